#!/bin/bash
# Compile-cache seeding on a GPU machine, through `remote` only (issue 27), on a namespace lab of two
# containers (A warms, B is seeded), for the drafter (examples/drafter, the guard, one thread) and for
# nanoGPT-like code under torchrun (examples/plain). For each, the first training step of:
#   cold       B with a fresh cache and no warmup configured (it compiles in its first step)
#   self-warm  A after `remote warmup -c A`
#   seeded     B after `remote warmup -c B`, which finds A's matching cache and copies it (no compile)
# and the same self-warm/seeded pair with TORCH_CACHING_PRECOMPILE=1 in train.env (Dynamo's bytecode and
# guards in the cache too), with each run's loss (is it the same training?) and torch's cache counters
# (the venv's hook, <run>/cache-stats). The caches are emptied between the variants (a benchmark may; no
# task of remote ever does).
#
# Usage (as root, in a checkout of remote, its controller packages importable by python3):
#   bash bench/gpu_cache.sh [RECORD.json]        (default docs/evidence/gpu-cache/<date>[-N].json)
# Environment: SRC_VENV (the venv whose torch is deployed; default python3's), GPU_CACHE_WORK (scratch,
# default /var/tmp/gpu-cache), STEPS (drafter steps per run, default 300), ITERS (plain, default 200),
# PARTS ("drafter plain", the default, or one of them), PAIRS (self-warmed/seeded runs of each, alternating;
# each side's first step is their median; default 1), BUDGET (seconds; later steps are skipped).
# Runs on a CPU machine too (a rehearsal: CPU torch, no GPU facts).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
date=$(date -u +%Y-%m-%d)
record=${1:-}
if [ -z "$record" ]; then
  record=$repo/docs/evidence/gpu-cache/$date.json
  n=2
  while [ -e "$record" ]; do record=$repo/docs/evidence/gpu-cache/$date-$n.json; n=$((n + 1)); done
fi
work=${GPU_CACHE_WORK:-/var/tmp/gpu-cache}
steps=${STEPS:-300}
iters=${ITERS:-200}
parts=${PARTS:-drafter plain}
budget=${BUDGET:-0}
started=$SECONDS
src_venv=${SRC_VENV:-$(python3 -c 'import sys; print(sys.prefix)')}
a=200 b=201
lab=$work/lab
house=$work/wheelhouse
logs=$work/logs
export REMOTE_LAB_DIR=$lab PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
rm -rf "$logs"
mkdir -p "$logs" "$(dirname "$record")"
: > "$work/steps.tsv"
: > "$work/facts.tsv"

# shellcheck disable=SC2034  # read by bench/lib.sh's step
step_stamped=0 step_width=20 step_cut=140
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"  # remote, fact, stamp, pct, step
# The first step of a run, seconds from its process start: the drafter's "first steady step of every
# thread", plain's "first step done".
first_step() { grep -oE '(first steady step of every thread|first step done) [0-9.]+s' "$1" | grep -oE '[0-9.]+' | tail -n 1; }
last_loss() { grep -oE 'loss [0-9.]+' "$1" | tail -n 1 | grep -oE '[0-9.]+'; }
# The run's compile-cache counters (the venv's hook), summed over its processes: "fxgraph_hit fxgraph_miss".
counters() {
  # shellcheck disable=SC2016
  remote exec -c "$1" --hosts "$2" --command 'for f in /root/runs/current/cache-stats/*.json; do cat "$f"; echo; done' 2>/dev/null |
    python3 -c '
import json, sys
t = {}
for line in sys.stdin:
    try:
        for k, v in json.loads(line).items():
            t[k] = t.get(k, 0) + v
    except ValueError:
        pass
print(t.get("fxgraph_hit", 0), t.get("fxgraph_miss", 0))'
}
fresh() { remote exec -c "$1" --hosts "$2" --command 'rm -rf /root/.cache/torch-compile' > /dev/null 2>&1; }
# measure KEY CT HOSTS [N]: a train run (the Nth of KEY); its first step, loss and counters as facts KEY_*
measure() {
  local key=$1 ct=$2 hosts=$3 n=${4:-1}
  step "$key-$n" remote train -c "$ct" --hosts "$hosts"
  first=$(first_step "$logs/$key-$n.log")
  firsts[$key]="${firsts[$key]:-} $first"
  fact "${key}_first_runs" "${firsts[$key]}"
  fact "${key}_loss" "$(last_loss "$logs/$key-$n.log")"
  fact "${key}_counters" "$(counters "$ct" "$hosts")"
}
declare -A firsts
pairs=${PAIRS:-1}  # self-warmed/seeded runs, alternating; each side's figure is the median
# pair W SELF SEEDED HOSTS: PAIRS runs of each, alternating (A B, B A, ...)
pair() {
  local i
  for i in $(seq 1 "$pairs"); do
    if [ $((i % 2)) -eq 1 ]; then
      measure "$2" $a "$4" "$i"; measure "$3" $b "$4" "$i"
    else
      measure "$3" $b "$4" "$i"; measure "$2" $a "$4" "$i"
    fi
  done
}

write_record() {
python3 - "$work" "$record" "$date" <<'EOF'
import json, os, statistics, sys
work, record, date = sys.argv[1:4]
facts = dict(line.rstrip("\n").split("\t", 1) for line in open(f"{work}/facts.tsv") if "\t" in line)
steps = [{"name": n, "ok": rc == "0", "seconds": round(float(s), 1)}
         for n, rc, s in (line.split("\t") for line in open(f"{work}/steps.tsv").read().splitlines())]
num = lambda k: float(facts[k]) if facts.get(k) not in (None, "") else None
out = {"date": date, "tree": os.environ.get("GPU_CACHE_TREE"), "gpu": facts.get("gpu"), "driver": facts.get("driver"),
       "torch": facts.get("torch"), "command": facts.get("command"), "steps": steps, "workloads": {}}
for w in ("drafter", "plain"):
    runs = {}
    for v in ("cold", "self", "seeded", "pre_self", "pre_seeded"):
        k = f"{w}_{v}"
        if f"{k}_first_runs" not in facts:
            continue
        firsts = sorted(float(x) for x in facts[f"{k}_first_runs"].split())
        hit, miss = ((facts.get(f"{k}_counters") or "") + " - -").split()[:2]
        runs[v] = {"first_step_s": round(statistics.median(firsts), 2) if firsts else None, "first_step_runs": firsts,
                   "loss": num(f"{k}_loss"),
                   "fxgraph_hit": int(hit) if hit.isdigit() else None, "fxgraph_miss": int(miss) if miss.isdigit() else None}
    if not runs:
        continue
    f = lambda v: (runs.get(v) or {}).get("first_step_s")
    ratio = lambda x, y: round(f(x) / f(y), 3) if f(x) and f(y) else None
    out["workloads"][w] = {"runs": runs, "copy_s": num(f"{w}_copy_s"), "copied_files": facts.get(f"{w}_copied"),
                           "tmp_files_not_copied": facts.get(f"{w}_tmp_files"),
                           "ratios": {"seeded_over_self": ratio("seeded", "self"), "seeded_over_cold": ratio("seeded", "cold"),
                                      "self_over_cold": ratio("self", "cold"),
                                      "pre_seeded_over_cold": ratio("pre_seeded", "cold"),
                                      "pre_self_over_self": ratio("pre_self", "self"),
                                      "pre_seeded_over_seeded": ratio("pre_seeded", "seeded")}}
json.dump(out, open(record, "w"), indent=2)
open(record, "a").write("\n")
print(json.dumps({w: v["ratios"] for w, v in out["workloads"].items()}), "->", record)
EOF
}
trap write_record EXIT
fact command "STEPS=$steps ITERS=$iters PAIRS=${PAIRS:-1} PARTS='$parts' bash bench/gpu_cache.sh"

if command -v nvidia-smi > /dev/null; then
  fact gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
  fact driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
fi
read -r torch_dist torch_version torch_cuda base_python < <("$src_venv/bin/python" -c '
import importlib.metadata as m, os, sys, torch
print(m.version("torch"), torch.__version__, torch.version.cuda or "cpu", os.path.realpath(sys._base_executable))')
numpy_version=$("$src_venv/bin/python" -c 'import importlib.metadata as m; print(m.version("numpy"))')
fact torch "$torch_version"
echo "== $(date -u +%FT%TZ) torch $torch_version (CUDA $torch_cuda) from $src_venv"

step lab-up remote lab up --backend ns --containers "$a,$b" || exit 1
smi=$(command -v nvidia-smi || true)
libdirs=""
ld_path=${LD_LIBRARY_PATH:-}
for d in ${ld_path//:/ }; do
  if [ -e "$d/libcuda.so.1" ]; then libdirs="$libdirs $d"; fi
done
if [ -n "$smi" ]; then
  for ct in $a $b; do
    step "gpu-setup-$ct" "$lab/bin/pct" exec "$ct" --keep-env 0 -- bash -c "set -e
      for d in $libdirs; do echo \$d; done > /etc/ld.so.conf.d/zz-host-nvidia.conf
      ldconfig
      command -v nvidia-smi > /dev/null || ln -s '$smi' /usr/local/bin/nvidia-smi
      nvidia-smi -L"
  done
fi
if [ ! -s "$house/.done" ]; then
  step wheelhouse "$repo/scripts/wheelhouse-from-venv" "$src_venv" "$house" torch numpy ||
    WHEELHOUSE_ALLOW_CHANGED=1 step wheelhouse-as-is "$repo/scripts/wheelhouse-from-venv" "$src_venv" "$house" torch numpy ||
    exit 1
  touch "$house/.done"
fi
venv_yaml="venv:
  python: $base_python
  packages: [torch==$torch_dist, numpy==$numpy_version]
  find_links: [$house]
  offline: true
  cuda: '$torch_cuda'"
# hosts files: NAME.yaml (warmup configured), NAME-cold.yaml (none), NAME-pre.yaml (TORCH_CACHING_PRECOMPILE=1)
variants() {
  local name=$1
  cat > "$work/$name.yaml"
  sed '/^warmup:/,/^  cache_dir:/d' "$work/$name.yaml" > "$work/$name-cold.yaml"
  sed 's/^  run_dir: \/root\/runs$/  run_dir: \/root\/runs\n  env: {TORCH_CACHING_PRECOMPILE: "1"}/' "$work/$name.yaml" > "$work/$name-pre.yaml"
}
variants drafter <<EOF
$(cat "$lab/hosts-bare.yaml")
$venv_yaml
code:
  repo: $lab/dflash
  path: /root/dflash
warmup:
  command: python -m drafter.warmup --device {device}
  devices: [0]
  cache_dir: /root/.cache/torch-compile
train:
  command: python -m drafter.train --target-gpus 0 --drafter-gpus 0 --steps $steps --log-interval 1
  run_dir: /root/runs
EOF
variants plain <<EOF
$(cat "$lab/hosts-bare.yaml")
$venv_yaml
code:
  repo: $lab/plain
  path: /root/plain
warmup:
  command: torchrun --nproc-per-node 1 train.py --max-iters 5
  cache_dir: /root/.cache/torch-compile
train:
  command: torchrun --nproc-per-node 1 train.py --max-iters $iters --log-interval 50
  metric: {pattern: 'time ([\d.]+)ms', unit: ms/iter, higher_is_better: false}
  run_dir: /root/runs
EOF
python3 "$repo/examples/plain/prepare.py" --out "$work/plain-data/tokens.bin" > /dev/null

# workload W: cold on B, self-warm on A, seeded B from A; then the same with precompile
workload() {
  local w=$1 h=$work/$1.yaml
  step "$w-deploy" remote deploy -c "$a,$b" --hosts "$h" || return 1
  if [ "$w" = plain ]; then
    step "$w-push-data" remote push -c "$a,$b" --hosts "$h" --src "$work/plain-data" --dest /root/plain/data || return 1
  fi
  fresh $a "$h"; fresh $b "$h"
  measure "${w}_cold" $b "$work/$w-cold.yaml"
  fresh $b "$h"
  step "$w-warmup-a" remote warmup -c $a --hosts "$h"
  step "$w-seed-b" remote warmup -c $b --hosts "$h"
  fact "${w}_copy_s" "$(awk -F'\t' -v n="$w-seed-b" '$1 == n { print $3 }' "$work/steps.tsv")"
  fact "${w}_copied" "$(grep -oE 'copied [0-9]+ cache file' "$logs/$w-seed-b.log" | grep -oE '[0-9]+' | tail -n 1)"
  # what the copy leaves out: the jobs' TMPDIR inside the folder
  fact "${w}_tmp_files" "$(remote exec -c $a --hosts "$h" --command 'find /root/.cache/torch-compile/torch-*/tmp -type f | wc -l' 2>/dev/null | tail -n 1)"
  pair "$w" "${w}_self" "${w}_seeded" "$h"
  step "$w-doctor-b" remote doctor -c $b --hosts "$h" --json
  # precompile: its own warmup (train.env differs: another passport), then seeded again
  fresh $a "$h"; fresh $b "$h"
  step "$w-pre-warmup-a" remote warmup -c $a --hosts "$work/$w-pre.yaml"
  step "$w-pre-seed-b" remote warmup -c $b --hosts "$work/$w-pre.yaml"
  pair "$w" "${w}_pre_self" "${w}_pre_seeded" "$work/$w-pre.yaml"
}
for w in $parts; do workload "$w"; done
step lab-down remote lab down
