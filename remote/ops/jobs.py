"""Training jobs: preflight, detached launch with a run record, status, a verified stop, results back.

A run lives in <run_dir>/<id>/: `log` (stdout and stderr of every process; torchrun's ranks marked
`[rankN]: `), `manifest.json`, `pid` (the job's session leader, written at start), `exit` (written
when it ends), `ranks/` (torchrun's per-rank logs). The job is its own session under the container's
init, so it survives the SSH session, the controller and pct exec. Every process of it carries
REMOTE_RUN_ID, which is how liveness is decided (remote/sh/lib.sh) and how `stop` proves that nothing
of it is left. The container shell is in remote/sh/ (launch, job, state, stop, follow); what preflight reads
comes from the facts probe (remote/facts/probe.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from .. import facts, shell
from ..config import ContainerSpec
from ..errors import (
    FORCE,
    SAVE,
    WARMUP_TO_TRAIN,
    CommandError,
    ConfigError,
    JobError,
    JobRunning,
    RemoteError,
    TransferError,
    UnknownRun,
    call,
    worded,
)
from ..facts import runs as runfacts
from ..facts.deployed import VenvRecord
from ..facts.runs import RunState, parse_state
from ..naming import printable
from ..results import ContainerStatus, JobStatus, LiveRun, PulledRun, RunStatus, Stopped
from ..target import Target, resolve
from ..transport.session import HostState, Session
from . import checkpoints, compilelog, dryplan, files, gpumem, jobenv, layout, logs, oplock, pyspy
from . import code as codemod
from . import warmup as wm
from .runwatch import EXIT_STALLED, stall_text, watch_settings


@dataclass(frozen=True)
class Preflight:
    """What train's preflight found: the deployed commit and venv record, the GPUs (None: no nvidia-smi, a CPU
    run), its notes, the live runs it saw and its warnings (each reported typed: Target.warn, a Note of level
    "warning")."""

    commit: str
    venv: VenvRecord
    gpus: tuple[facts.Gpu, ...] | None
    notes: list[str]
    live: tuple[LiveRun, ...] = ()  # the runs with a live process the probe saw
    warnings: tuple[str, ...] = ()  # what needs the user's attention, though the launch goes on


def preflight(t: Target, *, host_gpu=None, force: bool = False) -> Preflight:
    """Everything that must be true before a training job starts, read in one facts probe (its GPU passthrough
    part included); every problem found is named at once, each with how to fix it. `host_gpu`: a callable
    that reads the host's GPU facts (remote.facts.gpu.read_host), run at the same time as the probe, for
    the warnings only the host can give (a pending reboot); its failure is no problem of the run's.
    The checkout is compared with what the hosts file pins (code.ref resolved here, as deploy does): a
    deployed commit that is not the pinned one is refused unless `force` (then a note)."""
    ct, spec = t.ct, t.spec
    pending = None
    if host_gpu is not None and not ct.dry:
        from .. import executor

        pending = executor.later(host_gpu)  # beside the probe; a host read that hangs is left behind at 90 s
    raw = facts.read_raw(t, facts.DEPLOYED if ct.dry else facts.PREFLIGHT)[0]
    if ct.dry:
        state = dryplan.state_in(raw, spec)  # after a dry deploy: what it would have deployed
        return Preflight(state.commit, state.venv, None,
                         [_verified(state.venv), "(dry run: the checks that read the container are skipped)"]
                         + ([f"(dry run: planned from the dry steps before: checkout at {state.commit[:12]})"]
                            if "code" in dryplan.planned(spec) else []))
    host = None
    if pending is not None:
        try:
            host = pending.result(timeout=90)
        except Exception as exc:  # noqa: BLE001 -- the host's part only warns: it never stops a launch
            t.warn(f"preflight: the host's GPU facts could not be read: {exc}")
    return check(raw, spec, host, pin=codemod.pin_of(spec.code.repo, spec.code.ref), force=force)


def host_gpu(session, spec: ContainerSpec):
    """The host's GPU facts for this container's preflight (remote.facts.gpu.read_host), one round trip."""
    from ..facts import gpu as gpufacts

    return lambda: gpufacts.read_host(session, spec.host, [spec.ctid])


def _verified(venv_record: VenvRecord) -> str:
    verify = venv_record.verify
    return f"venv verified: torch {verify.torch} (CUDA build {verify.cuda_build or 'none'})"


def only_warmup_missing(exc: JobError) -> bool:
    """Whether a missing warmup is preflight's only problem: `train --warmup` warms up then, and never a
    venv, checkout or GPU setup that is wrong as well (its cache would be recorded as this lock's)."""
    return str(exc).startswith("no warmup")


def check(raw: dict, spec: ContainerSpec, host=None, *, pin: codemod.Pin | str | None = None,
          force: bool = False) -> Preflight:
    """Preflight over the probe's answer (parts facts.PREFLIGHT) and, where read, the host's GPU facts
    (remote.facts.gpu.HostGpu); `pin`: what the hosts file pins (remote.ops.code.pin_of: a Pin, why it could
    not be read, or None without code.repo). Pure: tested as data."""
    from ..facts import gpu as gpufacts

    state = wm.deployed_in(raw, spec)
    commit, venv = state.commit, state.venv
    verify = venv.verify.as_record()
    notes = [_verified(venv)]
    warnings: list[str] = []
    problems: list[str] = []
    behind = None
    if isinstance(pin, str):
        warnings.append(f"the checkout was not compared with the hosts file's code.ref: {pin}")
    elif pin is not None:
        behind = codemod.stale(pin, (raw.get("code") or {}).get("record"))
        if behind and force:
            warnings.append(f"{behind}: training the deployed commit anyway (forced)")
        elif behind:
            problems.append(f"{behind}: `remote deploy` ships it, or pass {FORCE} to train the deployed commit")
        elif pin.edited:
            warnings.append(f"{pin.repo} has uncommitted changes that are not in the container "
                         f"({', '.join(pin.edited[:5])}): `remote deploy` with allow_dirty=True ships them")
    problems += wm.unlike_deployed(raw, spec, state, hints=True)
    # The GPU passthrough: an error finding refuses the launch; a pending host reboot is a warning.
    ct_gpu = facts.gpu_of(raw)
    gpu_found = gpufacts.findings(host, spec.ctid, ct_gpu) if ct_gpu is not None else []
    problems += [f"{f.what} [{f.code}]: {f.fix}" for f in gpu_found if f.severity == "error"]
    if host is not None and (ct_gpu is not None and ct_gpu.gpu or (host.configs.get(spec.ctid) or
                                                                    gpufacts.CtConfig(0)).gpu):
        warnings += [f"{f.what} [{f.code}]: {f.fix}" for f in gpufacts.host_findings(host, spec.host.name)
                  if f.code == "host-reboot-pending"]
    folder = jobenv.compile_cache(spec, verify)
    if spec.warmup.command:
        recs = list(facts.warmups_of(raw))
        missing = wm.missing_in(recs, spec, state)
        if missing:
            problems.append("no warmup for this commit, venv, command and environment -- " + "; ".join(missing)
                            + f": run `remote warmup` (or {WARMUP_TO_TRAIN}); a cold cache is when threads race")
        elif wm.compiled(recs, spec, state) and \
                not (raw.get("cache") or {}).get("filled", {}).get(folder.rsplit("/", 1)[-1]):
            problems.append(f"no warmup: the compile cache {folder} is gone or empty although its warmups "
                            f"compiled into it (deleted by hand?): run `remote warmup` (or {WARMUP_TO_TRAIN}); "
                            "a cold cache is when threads race")
    torch = facts.torch_of(raw)
    if torch.error and verify.get("torch"):  # a venv deploy verified with torch in it
        problems.append(f"`import torch` fails in the venv ({torch.error}): `remote deploy` rebuilds it")
    g = facts.gpus_of(raw)
    env = jobenv.user_env(spec)
    gpu_problem = facts.gpu_problem(torch, g, env)
    # Where the GPU findings above name the node or library at fault, they are the fix: no second guess.
    explained = any(f.severity == "error" for f in gpu_found)
    if g.error:
        problems.append(f"{g.error}: " + ("the GPU findings above are why" if explained else
                                          "check the container's GPU passthrough and the host driver"))
    elif g.smi and not g.gpus:
        problems.append("nvidia-smi lists no GPUs: " + ("the GPU findings above are why" if explained else
                        "check the container's GPU passthrough (lxc.cgroup2.devices.allow, mount entries) and the "
                        "host driver"))
    elif gpu_problem:
        problems.append(f"{gpu_problem[0]}: " + ("the GPU findings above are why" if explained else gpu_problem[1]))
    stray_note = None
    if g.smi and g.gpus and not g.error:
        stray_problem, stray_note = gpumem.check(raw, g, spec)
        if stray_problem:
            problems.append(stray_problem)
    if problems:
        raise worded(JobError(problems[0] if len(problems) == 1 else f"{len(problems)} problems, nothing was "
                              "started:\n" + "\n".join(f"  - {p}" for p in problems)), FORCE, WARMUP_TO_TRAIN)
    notes.append(f"checkout clean at {commit[:12]}" + (f", as the hosts file pins (code.ref {pin.ref})"
                                                        if isinstance(pin, codemod.Pin) and not behind else ""))
    if spec.warmup.command:
        notes.append(f"warmup done for {', '.join(wm.devices_of(spec))}")
    notes.append(f"compile cache {folder}")
    warnings += layout.compile_layout_notes(layout.devices_from_command(spec.train.command), venv.verify.torch)
    gpus = tuple(facts.Gpu.of(x) for x in g.gpus) if g.smi else None
    live = runfacts.live_in(raw)
    if gpus is None:
        notes.append("no nvidia-smi in the container: CPU run")
    else:
        cvd = env.get("CUDA_VISIBLE_DEVICES")
        notes.append(f"{len(gpus)} GPU(s): {gpus[0].name}, driver {gpus[0].driver}; torch sees "
                     f"{torch.device_count}" + (f", train.env selects {facts.visible_count(list(g.gpus), env)}"
                                                if cvd else "")
                     + (" (torch's answer kept from an earlier probe: venv and driver unchanged)" if torch.cached else ""))
    if stray_note:
        warnings.append(stray_note)
    return Preflight(commit, venv, gpus, notes, live, tuple(warnings))


def busy(ctid: int, what: str, live: tuple[LiveRun, ...] = ()) -> JobRunning:
    """A train refused because a job runs there (exit 3, as deploy's refusal is); `live`, where known, the
    runs that hold it (its `.holder`, as deploy's and gpu fix's refusals carry theirs)."""
    stop, follow = call(ctid, "stop()"), call(ctid, "log(follow=True)")
    return worded(JobRunning(ctid, f"container {ctid}: {what} -- stop it ({stop}), follow it ({follow}), or pass "
                                   f"{FORCE} to start another", busy_details(live) if live else None),
                  stop, follow, FORCE)


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # what new_run_id makes, and any sane name


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def launch(t: Target, pre: Preflight, *, force: bool = False,
           command: str | None = None, run_id: str | None = None, extra: dict | None = None,
           env: dict | None = None, held: oplock.Lease | None = None, announce: bool = True,
           base: str | None = None, restarts: int | None = None) -> tuple[str, int]:
    """Start the job detached; returns (run id, pid). Refused while another job runs, unless forced.
    A multi-node run passes its one run id, its node's fields for the manifest (`extra`) and its node's
    environment (`env`, under train.env). The job's wrapper restarts it as train.restarts says, and the
    watch beside it (stalls, metrics.jsonl, gpu.csv) gets py-spy pushed first when train.stall is set.
    `held`: the operation lease the caller took for its preflight (train does), else launch takes it.
    `announce`: report the start (and py-spy's install) through t; False for one node of a run whose caller
    announces it (multinode). `base`: a resume's command without its resume words (what a restart adds them to).
    `restarts`: the wrapper's, instead of train.restarts (a multi-node run restarts as a whole instead)."""
    ct, spec = t.ct, t.spec
    restarts = spec.train.restarts if restarts is None else restarts
    command = command or spec.train.command
    if not command:
        raise ConfigError("hosts file", "train.command", "set the training command to run")
    run_id = run_id or new_run_id()
    v = pre.venv.verify
    verify = v.as_record()
    manifest = {"id": run_id, "container": spec.ctid, "commit": pre.commit, "venv": spec.venv.path,
                "venv_lock_sha256": pre.venv.lock_sha256, "torch": v.torch, "cuda_build": v.cuda_build,
                "triton": v.triton, "driver": pre.gpus[0].driver if pre.gpus else None,
                "gpus": [g.as_record() for g in pre.gpus] if pre.gpus is not None else None, "command": command,
                "node": spec.host.node_name,  # where it started: a cluster's container may move (a restart migration)
                "env": jobenv.describe(spec, verify), "compile_cache": jobenv.compile_cache(spec, verify),
                "outputs": list(spec.train.outputs), "checkout": spec.code.path,
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "started_epoch": time.time(),
                "metric": dataclasses.asdict(spec.train.metric) if spec.train.metric else None,
                "baseline": spec.train.baseline, "stall": spec.train.stall, "on_stall": spec.train.on_stall,
                "restarts": restarts, "restart_on": list(spec.train.restart_on), **(extra or {})}
    if pre.live and not force:  # refused before a run id is announced: no run that never existed is said to start
        runs = ", ".join(f"run {printable(r.run)} " + (f"(pid {r.pid})" if r.pid else "(starting)") for r in pre.live)
        raise busy(spec.ctid, f"busy: {runs} {'are' if len(pre.live) > 1 else 'is'} still running", pre.live)
    py_spy = pyspy.ensure(t, say=announce) if spec.train.stall else None
    if announce and not ct.dry:  # the id before the job starts: a Ctrl-C from here on knows which run it may have left
        t.step(f"run {run_id} starting in container {spec.ctid}")
    try:
        # Not while a deploy swaps the venv or moves the checkout: under the caller's lease (its preflight
        # read what this run records), checked still ours, or one of its own.
        with (contextlib.nullcontext(held) if held is not None else oplock.hold(ct, "train")) as lease:
            lease.check()
            r = jobenv.run(t, verify, ["bash", "-c", shell.with_lib("launch"), "launch", spec.train.run_dir,
                                              run_id, "1" if force else "0", spec.code.path, command,
                                              json.dumps(manifest, indent=1), str(restarts),
                                              " ".join(map(str, spec.train.restart_on)),
                                              json.dumps({**watch_settings(spec, py_spy),
                                                          "checkpoint": checkpoints.watch_conf(spec)}),
                                              *installed("job.sh", shell.load("job")),
                                              *installed("watch.py", shell.load_python("watch")),
                                              *checkpoints.launch_args(spec, base or command)],
                           extra=env, timeout=60, label="launch")
    except KeyboardInterrupt:
        ref = f"-c {spec.ctid} --run {run_id}"
        if announce:
            t.note(f"interrupted while run {run_id} was starting in container {spec.ctid}: it may be running. "
                   f"`remote status -c {spec.ctid}` says whether it is, `remote logs {ref} --follow` follows it, "
                   f"`remote stop {ref}` ends it")
        raise
    except CommandError as exc:
        if exc.command_status == 7:
            raise JobError(f"launch refused: {exc.stderr_tail} (the wrapper's file in the container; nothing was "
                           "started)") from None
        if exc.command_status == 5:  # a job runs there: busy (exit 3), as deploy's refusal is
            raise busy(spec.ctid, exc.stderr_tail) from None
        raise JobError(f"launch failed: {exc}") from None
    return run_id, int(r.out.strip().splitlines()[-1]) if not ct.dry else 0


BIN = f"{facts.UV_HOME}/bin"  # the wrapper and the watch, as files: one per content, never rewritten in place


def installed(name: str, text: str) -> tuple[str, str, str]:
    """(path, sha256, text) of one of remote/sh's programs as launch.sh puts it in the container: named by its
    content (`job-<sha12>.sh`), so `ps` there shows that short path, and a file a live wrapper runs from is
    never rewritten by a launch of another version of remote; launch.sh checks it by sha256 before it runs."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    stem, dot, ext = name.rpartition(".")
    return f"{BIN}/{stem}-{digest[:12]}{dot}{ext}", digest, text


def busy_details(live: tuple[LiveRun, ...]) -> dict:
    """What a BusyError over live runs carries (its `.details`): the latest live run's id and pid, and every one."""
    return {"run": live[-1].run, "pid": live[-1].pid, "live": [{"run": r.run, "pid": r.pid} for r in live]}


def live_text(live: tuple[LiveRun, ...]) -> str:
    """Live runs for a message: `run A (pid 12), run B (starting)`."""
    return ", ".join(f"run {printable(r.run)} " + (f"(pid {r.pid})" if r.pid else "(starting: no pid file yet)")
                     for r in live)


def state(t: Target, run_id: str | None = None) -> RunState:
    """The latest run's (or run_id's) state: alive, exit status (or lost), manifest, the log's tail.
    A run_id that is not there is a JobError naming it and the latest ids. Read with the system PATH
    (t.system): state.sh needs nothing of the venv, and deploy reads it where the venv may be broken."""
    spec = t.spec
    run_id = None if run_id == "latest" else run_id
    r = t.system.script(shell.with_lib("state"), spec.train.run_dir, run_id or "", mutates=False, timeout=60,
                    label="run state")
    st = parse_state(r.out)
    if run_id and not st.run:
        raise unknown_run(spec, run_id, st.latest)
    return st


def run_status(st: RunState) -> RunStatus:
    """A run's state (state()'s answer) as the typed value the API returns."""
    return RunStatus(st.run, st.path, st.pid, st.alive, st.exit, st.lost, st.stopped, st.orphans, st.log_size,
                     st.manifest.raw, st.live, dataclasses.asdict(st.stalled) if st.stalled else None, st.stalls,
                     st.gpu, st.attempt, st.attempts_max, st.checkpoint, st.parent)


def unknown_run(spec: ContainerSpec, run_id: str, latest: tuple[str, ...] | list[str]) -> UnknownRun:
    """The error for a run id that the container does not have, with the latest ones it has (what the
    container listed is kept only where it is a run id: it can hold anything)."""
    ids = [i for i in latest if RUN_ID.fullmatch(i)]
    have = f"the latest: {', '.join(ids)}" if ids else "it has none"
    runs = call(spec.ctid, "runs()")
    return worded(UnknownRun(f"container {spec.ctid} has no run '{printable(run_id)}' in {spec.train.run_dir}; "
                             f"{have} ({runs} lists them)"), runs)


def describe_end(st: RunState) -> str:
    killed = "".join(f"; attempt {a.attempt} was killed by the kernel's OOM killer (exit {a.exit})"
                     for a in st.attempts[:-1] if a.killed == "oom")
    attempt = (f" (attempt {st.attempt} of {st.attempts_max}{killed})"
               if (st.attempts_max or 0) > 1 and st.attempt else "")
    if st.alive:
        return (stall_text(st.stalled) + ", still running" if st.stalled else "still running") + attempt
    if st.stalled and st.exit == EXIT_STALLED:
        return f"{stall_text(st.stalled)}; ended by the stall watch (exit {EXIT_STALLED}){attempt}"
    if st.lost:
        left = f"; processes of it still run: {' '.join(map(str, st.orphans))} (`remote stop` ends them)" \
            if st.orphans else ""
        return ("LOST: it ended without an exit record (container restarted, or its wrapper was killed)" + left)
    if st.stopped:
        return f"stopped by `remote stop` (exit status {st.exit}){attempt}"
    return f"exited with status {st.exit}{attempt}"


def final_status(st: RunState) -> int:
    """The exit status a task reports for a finished run: the job's own, 1 when it was lost."""
    return st.final_status


def stop(t: Target, run_id: str | None = None, grace: int = 10, save: bool = False,
         refuse: str | None = None) -> Stopped:
    """TERM the job's processes, KILL after `grace` seconds, and verify that nothing of it is left.

    Without run_id: every live run (a `train --force` starts one beside another; a wrapper may not have
    written its pid file yet), and the latest run's leftovers; the latest's result is returned, with the
    others' under "others". Stopping is how a container is freed, so nothing that runs is left out.
    `refuse` (save-or-refuse, implies save): what would end the run ("the rollback"); where no new complete
    checkpoint comes within train.checkpoint.grace the job is left running and SaveRefused names that."""
    spec = t.spec
    save = save or refuse is not None
    if save and spec.train.checkpoint is None:  # before anything is stopped: a refusal changes nothing
        raise worded(ConfigError(t.session.config.file, "train.checkpoint", f"{SAVE} needs it: where the job saves"),
                     SAVE)
    st = state(t, run_id)
    if not st.run and not (run_id is None and st.live):
        raise JobError(f"container {spec.ctid} has no runs in {spec.train.run_dir}")
    others = [r.run for r in st.live if r.run != st.run] if run_id is None else []
    # Save-or-refuse asks the latest run first: a refusal must find the others untouched too.
    first = _stop_one(t, st, grace, save=save, refuse=refuse) if st.run and refuse else None
    results = [_stop_one(t, state(t, rid), grace) for rid in others]
    result = first or (_stop_one(t, st, grace, save=save) if st.run else results.pop(0))
    return dataclasses.replace(result, others=tuple(results))


def _stop_one(t: Target, st: RunState, grace: int, save: bool = False, refuse: str | None = None) -> Stopped:
    ct = t.ct
    assert st.run is not None  # stop() passes runs only
    asked, save = save, save and st.alive  # a save is asked of a running job only (Saved "not-running" else)
    wait = t.spec.train.checkpoint.grace if save and t.spec.train.checkpoint else 0
    r = ct.script(checkpoints.save_script() if save else shell.with_lib("stop"), st.path, st.run, str(grace),
                  *(checkpoints.save_args(t.spec) + (["refuse"] if refuse else []) if save else ()),
                  timeout=grace + wait + 60, label="stop")
    if ct.dry:
        return Stopped(st.run, st.alive, "none", None, None)
    fields = runfacts.fields_of(r.out)
    if fields.get("kept") == "running":  # save-or-refuse: nothing new came, the job was left running
        raise checkpoints.save_refused(t, st, refuse or "the stop", fields.get("saved"), state(t, st.run).tail)
    left = [int(p) for p in fields.get("left", "").split() if p.isdigit()]
    # None where the GPUs could not be checked (no nvidia-smi, or it did not answer)
    gpu_left = [int(p) for p in fields.get("gpu_left", "").split() if p.isdigit()] \
        if fields.get("gpu_checked") == "1" else None
    exit_text = fields.get("exit", "")
    if left or gpu_left:
        raise JobError(f"run {st.run}: processes still alive after KILL: {left + (gpu_left or [])}")
    return Stopped(st.run, st.alive or bool(st.orphans), fields.get("signal"),
                   int(exit_text) if exit_text.lstrip("-").isdigit() else None,
                   tuple(gpu_left) if gpu_left is not None else None, nodes=st.manifest.nodes,
                   saved=checkpoints.after_stop(t, st, fields.get("saved"), fields.get("restored"),
                                                lambda: state(t, st.run).tail) if asked else None)


watch_for = logs.watch_for


CompileNotices = compilelog.CompileNotices  # where it has always been imported from


@dataclass(frozen=True)
class Followed(RunState):
    """A followed run's state when the following ended, and what the log watch found over the whole log."""

    log_watch: logs.Watch | None = None  # the throughput, warnings and crash hints read from the log


def show_log(t: Target, run_id: str | None = None, *, follow: bool = False) -> Followed:
    """Report a run's log through t, each line as output (collapsed progress bars), with throughput warnings,
    crash hints and a lost connection resumed (t.resumed); with follow, until the job ends. Returns the run's
    final state."""
    ct, spec = t.ct, t.spec
    st = state(t, run_id)
    if not st.run:
        raise JobError(f"container {spec.ctid} has no runs in {spec.train.run_dir}: start one with `remote train`")
    watch = watch_for(spec)
    splitter = logs.LineSplitter()

    compiled = CompileNotices(t)

    def show(lines: list[str]) -> None:
        for line in lines:
            t.output(line)
            for notice in watch.notices(line):
                if notice.signature:  # a crash signature: its hint from the compile watch where it knows the cause
                    t.warn(f"{notice.signature}: {compiled.hint(notice.signature, notice.text)}")
                elif notice.warning:
                    t.warn(notice.text)
                else:
                    t.output(notice.text)

    logs.follow(ct, st.path, st.run, on_bytes=lambda chunk: show(splitter.feed(chunk)), follow_=follow,
                reconnect=ct.transport.close, on_compile=compiled.line, on_resume=t.resumed)
    show(splitter.flush())
    final = Followed(**{f.name: getattr(state(t, st.run), f.name) for f in dataclasses.fields(RunState)},
                     log_watch=watch)
    t.note(printable(f"run {final.run}: {describe_end(final)}; {watch.summary()}"))
    for name, hint, _ in watch.found:
        t.note(f"{name}: {compiled.hint(name, hint)}")
    counts, found = compiled.summary()  # the run's compile health, where the watch recorded any
    if counts:
        t.note(counts)
    for text in found:
        t.warn(text)
    return final



def resume_saved(t: Target, run: str | None, why: str) -> str | None:
    """A run saved and stopped for a restart (gpu fix) or a rollback, resumed from its checkpoint (train
    --resume): its new run id, or None with a warning saying how to resume it by hand (no checkpoint came,
    a preflight problem). `why`: what was done to it, in the warning's words."""
    try:
        resumed, _ = start(t, resume=True)
    except RemoteError as exc:
        t.warn(f"{f'run {run}' if run else 'the run'} was saved and {why}, but it did not resume: {exc} "
               f"(`remote train -c {t.ctid} --resume` resumes it)")
        return None
    return resumed if isinstance(resumed, str) else None

def start(t: Target, *, force: bool = False, warmup: bool = False, command: str | None = None,
          env: dict[str, str] | None = None, resume: bool = False, fresh: bool = False) -> tuple[str, int | None]:
    """Preflight (warming up first where only the warmup is missing and `warmup`), then launch detached:
    (run id, pid; None in a dry run). What train does before it follows; remote.api's Container.train.
    `command` and `env`: this run's, instead of train.command and on top of train.env. `resume`, `fresh`: with
    train.checkpoint, from the latest complete checkpoint or over (remote.ops.checkpoints.prepare)."""
    session, spec, ct = t.session, t.spec, t.ct

    def checked_launch() -> tuple[str, int]:
        # Preflight and launch under one operation lease: no deploy from another controller can move the
        # checkout or swap the venv between what preflight read and what the manifest records.
        with oplock.hold(ct, "train") as held:
            pre = preflight(t, host_gpu=host_gpu(session, spec), force=force)
            for note in pre.notes:
                t.output(printable(f"preflight: {note}"))
            for warning in pre.warnings:
                t.warn(printable(f"preflight: {warning}"))
            begin = checkpoints.prepare(t, command or spec.train.command or "", resume=resume, fresh=fresh,
                                        live=bool(pre.live), latest=lambda: state(t).run)
            return checkpoints.started(t, begin, launch(t, pre, force=force, held=held, command=begin.command or None,
                                                        env=env, base=begin.base, extra=begin.manifest()))

    try:
        run_id, pid = checked_launch()
    except JobError as exc:
        if not (warmup and only_warmup_missing(exc)):
            raise
        wm.warmup(t)  # takes the lease itself: ours was given back
        run_id, pid = checked_launch()
    if session.dry:  # nothing was started: no pid to name
        t.step(f"(dry run) run {run_id} would start in container {spec.ctid}; log {spec.train.run_dir}/{run_id}/log")
        return run_id, None
    t.step(f"run {run_id} started (pid {pid} in container {spec.ctid}); log {spec.train.run_dir}/{run_id}/log")
    return run_id, pid


def train(t: Target, *, force: bool = False, warmup: bool = False, follow: bool = True,
          on_end=None) -> Followed | None:
    """Preflight, launch detached, then follow the log until the job ends (returns its state); then
    on_end(t, final) (the CLI passes remote.runs.knowngood.after_run)."""
    session = t.session
    run_id, _ = start(t, force=force, warmup=warmup)
    if not follow or session.dry:
        return None
    try:
        final = show_log(t, run_id, follow=True)
    except KeyboardInterrupt:
        t.note(f"stopped following; run {run_id} keeps running. `remote logs -c {t.ctid} --run {run_id} --follow` resumes, `remote stop -c {t.ctid} --run {run_id}` ends it")
        return None
    if on_end is not None:
        on_end(t, final)
    return final


def pull_run(t: Target, run_id: str | None, dest: str, *, progress: bool = True) -> PulledRun:
    """Bring a run's log, manifest and outputs (train.outputs, relative to the checkout) into dest/<run id>/:
    streamed and verified like `remote pull`."""
    spec, ct = t.spec, t.ct
    st = state(t, None if run_id in (None, "latest") else run_id)
    if not st.run:
        raise JobError(f"container {spec.ctid} has no run {'' if run_id in (None, 'latest') else run_id + ' '}"
                       f"in {spec.train.run_dir}: start one with `remote train`")
    # The run id and the outputs come from the container (`current`, manifest.json): untrusted paths.
    root = Path(dest)
    root.mkdir(parents=True, exist_ok=True)
    if not RUN_ID.fullmatch(st.run):
        raise TransferError(f"container {spec.ctid}: run id {st.run!r} refused (not a run id; from "
                            f"{spec.train.run_dir}/current): nothing was pulled")
    target = files.inside(root, st.run, "run id")
    target.mkdir(exist_ok=True)
    refused_outputs = st.manifest.problem("outputs")
    if refused_outputs:
        t.warn(printable(f"outputs in {st.path}/manifest.json refused: {refused_outputs}"))
    outputs = () if refused_outputs else st.manifest.outputs if st.manifest.outputs is not None \
        else spec.train.outputs
    wanted = [(f"{st.path}/log", "log"), (f"{st.path}/manifest.json", "manifest.json")]
    # What the watch and the wrapper left (remote/sh/watch.py, job.sh); absent ones are skipped quietly
    # (no gpu.csv on a CPU container, no stacks without a stall).
    optional = ["metrics.jsonl", "gpu.csv", "events.jsonl", "attempts", "compile.jsonl"] + \
        [f"stacks-{n}.txt" for n in range(1, st.stalls + 1)]
    wanted += [(f"{st.path}/{name}", name) for name in optional]
    wanted += [(out if out.startswith("/") else f"{spec.code.path}/{out}", f"outputs/{out.strip('/')}")
               for out in outputs]
    got, refused = {}, []
    for src, rel in wanted:
        try:
            local = files.inside(target, rel, "output")
            stats = files.pull(ct, src, local, progress=files.ProgressPrinter(f"pull {src}") if progress else None)
        except TransferError as exc:
            if rel in ("log", "manifest.json"):
                raise
            if rel in optional and "no such file" in str(exc):
                continue
            t.warn(printable(f"{'' if rel in optional else 'output '}{src}: {exc}"))
            refused.append(f"{rel}: {exc}")
            continue
        got[rel] = f"{stats.files} file(s), {stats.bytes} bytes"
        for why in stats.refused:
            t.warn(printable(f"{rel}/{why}"))
        refused += [f"{rel}/{why}" for why in stats.refused]
    if st.alive:
        t.note(printable(f"run {st.run} is still running: its outputs were pulled as they are now"))
    return PulledRun(st.run, str(target), got, tuple(refused))


def container_jobs(session: Session, hosts: list[HostState]) -> list[ContainerStatus]:
    """Per container of a reachable host: its state (as `inventory` found it) and its latest run
    (alive or lost, uptime, throughput with its unit, exit status)."""
    from .. import executor

    known = {ctid: state for host in hosts if host.reachable for ctid, state in host.containers.items()}
    # Every container at once (bounded per host), over each host's one connection.
    return executor.values(session.config, list(known),
                          lambda ctid: _container_job(session, session.config.containers[ctid], known[ctid]))


def _container_job(session: Session, spec: ContainerSpec, known: str) -> ContainerStatus:
    entry = ContainerStatus(spec.ctid, spec.host.name, known)
    if known == "missing":
        return dataclasses.replace(
            entry, error=f"container {spec.ctid} does not exist on host {spec.host.name} (`pct list` there)")
    if known != "running":
        return entry
    try:
        # One round trip: the run's state (state.sh, inside the probe) and the venv's deploy record.
        raw = facts.read_raw(resolve(session, spec.ctid), facts.STATUS)[0]
        if raw["run"].get("rc") != 0:  # bash failed in it, or could not start (`missing`)
            why = raw["run"].get("err", "").strip() or raw["run"].get("missing", "")
            raise JobError(f"reading the run state failed: {why[-300:]}")
        st = parse_state(raw["run"]["out"])
        entry = dataclasses.replace(entry, also_live=tuple(r for r in st.live if r.run != st.run))
        if st.run:
            values, watch = logs.series(spec, st.tail, last_line=False)
            # The manifest is the job's file (a job may rewrite it) and the compile part the probe's reading
            # of the job's files: untrusted, each field checked, a wrong one that container's error alone.
            m = st.manifest
            problem = m.problem("started_epoch") or m.problem("nodes")
            if problem:
                raise ValueError(problem)
            started = m.started_epoch
            compile_part = raw.get("compile")
            if compile_part is not None and not isinstance(compile_part, dict):
                raise ValueError(f"the probe's compile part is a {type(compile_part).__name__}, not an object")
            entry = dataclasses.replace(entry, run=JobStatus(
                id=st.run, alive=st.alive, lost=st.lost, orphans=st.orphans, exit=st.exit,
                pid=st.pid, stopped=st.stopped,
                uptime_s=round(st.now - started) if started and st.alive else None,
                throughput=watch.last, rolling=watch.rolling, unit=watch.unit,
                higher_is_better=watch.higher_is_better, baseline=spec.train.baseline, low=watch.low,
                problems=tuple(name for name, _, _ in watch.found), spark=logs.sparkline(values),
                stalled=dataclasses.asdict(st.stalled) if st.stalled else None, attempt=st.attempt,
                attempts_max=st.attempts_max, gpu=st.gpu,
                # one node of a multi-node run
                nodes=m.nodes, node_rank=m.node_rank,
                # the compile watch's counts (remote/ops/compilelog.py), where the probe read this run's
                compile=compilelog.from_probe(compile_part) if (compile_part or {}).get("run") == st.run
                else None,
                # a cluster's container that a restart migration moved (and so killed the run): where it started
                moved_from=moved_from(st, spec), checkpoint=st.checkpoint, parent=st.parent,
                oom_killed=tuple(a.attempt for a in st.attempts if a.killed == "oom")))
        lock = ((raw.get("venv") or {}).get("record") or {}).get("lock_sha256")
        entry = dataclasses.replace(entry, probed=True, venv_lock=lock if isinstance(lock, str) else None,
                                    gpu_memory=facts.gpu_use(facts.gpus_of(raw), facts.marked_of(raw)))
    except RemoteError as exc:
        entry = dataclasses.replace(entry, error=str(exc))
    except (TypeError, ValueError, AttributeError) as exc:  # one container's answer out of shape: its entry only
        entry = dataclasses.replace(entry, error=printable(f"container {spec.ctid}'s run state could not be read: "
                                                           f"{exc}")[:400])
    return entry


def moved_from(st: RunState, spec: ContainerSpec) -> str | None:
    """The node a lost run started on, where its container is on another node of its cluster now."""
    node = st.manifest.node
    if st.lost and spec.cluster and node is not None and node != spec.host.node_name:
        return printable(node)[:64]
    return None


def lock_outliers(entries: list[ContainerStatus], config) -> dict[int, str]:
    """Containers whose venv lock differs from their siblings' (the others with the same venv spec):
    ctid -> what the siblings have. The lock most of them have is taken as the siblings'."""
    groups: dict = {}
    for e in entries:
        if e.venv_lock:
            groups.setdefault(config.containers[e.container].venv, []).append(e)
    out = {}
    for members in groups.values():
        counts: dict[str, int] = {}
        for e in members:
            counts[e.venv_lock] = counts.get(e.venv_lock, 0) + 1
        if len(counts) < 2:
            continue
        common = max(counts, key=lambda k: (counts[k], k))
        for e in members:
            if e.venv_lock != common:
                out[e.container] = common
    return out
