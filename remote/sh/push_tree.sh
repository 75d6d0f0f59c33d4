# Receive a tar stream on stdin into $1 (a staging folder beside the destination, emptied first), then
# print the NUL-separated sha256 manifest of its files ("<sha256>  ./<path>\0", sorted).
# The destination is not touched here: commit_tree.sh moves the staging folder into place.
stage=$1
rm -rf -- "$stage"
mkdir -p -- "$stage"
tar -x --no-same-owner -C "$stage" -f -
cd -- "$stage" || exit 3
find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum -z
