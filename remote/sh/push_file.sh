# Receive a file on stdin into $1 (the partial file beside the destination), appending from byte $2
# (0: start over). Once stdin ends, prints the sha256 of the whole partial file as it is on disk.
# The destination is not touched here: commit_file.sh renames the partial into place after the
# controller compared the sums.
sha() { if command -v openssl >/dev/null; then openssl dgst -sha256 -r | cut -c1-64; else sha256sum | cut -c1-64; fi; }
part=$1 offset=$2
mkdir -p -- "$(dirname -- "$part")"
# One writer at a time: a cut-off attempt's writer may still be flushing when the retry starts; the
# retry waits for it, then truncates to the prefix it verified.
exec 9>>"$part"
if command -v flock >/dev/null; then flock 9; fi
if [ "$offset" = 0 ]; then
  cat > "$part"
else
  truncate -s "$offset" -- "$part"
  cat >> "$part"
fi
# Read back what landed (from the page cache), not the stream on its way in.
sha < "$part"
