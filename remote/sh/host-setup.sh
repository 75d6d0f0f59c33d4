# `remote host setup` (remote.ops.hostsetup): install the boot unit, idempotently. Runs as root on the host.
# Usage: bash -c "$(cat host-setup.sh)" host-setup DRY(0|1) PATH CONTENT [PATH CONTENT]...
# Each PATH (a script made executable when it ends in .sh) is written only where its content differs; the
# unit is enabled (the symlink `systemctl enable` makes) and systemd reloaded when something changed.
# Prints one line per file: `wrote PATH`, `would write PATH` or `unchanged PATH`, then `enabled UNIT` or
# `would enable UNIT` where that was needed. Every host path is under ${REMOTE_GPU_SYSROOT:-}.
set -euo pipefail
root=${REMOTE_GPU_SYSROOT:-}
root=${root%/}
if [ -n "$root" ]; then
  PATH="$root/usr/sbin:$root/usr/bin:$PATH"  # the lab's simulated driver's tools (remote/lab/fakegpu.py)
fi
dry=$1
shift
changed=0
unit=
while [ "$#" -ge 2 ]; do
  path=$1 content=$2
  shift 2
  case "$path" in /*) ;; *) echo "host-setup: not an absolute path: $path" >&2; exit 2 ;; esac
  case "$path" in *.service) unit=$path ;; esac
  file=$root$path
  if [ -f "$file" ] && [ "$(cat "$file"; printf x)" = "${content}x" ]; then
    echo "unchanged $path"
    continue
  fi
  changed=1
  if [ "$dry" = 1 ]; then
    echo "would write $path"
    continue
  fi
  mkdir -p "$(dirname "$file")"
  printf '%s' "$content" > "$file.remote-tmp"
  case "$path" in *.sh) chmod 0755 "$file.remote-tmp" ;; *) chmod 0644 "$file.remote-tmp" ;; esac
  mv "$file.remote-tmp" "$file"
  echo "wrote $path"
done
if [ -n "$unit" ]; then
  name=$(basename "$unit")
  link=$root/etc/systemd/system/multi-user.target.wants/$name
  if [ "$(readlink "$link" 2> /dev/null)" != "$unit" ]; then
    changed=1
    if [ "$dry" = 1 ]; then
      echo "would enable $name"
    else
      mkdir -p "$(dirname "$link")"
      ln -sfn "$unit" "$link"
      echo "enabled $name"
    fi
  fi
  if [ "$changed" = 1 ] && [ "$dry" != 1 ] && [ -z "$root" ] && command -v systemctl > /dev/null 2>&1; then
    systemctl daemon-reload
  fi
fi
