# The network interface that holds address $1 in this container: a multi-node run's gloo and NCCL use it,
# not the interface the container's hostname resolves to (Proxmox puts that on 127.0.1.1).
# Prints the interface's name; exit 4 with this container's addresses on stderr when none holds it.
addr=$1
command -v ip >/dev/null || { echo "ip (iproute2) is not installed in the container" >&2; exit 5; }
name=$(ip -o addr show to "$addr" | awk '{print $2; exit}')
if [ -z "$name" ]; then
  ip -o addr show | awk '{printf "%s %s, ", $2, $4}' >&2
  exit 4
fi
printf '%s\n' "$name"
