# Receive a tar stream on stdin into a staging folder for the destination $1 (emptied first), then print
# its path and the sha256 manifest of its files, NUL-separated ("<stage>\0<sha256>  ./<path>\0", sorted).
# The stage is inside $1 when $1 is a folder (a mount point: the copy lands on its filesystem, and the
# merge is hard links), else $1.partial beside it. The destination is not touched here: commit_tree.sh
# moves the staging folder into place. Exit 4, before reading anything, when $1 is there and is not a
# folder (nor a link to one): a folder is never pushed onto a file.
dest=$1
if { [ -e "$dest" ] || [ -L "$dest" ]; } && [ ! -d "$dest" ]; then
  echo "$dest is there and is not a folder" >&2
  exit 4
fi
if [ -d "$dest" ] && [ ! -L "$dest" ]; then stage=$dest/.remote-push.partial; else stage=$dest.partial; fi
rm -rf -- "$stage"
mkdir -p -- "$stage"
# A tar that fails (a full disk) takes its half-written stage with it, and its exit status is the script's.
tar -x --no-same-owner -C "$stage" -f - || { status=$?; rm -rf -- "$stage"; exit "$status"; }
printf '%s\0' "$stage"
cd -- "$stage" || exit 3
find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum -z
