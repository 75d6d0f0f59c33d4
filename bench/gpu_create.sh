#!/bin/bash
# From nothing to a trained run on a GPU machine, every step through `remote` (issue 37 item 7): a namespace
# lab (no LXC, no sshd), then `remote create --gpu`, deploy (offline, the machine's own torch), warmup, train;
# the time from create to the first steady step, unseeded (A) and seeded from A's warm cache (B, created after
# the host's uvm nodes were removed: create makes them). Then planted faults on A, each named by
# `remote doctor --gpu`, repaired by `remote gpu fix` and proven by a train:
#   uvm      the host's /dev/nvidia-uvm and -tools removed
#   devn     A's devN line for /dev/nvidia-uvm deleted (pct set --delete), A restarted
#   replaced A's driver user space replaced by another version's (the loader finds a libcuda.so.<other> first)
#   removed  A's driver user space removed (its loader entry and every libcuda the loader finds)
#
# Usage (as root, in a checkout of remote whose controller packages python3 imports):
#   bash bench/gpu_create.sh [RECORD.json]    (default docs/evidence/gpu-create/<date>[-N].json)
# Environment: SRC_VENV (the venv whose torch is deployed; default python3's), GPU_CREATE_WORK (scratch, default
# /var/tmp/gpu-create), STEPS (drafter steps per train, default 300), GPU (create's --gpu, default 0), BUDGET
# (seconds: steps that would start later are skipped and recorded so; default none), FAULTS (which faults to
# plant, in this order; default "uvm devn replaced removed").
# On a machine without nvidia-smi it is a rehearsal: --gpu none, the lab's CPU torch wheel, no fault section.
# Prints one line per step; everything each step printed is in WORK/logs/.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
date=$(date -u +%Y-%m-%d)
record=${1:-}
if [ -z "$record" ]; then
  record=$repo/docs/evidence/gpu-create/$date.json
  n=2
  while [ -e "$record" ]; do record=$repo/docs/evidence/gpu-create/$date-$n.json; n=$((n + 1)); done
fi
work=${GPU_CREATE_WORK:-/var/tmp/gpu-create}
steps=${STEPS:-300}
budget=${BUDGET:-0}  # seconds: steps that would start later are skipped (and recorded as such)
src_venv=${SRC_VENV:-$(python3 -c 'import sys; print(sys.prefix)')}
A=${CT_A:-301}
B=${CT_B:-302}
lab=$work/lab
house=$work/wheelhouse
logs=$work/logs
export REMOTE_LAB_DIR=$lab PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$logs" "$(dirname "$record")"
: > "$work/steps.tsv"
: > "$work/facts.tsv"
gpu_machine=false
command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1 && gpu_machine=true
gpu=${GPU:-0}
$gpu_machine || gpu=none

# shellcheck disable=SC2034  # read by bench/lib.sh's step
step_stamped=1 step_width=16 step_cut=160
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"  # remote, fact, stamp, pct, step
# The arrival time of a log's "first steady step" line.
steady_at() { grep -m1 'first steady step of every thread' "$logs/$1.log" | cut -d' ' -f1; }
started_at() { awk -F'\t' -v n="$1" '$1 == n { print $4 }' "$work/steps.tsv" | tail -n 1; }
# create-to-first-step: from the start of step CREATE to the first steady step's line in step TRAIN's log.
to_first_step() {
  local s e
  s=$(started_at "$1"); e=$(steady_at "$2")
  [ -n "$s" ] && [ -n "$e" ] && awk "BEGIN { printf \"%.1f\", $e - $s }"
}
# Findings are the point: doctor's exit status 1 (findings) is this step's success; the kinds go to the record.
doctor_finds() { remote doctor --gpu "$@"; [ $? -eq 1 ]; }
kinds() {
  python3 - "$logs/$1.log" <<'EOF'
import json, sys
text = "\n".join(line.split(" ", 1)[1] if " " in line else "" for line in open(sys.argv[1]).read().splitlines())
try:
    data = json.JSONDecoder().raw_decode(text[text.index("\n{\n") if "\n{\n" in text else text.index("{"):].lstrip())[0]
except ValueError:
    print("-"); sys.exit()
found = set()
def walk(x):
    if isinstance(x, dict):
        if "kind" in x and isinstance(x["kind"], str) and ("fix" in x or "message" in x or "severity" in x):
            found.add(x["kind"])
        for v in x.values():
            walk(v)
    elif isinstance(x, list):
        for v in x:
            walk(v)
walk(data)
print(",".join(sorted(found)) or "-")
EOF
}
# Where remote did not make the host's uvm nodes (a failure recorded as such), made by hand so the rest runs.
uvm_by_hand() {
  $gpu_machine && { [ ! -c /dev/nvidia-uvm ] || [ ! -c /dev/nvidia-uvm-tools ]; } || return 0
  local major
  major=$(awk '$2 == "nvidia-uvm" { print $1 }' /proc/devices)
  [ -c /dev/nvidia-uvm ] || mknod -m 0666 /dev/nvidia-uvm c "$major" 0
  [ -c /dev/nvidia-uvm-tools ] || mknod -m 0666 /dev/nvidia-uvm-tools c "$major" 1
  fact "uvm_by_hand_after_$1" "$major"
}
inside() { local ct=$1; shift; pct exec "$ct" -- bash -c "$*"; }

write_record() {
python3 - "$work" "$record" "$date" <<'EOF'
import json, os, sys
work, record, date = sys.argv[1:4]
facts = dict(line.rstrip("\n").split("\t", 1) for line in open(f"{work}/facts.tsv") if "\t" in line)
steps = [{"name": n, "ok": rc == "0", "seconds": round(float(s), 2), **({"skipped": True} if rc == "skipped" else {})}
         for n, rc, s, _ in (line.split("\t") for line in open(f"{work}/steps.tsv").read().splitlines())]
num = lambda k: float(facts[k]) if facts.get(k) not in (None, "") else None
faults = {}
for name in ("uvm", "devn", "replaced", "removed"):
    if f"fault_{name}_doctor" in facts:
        faults[name] = {"doctor_named": facts.get(f"fault_{name}_doctor", "-").split(","),
                        "after_fix": facts.get(f"fault_{name}_after", "-").split(","),
                        "fix_said": facts.get(f"fault_{name}_fix", ""),
                        "train_ok": facts.get(f"fault_{name}_train") == "0",
                        "throughput_ktok_s": num(f"fault_{name}_ktoks")}
out = {"date": date, "tree": os.environ.get("GPU_CREATE_TREE"), "gpu": facts.get("gpu"),
       "driver": facts.get("driver"), "torch": facts.get("torch"), "gpu_arg": facts.get("gpu_arg"),
       "steps": steps,
       "create_to_first_step_s": {"unseeded": num("first_step_a"), "seeded": num("first_step_b")},
       "goal_s": {"unseeded": 90, "seeded": 60},
       "first_step_after_process_start_s": {"unseeded": num("proc_first_a"), "seeded": num("proc_first_b")},
       "uvm_made_by_create": facts.get("uvm_made_by_create"), "seeded_from_cache": facts.get("seeded"),
       "create_steps": {"A": json.loads(facts.get("create_steps_a") or "null"),
                        "B": json.loads(facts.get("create_steps_b") or "null")},
       "faults": faults}
json.dump(out, open(record, "w"), indent=2)
open(record, "a").write("\n")
print(json.dumps(out["create_to_first_step_s"]), "->", record)
EOF
}
trap write_record EXIT

# -- the machine ------------------------------------------------------------------------------------------
fact gpu_arg "$gpu"
if $gpu_machine; then
  fact gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
  fact driver "$(cat /sys/module/nvidia/version 2> /dev/null || nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
  ls -l /dev/nvidia* > "$logs/host-nodes-before.txt" 2>&1
fi

# -- lab, wheelhouse, hosts file (no container of remote's yet: the lab's own 200 only) ---------------------
step lab-up remote lab up --backend ns --containers 200 || exit 1
template=$(python3 -c 'from remote.lab.ns import NsLab; from pathlib import Path; print(NsLab(dir=Path("'"$lab"'")).template)')
if $gpu_machine; then
  read -r torch_dist torch_version torch_cuda base_python < <("$src_venv/bin/python" -c '
import importlib.metadata as m, os, sys, torch
print(m.version("torch"), torch.__version__, torch.version.cuda or "cpu", os.path.realpath(sys._base_executable))')
  numpy_version=$("$src_venv/bin/python" -c 'import importlib.metadata as m; print(m.version("numpy"))')
  fact torch "$torch_version"
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
  venv_yaml=$(sed -n '/^venv:/,/^code:/p' "$lab/hosts.yaml" | sed '$d')
  fact torch "$(grep -oE 'torch==[^,]+' "$lab/hosts.yaml" | head -n 1)"
fi
# hosts-bare.yaml's host and the lab's own container; create adds A and B to this file.
cat > "$work/hosts.yaml" <<EOF
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
export REMOTE_HOSTS_FILE=$work/hosts.yaml
create() { remote create "$1" --host lab --template "$template" --storage local --gpu "$gpu" --cores 8 --memory 65536 --disk 64 --json; }
create_steps() { python3 -c '
import json, sys
t = "\n".join(l.split(" ", 1)[1] if " " in l else "" for l in open(sys.argv[1]).read().splitlines())
d = json.loads(t[t.index("{"):])
print(json.dumps({s["name"]: s["seconds"] for s in d["steps"]}))' "$logs/$1.log" 2> /dev/null; }
proc_first() { grep -m1 'first steady step of every thread' "$logs/$1.log" | grep -oE 'thread [0-9.]+s' | grep -oE '[0-9.]+'; }
ktoks() {
  grep -oE '[0-9.]+ Ktok/s' "$logs/$1.log" | awk '{ v[NR] = $1 } END { for (i = (NR >= 3 ? 2 : 1); i <= NR; i++) print v[i] }' |
    sort -n | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'
}

# -- A: from nothing, unseeded -------------------------------------------------------------------------------
step create-A create "$A" || exit 1
fact create_steps_a "$(create_steps create-A)"
step deploy-A remote deploy -c "$A" || exit 1
step warmup-A remote warmup -c "$A"
step train-A remote train -c "$A"
fact first_step_a "$(to_first_step create-A train-A)"
fact proc_first_a "$(proc_first train-A)"
step doctor-gpu-A remote doctor --gpu -c "$A"

# -- B: the host's uvm nodes removed first (create makes them), seeded from A's warm cache ------------------
# (SKIP_B=1: straight to the faults)
if [ -z "${SKIP_B:-}" ]; then
if $gpu_machine; then
  rm -f /dev/nvidia-uvm /dev/nvidia-uvm-tools
  ls -l /dev/nvidia-uvm* > "$logs/host-uvm-removed.txt" 2>&1
fi
if ! step create-B create "$B"; then  # the rest of the run still measured: the nodes made by hand, create again
  uvm_by_hand create-B
  step create-B-again create "$B" || exit 1
fi
fact create_steps_b "$(create_steps create-B)"
if $gpu_machine; then
  if [ -c /dev/nvidia-uvm ] && [ -c /dev/nvidia-uvm-tools ]; then fact uvm_made_by_create yes; else fact uvm_made_by_create no; fi
  ls -l /dev/nvidia-uvm* > "$logs/host-uvm-after-create.txt" 2>&1
fi
step deploy-B remote deploy -c "$B" || exit 1
step warmup-B remote warmup -c "$B"
if grep -qiE 'cop(y|ied)' "$logs/warmup-B.log"; then fact seeded yes; else fact seeded no; fi
step train-B remote train -c "$B"
fact first_step_b "$(to_first_step create-B train-B)"
fact proc_first_b "$(proc_first train-B)"
fi

# -- planted faults on A (the host's nodes listed before each: what CUDA run as root makes by itself shows): doctor --gpu names each, gpu fix repairs it, a train proves it ----------------------
$gpu_machine || exit 0
faults=" ${FAULTS:-uvm devn replaced removed} "
wanted() { [[ $faults == *" $1 "* ]]; }
fault() {  # fault NAME: after the plant, doctor (JSON), fix, doctor again, train
  local name=$1
  ls -l /dev/nvidia-uvm* > "$logs/host-uvm-before-doctor-$name.txt" 2>&1
  step "doctor-$name" doctor_finds -c "$A" --json
  fact "fault_${name}_doctor" "$(kinds "doctor-$name")"
  step "fix-$name" remote gpu fix -c "$A"
  fact "fault_${name}_fix" "$(cut -d' ' -f2- "$logs/fix-$name.log" | grep -v '^\s*$' | tr '\n' '|' | cut -c1-600)"
  step "doctor-after-$name" remote doctor --gpu -c "$A" --json
  fact "fault_${name}_after" "$(kinds "doctor-after-$name")"
  step "train-$name" remote train -c "$A"
  fact "fault_${name}_train" "$(awk -F'\t' -v n="train-$name" '$1 == n { print $2 }' "$work/steps.tsv")"
  fact "fault_${name}_ktoks" "$(ktoks "train-$name")"
}
# uvm: the host's nodes removed (A's own node, made at its start, stays; the host's is what doctor reads)
if wanted uvm; then
  rm -f /dev/nvidia-uvm /dev/nvidia-uvm-tools
  fault uvm
  uvm_by_hand fault-uvm
fi
# devn: A's devN line of /dev/nvidia-uvm deleted, A restarted without it
if wanted devn; then
  key=$(pct config "$A" | awk -F: '/^dev[0-9]+:/ && /\/dev\/nvidia-uvm(,|$)/ { print $1; exit }')
  pct config "$A" > "$logs/config-A-before-devn.txt"
  step plant-devn bash -c "'$lab/bin/pct' stop $A && '$lab/bin/pct' set $A --delete $key && '$lab/bin/pct' start $A"
  fault devn
fi
# replaced: another version's libcuda found first by A's loader (the same binary under another version's name)
if wanted replaced; then
  other=/opt/other-driver
  step plant-replaced inside "$A" "set -e; lib=\$(ldconfig -p | awk '/libcuda\\.so\\.1 .*x86-64/ { print \$NF; exit }'); mkdir -p $other; cp -L \$lib $other/libcuda.so.560.35.03; ln -sf libcuda.so.560.35.03 $other/libcuda.so.1; echo $other > /etc/ld.so.conf.d/000-remote-nvidia.conf; ldconfig; ldconfig -p | grep libcuda.so.1"
  fault replaced
  inside "$A" "rm -rf $other; ldconfig" > /dev/null 2>&1
fi
# removed: A's loader entry and every libcuda its loader finds (the machine's own copies under A's overlay root)
if wanted removed; then
  step plant-removed inside "$A" "rm -f /etc/ld.so.conf.d/000-remote-nvidia.conf; for f in \$(ldconfig -p | awk '\$1 ~ /^libcuda\\.so/ { print \$NF }'); do rm -f \$f \$(readlink -f \$f) 2> /dev/null || echo \"cannot remove \$f\"; done; ldconfig; echo left:; ldconfig -p | grep -E '^\\s*libcuda\\.so' || true"
  fault removed
fi

if $gpu_machine; then ls -l /dev/nvidia* > "$logs/host-nodes-after.txt" 2>&1; fi
step lab-down remote lab down
