# Run remote/sh/cachecopy.py ($1, its text) with the system python3, isolated: $2 the mode, $3 the folder.
exec python3 -I -S -c "$1" "${@:2}"
