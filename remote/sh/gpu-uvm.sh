# On a Proxmox host whose NVIDIA module is loaded but /dev/nvidia-uvm is missing (after a reboot, until
# something asks the driver for it): make the uvm nodes as the driver's own tool does, `nvidia-modprobe -u -c 0`
# (remote create, remote gpu fix, the boot unit of remote host setup).
# Every host path under ${REMOTE_GPU_SYSROOT:-} (empty on a real host): there the root's own
# usr/bin/nvidia-modprobe is run (the lab's simulated driver provides one).
# Exit: 0 the node is there; 4 no nvidia-modprobe; 5 it ran and the node is still missing.
set -euo pipefail
root=${REMOTE_GPU_SYSROOT:-}
root=${root%/}
tool=""
if [ -n "$root" ]; then
  [ -x "$root/usr/bin/nvidia-modprobe" ] && tool=$root/usr/bin/nvidia-modprobe
else
  tool=$(command -v nvidia-modprobe || true)
fi
if [ -z "$tool" ]; then
  echo "nvidia-modprobe is not installed on the host (it ships with the NVIDIA driver; Debian: apt install nvidia-modprobe)"
  exit 4
fi
"$tool" -u -c 0
if [ ! -c "$root/dev/nvidia-uvm" ]; then
  echo "nvidia-modprobe -u -c 0 ran and $root/dev/nvidia-uvm is still missing: is nvidia_uvm loaded (modprobe nvidia-uvm)?"
  exit 5
fi
echo "ok"
