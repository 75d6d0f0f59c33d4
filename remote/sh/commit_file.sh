# Move a verified partial file into place: $1 partial, $2 destination, $3 octal mode. Exit 3 when the
# destination is a directory (never replaced by a file).
part=$1 dest=$2 mode=$3
if [ -d "$dest" ] && [ ! -L "$dest" ]; then echo "$dest is a directory" >&2; exit 3; fi
chmod "$mode" -- "$part"
mv -fT -- "$part" "$dest"
