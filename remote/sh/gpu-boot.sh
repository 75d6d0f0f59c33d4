#!/bin/bash
# Installed by `remote host setup` as /usr/local/lib/remote/gpu-boot.sh; run by remote-gpu.service at boot,
# before pve-guests.service and pve-ha-lrm.service. Makes /dev/nvidia-uvm (-tools) (gpu-uvm.sh: `nvidia-modprobe -u -c 0`, the
# driver's own tool) and each GPU's /dev/nvidiaN (`nvidia-modprobe -c N`, else mknod c 195 N), then refills the driver's
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
# Each GPU the module drives, by its own minor (`Device Minor:` of its information file): not a count from 0, as
# a GPU bound to vfio-pci for a VM, or one that fell off the bus, leaves a gap (/dev/nvidia1 with no /dev/nvidia0).
for info in "$root"/proc/driver/nvidia/gpus/*/information; do
  [ -f "$info" ] || continue
  minor=$(sed -n 's/^Device Minor:[[:space:]]*\([0-9][0-9]*\)[[:space:]]*$/\1/p' "$info" | head -n 1)
  if [ -z "$minor" ]; then
    echo "gpu-boot: $info names no Device Minor: its node is not made" >&2
    rc=1
    continue
  fi
  node=$root/dev/nvidia$minor
  if command -v nvidia-modprobe > /dev/null 2>&1; then
    nvidia-modprobe -c "$minor" || true
  fi
  # Without nvidia-modprobe (not every driver install has it, the H200 host's had not), or where it failed:
  # what it does, by hand. The GPU nodes' major is NVIDIA's fixed 195; nvidiactl is 195:255.
  if [ ! -c "$node" ]; then
    mknod -m 0666 "$node" c 195 "$minor" && echo "gpu-boot: made $node by mknod (c 195 $minor)" || rc=1
  fi
  if [ ! -c "$root/dev/nvidiactl" ]; then
    mknod -m 0666 "$root/dev/nvidiactl" c 195 255 || rc=1
  fi
done
if [ -f "$here/nvidia-userspace.sh" ]; then
  bash "$here/nvidia-userspace.sh" /var/lib/remote/nvidia || rc=1
fi
exit "$rc"
