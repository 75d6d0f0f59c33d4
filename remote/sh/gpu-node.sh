# In a running GPU container (remote gpu fix): one NVIDIA device node repaired in place, so that a live run
# is not killed by a restart. What is mounted over the node (a bind of /dev/null made inside the container)
# is unmounted, one layer at a time, until the node is the host's; where MAKE is 1 (a privileged container:
# an unprivileged one may not mknod a device) and the node under the mounts is still wrong or missing, it is
# made again with the host's numbers, MODE and GID. Prints one line per change: `unmounted PATH`, `made PATH`.
# Usage: bash -c "$(cat gpu-node.sh)" gpu-node PATH MAJOR MINOR MODE GID MAKE
# Exit: 0 PATH is the character device MAJOR:MINOR now; 3 it is not (stderr says what it is).
set -uo pipefail
path=$1 major=$2 minor=$3 mode=$4 gid=$5 make=$6
want=$(printf '%x:%x' "$major" "$minor")
right() { [ -c "$path" ] && [ "$(stat -c '%t:%T' "$path" 2> /dev/null)" = "$want" ]; }
# mountinfo's 5th field is the mount point (no space in an NVIDIA node's path, so no escape to undo).
mounted() { awk -v p="$path" '$5 == p { found = 1 } END { exit !found }' /proc/self/mountinfo; }
layers=0
while ! right && mounted && [ "$layers" -lt 8 ]; do
  umount "$path" || break
  echo "unmounted $path"
  layers=$((layers + 1))
done
if ! right && ! mounted && [ "$make" = 1 ]; then
  rm -f "$path"
  mkdir -p "$(dirname "$path")"
  if mknod -m "$mode" "$path" c "$major" "$minor" && chgrp "$gid" "$path"; then
    echo "made $path"
  fi
fi
if right; then
  exit 0
fi
if [ -e "$path" ]; then
  echo "$path is still $(stat -c '%F %t:%T' "$path" 2> /dev/null) (mounted on: $(mounted && echo yes || echo no))," \
    "not the character device $major:$minor" >&2
else
  echo "$path is still missing" >&2
fi
exit 3
