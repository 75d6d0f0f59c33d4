#!/usr/bin/env bash
# The story's race under the job's wrapper and its watch, on this machine's GPU, no container: the drafter
# (examples/drafter) without its guard, threads staggered, on a cold compile cache of its own. Where the race
# hangs it, the watch must declare the stall, dump every thread's stack (py-spy where $1 names one) and stop
# it (on_stall: stop). Prints the end of the log, the stacks and gpu.csv; leaves the run in ${OUT:-a temp folder}.
#     bash bench/watch_drafter.sh [PATH-TO-PY-SPY]      (DRAFTERS=0,0,0 STALL=60 LIMIT=200 STEPS=400)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
run=$work/run
mkdir -p "$run" "$work/cache"
: > "$run/log"
echo '{}' > "$run/manifest.json"
mkdir -p "$work/py" && cp "$root/remote/guard.py" "$work/py/remote_guard.py"  # as deploy installs it (off here)
export PYTHONPATH=$work/py
export TORCHINDUCTOR_CACHE_DIR=$work/cache/inductor TRITON_CACHE_DIR=$work/cache/triton  # cold, and never /tmp's
conf=$(python3 -c 'import json, sys; print(json.dumps({"stall": float(sys.argv[2]), "on_stall": "stop",
  "py_spy": sys.argv[1] or None, "gpu_every": 5, "grace": 5, "metrics": [{"pattern": r"([\d.]+) Ktok/s",
  "flags": 0, "unit": "Ktok/s", "scale": 1.0, "invert": False}]}))' "${1:-}" "${STALL:-60}")
command="python3 -m drafter.train --target-gpus 0 --drafter-gpus ${DRAFTERS:-0,0,0} --no-guard --stagger 4 --steps ${STEPS:-400} --log-interval 2"
t0=$(date +%s)
REMOTE_RUN_ID=watch-drafter-$$ setsid bash -c "$(cat "$root/remote/sh/job.sh")" job "$run" "$root/examples" "$command" 0 "" \
  "$(cd "$root" && python3 -c 'from remote import shell; print(shell.load_python("watch"))')" "$conf" &
leader=$!
for _ in $(seq "${LIMIT:-200}"); do [ -e "$run/exit" ] && break; sleep 1; done
echo "after $(( $(date +%s) - t0 )) s: exit $(cat "$run/exit" 2>/dev/null || echo none) (124: ended by the stall watch)"
tail -n 8 "$run/log"
for f in "$run"/stacks-*.txt; do [ -e "$f" ] && { echo "== $f"; head -n 80 "$f"; }; done
head -n 6 "$run/gpu.csv" 2>/dev/null || echo "no gpu.csv"
if [ ! -e "$run/exit" ]; then  # not ended within LIMIT: end it, as `remote stop` would
  kill -TERM -- -"$leader" 2>/dev/null; sleep 5; kill -KILL -- -"$leader" 2>/dev/null
fi
if [ -n "${OUT:-}" ]; then cp -r "$run" "$OUT/run"; else echo "run folder: $run"; fi
