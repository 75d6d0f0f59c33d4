#!/bin/bash
# Installed by `remote host setup` as /usr/local/lib/remote/gpu-boot.sh; run by remote-gpu.service at boot,
# before pve-guests.service. Makes /dev/nvidia-uvm (-tools) and each GPU's /dev/nvidiaN (nvidia-modprobe:
# the driver's own tool, which loads the module where it is not loaded), then refills the driver's
# user-space folder with the loaded module's files. Every host path is under ${REMOTE_GPU_SYSROOT:-}.
set -uo pipefail
root=${REMOTE_GPU_SYSROOT:-}
root=${root%/}
if [ -n "$root" ]; then
  PATH="$root/usr/sbin:$root/usr/bin:$PATH"  # the lab's simulated driver's tools (remote/lab/fakegpu.py)
fi
here=$(dirname "$(readlink -f "$0")")
rc=0
nvidia-modprobe -u -c 0 || rc=1
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
