# What a transfer finds in place, one line per (path, prefix) pair of arguments:
#   "<kind> <size> <sha256 of the first <prefix> bytes, or ->"   kind: f file, d directory, n nothing, o other.
# prefix "all" hashes the whole file; 0, or more than the size, hashes nothing. Always exits 0.
sha() { if command -v openssl >/dev/null; then openssl dgst -sha256 -r | cut -c1-64; else sha256sum | cut -c1-64; fi; }
while [ "$#" -ge 2 ]; do
  path=$1 prefix=$2
  shift 2
  if [ -d "$path" ]; then echo "d 0 -"; continue; fi
  if [ ! -e "$path" ] && [ ! -L "$path" ]; then echo "n 0 -"; continue; fi
  if [ ! -f "$path" ]; then echo "o 0 -"; continue; fi
  size=$(stat -c %s -- "$path")
  [ "$prefix" = all ] && prefix=$size
  sum=-
  if [ "$prefix" -gt 0 ] && [ "$prefix" -le "$size" ]; then
    sum=$(head -c "$prefix" -- "$path" | sha)
  fi
  echo "f $size $sum"
done
