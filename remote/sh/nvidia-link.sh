# In a GPU container made by `remote create` (and re-run by `remote gpu fix`): the driver's user space that
# the host bind-mounts read-only at MOUNT (remote/sh/nvidia-userspace.sh fills it) made the one the loader
# and PATH find: an ld.so.conf.d entry for MOUNT/current/lib (first: 000-), nvidia-smi linked into
# /usr/bin (/usr/local/bin where a package has its own), ldconfig run. Idempotent; prints `version V`.
# Usage: bash -c "$(cat nvidia-link.sh)" nvidia-link MOUNT
set -euo pipefail
mount=$1
if [ ! -r "$mount/current/VERSION" ]; then
  echo "error $mount/current is not there: the host's driver folder is not mounted (its mpN line, a restart)" >&2
  exit 3
fi
conf=/etc/ld.so.conf.d/000-remote-nvidia.conf
want="$mount/current/lib"
if [ "$(cat "$conf" 2> /dev/null || true)" != "$want" ]; then
  printf '%s\n' "$want" > "$conf.tmp"
  mv "$conf.tmp" "$conf"
fi
# In /usr/bin (pct exec's PATH has no /usr/local/bin) unless a package put its own file there.
for tool in "$mount"/current/bin/*; do
  [ -e "$tool" ] || continue
  name=${tool##*/}
  where=/usr/bin
  if [ -e "/usr/bin/$name" ] && [ "$(readlink "/usr/bin/$name" || true)" != "$mount/current/bin/$name" ]; then
    where=/usr/local/bin
  fi
  ln -sfn "$mount/current/bin/$name" "$where/$name"
done
ldconfig
echo "version $(cat "$mount/current/VERSION")"
