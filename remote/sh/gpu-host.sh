# The GPU host probe (remote.facts.gpu): read-only, one round trip per Proxmox host.
# Usage: bash -c "$(cat gpu-host.sh)" gpu-host MARK PCT-WORD... -- CTID...
# Prints sections, each headed by a line `MARK NAME [ARG]` (MARK: a fresh random token, so no text the
# host prints can open a section), ending with `MARK end`. Nothing here writes anywhere.
set -u
mark=$1
shift
pct=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  pct+=("$1")
  shift
done
[ "$#" -gt 0 ] && shift
# Every host path under ${REMOTE_GPU_SYSROOT:-} (empty on a real host: the lab's simulated driver's root,
# remote/lab/fakegpu.py), its tools first on PATH; node paths are printed as the host's (/dev/...).
root=${REMOTE_GPU_SYSROOT:-}
root=${root%/}
if [ -n "$root" ]; then
  PATH="$root/usr/sbin:$root/usr/bin:$PATH"
fi
section() { printf '%s %s\n' "$mark" "$*"; }
have() { command -v "$1" > /dev/null 2>&1; }
section kernel
uname -r
section packages
if have dpkg-query; then
  dpkg-query -W -f '${Package} ${Version}\n' pve-manager pve-container 2> /dev/null
fi
section proc-version
cat "$root/proc/driver/nvidia/version" 2> /dev/null
section sys-version
cat "$root/sys/module/nvidia/version" 2> /dev/null
section modinfo
if have modinfo; then
  modinfo -F version nvidia 2> /dev/null
elif [ -x /sbin/modinfo ]; then
  /sbin/modinfo -F version nvidia 2> /dev/null
fi
section modules
grep -E '^nvidia' "$root/proc/modules" 2> /dev/null | cut -d' ' -f1
section devices
cat "$root/proc/devices" 2> /dev/null
section nodes
for node in "$root"/dev/nvidia* "$root"/dev/nvidia-caps/*; do
  [ -e "$node" ] || continue
  printf '%s ' "${node#"$root"}"
  stat -c '%F %t %T %u %g %a' "$node" 2> /dev/null || echo
done
# MIG: which GPU instance or compute instance each /dev/nvidia-caps node opens (`gpu0/gi1/access 12`): only the
# lines of nodes the host has (the driver's file lists every possible minor, thousands of lines).
section mig-minors
if [ -d "$root/dev/nvidia-caps" ] && [ -r "$root/proc/driver/nvidia-caps/mig-minors" ]; then
  for cap in "$root"/dev/nvidia-caps/nvidia-cap*; do
    [ -e "$cap" ] && printf '%s\n' "${cap##*nvidia-cap}"
  done | awk 'FNR == NR { have[$1] = 1; next } ($2 in have)' - "$root/proc/driver/nvidia-caps/mig-minors"
fi
section lspci
if have lspci; then
  lspci -nnk -d 10de: 2> /dev/null
fi
section persistenced
if have pgrep; then
  pgrep -x nvidia-persiste > /dev/null 2>&1 && echo running
fi
section smi
if have nvidia-smi; then
  timeout -k 2 10 nvidia-smi --query-gpu=index,pci.bus_id,persistence_mode,mig.mode.current,driver_version \
    --format=csv,noheader 2>&1
  echo "rc=$?"
fi
for ctid in "$@"; do
  section pct-config "$ctid"
  "${pct[@]}" config "$ctid" 2>&1
  echo "rc=$?"
done
section end
