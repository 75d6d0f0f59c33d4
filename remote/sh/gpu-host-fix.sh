# The host side of `remote gpu fix` (remote.ops.gpufix) that pct cannot do: runs as root on the Proxmox host.
# (The uvm nodes: remote/sh/gpu-uvm.sh; the driver's user space: remote/sh/nvidia-userspace.sh.)
# Usage: bash -c "$(cat gpu-host-fix.sh)" gpu-host-fix ACTION ARG...
#   drop-raw CTID LINE.. remove exactly these raw `lxc.*` lines from the container's current config
#                        (/etc/pve/lxc/CTID.conf, before its first [snapshot] section): pct cannot remove them
# Every host path is under ${REMOTE_GPU_SYSROOT:-} (the lab's simulated driver; empty on a real host).
set -euo pipefail
root=${REMOTE_GPU_SYSROOT:-}
root=${root%/}
if [ -n "$root" ]; then
  PATH="$root/usr/sbin:$root/usr/bin:$PATH"  # the lab's simulated driver's tools (remote/lab/fakegpu.py)
fi
action=${1:-}
[ "$#" -gt 0 ] && shift
case "$action" in
  drop-raw)
    ctid=$1
    shift
    case "$ctid" in '' | *[!0-9]*) echo "drop-raw: not a container id: $ctid" >&2; exit 2 ;; esac
    conf="$root/etc/pve/lxc/$ctid.conf"
    [ -f "$conf" ] || { echo "drop-raw: $conf does not exist" >&2; exit 1; }
    conf=$(readlink -f "$conf")  # the file itself (a link's target keeps its place)
    tmp="$conf.remote-tmp.$$"
    # awk gets the lines to drop on its stdin's first part, NUL-free: one a line, then the file.
    awk -v n="$#" '
      FNR == NR { drop[$0] = 1; next }
      /^\[/ { section = 1 }
      !section && ($0 in drop) { dropped++; next }
      { print }
      END { if (dropped + 0 < n + 0) { exit 3 } }
    ' <(printf '%s\n' "$@") "$conf" > "$tmp" || { rc=$?; rm -f "$tmp"; [ "$rc" = 3 ] && echo "drop-raw: not every line was in $conf" >&2; exit "$rc"; }
    mv "$tmp" "$conf"
    ;;
  *)
    echo "gpu-host-fix: unknown action ${action:-(none)}" >&2
    exit 2
    ;;
esac
