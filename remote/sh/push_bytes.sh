# Write stdin to $1 with octal mode $2 (parents created, atomic rename), then print its sha256.
# For small content sent in one message (through the agent); large files go through push_file.sh.
dest=$1 mode=$2
mkdir -p -- "$(dirname -- "$dest")"
tmp=$(mktemp -- "$dest.remote-XXXXXX")
trap 'rm -f -- "$tmp"' EXIT
cat > "$tmp"
chmod "$mode" -- "$tmp"
mv -f -- "$tmp" "$dest"
trap - EXIT
sha256sum < "$dest" | cut -c1-64
