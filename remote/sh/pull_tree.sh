# Send the folder $1 on stdout: a line "<manifest bytes> <estimated tar bytes>", the NUL-separated sha256
# manifest of its files ("<sha256>  ./<path>\0", sorted), then a tar stream of the folder.
# Exit 3 when $1 is not a directory.
[ -d "$1" ] || { echo "not a directory: $1" >&2; exit 3; }
cd -- "$1" || exit 3
manifest=$(mktemp)
trap 'rm -f -- "$manifest"' EXIT
find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum -z > "$manifest"
total=$(find . -printf '%s\n' | awk '{ t += 512 + int(($1 + 511) / 512) * 512 } END { print t + 1024 }')
echo "$(stat -c %s -- "$manifest") $total"
cat -- "$manifest"
tar -c -f - .
