"""One training run across several containers (torch.distributed's c10d rendezvous does the rest).

`train` preflights every node before anything starts, then launches the one run id on each node with
the command formatted for it ({nnodes}, {node_rank}, {master_addr}, {master_port}, {node_addr},
{run_id}); the first node is the master, reached at its `containers.<id>.address`. Names need not
resolve across nodes (Proxmox resolves only a container's own name, on 127.0.1.1): each node's torchrun
publishes its own `address` (PET_LOCAL_ADDR, torchrun's --local-addr) and gloo/NCCL use the interface
that holds it (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME); train.env overrides any of these. A rendezvous
that cannot complete ends after train.rendezvous_timeout (torchrun's join_timeout) with that reason. `follow` merges the nodes' logs, each line
marked `[id] `, and stops the run on every node as soon as one node fails: the other nodes' ranks would
wait in a collective until its timeout. Each node's manifest lists the nodes, so `status` shows the run
once and `stop` on one node stops them all.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .. import executor, shell
from ..config import CONTAINER_KEY, ContainerSpec
from ..config import unset as config_unset
from ..errors import CheckpointRefused, CommandError, ConfigError, JobError, RemoteError
from ..facts.runs import RunState
from ..naming import printable
from ..target import reporter, resolve
from ..threads import ContextThread
from ..transport.session import Session
from . import checkpoints, jobs, nodeckpt
from . import warmup as wm

FIELDS = ("nnodes", "node_rank", "master_addr", "master_port", "node_addr", "run_id")
# What torchrun and the collectives print when the nodes never met (a timeout, an unreachable store).
RENDEZVOUS_FAILED = ("RendezvousTimeoutError", "RendezvousClosedError", "RendezvousConnectionError",
                     "DistNetworkError", "DistStoreError")
POLL_S = 1.0  # how often the nodes' states are read while following


def node_command(command: str, values: dict) -> str:
    """The command for one node: only the FIELDS in braces are replaced (`${VAR}` stays for bash)."""
    for key in FIELDS:
        command = command.replace("{" + key + "}", str(values[key]))
    return command


def plan_nodes(specs: list[ContainerSpec], run_id: str, file: str = "hosts file") -> list[dict]:
    """Each node's values, the first node being the master."""
    first = specs[0]
    for spec in specs:  # names need not resolve: every node is reached, and publishes itself, by address
        if not spec.address:
            raise ConfigError(file, f"containers.{spec.ctid}.address",
                              "every container of a multi-node run needs the address the others reach it at "
                              "(its IP on the network the nodes share)")
    if len({s.ctid for s in specs}) != len(specs):
        raise ConfigError(file, CONTAINER_KEY, "a container is listed twice")
    return [{"nnodes": len(specs), "node_rank": rank, "master_addr": first.address,
             "master_port": first.train.master_port, "node_addr": spec.address, "run_id": run_id}
            for rank, spec in enumerate(specs)]


def node_env(spec: ContainerSpec, iface: str, master: bool) -> dict[str, str]:
    """A node's environment: torchrun publishes its address, not its hostname (PET_* are torchrun's flags'
    environment form), gloo and NCCL use the interface holding it, and the rendezvous gives up in time."""
    t = spec.train.rendezvous_timeout
    assert spec.address, "plan_nodes checks every node's address first"
    return {"PET_LOCAL_ADDR": spec.address, "GLOO_SOCKET_IFNAME": iface, "NCCL_SOCKET_IFNAME": iface,
            # join_timeout: c10d's rendezvous; timeout: the static one (torchrun's default backend).
            # is_host: c10d guesses whether it serves the rendezvous store by resolving its own hostname,
            # which on Proxmox is 127.0.1.1, never the master's address: every node would be a client.
            "PET_RDZV_CONF": f"join_timeout={t},timeout={t},is_host={int(master)}"}


def node_iface(session: Session, spec: ContainerSpec, file: str = "hosts file") -> str:
    """The interface of container spec.ctid that holds its configured address; a ConfigError naming the
    key when none does (the other nodes could not reach it there)."""
    assert spec.address, "plan_nodes checks every node's address first"
    try:
        return session.container_for(spec).script(shell.load("node-iface"), spec.address, timeout=30,
                                                    mutates=False, label="node address").out.strip()
    except CommandError as exc:
        if exc.command_status != 4:
            raise
        raise ConfigError(file, f"containers.{spec.ctid}.address",
                          f"{spec.address} is not an address of container {spec.ctid} (it has: "
                          f"{exc.stderr_tail.strip().rstrip(',')}): set the address the other nodes reach it at"
                          ) from None


GATE = ("torch", "cuda build", "NCCL", "driver major", "venv lock", "commit")


def gate_fields(pre: jobs.Preflight) -> dict[str, str | None]:
    """What must match on every node of a multi-node run, from one node's preflight (jobs.Preflight): torch and
    its CUDA build, the NCCL in the venv, the GPU driver's major version, the venv lock, the commit."""
    verify = pre.venv.verify
    nccl = sorted(f"{name} {version}" for name, version in verify.dists.items()
                  if name.lower().replace("_", "-").startswith("nvidia-nccl"))
    driver = (pre.gpus[0].driver if pre.gpus else None) or None
    return {"torch": verify.torch, "cuda build": verify.cuda_build, "NCCL": ", ".join(nccl) or None,
            "driver major": driver.split(".")[0] if driver else None,
            "venv lock": pre.venv.lock_sha256, "commit": pre.commit}


def mismatches(nodes: dict[int, tuple[str, dict[str, str | None]]]) -> list[str]:
    """Each gate field whose value is not the same on every node: `torch: 2.11.0 on 200 (pve1); 2.10.0 on 201
    (pve2)`, values as the containers said them (printable, shortened). Pure."""
    out = []
    for field in GATE:
        seen: dict[str | None, list[str]] = {}
        for ctid, (node, fields) in nodes.items():
            seen.setdefault(fields.get(field), []).append(f"{ctid} ({node})")
        if len(seen) > 1:
            shown = "; ".join(f"{printable(str(value))[:16 if field in ('venv lock', 'commit') else 60]} on "
                              f"{', '.join(where)}" for value, where in seen.items())
            out.append(f"{field}: {shown}")
    return out


def rendezvous_failed(st: RunState) -> bool:
    """Whether a node's log shows that the nodes never met (not a failure of the training itself)."""
    return any(word in st.tail for word in RENDEZVOUS_FAILED)


def train(session: Session, ids: list[int], *, force: bool = False, warmup: bool = False,
          follow: bool = True, resume: bool = False, fresh: bool = False) -> MultiRun | None:
    """Preflight every node, then start one run on all of them; follow until it ends (returns
    follow_run's result, restarts included: follow_whole), or None when not following. With train.checkpoint: a
    plain train refused where a node holds a complete checkpoint, `resume` at the run's common step, `fresh`
    (remote.ops.nodeckpt.prepare). Each node's events are marked with it (its Target), the run's as a whole
    with none (the session's reporter)."""
    run_id = start(session, ids, force=force, warmup=warmup, resume=resume, fresh=fresh)
    if run_id is None or not follow:
        return None
    try:
        return follow_whole(session, ids, run_id)
    except KeyboardInterrupt:
        reporter(session).note(f"stopped following; run {run_id} keeps running on {len(ids)} nodes. `remote logs "
                               "--follow` resumes, `remote stop` ends it on every node")
        return None


def whole_restarts(spec: ContainerSpec) -> bool:
    """Whether a multi-node run restarts as a whole, every node at the common step, from the controller that
    follows it (train.checkpoint and train.restarts set): each node's wrapper restarting from its own latest
    checkpoint could resume the ranks from different steps, and cannot give a node the master's."""
    return spec.train.checkpoint is not None and spec.train.restarts > 0


def start(session: Session, ids: list[int], *, force: bool = False, warmup: bool = False, resume: bool = False,
          fresh: bool = False, parent_note: str = "") -> str | None:
    """train's start: every node preflighted, the checkpoints prepared, the run launched on every node; its
    id (None in a dry run)."""
    nodes = {i: resolve(session, i) for i in ids}  # each node resolved once
    run = reporter(session)
    specs = [nodes[i].spec for i in ids]
    run_id = jobs.new_run_id()
    values = plan_nodes(specs, run_id, session.config.file)
    for spec in specs:
        if not spec.train.command:
            raise config_unset(session.config.file, "train.command", "set the training command to run")

    def check(ctid: int):
        try:
            return jobs.preflight(nodes[ctid], force=force)
        except JobError as exc:
            if not (warmup and jobs.only_warmup_missing(exc)):
                return exc
            wm.warmup(nodes[ctid])
            return jobs.preflight(nodes[ctid], force=force)
        except RemoteError as exc:
            return exc

    def check_node(ctid: int):
        pre = check(ctid)
        if isinstance(pre, BaseException):
            return pre
        try:
            return pre, node_iface(session, nodes[ctid].spec, session.config.file)
        except RemoteError as exc:
            return exc

    checked = executor.values(session.config, ids, check_node)
    failed = [(ctid, p) for ctid, p in zip(ids, checked, strict=True) if isinstance(p, BaseException)]
    if failed:
        raise JobError("preflight failed, nothing was started: " + "; ".join(f"container {c}: {e}" for c, e in failed))
    pres, ifaces = [p for p, _ in checked], [i for _, i in checked]
    differ = mismatches({spec.ctid: (spec.host.node_name, gate_fields(pre)) for spec, pre in zip(specs, pres, strict=True)})
    if differ:
        raise JobError("the nodes differ where a multi-node run needs them equal (a NCCL or torch mismatch hangs "
                       "in the first collective rather than failing), nothing was started: " + "; ".join(differ)
                       + ": deploy the same commit and venv to every node (`remote deploy -c "
                       + ",".join(map(str, ids)) + "`), or use nodes with the same driver")
    for ctid, pre in zip(ids, pres, strict=True):
        for note in pre.notes:
            # GPU names, versions: the container's; marked in the text, as this thread is no node's part
            nodes[ctid].output(printable(f"[{ctid}] preflight: {note}"))
        for warning in pre.warnings:
            nodes[ctid].warn(printable(f"[{ctid}] preflight: {warning}"))
    commands = {spec.ctid: node_command(spec.train.command or "", v) for spec, v in zip(specs, values, strict=True)}
    starts = nodeckpt.prepare(session, nodes, ids, commands, resume=resume, fresh=fresh,
                              live=any(pre.live for pre in pres))
    started: list[tuple[int, int]] = []
    try:
        for spec, pre, v, iface in zip(specs, pres, values, ifaces, strict=True):
            assert spec.train.command, "checked before the preflight"
            begin = starts[spec.ctid]
            extra = {"nodes": ids, "node_rank": v["node_rank"], "master_addr": v["master_addr"],
                     "master_port": v["master_port"], "node_addr": v["node_addr"], "iface": iface,
                     **(begin.manifest() or {})}
            if whole_restarts(spec):
                extra["run_restarts"] = spec.train.restarts  # the controller's, the wrapper's being 0
            _, pid = checkpoints.started(nodes[spec.ctid], begin, jobs.launch(
                nodes[spec.ctid], pre, force=force, command=begin.command, run_id=run_id, extra=extra,
                env=node_env(spec, iface, v["node_rank"] == 0), announce=False, base=begin.base,
                restarts=0 if whole_restarts(spec) else None))
            started.append((spec.ctid, pid))
    except RemoteError as exc:
        stop_nodes(session, [c for c, _ in started], run_id)
        raise JobError(f"the launch failed on container {spec.ctid}: {exc}; stopped the run on "
                       f"{', '.join(str(c) for c, _ in started) or 'no other node'}") from None
    if session.dry:  # nothing was started: no pids to name
        run.step(f"(dry run) run {run_id} would start on {len(ids)} nodes: {', '.join(map(str, ids))}; master "
                 f"{values[0]['master_addr']}:{values[0]['master_port']}")
        return None
    run.step(f"run {run_id} started on {len(ids)} nodes: " + ", ".join(f"{c} (pid {p})" for c, p in started)
             + f"; master {values[0]['master_addr']}:{values[0]['master_port']}" + parent_note)
    if whole_restarts(specs[0]):
        run.note(f"train.restarts ({specs[0].train.restarts}): the run restarts as a whole, every node from the "
                 "common checkpoint, while a controller follows it (`remote train` without --detach, or `remote "
                 f"logs -c {ids[0]} --follow`)")
    return run_id


def restartable(session: Session, ids: list[int], result: MultiRun) -> bool:
    """Whether a followed multi-node run that ended is restarted as a whole: it failed on a node (not by
    `remote stop`), with an exit status train.restart_on allows."""
    if result.failed is None or result.failed not in result.nodes:
        return False
    st = result.nodes[result.failed]
    code = final_status(result)
    codes = resolve(session, ids[0]).spec.train.restart_on
    return not st.stopped and code != 0 and (not codes or code in codes)


def follow_whole(session: Session, ids: list[int], run_id: str) -> MultiRun:
    """follow_run, and where the run restarts as a whole (whole_restarts) and failed on a node, up to
    train.restarts restarts: every node stopped (follow_run did), then a new run resumed on every node from the
    common step (nodeckpt.prepare), or started over where no node held a checkpoint yet."""
    spec = resolve(session, ids[0]).spec
    result = follow_run(session, ids, run_id)
    k = 0
    while whole_restarts(spec) and k < spec.train.restarts and restartable(session, ids, result):
        k += 1
        run = reporter(session)
        run.step(f"run {result.run} failed on node {result.failed} (exit {final_status(result)}): restart {k} of "
                 f"{spec.train.restarts}, every node from the run's common checkpoint")
        time.sleep(min(30, 1 << (k - 1)))  # the wrapper's backoff
        try:
            common = nodeckpt.plan(session, {i: resolve(session, i) for i in ids}, ids)
        except CheckpointRefused as exc:  # no common step: a restart would resume the ranks apart
            run.warn(f"run {result.run} not restarted: {exc}")
            return result
        new = start(session, ids, resume=common is not None, parent_note=f" (restart {k} of run {result.run}"
                    + ("" if common is not None else ", over: no node held a checkpoint yet") + ")")
        assert new is not None, "no restarts in a dry run: nothing was started"
        result = follow_run(session, ids, new)
    return result


def stop_nodes(session: Session, ids: list[int], run_id: str, grace: int = 10) -> dict[int, object]:
    """Stop the run on each node at once; ctid -> stop's result or the error."""
    nodes = {i: resolve(session, i) for i in ids}

    def one(ctid: int):
        try:
            return jobs.stop(nodes[ctid], run_id, grace=grace)
        except RemoteError as exc:
            return exc

    return dict(zip(ids, executor.values(session.config, ids, one), strict=True))


@dataclass(frozen=True)
class MultiRun:
    """A multi-node run followed to its end: every node's final state, and the node that failed first."""

    run: str
    nodes: dict[int, jobs.Followed]  # ctid -> its final state
    failed: int | None = None


def follow_run(session: Session, ids: list[int], run_id: str) -> MultiRun:
    """Every node's log merged (each node's events marked with it: `[id] ` on a command line) until the run
    ends on all of them; the first node that fails (or is lost) has the run stopped on every other node.
    Returns {run, nodes: ctid -> final state, failed: the node that failed first, or None}."""
    nodes = {i: resolve(session, i) for i in ids}  # each node resolved once
    finals: dict[int, jobs.Followed] = {}
    done = threading.Event()
    master = nodes[ids[0]].spec

    def met(ctid: int, st: RunState) -> str:
        """Why, when the nodes never met: the run ended at its rendezvous, not in training."""
        if not rendezvous_failed(st):
            return ""
        return (f": the nodes did not meet at {master.address}:{master.train.master_port} within "
                f"train.rendezvous_timeout ({nodes[ctid].spec.train.rendezvous_timeout} s) -- "
                "every node must reach that address and port, and torchrun's --nnodes must be the number of "
                "containers listed ({nnodes})")
    failure: list[tuple[int, str]] = []

    def watchdog() -> None:
        while not done.wait(POLL_S):
            try:
                states = executor.values(session.config, ids, lambda c: jobs.state(nodes[c], run_id))
            except RemoteError:
                continue  # a lost connection: the followers reconnect; look again next time
            bad = [(c, st) for c, st in zip(ids, states, strict=True) if not st.alive and st.final_status]
            if bad:
                ctid, st = first_to_end(session, bad)
                others = [c for c, s in zip(ids, states, strict=True) if s.alive or s.orphans]
                failure.append((ctid, f"node {ctid} {jobs.describe_end(st)}" + met(ctid, st)))
                nodes[ctid].warn(f"node {ctid} {jobs.describe_end(st)}: stopping the run on every node"
                                 + (f" ({', '.join(map(str, others))} would wait in a collective)" if others else ""))
                stop_nodes(session, others, run_id)
                return
            if not any(st.alive for st in states):
                return

    def one(ctid: int) -> None:
        finals[ctid] = jobs.show_log(nodes[ctid], run_id, follow=True)

    guard = ContextThread(target=watchdog, daemon=True)
    guard.start()
    try:
        outcomes = executor.each(session.config, ids, one)
    finally:
        done.set()
        guard.join(timeout=60)
    for o in outcomes.values():
        if not o.ok and o.container not in finals:
            raise JobError(f"following container {o.container} failed: {o.message}")
    ends = "; ".join(f"{c}: {jobs.describe_end(finals[c])}" for c in ids)
    bad: list[tuple[int, RunState]] = [(c, finals[c]) for c in ids if finals[c].final_status]
    if not failure and bad:  # every node ended before the watchdog looked: name the first that failed
        ctid, st = first_to_end(session, bad)
        failure.append((ctid, f"node {ctid} {jobs.describe_end(st)}" + met(ctid, st)))
    reporter(session).note(f"multi-node run {run_id}: " + ("FAILED, " + failure[0][1] + "; " if failure else "")
                           + ends)
    return MultiRun(run_id, finals, failure[0][0] if failure else None)


def first_to_end(session: Session, ended: list[tuple[int, RunState]]) -> tuple[int, RunState]:
    """Of several nodes that ended badly, the one whose exit record was written first (the others'
    ranks usually fail only because it did); a node without a record (lost) counts as first."""
    if len(ended) == 1:
        return ended[0]

    def when(item):
        ctid, st = item
        r = session.container(ctid).run(["stat", "-c", "%.9Y", "--", f"{st.path}/exit"], check=False,
                                        mutates=False, timeout=30)
        try:
            return float(r.out.strip())
        except ValueError:
            return 0.0

    return min(ended, key=when)


def final_status(result: MultiRun) -> int:
    """The run's exit status: the failed node's (the first to fail), else the first non-zero, else 0."""
    finals = result.nodes
    if result.failed is not None and result.failed in finals and finals[result.failed].final_status:
        return finals[result.failed].final_status
    return next((st.final_status for st in finals.values() if st.final_status), 0)


def nodes_of(session: Session, ctid, run_id: str | None) -> tuple[str | None, list[int]]:
    """The run (latest, or run_id) of container ctid and its nodes ([] for a single-node run)."""
    st = jobs.state(resolve(session, ctid), run_id)
    return st.run, [n for n in st.manifest.nodes or () if n in session.config.containers]

