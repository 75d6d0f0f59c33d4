#!/bin/bash
# Issue 44's proof on a GPU, through `remote` only: unmodified nanoGPT (examples/nanogpt, upstream 3adf61e1) in a
# container that `remote create --gpu` made on the namespace lab (no LXC, no sshd), deployed offline with the
# machine's own torch; then
#   stop/resume  `remote stop --save` mid-run, `remote train --resume`: the run goes on at the checkpoint's iter
#   gpu fix      the container's /dev/nvidia-uvm devN line deleted under a live run (a planted fault that needs a
#                restart), `remote gpu fix`: where it saves and resumes by itself, that; where it refuses a live
#                run (the feature not there yet), `stop --save`, `gpu fix`, `train --resume`, as a user would
# Timed: fault to first step after resume (from the start of `stop --save` / `gpu fix` to the arrival of the
# resumed run's first `iter N` line; every output line stamped as it arrives), and its parts.
#
# Usage (as root, in a checkout of remote whose controller packages python3 imports):
#   bash bench/gpu_resume.sh [RECORD.json]    (default docs/evidence/gpu-resume/<date>[-N].json)
# Environment: SRC_VENV (the venv whose torch is deployed; default python3's), GPU_RESUME_WORK (scratch, default
# /var/tmp/gpu-resume), MAX_ITERS (default 1500 on a GPU, 400 on a CPU), EVAL (eval_interval = checkpoint
# interval, default 100 / 50), COMPILE (True/False, default True on a GPU), BUDGET (seconds: steps that would
# start later are skipped and recorded so; default none), UV_WHEEL (the uv wheel an offline deploy needs).
# On a machine without nvidia-smi it is a rehearsal: --gpu none, the lab's CPU torch wheel, a small model on the
# CPU, and the gpu fix part only as far as a container without a GPU allows (skipped).
# Prints one line per step; everything each step printed is in WORK/logs/.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
date=$(date -u +%Y-%m-%d)
record=${1:-}
if [ -z "$record" ]; then
  record=$repo/docs/evidence/gpu-resume/$date.json
  n=2
  while [ -e "$record" ]; do record=$repo/docs/evidence/gpu-resume/$date-$n.json; n=$((n + 1)); done
fi
work=${GPU_RESUME_WORK:-/var/tmp/gpu-resume}
budget=${BUDGET:-0}
src_venv=${SRC_VENV:-$(python3 -c 'import sys; print(sys.prefix)')}
A=${CT_A:-311}
lab=$work/lab
house=$work/wheelhouse
logs=$work/logs
export REMOTE_LAB_DIR=$lab PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$logs" "$(dirname "$record")"
: > "$work/steps.tsv"
: > "$work/facts.tsv"
gpu_machine=false
command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1 && gpu_machine=true
if $gpu_machine; then
  gpu=${GPU:-0}; max_iters=${MAX_ITERS:-1500}; eval=${EVAL:-100}; compile=${COMPILE:-True}
  model="--device=cuda --compile=$compile --dtype=bfloat16"  # the config's own model: 6 layers, 384 wide, block 256
else
  gpu=none; max_iters=${MAX_ITERS:-400}; eval=${EVAL:-50}; compile=False
  model="--device=cpu --compile=False --dtype=float32 --block_size=64 --batch_size=16 --n_layer=2 --n_head=2 --n_embd=64"
fi
train_cmd="python train.py config/train_shakespeare_char.py $model --max_iters=$max_iters --lr_decay_iters=$max_iters --eval_interval=$eval --eval_iters=20 --log_interval=10 --always_save_checkpoint=True --out_dir=out"

# shellcheck disable=SC2034  # read by bench/lib.sh's step
step_stamped=1 step_width=16 step_cut=160
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"  # remote, fact, stamp, pct, step
started_at() { awk -F'\t' -v n="$1" '$1 == n { print $4 }' "$work/steps.tsv" | tail -n 1; }
run_log() { pct exec "$A" -- cat "/root/runs/$1/log"; }
latest_run() { pct exec "$A" -- bash -c 'ls -1t /root/runs | grep -v "^\." | head -n 1'; }
# wait_iter RUN N: until the run's log shows `iter M` with M >= N (at most 400 s)
wait_iter() {
  local end=$((SECONDS + 400)) last
  while [ "$SECONDS" -lt "$end" ]; do
    last=$(run_log "$1" 2> /dev/null | grep -oE '^iter [0-9]+' | tail -n 1 | cut -d' ' -f2)
    [ -n "$last" ] && [ "$last" -ge "$2" ] && return 0
    sleep 0.5
  done
  return 1
}
# the stamped arrival of the first `iter N` line in a step's log, and that N
first_iter_at() { grep -m1 -E '^[0-9.]+ (\[[^]]*\] )?iter [0-9]+:' "$logs/$1.log" | cut -d' ' -f1; }
first_iter_n() { grep -m1 -oE '^[0-9.]+ (\[[^]]*\] )?iter [0-9]+:' "$logs/$1.log" | grep -oE 'iter [0-9]+' | cut -d' ' -f2; }
diff_s() { [ -n "$1" ] && [ -n "$2" ] && awk "BEGIN { printf \"%.1f\", $2 - $1 }"; }

write_record() {
python3 - "$work" "$record" "$date" <<'EOF'
import json, os, sys
work, record, date = sys.argv[1:4]
facts = dict(line.rstrip("\n").split("\t", 1) for line in open(f"{work}/facts.tsv") if "\t" in line)
steps = [{"name": n, "ok": rc == "0", "rc": rc, "seconds": round(float(s), 2)}
         for n, rc, s, _ in (line.split("\t") for line in open(f"{work}/steps.tsv").read().splitlines())]
num = lambda k: float(facts[k]) if facts.get(k) not in (None, "") else None
out = {"date": date, "tree": os.environ.get("GPU_RESUME_TREE"), "gpu": facts.get("gpu"), "driver": facts.get("driver"),
       "torch": facts.get("torch"), "train_command": facts.get("train_command"), "steps": steps,
       "stop_resume": {"checkpoint_step": num("sr_checkpoint_step"), "stop_said": facts.get("sr_stop_said"),
                       "last_iter_before_stop": num("sr_last_iter"), "resumed_first_iter": num("sr_first_iter"),
                       "resumed_last_iter": num("sr_last_iter_after"), "stop_save_s": num("sr_stop_s"),
                       "resume_to_first_step_s": num("sr_resume_first_s"),
                       "fault_to_first_step_s": num("sr_fault_first_s")},
       "gpu_fix": {"mode": facts.get("gf_mode"), "fix_said": facts.get("gf_fix_said"),
                   "checkpoint_step": num("gf_checkpoint_step"), "resumed_first_iter": num("gf_first_iter"),
                   "resumed_last_iter": num("gf_last_iter_after"), "cuinit_after": facts.get("gf_cuinit"),
                   "fault_to_first_step_s": num("gf_fault_first_s")},
       "goal_s": {"fault_to_first_step_same_container": 30}}
json.dump(out, open(record, "w"), indent=2)
open(record, "a").write("\n")
print(json.dumps(out["stop_resume"]), json.dumps(out["gpu_fix"]), "->", record)
EOF
}
trap write_record EXIT
trap "exit 143" TERM INT  # a timeout still leaves the record of what ran

# -- the machine, the lab, the wheelhouse, the code ---------------------------------------------------------
fact train_command "$train_cmd"
if $gpu_machine; then
  fact gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
  fact driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
fi
step lab-up remote lab up --backend ns --containers "${LAB_CT:-200}" || exit 1
template=$(python3 -c 'from remote.lab.ns import NsLab; from pathlib import Path; print(NsLab(dir=Path("'"$lab"'")).template)')
if $gpu_machine; then
  read -r torch_dist torch_version torch_cuda base_python < <("$src_venv/bin/python" -c '
import importlib.metadata as m, os, sys, torch
print(m.version("torch"), torch.__version__, torch.version.cuda or "cpu", os.path.realpath(sys._base_executable))')
  numpy_version=$("$src_venv/bin/python" -c 'import importlib.metadata as m; print(m.version("numpy"))')
  fact torch "$torch_version"
  mkdir -p "$house"
  [ -n "${UV_WHEEL:-}" ] && cp "$UV_WHEEL" "$house/"
  if ! step wheelhouse "$repo/scripts/wheelhouse-from-venv" "$src_venv" "$house" torch numpy; then
    WHEELHOUSE_ALLOW_CHANGED=1 step wheelhouse-as-is "$repo/scripts/wheelhouse-from-venv" "$src_venv" "$house" torch numpy || exit 1
  fi
  venv_yaml="venv:
  python: $base_python
  packages: [torch==$torch_dist, numpy==$numpy_version]
  find_links: [$house]
  offline: true
  cuda: '$torch_cuda'"
else
  venv_yaml=$(sed -n '/^venv:/,/^code:/p' "$lab/hosts.yaml" | sed '$d' | grep -v '^  requirements:')
  fact torch "$(grep -oE 'torch==[^,]+' "$lab/hosts.yaml" | head -n 1)"
fi
# The code as a user's repository: the vendored files (unchanged) and prepare_offline.py, committed.
code=$work/nanogpt
rm -rf "$code" && mkdir -p "$code/config"
for f in train.py model.py configurator.py config/train_shakespeare_char.py LICENSE prepare_offline.py; do
  cp "$repo/examples/nanogpt/$f" "$code/$f"
done
git -C "$code" init -q && git -C "$code" add -A &&
  git -C "$code" -c user.name=bench -c user.email=bench@remote.invalid commit -qm "nanoGPT 3adf61e1, unmodified"
cat > "$work/hosts.yaml" <<EOF
$(cat "$lab/hosts-bare.yaml")
$venv_yaml
code:
  repo: $code
  path: /root/nanogpt
warmup:
  command: $train_cmd --max_iters=20 --eval_interval=10 --out_dir=/tmp/warmup-out
train:
  command: $train_cmd
  run_dir: /root/runs
  checkpoint:
    path: out/ckpt.pt
    resume: --init_from=resume
    signal: none
    grace: 120
EOF
export REMOTE_HOSTS_FILE=$work/hosts.yaml
step create remote create "$A" --host lab --template "$template" --storage local --gpu "$gpu" --cores 8 --memory 65536 --disk 64 || exit 1
step deploy remote deploy -c "$A" || exit 1
step prepare remote exec -c "$A" "python prepare_offline.py" || exit 1
step warmup remote warmup -c "$A"

# -- stop --save mid-run, then train --resume ------------------------------------------------------------------
step train-1 remote train -c "$A" --detach || exit 1
run1=$(grep -oE '==> run [0-9a-f-]+' "$logs/train-1.log" | head -n 1 | cut -d' ' -f3)
wait_iter "$run1" $((eval * 3 + 20)) || { echo "run $run1 did not reach iter $((eval * 3 + 20))"; exit 1; }
fact sr_last_iter "$(run_log "$run1" | grep -oE '^iter [0-9]+' | tail -n 1 | cut -d' ' -f2)"
step stop-save remote stop -c "$A" --save
fact sr_stop_said "$(cut -d' ' -f2- "$logs/stop-save.log" | grep -iE 'checkpoint|ckpt|lost' | tr '\n' '|' | cut -c1-600)"
fact sr_checkpoint_step "$(cut -d' ' -f2- "$logs/stop-save.log" | grep -oE 'step [0-9]+' | head -n 1 | cut -d' ' -f2)"
step resume remote train -c "$A" --resume
fact sr_first_iter "$(first_iter_n resume)"
fact sr_last_iter_after "$(cut -d' ' -f2- "$logs/resume.log" | grep -oE '(^|\] )iter [0-9]+' | tail -n 1 | grep -oE '[0-9]+$')"
fact sr_stop_s "$(awk -F'\t' '$1 == "stop-save" { print $3 }' "$work/steps.tsv")"
fact sr_resume_first_s "$(diff_s "$(started_at resume)" "$(first_iter_at resume)")"
fact sr_fault_first_s "$(diff_s "$(started_at stop-save)" "$(first_iter_at resume)")"

# -- gpu fix with a run live ------------------------------------------------------------------------------------
if $gpu_machine; then
  step train-2 remote train -c "$A" --fresh --detach || exit 1
  run2=$(grep -oE '==> run [0-9a-f-]+' "$logs/train-2.log" | head -n 1 | cut -d' ' -f3)
  wait_iter "$run2" $((eval * 2 + 20)) || { echo "run $run2 did not reach iter $((eval * 2 + 20))"; exit 1; }
  key=$(pct config "$A" | awk -F: '/^dev[0-9]+:/ && /\/dev\/nvidia-uvm(,|$)/ { print $1; exit }')
  fact gf_planted "$key"
  step plant-devn pct set "$A" --delete "$key"  # the config loses the line; the running container keeps its node
  step doctor-gpu remote doctor --gpu -c "$A"  # exit 1: it names the fault
  step gpu-fix remote gpu fix -c "$A"
  fix_rc=$(awk -F'\t' '$1 == "gpu-fix" { print $2 }' "$work/steps.tsv")
  fact gf_fix_said "$(cut -d' ' -f2- "$logs/gpu-fix.log" | grep -v '^\s*$' | tr '\n' '|' | cut -c1-800)"
  if [ -z "$key" ] || ! grep -qiE 'restart|pct (stop|start)|reboot' "$logs/gpu-fix.log"; then
    fact gf_mode "no restart: the planted fault did not need one (see gpu-fix.log)"
    follow=
  elif [ "$fix_rc" = 3 ]; then  # refused for the live run: what a user does then, through remote
    fact gf_mode "refused a live run: stop --save, gpu fix, train --resume"
    step gf-stop-save remote stop -c "$A" --save
    fact gf_checkpoint_step "$(cut -d' ' -f2- "$logs/gf-stop-save.log" | grep -oE 'step [0-9]+' | head -n 1 | cut -d' ' -f2)"
    step gpu-fix-2 remote gpu fix -c "$A"
    step gf-resume remote train -c "$A" --resume
    follow=gf-resume
  else
    fact gf_mode "gpu fix saved, restarted and resumed by itself (exit $fix_rc)"
    fact gf_checkpoint_step "$(cut -d' ' -f2- "$logs/gpu-fix.log" | grep -oE 'step [0-9]+' | head -n 1 | cut -d' ' -f2)"
    step gf-logs remote logs -c "$A" --follow
    follow=gf-logs
  fi
  [ -n "$follow" ] || { step lab-down remote lab down; exit 0; }
  fact gf_cuinit "$(pct exec "$A" -- python3 -c 'import ctypes; print(ctypes.CDLL("libcuda.so.1").cuInit(0))' 2>&1 | tail -n 1)"
  fact gf_first_iter "$(first_iter_n "$follow")"
  fact gf_last_iter_after "$(cut -d' ' -f2- "$logs/$follow.log" | grep -oE '(^|\] )iter [0-9]+' | tail -n 1 | grep -oE '[0-9]+$')"
  fact gf_fault_first_s "$(diff_s "$(started_at gpu-fix)" "$(first_iter_at "$follow")")"
fi
step lab-down remote lab down
