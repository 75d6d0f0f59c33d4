# Append a venv that was swapped in to the versions folder's history (what --rollback reads).
# $1 the versions folder, $2 the venv's full path.
printf '%s\n' "$2" >> "$1/history"
