# Stop run $2 (folder $1): TERM every process that carries its marker (and its leader's process group,
# once the leader is verified to be ours), KILL what is left after $3 seconds, then verify that nothing
# carries the marker. No pid is signalled that was not verified to be this run's.
run=$1 id=$2 grace=$3
pid=$(cat "$run/pid" 2>/dev/null || true)
# First, so that the wrapper starts no further attempt (a restart, or one waiting out its backoff).
[ -e "$run/exit" ] || : > "$run/stop" 2>/dev/null || true
leader=
ours "$pid" "$id" && [ "$(ps -o pgid= -p "$pid" | tr -d ' ')" = "$pid" ] && leader=$pid
signal() {
  if [ -n "$leader" ] && ours "$leader" "$id"; then kill "-$1" -- "-$leader" 2>/dev/null || true; fi
  for p in $(marked "$id"); do kill "-$1" "$p" 2>/dev/null || true; done
}
signalled=none
if [ -n "$(marked "$id")" ]; then
  signal TERM
  signalled=TERM
  end=$(( $(date +%s%N) + grace * 1000000000 ))
  while [ -n "$(marked "$id")" ] && [ "$(date +%s%N)" -lt "$end" ]; do sleep 0.1; done
fi
if [ -n "$(marked "$id")" ]; then
  signalled=KILL
  signal KILL
  sleep 0.3
fi
[ -e "$run/exit" ] || echo 137 > "$run/exit"
# Whether any of its processes is still on a GPU: said only where nvidia-smi answered (in time).
gpu='' checked=0
if command -v nvidia-smi >/dev/null 2>&1 \
    && apps=$(timeout -k 2 10 nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); then
  checked=1
  for p in $apps; do
    ours "$p" "$id" && gpu="$gpu $p"
  done
fi
echo "gpu_checked=$checked"
echo "signal=$signalled"
echo "left=$(marked "$id" | tr '\n' ' ')"
echo "gpu_left=$gpu"
echo "exit=$(cat "$run/exit")"
