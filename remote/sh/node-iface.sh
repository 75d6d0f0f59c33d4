# The network interface that holds address $1 in this container: a multi-node run's gloo and NCCL use it,
# not the interface the container's hostname resolves to (Proxmox puts that on 127.0.1.1).
# Prints the interface's name; exit 4 with this container's addresses on stderr when the address is not
# one of its own.
addr=$1
command -v ip >/dev/null || { echo "ip (iproute2) is not installed in the container" >&2; exit 5; }
# The interface the address is configured on (eth0 for 10.1.3.200/24) ...
name=$(ip -o addr show to "$addr" | awk '{print $2; exit}')
# ... else a local address without one of its own (127.0.0.0/8 is all the loopback's).
[ -n "$name" ] || name=$(ip -o route get "$addr" 2>/dev/null | awk '$1 == "local" {for (i = 2; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')
if [ -z "$name" ]; then
  ip -o addr show | awk '{printf "%s %s, ", $2, $4}' >&2
  exit 4
fi
printf '%s\n' "$name"
