# Receive a file on stdin into $1 (the partial file beside the destination), appending from byte $2
# (0: start over). Prints the sha256 of the whole partial file once stdin ends. The destination is
# not touched here: commit_file.sh renames the partial into place after the controller compared sums.
sha() { if command -v openssl >/dev/null; then openssl dgst -sha256 -r | cut -c1-64; else sha256sum | cut -c1-64; fi; }
part=$1 offset=$2
mkdir -p -- "$(dirname -- "$part")"
if [ "$offset" = 0 ]; then
  # Hash while writing: the data is read once.
  tee -- "$part" | sha
else
  truncate -s "$offset" -- "$part"
  cat >> "$part"
  sha < "$part"
fi
