# Move a verified staging folder $1 into place at $2: renamed when $2 does not exist, else merged into
# it (files of the same name replaced, others kept) with hard links (copies where a mount point inside
# $2 puts a file on another filesystem), then removed. Exit 3 when $2 is not a directory.
stage=$1 dest=$2
if [ ! -e "$dest" ] && [ ! -L "$dest" ]; then
  mkdir -p -- "$(dirname -- "$dest")"
  mv -T -- "$stage" "$dest"
  exit 0
fi
[ -d "$dest" ] || { echo "$dest exists and is not a directory" >&2; exit 3; }
cp -a -l --remove-destination -- "$stage/." "$dest/" 2>/dev/null ||
  cp -a --remove-destination -- "$stage/." "$dest/"
rm -rf -- "$stage"
