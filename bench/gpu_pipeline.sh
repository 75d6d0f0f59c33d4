#!/bin/bash
# The story on a GPU machine, through `remote` only (issue 18): a namespace lab (no LXC, no sshd), an
# air-gapped deploy of the machine's own torch (a wheelhouse made from its venv), warmups of
# examples/plain (torchrun) and examples/drafter (the guard), train to a known-good record, doctor healthy;
# then the venv polluted, the compile cache deleted and the model file patched, doctor naming each, and
# deploy && warmup && train back to the known-good throughput; stop frees the GPU. Measured in the same
# run: the first step cold (fresh cache) against warm (after `remote warmup`), and steady throughput
# launched by `remote train` against the same command launched by hand in the container.
#
# Usage (as root, in a checkout of remote, its controller packages importable by python3):
#   bash bench/gpu_pipeline.sh [RECORD.json]    (default docs/evidence/gpu-pipeline/<date>[-N].json)
# then `python3 bench/gpu_pipeline_table.py` adds it to docs/evidence/gpu-pipeline.md's table.
# Environment: SRC_VENV (the venv whose torch is deployed; default python3's), GPU_PIPELINE_WORK (scratch,
# default /var/tmp/gpu-pipeline), STEPS (drafter steps per run, default 400), RUNS (runs on each side of the
# known-good/recovered comparison, each side's figure their median; default 3). Runs on a CPU machine too
# (a rehearsal: no GPU facts). Prints one line per step; everything each step printed is in WORK/logs/.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
date=$(date -u +%Y-%m-%d)
record=${1:-}
if [ -z "$record" ]; then  # docs/evidence/gpu-pipeline/<date>.json, or <date>-2.json, ... when that day has one
  record=$repo/docs/evidence/gpu-pipeline/$date.json
  n=2
  while [ -e "$record" ]; do record=$repo/docs/evidence/gpu-pipeline/$date-$n.json; n=$((n + 1)); done
fi
work=${GPU_PIPELINE_WORK:-/var/tmp/gpu-pipeline}
steps=${STEPS:-400}
pairs=${PAIRS:-3}  # tool/by-hand run pairs
budget=${BUDGET:-0}  # seconds: steps that would start later are skipped (and recorded as such)
started=$SECONDS
src_venv=${SRC_VENV:-$(python3 -c 'import sys; print(sys.prefix)')}
ct=${GPU_PIPELINE_CT:-200}
lab=$work/lab
house=$work/wheelhouse
logs=$work/logs
export REMOTE_LAB_DIR=$lab PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$logs" "$(dirname "$record")"
: > "$work/steps.tsv"
: > "$work/facts.tsv"

# shellcheck disable=SC2034  # read by bench/lib.sh's step
step_stamped=0 step_width=18 step_cut=150
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"  # remote, fact, stamp, pct, step
# step NAME CMD...: run, time, log; one line on stdout; the step's exit status is kept in the record.
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | paste -sd, -; }
gpu_procs() { nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | paste -sd, -; }
# The median of a run's throughput lines, the first one left out (it can hold the end of the ramp) when there are 3+.
ktoks() {
  grep -oE '[0-9.]+ Ktok/s' "$1" | awk '{ v[NR] = $1 } END { for (i = (NR >= 3 ? 2 : 1); i <= NR; i++) print v[i] }' |
    sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'
}
first_steady() { grep -oE 'first steady step of every thread [0-9.]+s' "$1" | grep -oE '[0-9.]+' | tail -n 1; }

# -- the record (also when a step stops the story early: what ran is in it) -----------------------------------
write_record() {
python3 - "$work" "$record" "$date" <<'EOF'
import json, os, sys
work, record, date = sys.argv[1:4]
facts = dict(line.rstrip("\n").split("\t", 1) for line in open(f"{work}/facts.tsv") if "\t" in line)
steps = [{"name": n, "ok": rc == "0", "seconds": round(float(s), 1)}
         for n, rc, s in (line.split("\t") for line in open(f"{work}/steps.tsv").read().splitlines())]
num = lambda k: float(facts[k]) if facts.get(k) not in (None, "") else None
named = facts.get("doctor_named", "false - -").split()
cold, warm = num("first_step_cold_s"), num("first_step_warm_s")
tool, hand, base, rec = num("throughput_tool"), num("throughput_by_hand"), num("known_good"), num("recovered")
runs = lambda k: [float(x) for x in facts.get(k, "").split()]
out = {
    "date": date, "tree": os.environ.get("GPU_PIPELINE_TREE"), "gpu": facts.get("gpu"), "driver": facts.get("driver"), "torch": facts.get("torch"),
    "steps": steps, "first_step_cold_s": cold, "first_step_warm_s": warm,
    "throughput_tool": tool, "throughput_by_hand": hand, "unit": "Ktok/s",
    "throughput_runs": {"tool": runs("throughput_tool_runs"), "by_hand": runs("throughput_hand_runs")},
    "replay": {"baseline": base, "polluted": {"named": [x for x in named[1:2] for x in x.split(",") if x != "-"],
                                              "missed": [x for x in named[2:3] for x in x.split(",") if x != "-"]},
               "doctor_named": named[0] == "true", "recovered": rec,
               "baseline_runs": runs("known_good_runs"), "recovered_runs": runs("recovered_runs"),
               "median_of": min(len(runs("known_good_runs")), len(runs("recovered_runs"))) or None},
    "ratios": {"warm_over_cold": round(warm / cold, 3) if cold and warm else None,
               "tool_over_hand": round(tool / hand, 3) if tool and hand else None,
               "recovered_over_baseline": round(rec / base, 3) if rec and base else None},
    "gpu_freed": {"processes_while_running": facts.get("gpu_procs_running"),
                  "processes_after_stop": facts.get("gpu_procs_after_stop"),
                  "idle_mem_mib": facts.get("idle_mem_mib"), "mem_after_stop_mib": facts.get("mem_after_stop_mib")},
    "cuda_build_checked": facts.get("cuda_build_checked") == "0", "torch_cuda": facts.get("torch_cuda"),
}
json.dump(out, open(record, "w"), indent=2)
open(record, "a").write("\n")
print(json.dumps(out["ratios"]), "->", record)
EOF
}
trap write_record EXIT

# -- the machine ------------------------------------------------------------------------------------------
if command -v nvidia-smi > /dev/null; then
  fact gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
  fact driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
  fact gpu_count "$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)"
  fact idle_mem_mib "$(gpu_used)"
fi
read -r torch_dist torch_version torch_cuda base_python < <("$src_venv/bin/python" -c '
import importlib.metadata as m, os, sys, torch
print(m.version("torch"), torch.__version__, torch.version.cuda or "cpu", os.path.realpath(sys._base_executable))')
numpy_version=$("$src_venv/bin/python" -c 'import importlib.metadata as m; print(m.version("numpy"))')
fact torch "$torch_version"
fact torch_cuda "$torch_cuda"
echo "== $(date -u +%FT%TZ) torch $torch_version (dist $torch_dist, CUDA $torch_cuda) from $src_venv, base python $base_python"

# -- lab, wheelhouse, hosts files --------------------------------------------------------------------------
step lab-up remote lab up --backend ns --containers "$ct" || exit 1
# The driver's user-space libraries and nvidia-smi where the container's loader and PATH find them, as a
# Proxmox GPU container has them installed; needed only where the host itself finds them through its
# environment (LD_LIBRARY_PATH, a PATH entry that pct's PATH lacks).
smi=$(command -v nvidia-smi || true)
libdirs=""
ld_path=${LD_LIBRARY_PATH:-}
for d in ${ld_path//:/ }; do
  if [ -e "$d/libcuda.so.1" ]; then libdirs="$libdirs $d"; fi
done
if [ -n "$smi" ]; then
  step gpu-setup "$lab/bin/pct" exec "$ct" --keep-env 0 -- bash -c "set -e
    for d in $libdirs; do echo \$d; done > /etc/ld.so.conf.d/zz-host-nvidia.conf
    ldconfig
    command -v nvidia-smi > /dev/null || ln -s '$smi' /usr/local/bin/nvidia-smi
    nvidia-smi -L; ldconfig -p | grep -m1 libcuda.so.1"
fi
# The closure of torch and numpy, and `six` (in the wheelhouse, not in the spec: the pollution below).
if ! step wheelhouse "$repo/scripts/wheelhouse-from-venv" "$src_venv" "$house" torch numpy six; then
  # A venv changed since its install (the script names each file): packed as it is, and said so in the record.
  WHEELHOUSE_ALLOW_CHANGED=1 step wheelhouse-as-is "$repo/scripts/wheelhouse-from-venv" "$src_venv" "$house" \
    torch numpy six || exit 1
fi
venv_yaml="venv:
  python: $base_python
  packages: [torch==$torch_dist, numpy==$numpy_version]
  find_links: [$house]
  offline: true
  cuda: '$torch_cuda'"
devices=0
drafter_cmd="python -m drafter.train --target-gpus 0 --drafter-gpus 0 --steps $steps --log-interval 1"
cat > "$work/hosts.yaml" <<EOF
$(cat "$lab/hosts-bare.yaml")
$venv_yaml
code:
  repo: $lab/dflash
  path: /root/dflash
warmup:
  command: python -m drafter.warmup --device {device}
  devices: [$devices]
  cache_dir: /root/.cache/torch-compile
train:
  command: $drafter_cmd
  run_dir: /root/runs
EOF
# A run that outlasts the wait below: the one `remote stop` ends.
sed "s/--steps $steps/--steps 1000000/" "$work/hosts.yaml" > "$work/hosts-long.yaml"
# The cold run: the same command with no warmup configured (train's preflight insists on one otherwise).
sed '/^warmup:/,/^  cache_dir:/d' "$work/hosts.yaml" > "$work/hosts-cold.yaml"
cat > "$work/hosts-plain.yaml" <<EOF
$(cat "$lab/hosts-bare.yaml")
$venv_yaml
code:
  repo: $lab/plain
  path: /root/plain
warmup:
  command: torchrun --nproc-per-node 1 train.py --max-iters 5
  cache_dir: /root/.cache/torch-compile
train:
  command: torchrun --nproc-per-node 1 train.py --max-iters 300 --log-interval 50
  metric: {pattern: 'time ([\d.]+)ms', unit: ms/iter, higher_is_better: false}
  run_dir: /root/runs
EOF
python3 "$repo/examples/plain/prepare.py" --out "$work/plain-data/tokens.bin" > /dev/null
export REMOTE_HOSTS_FILE=$work/hosts.yaml

# -- the drafter: cold, warm, known-good, doctor, by hand ------------------------------------------------
step deploy remote deploy -c "$ct" || exit 1
grep -q "torch $torch_version (CUDA build $( [ "$torch_cuda" = cpu ] && echo none || echo "$torch_cuda"))" "$logs/deploy.log"
fact cuda_build_checked $?
step train-cold remote train -c "$ct" --hosts "$work/hosts-cold.yaml"
fact first_step_cold_s "$(first_steady "$logs/train-cold.log")"
# A fresh cache for the warmup: what the cold run compiled goes (the warmup must fill it by itself).
remote exec -c "$ct" --command 'rm -rf /root/.cache/torch-compile' > /dev/null 2>&1
step warmup remote warmup -c "$ct"
step train remote train -c "$ct"
fact first_step_warm_s "$(first_steady "$logs/train.log")"
# The known-good figure and the recovered one are each the median of RUNS runs (default 3): one run against
# one was inside this workload's run-to-run spread (9% in the 2026-12-01-3 record).
median() { printf '%s\n' "$@" | grep . | sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }
runs=${RUNS:-3}
kg_runs="$(ktoks "$logs/train.log")"
for i in $(seq 2 "$runs"); do
  step "train-$i" remote train -c "$ct" && kg_runs="$kg_runs $(ktoks "$logs/train-$i.log")"
done
fact known_good_runs "$kg_runs"
# shellcheck disable=SC2086
fact known_good "$(median $kg_runs)"
step known-good remote known-good -c "$ct"
step doctor remote doctor -c "$ct"
# By hand: the same command in the same environment (the job's: venv, compile cache, TMPDIR, as `remote exec`
# shows it), started by pct itself in the checkout: no detached job, no log file, no follower. Throughput of
# this small model moves by 10-20% from run to run (it is bound by the host's CPU), so tool and hand runs
# alternate (ABBA...) and each side's figure is the median of its runs.
remote exec -c "$ct" --command env 2>/dev/null | grep -vE '^(PWD|OLDPWD|SHLVL|_)=' > "$work/job.env"
mapfile -t job_env < "$work/job.env"
by_hand() { "$lab/bin/pct" exec "$ct" -- env -i "${job_env[@]}" bash -c "cd /root/dflash && exec $drafter_cmd"; }
tool_runs="" hand_runs=""
for i in $(seq 1 "$pairs"); do
  if [ $((i % 2)) -eq 1 ]; then order="tool hand"; else order="hand tool"; fi
  for side in $order; do
    if [ "$side" = tool ]; then
      step "tool-$i" remote train -c "$ct" && tool_runs="$tool_runs $(ktoks "$logs/tool-$i.log")"
    else
      step "by-hand-$i" by_hand && hand_runs="$hand_runs $(ktoks "$logs/by-hand-$i.log")"
    fi
  done
done
fact throughput_tool_runs "$tool_runs"
fact throughput_hand_runs "$hand_runs"
# shellcheck disable=SC2086
fact throughput_tool "$(median $tool_runs)"
# shellcheck disable=SC2086
fact throughput_by_hand "$(median $hand_runs)"

# -- the story: pollute, delete the cache, patch the model; doctor names each; back to known-good ---------
step pollute "$lab/bin/pct" exec "$ct" -- bash -c "/root/.local/share/remote/uv-*/uv pip install --python /root/venv/bin/python --no-index --offline --find-links $house six && rm -rf /root/.cache/torch-compile && echo '# patched by hand' >> /root/dflash/drafter/model.py"
# Findings are the point here: doctor's exit status 1 (findings) is this step's success.
doctor_finds() { remote doctor "$@"; [ $? -eq 1 ]; }
step doctor-polluted doctor_finds -c "$ct" --json
named=$(python3 - "$logs/doctor-polluted.log" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
codes = {f["code"] for r in json.loads(text[text.index("{"):])["containers"] for f in r["findings"]} if "{" in text else set()
want = {"package-added", "cache-missing", "checkout-edited"}
print("true" if want <= codes else "false", ",".join(sorted(codes & want)) or "-", ",".join(sorted(want - codes)) or "-")
EOF
)
fact doctor_named "$named"
step recover-deploy remote deploy -c "$ct"
step recover-warmup remote warmup -c "$ct"
step recover-train remote train -c "$ct"
rec_runs="$(ktoks "$logs/recover-train.log")"
for i in $(seq 2 "$runs"); do
  step "recover-train-$i" remote train -c "$ct" && rec_runs="$rec_runs $(ktoks "$logs/recover-train-$i.log")"
done
fact recovered_runs "$rec_runs"
# shellcheck disable=SC2086
fact recovered "$(median $rec_runs)"
step doctor-after remote doctor -c "$ct"

# -- stop frees the GPU -----------------------------------------------------------------------------------
step train-detached remote train -c "$ct" --detach --hosts "$work/hosts-long.yaml"
for _ in $(seq 1 90); do
  case $(remote logs -c "$ct" --hosts "$work/hosts-long.yaml" 2>/dev/null) in *Ktok/s*) break ;; esac
  sleep 1
done
fact gpu_procs_running "$(gpu_procs)"
step stop remote stop -c "$ct" --hosts "$work/hosts-long.yaml"
sleep 2
fact gpu_procs_after_stop "$(gpu_procs)"
fact mem_after_stop_mib "$(gpu_used)"
# -- examples/plain under torchrun ------------------------------------------------------------------------
step plain-deploy remote deploy -c "$ct" --hosts "$work/hosts-plain.yaml"
step plain-push-data remote push -c "$ct" --hosts "$work/hosts-plain.yaml" --src "$work/plain-data" --dest /root/plain/data
step plain-warmup remote warmup -c "$ct" --hosts "$work/hosts-plain.yaml"
step plain-train remote train -c "$ct" --hosts "$work/hosts-plain.yaml"

step lab-down remote lab down

