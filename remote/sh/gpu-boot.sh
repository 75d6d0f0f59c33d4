#!/bin/bash
# Installed by `remote host setup` as /usr/local/lib/remote/gpu-boot.sh; run by remote-gpu.service at boot,
# before pve-guests.service. Makes /dev/nvidia-uvm (-tools) (gpu-uvm.sh: `nvidia-modprobe -u -c 0`, the
# driver's own tool) and each GPU's /dev/nvidiaN (`nvidia-modprobe -c N`), then refills the driver's
# user-space folder with the loaded module's files (nvidia-userspace.sh), all installed beside it.
# Every host path is under ${REMOTE_GPU_SYSROOT:-}.
set -uo pipefail
root=${REMOTE_GPU_SYSROOT:-}
root=${root%/}
if [ -n "$root" ]; then
  PATH="$root/usr/sbin:$root/usr/bin:$PATH"  # the lab's simulated driver's tools (remote/lab/fakegpu.py)
fi
here=$(dirname "$(readlink -f "$0")")
rc=0
bash "$here/gpu-uvm.sh" || rc=1
n=0
for gpu in "$root"/proc/driver/nvidia/gpus/*; do
  [ -e "$gpu" ] || continue
  nvidia-modprobe -c "$n" || rc=1
  n=$((n + 1))
done
if [ -f "$here/nvidia-userspace.sh" ]; then
  bash "$here/nvidia-userspace.sh" /var/lib/remote/nvidia || rc=1
fi
exit "$rc"
