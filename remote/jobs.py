"""Training jobs: preflight, detached launch with a run record, status and a verified stop.

A run lives in <run_dir>/<id>/: `log` (stdout and stderr; stdin is /dev/null), `manifest.json`,
`pid` (the job's session leader, written at start), `exit` (written when it ends). The job is its
own session and process group under the container's init, so it survives the SSH session, the
controller and pct exec. Every process of it carries REMOTE_RUN_ID in its environment, which is
how `stop` proves that nothing of it is left.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass

from . import logs
from . import warmup as wm
from .config import Container as ContainerSpec
from .errors import CommandError, ConfigError, JobError, RemoteError
from .pct import Container
from .session import HostState, Session

# Launch under a lock: refuse when a job runs (unless forced), make the run folder, start the job
# detached (setsid -f) with its own session, and point `current` at it.
LAUNCH = r'''
run_dir=$1 id=$2 force=$3 checkout=$4 manifest=$5 command=$6
mkdir -p "$run_dir"
exec 9>"$run_dir/.lock"
flock -w 10 9 || { echo "another train is starting on this container" >&2; exit 4; }
if [ -e "$run_dir/current/pid" ] && [ "$force" != 1 ]; then
  pid=$(cat "$run_dir/current/pid")
  if kill -0 "$pid" 2>/dev/null && [ ! -e "$run_dir/current/exit" ]; then
    echo "busy: run $(basename "$(readlink -f "$run_dir/current")") (pid $pid) is still running" >&2; exit 5
  fi
fi
run="$run_dir/$id"
mkdir "$run"
printf '%s\n' "$manifest" > "$run/manifest.json"
: > "$run/log"
export REMOTE_RUN_ID=$id
setsid -f bash -c '
run=$1 checkout=$2 command=$3
echo $$ > "$run/pid"
trap "echo \"[remote] got SIGTERM at \$(date -Is)\" >> \"\$run/log\"" TERM
trap "" HUP
cd "$checkout" || { echo 126 > "$run/exit"; exit 126; }
bash -c "$command" < /dev/null >> "$run/log" 2>&1 &
child=$!
while :; do
  wait "$child"; rc=$?
  kill -0 "$child" 2>/dev/null || break
done
echo "$rc" > "$run/exit.tmp" && mv "$run/exit.tmp" "$run/exit"
' job "$run" "$checkout" "$command" < /dev/null > /dev/null 2>&1 9>&-  # the job must not hold the launch lock
for _ in $(seq 100); do [ -s "$run/pid" ] && break; sleep 0.05; done
[ -s "$run/pid" ] || { echo "the job did not start" >&2; exit 6; }
ln -sfn "$id" "$run_dir/current.tmp" && mv -T "$run_dir/current.tmp" "$run_dir/current"
cat "$run/pid"
'''

# State of the latest (or a given) run, as JSON.
STATE = r'''
run_dir=$1 id=$2
[ -n "$id" ] || id=$(basename "$(readlink "$run_dir/current" 2>/dev/null)" 2>/dev/null || true)
run="$run_dir/$id"
if [ -z "$id" ] || [ ! -d "$run" ]; then echo '{"run": null}'; exit 0; fi
pid=$(cat "$run/pid" 2>/dev/null || echo 0)
alive=false; [ "$pid" != 0 ] && kill -0 "$pid" 2>/dev/null && [ ! -e "$run/exit" ] && alive=true
exit_code=$(cat "$run/exit" 2>/dev/null || echo null)
size=$(stat -c %s "$run/log" 2>/dev/null || echo 0)
printf '{"run": "%s", "path": "%s", "pid": %s, "alive": %s, "exit": %s, "log_size": %s, "now": %s, "manifest": ' \
  "$id" "$run" "$pid" "$alive" "$exit_code" "$size" "$(date +%s)"
cat "$run/manifest.json" 2>/dev/null || printf null
printf ', "tail": '
tail -c 32768 "$run/log" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.buffer.read().decode("utf-8","replace")))' 2>/dev/null || printf '""'
printf '}\n'
'''

# TERM the job's process group, KILL after the grace period, then look for anything left that
# carries the run's marker in its environment (which also finds processes that left the group).
STOP = r'''
run=$1 id=$2 grace=$3
pid=$(cat "$run/pid" 2>/dev/null || echo 0)
marked() {
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = "$$" ] && continue
    { tr '\0' '\n' < "$e"; } 2>/dev/null | grep -qx "REMOTE_RUN_ID=$id" && echo "$p"
  done
  return 0  # processes come and go during the scan
}
signalled=none
if [ "$pid" != 0 ] && kill -0 "$pid" 2>/dev/null; then
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  signalled=TERM
  end=$(( $(date +%s%N) + grace * 1000000000 ))
  while [ -n "$(marked)" ] && [ "$(date +%s%N)" -lt "$end" ]; do sleep 0.1; done
fi
left=$(marked)
if [ -n "$left" ]; then
  signalled=KILL
  kill -KILL -- "-$pid" 2>/dev/null || true
  kill -KILL $left 2>/dev/null || true
  sleep 0.3
  left=$(marked)
fi
[ -e "$run/exit" ] || echo 137 > "$run/exit"
gpu=""
if command -v nvidia-smi >/dev/null 2>&1; then
  for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do
    { tr '\0' '\n' < "/proc/$p/environ"; } 2>/dev/null | grep -qx "REMOTE_RUN_ID=$id" && gpu="$gpu $p"
  done
fi
printf '{"signal": "%s", "left": [%s], "gpu_left": [%s], "exit": %s}\n' "$signalled" \
  "$(echo $left | tr ' ' ',')" "$(echo $gpu | tr ' ' ',')" "$(cat "$run/exit")"
'''

# GPUs as nvidia-smi reports them (an empty list where there is none).
GPUS = r'''
command -v nvidia-smi >/dev/null 2>&1 || { echo NO-NVIDIA-SMI; exit 0; }
nvidia-smi --query-gpu=index,name,driver_version,memory.used,memory.total --format=csv,noheader,nounits
'''


def parse_gpus(text: str) -> list[dict] | None:
    """nvidia-smi's CSV (index, name, driver, memory used, memory total); None when it is absent."""
    if text.strip() == "NO-NVIDIA-SMI":
        return None
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5 or not parts[0].isdigit():
            raise JobError(f"unexpected nvidia-smi output: {line!r}")
        gpus.append({"index": int(parts[0]), "name": parts[1], "driver": parts[2],
                     "memory_used_mib": int(float(parts[3])), "memory_total_mib": int(float(parts[4]))})
    return gpus


@dataclass(frozen=True)
class Preflight:
    commit: str
    venv: dict
    gpus: list[dict] | None
    notes: list[str]


def preflight(ct: Container, spec: ContainerSpec, *, echo=print) -> Preflight:
    """Everything that must be true before a training job starts; each failure says how to fix it."""
    state = wm.deployed(ct, spec)
    commit, venv = state["code"]["commit"], state["venv"]
    notes = [f"venv verified: torch {venv['verify'].get('torch')} (CUDA build {venv['verify'].get('cuda_build')})"]
    r = ct.script('cd "$1"; git rev-parse HEAD; git status --porcelain --untracked-files=no', spec.code.path,
                  mutates=False, timeout=60)
    head, *dirty = r.out.splitlines()
    if head != commit:
        raise JobError(f"checkout {spec.code.path} is at {head[:12]}, not the deployed {commit[:12]}: run `invoke deploy`")
    if dirty:
        raise JobError(f"checkout {spec.code.path} has edits ({', '.join(d[3:] for d in dirty[:5])}): "
                       "`invoke deploy` saves them as a patch and restores the commit")
    notes.append(f"checkout clean at {commit[:12]}")
    if spec.warmup.command and spec.warmup.devices:
        missing = set(spec.warmup.devices) - wm.warm_devices(ct, spec, commit, venv.get("lock_sha256"))
        if missing:
            raise JobError(f"no warmup for device(s) {', '.join(sorted(missing))} at this commit and venv: run "
                           "`invoke warmup` (or `invoke train --warmup`); a cold cache is when threads race")
        notes.append(f"warmup done for devices {', '.join(spec.warmup.devices)}")
    gpus = parse_gpus(ct.script(GPUS, mutates=False, timeout=60).out)
    if gpus is None:
        notes.append("no nvidia-smi in the container: CPU run")
    else:
        if not gpus:
            raise JobError("nvidia-smi lists no GPUs: check the container's GPU passthrough (lxc.cgroup2.devices.allow, "
                           "mount entries) and the host driver")
        seen = json.loads(ct.run(["python", "-c", "import torch, json; print(json.dumps(torch.cuda.device_count()))"],
                                 env=wm.job_env(spec), timeout=300).out)
        if seen != len(gpus):
            raise JobError(f"nvidia-smi lists {len(gpus)} GPU(s) but torch sees {seen}: check CUDA_VISIBLE_DEVICES in "
                           "train.env and that the venv's CUDA build matches the driver")
        notes.append(f"{len(gpus)} GPU(s): {gpus[0]['name']}, driver {gpus[0]['driver']}; torch sees {seen}")
    return Preflight(commit, venv, gpus, notes)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def launch(ct: Container, spec: ContainerSpec, pre: Preflight, *, force: bool = False,
           command: str | None = None) -> tuple[str, int]:
    """Start the job detached; returns (run id, pid). Refused while another job runs, unless forced."""
    command = command or spec.train.command
    if not command:
        raise ConfigError("hosts file", "train.command", "set the training command to run")
    run_id = new_run_id()
    env = wm.job_env(spec)
    manifest = {"id": run_id, "container": spec.ctid, "commit": pre.commit, "venv": spec.venv.path,
                "venv_lock_sha256": pre.venv.get("lock_sha256"), "torch": pre.venv["verify"].get("torch"),
                "cuda_build": pre.venv["verify"].get("cuda_build"), "triton": pre.venv["verify"].get("triton"),
                "driver": pre.gpus[0]["driver"] if pre.gpus else None, "gpus": pre.gpus, "command": command,
                "env": env, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "started_epoch": time.time(),
                "baseline": spec.train.baseline}
    # The exported environment reaches the job through `env` in the pct wrapper.
    try:
        r = ct.script(LAUNCH, spec.train.run_dir, run_id, "1" if force else "0", spec.code.path,
                      json.dumps(manifest, indent=1), command, env=env, timeout=60, label="launch")
    except CommandError as exc:
        if exc.exit_code == 5:
            raise JobError(f"container {spec.ctid}: {exc.stderr_tail} -- `invoke stop` it, follow it with "
                           "`invoke logs --follow`, or pass --force to start another") from None
        raise JobError(f"launch failed: {exc}") from None
    return run_id, int(r.out.strip().splitlines()[-1]) if not ct.dry else 0


def state(ct: Container, spec: ContainerSpec, run_id: str | None = None) -> dict:
    """The latest run's (or run_id's) state: alive, exit status, manifest, the log's tail."""
    r = ct.script(STATE, spec.train.run_dir, run_id or "", mutates=False, timeout=60)
    return json.loads(r.out)


def stop(ct: Container, spec: ContainerSpec, run_id: str | None = None, grace: int = 10) -> dict:
    """TERM the job's process group, KILL after `grace` seconds, and verify that nothing of it is left."""
    st = state(ct, spec, run_id)
    if not st.get("run"):
        raise JobError(f"container {spec.ctid} has no runs in {spec.train.run_dir}")
    r = ct.script(STOP, st["path"], st["run"], str(grace), timeout=grace + 60, label="stop")
    result = {"run": st["run"], "was_alive": st["alive"], **json.loads(r.out)}
    if result["left"] or result["gpu_left"]:
        raise JobError(f"run {st['run']}: processes still alive after KILL: {result['left'] + result['gpu_left']}")
    return result


def watch_for(spec: ContainerSpec) -> "logs.Watch":
    return logs.Watch(metrics=logs.compile_metric(spec.train.metric), baseline=spec.train.baseline,
                      tolerance=spec.train.tolerance)


def show_log(ct: Container, spec: ContainerSpec, run_id: str | None = None, *, follow: bool = False,
             echo=print) -> dict:
    """Print a run's log (collapsed progress bars, throughput warnings, crash hints); with follow, until
    the job ends. Returns the run's final state."""
    st = state(ct, spec, run_id)
    if not st.get("run"):
        raise JobError(f"container {spec.ctid} has no runs in {spec.train.run_dir}: start one with `invoke train`")
    watch = watch_for(spec)
    splitter = logs.LineSplitter()

    def on_bytes(chunk: bytes) -> None:
        for line in splitter.feed(chunk):
            echo(line)
            for note in watch.line(line):
                echo(note)

    logs.follow(ct, st["path"], on_bytes=on_bytes, follow_=follow, reconnect=ct.transport.close, echo=echo)
    for line in splitter.flush():
        echo(line)
        for note in watch.line(line):
            echo(note)
    final = state(ct, spec, st["run"])
    final["watch"] = watch
    if follow or not final["alive"]:
        echo(f"-- run {final['run']}: " + ("still running" if final["alive"] else f"exited with status {final['exit']}")
             + f"; {watch.summary()}")
        for name, hint, _ in watch.found:
            echo(f"-- {name}: {hint}")
    return final


def train(session: Session, ctid=None, *, force: bool = False, warmup: bool = False, follow: bool = True,
          echo=print) -> dict | None:
    """Preflight, launch detached, then follow the log until the job ends (returns its state)."""
    spec = session.config.container(ctid)
    ct = session.container(spec.ctid)
    try:
        pre = preflight(ct, spec, echo=echo)
    except JobError as exc:
        if not (warmup and "no warmup" in str(exc)):
            raise
        wm.warmup(session, spec.ctid, echo=echo)
        pre = preflight(ct, spec, echo=echo)
    for note in pre.notes:
        echo(f"preflight: {note}")
    run_id, pid = launch(ct, spec, pre, force=force)
    echo(f"==> run {run_id} started (pid {pid} in container {spec.ctid}); log {spec.train.run_dir}/{run_id}/log")
    if not follow or session.dry:
        return None
    try:
        return show_log(ct, spec, run_id, follow=True, echo=echo)
    except KeyboardInterrupt:
        echo(f"\n-- stopped following; run {run_id} keeps running. `invoke logs --follow` resumes, "
             "`invoke stop` ends it")
        return None


def container_jobs(session: Session, hosts: list[HostState]) -> list[dict]:
    """Per container of a reachable host: its state (as `inventory` found it) and its latest run
    (alive, uptime, throughput, exit status)."""
    out = []
    for host in hosts:
        if not host.reachable:
            continue
        for ctid, known in host.containers.items():
            out.append(_container_job(session, session.config.containers[ctid], known))
    return out


def _container_job(session: Session, spec: ContainerSpec, known: str) -> dict:
    entry: dict = {"container": spec.ctid, "host": spec.host.name, "state": known}
    if known == "missing":
        entry["error"] = f"container {spec.ctid} does not exist on host {spec.host.name} (`pct list` there)"
        return entry
    if known != "running":
        return entry
    try:
        st = state(session.container(spec.ctid), spec)
        if st.get("run"):
            watch = watch_for(spec)
            for line in logs.LineSplitter().feed(st.pop("tail").encode()):
                watch.line(line)
            started = (st.get("manifest") or {}).get("started_epoch")
            entry["run"] = {"id": st["run"], "alive": st["alive"], "exit": st["exit"], "pid": st["pid"],
                            "uptime_s": round(st["now"] - started) if started and st["alive"] else None,
                            "throughput": watch.last, "rolling": watch.rolling,
                            "baseline": spec.train.baseline, "low": watch.low,
                            "problems": [name for name, _, _ in watch.found]}
    except RemoteError as exc:
        entry["error"] = str(exc)
    return entry
