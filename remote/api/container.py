"""One container of a fleet (`fleet.container(200)`); its training runs are remote.api.run.Run.

A Container holds its Target (remote.target: the container resolved once) and hands it to every operation.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import JobError
from ..results import (
    CacheCopy,
    Checkpoint,
    DeployPlan,
    Finding,
    GpuFix,
    ImportedCache,
    KnownGood,
    Moved,
    PulledRun,
    Result,
    RolledBack,
    RunStatus,
    RunSummary,
    Snapshot,
    Stopped,
    Transfer,
    Warmup,
)
from . import checks
from .run import Run

if TYPE_CHECKING:
    from ..config import ContainerSpec
    from ..ops.session import PctContainer as _PctContainer
    from ..ops.session import Session
    from ..target import Target
    from .base import FleetBase

OutputCallback = Callable[[str, bytes], None]  # ("stdout" | "stderr", chunk), as the command prints it


class Container:
    """One container of a fleet (`fleet.container(200)`)."""

    fleet: FleetBase
    spec: ContainerSpec  # its settings, as the hosts file resolves them (remote.config)

    def __init__(self, fleet: FleetBase, spec: ContainerSpec):
        self.fleet, self.spec = fleet, spec
        self._made: Target | None = None

    @property
    def _target(self) -> Target:
        """The container resolved on the fleet's session (made on first use: reading settings connects nothing)."""
        if self._made is None:
            from ..target import resolve

            # The session's spec: a cluster's container on the host of the node holding it (remote.cluster).
            self._made = resolve(self.fleet._session, self.id)
        return self._made

    def __repr__(self) -> str:
        return f"<remote.Container {self.id} on {self.host}>"

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close its fleet's connections (a container made on its own, as remote.fabric makes one)."""
        self.fleet.close()

    @property
    def id(self) -> int:
        return self.spec.ctid

    @property
    def host(self) -> str:
        """The host entry it is reached through: in a cluster, the node holding it (its guest list read once)."""
        return self._s.config.containers[self.id].host.name if self.spec.cluster else self.spec.host.name

    @property
    def _s(self) -> Session:
        return self.fleet._session

    def _ct(self, venv_on_path: bool = True) -> _PctContainer:
        return self._target.ct if venv_on_path else self._target.system

    # -- commands ------------------------------------------------------------------------------------
    def exec(self, argv: Sequence[str] | str, *, timeout: float | None = None, check: bool = False,
             on_output: OutputCallback | None = None, job_env: bool = True) -> Result:
        """Run argv (a list: as it is, no shell; a str: a bash command line) in the container; once deployed,
        in the checkout with the job's environment (venv, compile cache, train.env), else (or with
        job_env=False) from /root with the venv first on PATH, as `pct exec` would.

        Returns the command's own exit status and output; with check, a non-zero one raises CommandError
        naming argv as given. `on_output(kind, chunk)` gets its output as it comes (then Result holds what
        was not streamed). A wrong argument is a TypeError or ValueError, before anything runs."""
        from ..ops import jobenv

        args = checks.argv(argv)
        kwargs: dict[str, Any] = dict(timeout=checks.seconds("timeout", timeout), check=False, on_output=on_output)
        checks.flag("check", check)
        ct = self._ct()
        # Deployed or not, and the job's environment, are decided in the container: one command, no probe first.
        r = jobenv.run_as_deployed(self._target, args, **kwargs) if checks.flag("job_env", job_env) \
            else ct.run(args, **kwargs)
        r = dataclasses.replace(r, argv=tuple(args))  # the user's argv, not the wrapper that ran it
        return r.check(f"container {self.id}") if check else r

    def shell(self) -> int:
        """An interactive shell in the container (needs a terminal): its exit status."""
        from ..ops.interactive import open_shell
        from ..ops.session import open_session

        # A pty session of its own, no agent, never kept (a terminal is this process's); its notes to the fleet's events.
        with open_session(self.fleet.config, keep=False, transport=self.fleet._transport,
                          events=self.fleet._emit.event) as s:
            return open_shell(dataclasses.replace(self._target, session=s))

    # -- files ---------------------------------------------------------------------------------------
    def push(self, src: str | os.PathLike, dest: str, *, attempts: int = 3,
             on_bytes: Callable[[int, int], None] | None = None) -> Transfer:
        """Copy a local file or folder into the container: streamed, verified by sha256, resumed after a
        lost connection. `on_bytes(done, total)` reports progress."""
        from ..errors import TransferError
        from ..ops import files

        src, dest = checks.path("src", src), checks.text("dest", dest)
        checks.count("attempts", attempts)
        if not (os.path.isfile(src) or os.path.isdir(src)):
            raise TransferError(f"cannot push {os.fspath(src)}: no such file or folder on this machine")
        return files.push(self._ct(), src, dest, attempts=attempts, progress=on_bytes)

    def pull(self, src: str, dest: str | os.PathLike, *, attempts: int = 3,
             on_bytes: Callable[[int, int], None] | None = None) -> Transfer:
        """Copy a file or folder out of the container: streamed, verified by sha256, resumed after a lost
        connection; tar members that would land outside `dest` are refused (Transfer.refused)."""
        from ..ops import files

        src, dest = checks.text("src", src), checks.path("dest", dest)
        checks.count("attempts", attempts)

        return files.pull(self._ct(), src, dest, attempts=attempts, progress=on_bytes)

    # -- deploy and warmup ---------------------------------------------------------------------------
    def deploy(self, *, check: bool = False, allow_dirty: bool = False, rollback: bool = False,
               force: bool = False) -> DeployPlan:
        """Make the venv and checkout exactly what the hosts file pins (a no-op when they are). check=True:
        change nothing, return what would change (and any drift). Refused (BusyError) while a job runs
        there, unless force."""
        from ..ops.deploy import LockOnce, deploy

        lock = self.fleet._shared_value("deploy-lock", LockOnce)  # one resolved lock for the fleet's deploys
        return deploy(self._target, allow_dirty=allow_dirty, check=check, rollback=rollback, force=force, lock=lock)

    def warmup(self, *, devices: Sequence[str] | None = None, parallel: bool = False) -> Warmup:
        """Compile the training into the persistent compile cache, one device at a time (or in parallel).
        Without devices, outside a Group call, and with no warmup for what it runs now: where another
        container of the hosts file holds a cache made for exactly that, it is copied instead (.copied)."""
        from ..ops import cachecopy
        from ..ops import warmup as wm

        devices = checks.words("devices", devices)
        checks.flag("parallel", parallel)
        if devices or self.fleet._groups:
            return wm.result_of(self.id, wm.warmup(self._target, parallel=parallel,
                                                   devices=list(devices) if devices else None))
        return wm.result_of(self.id, cachecopy.warmup_or_copy(self._target, parallel=parallel))

    def copy_cache(self, src: int | str) -> CacheCopy:
        """Copy container src's compile cache into this one: only the files it lacks, sha256-verified;
        refused (WarmupError, naming each field) unless src's passport is what this container needs."""
        from ..ops import cachecopy
        from ..target import resolve

        source = resolve(self.fleet._session, src)
        return cachecopy.copy(source, self._target)

    def export_cache(self, path: str | os.PathLike) -> Path:
        """Write the container's compile cache folder to a local bundle (tar.gz)."""
        from ..ops import warmup as wm

        wm.export_cache(self._target, os.fspath(path))
        return Path(path)

    def import_cache(self, path: str | os.PathLike) -> ImportedCache:
        """Load a bundle made by export_cache into the container's cache (refused if versions differ);
        .refused: the members not imported, with why."""
        from ..ops import warmup as wm

        return wm.import_cache(self._target, os.fspath(path))

    # -- runs ----------------------------------------------------------------------------------------
    def train(self, *, detach: bool = True, force: bool = False, warmup: bool = False, command: str | None = None,
              env: Mapping[str, str] | None = None, args: Sequence[str] = (), resume: bool = False,
              fresh: bool = False) -> Run:
        """Preflight, then start the training job detached: the Run. detach=False: follow its log (to progress)
        until it ends, record a known-good where it meets the baseline. BusyError while a job runs there unless
        force; JobError where preflight fails (force trains a checkout the hosts file no longer pins). This run
        only: `command` instead of train.command, `env` on top of train.env, `args` appended (each quoted).
        With train.checkpoint: resume=True starts from the latest complete checkpoint (train.checkpoint.resume
        added), fresh=True moves the old ones aside first; neither, where a complete one exists: CheckpointRefused."""
        import shlex

        from ..config import unset
        from ..ops import jobs

        for name, value in (("detach", detach), ("force", force), ("warmup", warmup), ("resume", resume),
                            ("fresh", fresh)):
            checks.flag(name, value)
        if resume and fresh:
            raise ValueError("resume=True and fresh=True exclude each other: continue from the latest checkpoint, "
                             "or start over")
        extra = checks.words("args", list(args) if isinstance(args, tuple) else args) or []
        base = checks.text("command", command) if command is not None else self.spec.train.command
        if not base:
            raise unset(self.fleet.config.file, "train.command", "set the training command to run (or give command=)")
        run_command = f"{base} {shlex.join(extra)}" if extra else command
        run_env = checks.environment("env", env)
        run_id, _ = jobs.start(self._target, force=force, warmup=warmup, command=run_command, env=run_env,
                               resume=resume, fresh=fresh)
        if self.fleet.dry:
            return Run(self, run_id)
        run = Run(self, run_id)
        if not detach:
            try:
                final = jobs.show_log(self._target, run_id, follow=True)
            except KeyboardInterrupt:
                ref = f"-c {self._target.ctid} --run {run_id}"  # this run: typed as printed, not the default's
                self._target.note(f"stopped following; run {run_id} keeps running. `remote logs {ref} --follow` "
                                  f"resumes, `remote stop {ref}` ends it")
                raise
            from ..runs.knowngood import after_run

            after_run(self._target, final)
            run._state = jobs.run_status(final)
        return run

    def run(self, run_id: str | None = None) -> Run:
        """A run of this container by id (None or "latest": the latest). UnknownRun when it has no such run."""
        from ..ops import jobs

        st = jobs.run_status(jobs.state(self._target, run_id))
        if st.run is None:
            raise JobError(f"container {self.id} has no runs in {self.spec.train.run_dir}: start one with train()")
        r = Run(self, st.run)
        r._state = st
        return r

    def runs(self, limit: int = 20) -> list[RunSummary]:
        """The latest runs: id, start, state, exit status, throughput, command (newest first)."""
        from ..runs.listing import list_runs

        limit = checks.count("limit", limit)
        return list_runs(self._target, limit=limit)

    def log(self, run_id: str | None = None, *, follow: bool = False) -> str:
        """A run's log as text (run(run_id).text()); follow=True: stream_log(follow=True) first (before 0.3, log())."""
        run = self.run(run_id)
        _ = follow and self.stream_log(run.id, follow=True)  # the lines to progress until the job ends
        return run.text()

    def stream_log(self, run_id: str | None = None, *, follow: bool = False) -> RunStatus:
        """A run's log to the progress callback as `remote logs` shows it (follow: until the job ends); its end state."""
        from ..ops import jobs

        return jobs.run_status(jobs.show_log(self._target, run_id, follow=follow))

    def stop(self, run_id: str | None = None, *, grace: int = 10, nodes: bool = True, save: bool = False) -> Stopped:
        """Stop a run (None: every live run, and the latest's leftovers) and verify nothing of it is left;
        a multi-node run is stopped on its other nodes too (unless nodes=False). save=True (train.checkpoint):
        the job is asked to save (its signal, re-sent) or its next save awaited, at most train.checkpoint.grace
        seconds, then stopped as always; `Stopped.saved` says which checkpoint it left and the steps lost. A
        multi-node run's save is asked of every node's rank, the stop waits for the run's checkpoint (the
        master's, or every node's own), then stops every node: `Stopped.saves` (each node's), `resume_step`."""
        from ..ops.jobs import state
        from ..ops.jobs import stop as stop_job

        checks.flag("save", save)
        if save and nodes and not self.fleet.dry:  # a multi-node run: the save asked of every rank, one step for all
            st = state(self._target, run_id)
            members = [n for n in st.manifest.nodes or () if n in self.fleet.config.containers]
            if st.run and len(members) > 1 and self.id in members:
                from ..ops.nodeckpt import save_stop

                whole = save_stop(self._s, members, st.run, grace=int(grace))
                return dataclasses.replace(whole.nodes[self.id], saves={c: s.saved for c, s in whole.nodes.items()
                                                                        if s.saved is not None},
                                           resume_step=whole.step, resume_note=whole.note)
        got = stop_job(self._target, run_id, grace=int(grace), save=save)
        others = [n for n in got.nodes or () if n != self.id and n in self.fleet.config.containers]
        if others and nodes and not self.fleet.dry:
            from ..ops.multinode import stop_nodes

            for ctid, one in stop_nodes(self._s, others, got.run, grace=int(grace)).items():
                if isinstance(one, BaseException):
                    raise one
                assert isinstance(one, Stopped)
                self._target.output(f"node {ctid}: " + ("stopped" if one.was_alive else "was not running")
                                    + ", verified: no process of it is left")
        return got

    def move(self, node: str, *, force: bool = False) -> Moved:
        """Move this container to node `node` of its cluster with its run (Fleet.move): save-stop, check, migrate,
        resume there. The handle follows it: its next call runs on `node`."""
        got = self.fleet.move(self.id, node, force=force)  # type: ignore[attr-defined]
        self._made = None  # resolved again: the session's lookup has it on its new node
        return got

    def checkpoints(self) -> list[Checkpoint]:
        """Every checkpoint train.checkpoint.path matches, newest first, each complete or not (and why), its step
        where it tells it; then the watch's kept copy (kept=True). JobError without train.checkpoint."""
        from ..ops import checkpoints

        return checkpoints.listing(self._target)

    def known_good(self, run_id: str | None = None) -> KnownGood:
        """Record a finished run and the container's facts as its known-good (for doctor): the record."""
        from ..runs.knowngood import record_run

        return record_run(self._target, run_id)

    def known_good_path(self) -> str:
        from ..runs.knowngood import path_of

        return path_of(self.spec)

    def report(self, run_id: str | None = None, out: str | os.PathLike | None = None) -> Path:
        """Write one self-contained HTML file of a run (out None: ./report-<id>-<run>.html here): its path."""
        from ..runs.report import write

        return write(self._target, run_id, os.fspath(out) if out is not None else None)

    def pull_run(self, dest: str | os.PathLike, run_id: str | None = None, *,
                 on_bytes: bool = False) -> PulledRun:
        """A run's outputs, log, manifest and watch files into dest/<run id>/."""
        from ..ops.jobs import pull_run

        return pull_run(self._target, run_id, os.fspath(dest), progress=on_bytes)

    # -- Proxmox snapshots ---------------------------------------------------------------------------
    def snapshots(self) -> list[Snapshot]:
        """The container's Proxmox snapshots (`pct listsnapshot`), oldest first."""
        from ..ops import snapshots as snaps

        return snaps.list_snapshots(self._target)

    def rollback(self, snapshot: str | None = None, *, force: bool = False) -> RolledBack:
        """Roll the whole container back to a snapshot (default: the newest of remote's own), then start it
        again. BusyError while a run is live unless force; an unknown snapshot is a bad input (exit 2)."""
        from ..ops import snapshots as snaps

        return snaps.rollback(self._target, snapshot=snapshot, force=force)

    # -- GPU passthrough ----------------------------------------------------------------------------------
    def gpu_fix(self, *, dry: bool = False, force: bool = False) -> GpuFix:
        """Repair what doctor --gpu finds that the container's config or its host can fix (devN lines, the
        uvm nodes, the driver's user space), the config diff shown first, a snapshot where the storage can;
        restarts the container only where it must (BusyError while a run is live, unless force); then
        cuInit(0) again. Needs root on the host (RootRequired for a `sudo: true` login)."""
        from ..ops import gpufix

        checks.flag("dry", dry)
        checks.flag("force", force)
        return gpufix.gpu_fix(self._target, dry=dry, force=force)

    # -- health --------------------------------------------------------------------------------------
    def doctor(self, *, fresh: bool = False) -> list[Finding]:
        """What differs from what deploy made and from the last known-good run (empty: healthy). A container
        that cannot be probed raises (ContainerNotRunning, TransportError, ...)."""
        from .. import doctor as dr

        facts = dr.gather(self._target, fresh=fresh)
        return dr.findings(facts, self.spec, dr.pinned(self.spec))

