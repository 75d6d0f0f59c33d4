#!/bin/bash
# The facts probe (remote/facts/probe.py) on a real GPU machine, as doctor and train's preflight run it:
# every part, three times (the first imports torch, the next two keep its answer), while a CUDA process
# of no run holds a GPU. Writes each probe's raw JSON to OUT_DIR (default: a new folder) for
# remote.facts.parse and doctor's findings to read; prints each probe's time.
# Usage: bash bench/gpu_facts.sh [OUT_DIR]   (run where torch and its GPUs are)
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$(mktemp -d "$HOME/facts-XXXXXX")}
mkdir -p "$out"
work=$(mktemp -d "$HOME/facts-work-XXXXXX")
# The venv is the one python3 runs in (where torch is installed), as a deployed one would have its own.
python3 - "$work" "$out" > "$out/arg.json" <<'EOF'
import json, sys
work, out = sys.argv[1:3]
print(json.dumps({"parts": ["venv", "dists", "torch", "code", "cache", "tmp", "jobs", "gpus", "disk", "known_good"],
                  "venv": sys.prefix, "versions": f"{work}/venv.versions", "uv": f"{work}/uv",
                  "checkout": f"{work}/co", "cache_dir": f"{work}/cache", "run_dir": f"{work}/runs",
                  "lease": f"{work}/ops.lock", "torch_cache": f"{out}/facts-torch.json"}))
EOF
# A process of no run on GPU 0: doctor must name it.
python3 -c 'import time, torch; x = torch.ones(1 << 20, device="cuda"); print("holding", flush=True); time.sleep(120)' \
  > "$out/holder.log" 2>&1 &
holder=$!
for _ in $(seq 60); do grep -q holding "$out/holder.log" && break; sleep 1; done
for i in 1 2 3; do
  start=$(date +%s.%N)
  python3 "$repo/remote/facts/probe.py" "$(cat "$out/arg.json")" > "$out/raw$i.json"
  echo "probe $i: exit $?, $(python3 -c "print(round($(date +%s.%N) - $start, 2))")s"
done
kill "$holder"
wait "$holder" 2>/dev/null
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader > "$out/smi.txt"
rm -rf "$work"
echo "raw JSON in $out"
