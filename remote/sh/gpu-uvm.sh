# On a Proxmox host whose NVIDIA module is loaded but /dev/nvidia-uvm is missing (after a reboot, until
# something asks the driver for it): make the uvm nodes as the driver's own tool does, `nvidia-modprobe -u -c 0`
# (remote create, remote gpu fix, the boot unit of remote host setup). Where nvidia-modprobe is not installed,
# what it does by hand: the nvidia_uvm module's major from /proc/devices (the module loaded first with
# `modprobe nvidia-uvm` where it is not), nodes nvidia-uvm (minor 0) and nvidia-uvm-tools (minor 1), mode 0666.
# Every host path under ${REMOTE_GPU_SYSROOT:-} (empty on a real host): there the root's own
# usr/bin/nvidia-modprobe is run (the lab's simulated driver provides one).
# Prints, on success, how the nodes were made as its last line: `made: <the command, as a user would type it>`.
# Exit: 0 the node is there; 4 no nvidia-modprobe and no nvidia-uvm module; 5 it ran and the node is still missing.
set -euo pipefail
root=${REMOTE_GPU_SYSROOT:-}
root=${root%/}
tool=""
if [ -n "$root" ]; then
  [ -x "$root/usr/bin/nvidia-modprobe" ] && tool=$root/usr/bin/nvidia-modprobe
else
  tool=$(command -v nvidia-modprobe || true)
fi
uvm_major() { awk '$2 == "nvidia-uvm" { print $1; exit }' "$root/proc/devices" 2> /dev/null || true; }
how="nvidia-modprobe -u -c 0"
if [ -n "$tool" ]; then
  "$tool" -u -c 0
else
  major=$(uvm_major)
  if [ -z "$major" ] && [ -z "$root" ] && command -v modprobe > /dev/null; then
    modprobe nvidia-uvm || true
    major=$(uvm_major)
  fi
  if [ -z "$major" ]; then
    echo "nvidia-modprobe is not installed on the host and the nvidia_uvm module is not loaded (no nvidia-uvm in" \
      "/proc/devices): load it (modprobe nvidia-uvm) or install nvidia-modprobe (Debian: apt install nvidia-modprobe)"
    exit 4
  fi
  how="mknod -m 0666 /dev/nvidia-uvm c $major 0; mknod -m 0666 /dev/nvidia-uvm-tools c $major 1 (no nvidia-modprobe)"
  for pair in nvidia-uvm:0 nvidia-uvm-tools:1; do
    node=$root/dev/${pair%%:*}
    if [ ! -c "$node" ]; then
      rm -f "$node"
      mknod -m 0666 "$node" c "$major" "${pair##*:}"
    fi
  done
fi
if [ ! -c "$root/dev/nvidia-uvm" ]; then
  echo "$how ran and $root/dev/nvidia-uvm is still missing: is nvidia_uvm loaded (modprobe nvidia-uvm)?"
  exit 5
fi
echo "made: $how"
