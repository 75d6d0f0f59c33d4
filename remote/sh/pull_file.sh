# Send the file $1 from byte $2 on stdout, after a first line "<size> <octal mode>". Only the first <size> bytes are
# sent and hashed, so a file that grows meanwhile (a log) still gives a consistent snapshot; the sha256
# of those <size> bytes is the last line on stderr. Exit 3 when $1 is not a regular file.
sha() { if command -v openssl >/dev/null; then openssl dgst -sha256 -r | cut -c1-64; else sha256sum | cut -c1-64; fi; }
path=$1 offset=$2
[ -f "$path" ] || { echo "not a regular file: $path" >&2; exit 3; }
read -r size mode < <(stat -c '%s %a' -- "$path")
echo "$size $mode"
# Hash the whole snapshot beside the sending (another core, the page cache), not after it.
head -c "$size" -- "$path" | sha >&2 &
hasher=$!
dd if="$path" bs=1M iflag=skip_bytes,count_bytes skip="$offset" count="$((size - offset))" status=none
wait "$hasher"
