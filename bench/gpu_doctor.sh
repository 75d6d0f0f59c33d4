#!/bin/bash
# `remote doctor --gpu` on a real GPU machine, through `remote` only (issue 23): a namespace lab (no LXC, no
# sshd; its container gets the machine's /dev/nvidia* nodes, listed as devN lines in its pct config), the
# machine's own torch deployed offline, then:
#   healthy: doctor --gpu finds nothing, `remote train` launches a CUDA check and it passes;
#   uvm:      the container's /dev/nvidia-uvm taken away (and /dev made read-only, so nothing re-creates it):
#             doctor --gpu must name container-uvm-missing and cuda-init-failed (999), `remote train` must refuse
#             to launch (exit 1, naming the finding); put back (the container restarted: its /dev made again);
#   mismatch: a driver library of another version found first by the container's loader (libcuda.so.1 ->
#             libcuda.so.<other>, a link to the real one, in an ld.so.conf.d entry sorted first): doctor --gpu
#             must name driver-lib-mismatch; put back;
#   four planted node faults (issue 34), each with /dev made read-only (so nothing, nvidia-modprobe included,
#             re-creates the node) and put back by restarting the container: /dev/nvidia-uvm bound to /dev/null,
#             /dev/nvidia-uvm re-made with a stale major (511:0), /dev/nvidia0 bound to /dev/null, /dev/nvidiactl
#             removed: doctor --gpu must name the node (container-node-wrong or container-node-missing, with the
#             host's numbers and a fix that is not itself), `remote train` must refuse naming it;
# healthy again after each. Every step's exit status, seconds, the kinds doctor named and its round trips
# go to the record (default docs/evidence/gpu-doctor/<date>.json).
#
# Usage (as root, in a checkout of remote whose controller packages python3 imports):
#   bash bench/gpu_doctor.sh [RECORD.json]
# Environment: SRC_VENV (the venv whose torch is deployed; default python3's), GPU_DOCTOR_WORK (scratch, default
# /var/tmp/gpu-doctor). On a machine without a package index the deploy takes uv from the controller's own uv
# of the pinned version (remote/ops/fetched.py), so nothing else is needed. On a CPU machine the same script
# is a rehearsal: no GPU nodes, so no finding is expected.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
date=$(date -u +%Y-%m-%d)
record=${1:-$repo/docs/evidence/gpu-doctor/$date.json}
work=${GPU_DOCTOR_WORK:-/var/tmp/gpu-doctor}
src_venv=${SRC_VENV:-$(python3 -c 'import sys; print(sys.prefix)')}
ct=200
lab=$work/lab
house=$work/wheelhouse
logs=$work/logs
rm -rf "$lab" "$logs"
export REMOTE_LAB_DIR=$lab PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$logs" "$(dirname "$record")"
: > "$work/steps.jsonl"
# shellcheck source=bench/lib.sh
. "$repo/bench/lib.sh"  # remote, pct (its own step: each step's wanted status and its JSON line)
# step NAME WANT CMD...: run and time CMD; WANT is the exit status that means the step did what it should.
step() {
  local name=$1 want=$2
  shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$@" > "$logs/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  python3 - "$name" "$want" "$rc" "$t0" "$t1" "$logs/$name.log" >> "$work/steps.jsonl" <<'PY'
import json, sys
name, want, rc, t0, t1, log = sys.argv[1:]
text = open(log, errors="replace").read()
entry = {"name": name, "rc": int(rc), "ok": rc == want, "seconds": round(float(t1) - float(t0), 2)}
start = text.find("{")
if name.startswith("doctor-") and start >= 0:  # bench/gpu_doctor.py --once: kinds and round trips
    try:
        got = json.loads(text[start:].splitlines()[0])
        entry.update(kinds=got["kinds"], round_trips=got["round_trips"], doctor_seconds=got["seconds"],
                     doctor_exit=got["exit"])
        entry["findings"] = [{k: f.get(k) for k in ("kind", "node", "message", "fix")}
                             for c in got["report"]["containers"] for f in c["findings"]]
    except (ValueError, KeyError, IndexError, TypeError):
        pass
if name.startswith("train-"):
    import re
    entry["named"] = sorted(set(re.findall(r"\[((?:container|cuda|device|host|driver|cgroup|mount|no|mig)-[a-z-]+)\]",
                                           text)))
    entry["tail"] = text.strip().splitlines()[-6:] if text.strip() else []
if name.endswith("-make") or name == "uvm-remove":
    entry["tail"] = text.strip().splitlines()[-3:] if text.strip() else []
print(json.dumps(entry))
PY
  printf '== %-18s rc=%-3s want=%-3s %s\n' "$name" "$rc" "$want" "$(tail -n 1 "$logs/$name.log" | cut -c1-160)"
}
doctor() { python3 "$repo/bench/gpu_doctor.py" --once --hosts "$work/hosts.yaml" --containers "$ct"; }

# -- the lab, the driver's user space in the container, an offline deploy of the machine's torch -------------
step lab-up 0 remote lab up --backend ns --containers "$ct"
smi=$(command -v nvidia-smi || true)
libdirs=""
ld_path=${LD_LIBRARY_PATH:-}
for d in ${ld_path//:/ }; do
  if [ -e "$d/libcuda.so.1" ]; then libdirs="$libdirs $d"; fi
done
if [ -n "$smi" ]; then  # as bench/gpu_pipeline.sh: the host's libraries where the container's loader finds them
  step gpu-setup 0 pct exec "$ct" --keep-env 0 -- bash -c "set -e
    for d in $libdirs; do echo \$d; done > /etc/ld.so.conf.d/zz-host-nvidia.conf
    ldconfig
    command -v nvidia-smi > /dev/null || ln -s '$smi' /usr/local/bin/nvidia-smi
    nvidia-smi -L; ldconfig -p | grep -m1 'libcuda.so.1 '"
fi
step pct-config 0 pct config "$ct"
read -r torch_dist torch_cuda base_python < <("$src_venv/bin/python" -c '
import importlib.metadata as m, os, sys, torch
print(m.version("torch"), torch.version.cuda or "cpu", os.path.realpath(sys._base_executable))')
if [ ! -d "$house" ]; then
  step wheelhouse 0 "$repo/scripts/wheelhouse-from-venv" "$src_venv" "$house" torch ||
    WHEELHOUSE_ALLOW_CHANGED=1 step wheelhouse-as-is 0 "$repo/scripts/wheelhouse-from-venv" "$src_venv" "$house" torch
fi
cat > "$work/hosts.yaml" <<YAML
$(cat "$lab/hosts-bare.yaml")
venv:
  python: $base_python
  packages: [torch==$torch_dist]
  find_links: [$house]
  offline: true
  cuda: '$torch_cuda'
code:
  repo: $lab/dflash
  path: /root/dflash
train:
  command: python -c "import torch; ok = torch.cuda.is_available() or '$torch_cuda' == 'cpu'; print('cuda', torch.cuda.is_available()); raise SystemExit(0 if ok else 3)"
  run_dir: /root/runs
YAML
export REMOTE_HOSTS_FILE=$work/hosts.yaml
step deploy 0 remote deploy -c "$ct"

# -- healthy ------------------------------------------------------------------------------------------------
step doctor-healthy 0 doctor
step train-healthy 0 remote train -c "$ct"

# -- /dev/nvidia-uvm taken away -----------------------------------------------------------------------------
gpu_want=0  # what a finding's step exits with: 1 (findings) on a GPU machine, 0 (nothing to find) in a rehearsal
[ -n "$smi" ] && gpu_want=1
step uvm-remove 0 pct exec "$ct" --keep-env 0 -- sh -c \
  'rm -f /dev/nvidia-uvm /dev/nvidia-uvm-tools && mount -o remount,ro /dev && ls /dev | grep nvidia || true'
step doctor-uvm-missing "$gpu_want" doctor
step train-uvm-missing "$gpu_want" remote train -c "$ct"
step uvm-restore 0 bash -c "'$lab/bin/pct' stop $ct && '$lab/bin/pct' start $ct && '$lab/bin/pct' exec $ct -- ls /dev"
step doctor-healthy-2 0 doctor

# -- a driver library of another version, found first ------------------------------------------------------
other=575.57.08
step mismatch-make 0 pct exec "$ct" --keep-env 0 -- bash -c "set -e
  real=\$(ldconfig -p | awk '/libcuda.so.1 .*64/ { print \$NF; exit }')
  [ -n \"\$real\" ] || { echo 'no libcuda.so.1 in the container (a CPU machine): nothing to replace'; exit 0; }
  mkdir -p /opt/other-nvidia
  ln -sf \"\$(readlink -f \"\$real\")\" /opt/other-nvidia/libcuda.so.$other
  ln -sf libcuda.so.$other /opt/other-nvidia/libcuda.so.1
  echo /opt/other-nvidia > /etc/ld.so.conf.d/00-other-nvidia.conf
  ldconfig
  ldconfig -p | grep 'libcuda.so.1 '"
step doctor-lib-mismatch "$gpu_want" doctor
step mismatch-restore 0 pct exec "$ct" --keep-env 0 -- bash -c \
  'rm -rf /opt/other-nvidia /etc/ld.so.conf.d/00-other-nvidia.conf && ldconfig && ldconfig -p | grep "libcuda.so.1 " || true'
step doctor-healthy-3 0 doctor

# -- four planted node faults, each put back by restarting the container (its /dev made again) ---------------
# node_fault NAME SCRIPT: plant (as root in the container), doctor --gpu and train must name it, put back.
node_fault() {
  step "$1-make" 0 pct exec "$ct" --keep-env 0 -- sh -c "set -e; $2; mount -o remount,ro /dev; ls -ln /dev | grep nvidia"
  step "doctor-$1" "$gpu_want" doctor
  step "train-$1" "$gpu_want" remote train -c "$ct"
  step "$1-restore" 0 bash -c "'$lab/bin/pct' stop $ct && '$lab/bin/pct' start $ct"
  step "doctor-healthy-$1" 0 doctor
}
if [ -e /dev/nvidia-uvm ] || [ "$gpu_want" = 1 ]; then
  node_fault uvm-null 'mount --bind /dev/null /dev/nvidia-uvm'
  node_fault uvm-stale 'rm -f /dev/nvidia-uvm; mknod -m 666 /dev/nvidia-uvm c 511 0'
  node_fault gpu-null 'mount --bind /dev/null /dev/nvidia0'
  node_fault ctl-removed 'rm -f /dev/nvidiactl'
fi
step train-healthy-2 0 remote train -c "$ct"
step lab-down 0 remote lab down

python3 - "$work/steps.jsonl" "$record" "$date" "$smi" <<'PY'
import json, subprocess, sys
steps_file, record, date, smi = sys.argv[1:]
steps = [json.loads(line) for line in open(steps_file)]
def q(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True, timeout=20).stdout.strip()
    except OSError:
        return None
out = {"date": date, "command": "bash bench/gpu_doctor.sh", "gpu": q("nvidia-smi", "--query-gpu=name", "--format=csv,noheader") if smi else None,
       "driver": q("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader") if smi else None,
       "module": (open("/proc/driver/nvidia/version").readline().strip() if smi else None),
       "all_ok": all(s["ok"] for s in steps), "steps": steps}
json.dump(out, open(record, "w"), indent=1)
open(record, "a").write("\n")
print("all ok" if out["all_ok"] else "NOT all ok: " + ", ".join(s["name"] for s in steps if not s["ok"]), "->", record)
PY
