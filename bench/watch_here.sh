# The job wrapper and its watch (remote/sh/job.sh, watch.py) run on this machine, no container: a job that
# works the GPU for 20 s (a CPU loop where torch sees no GPU), printing a metric, then waits forever in a
# named function. Shows gpu.csv's rows (nvidia-smi's loop mode), the stall's stacks (py-spy where $1 names
# one, else the kernel's view) and the watch's CPU with its nvidia-smi over 15 s. Leaves the run folder in
# ${OUT:-a temporary folder}.    bash bench/watch_here.sh [PATH-TO-PY-SPY]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
run=$work/run
mkdir -p "$run"
: > "$run/log"
echo '{}' > "$run/manifest.json"
cat > "$work/job.py" <<'PY'
import time
try:
    import torch
    assert torch.cuda.is_available()
    x = torch.randn(8192, 8192, device="cuda")
    t = time.time()
    while time.time() - t < 20:
        for _ in range(20):
            x @ x
        torch.cuda.synchronize()
        print("step 1234.5 tok/s", flush=True)
except (ImportError, AssertionError):
    for i in range(200):
        print("step 1234.5 tok/s", flush=True)
        time.sleep(0.1)
def waits_for_the_rendezvous():
    time.sleep(3600)
waits_for_the_rendezvous()
PY
conf=$(python3 -c 'import json, sys; print(json.dumps({"stall": 8, "on_stall": "stop", "py_spy": sys.argv[1] or None,
  "gpu_every": 5, "grace": 3, "metrics": [{"pattern": r"([\d.]+)\s*tok/s", "flags": 2, "unit": "Ktok/s",
  "scale": 0.001, "invert": False}]}))' "${1:-}")
REMOTE_RUN_ID=watch-here-$$ setsid bash -c "$(cat "$root/remote/sh/job.sh")" job "$run" "$work" "python3 job.py" 0 "" \
  "$(cd "$root" && python3 -c 'from remote import shell; print(shell.load_python("watch"))')" "$conf" &
sleep 4
pids=$(grep -l "REMOTE_RUN_ID=watch-here-$$" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3)
mine=
for p in $pids; do
  case $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null) in *" -I -S -c "*|*nvidia-smi*) mine="$mine $p" ;; esac
done
ticks() {
  local t=0 p f
  for p in $mine; do
    read -r -a f <<< "$(cut -d')' -f2- "/proc/$p/stat" 2>/dev/null)" && t=$((t + f[11] + f[12]))
  done
  echo "$t"
}
a=$(ticks); t0=$(date +%s.%N); sleep 15; b=$(ticks); t1=$(date +%s.%N)
python3 -c "print(f'watch + nvidia-smi CPU: {($b - $a) / $(getconf CLK_TCK) / ($t1 - $t0):.4%} of one core')"
for _ in $(seq 60); do [ -e "$run/exit" ] && break; sleep 1; done
echo "exit: $(cat "$run/exit" 2>/dev/null) (124: ended by the stall watch)"
tail -n 2 "$run/log"
head -n 4 "$run/gpu.csv" 2>/dev/null || echo "no gpu.csv (no nvidia-smi here)"
head -n 30 "$run/stacks-1.txt"
cat "$run/watch.log"
if [ -n "${OUT:-}" ]; then cp -r "$run" "$OUT/run"; else echo "run folder: $run"; fi
