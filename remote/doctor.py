"""`doctor`: every way a container differs from what deploy made and from its last known-good run.

One facts probe per container (remote.facts), then a pure `findings(facts, spec)`: each finding says
what it is, since when (against the known-good record, remote.runs.knowngood), why it matters and the
command that fixes it. Severity `error` and `warning` make a container unhealthy (exit status 1);
`info` is shown but is not a problem (an untracked file deploy leaves alone, no known-good yet).
"""

from __future__ import annotations

import re

from .config import ContainerSpec
from .errors import RemoteError
from .facts import Facts, gather, gpu_problem
from .facts.deployed import Deployed
from .naming import known_good_label, passport_line, printable  # noqa: F401 -- also this module's names
from .ops import code as codemod
from .ops import compilelog, layout
from .ops import passport as pp
from .ops import venv as venvmod
from .ops import warmup as wm
from .results import Diagnosis, Finding
from .target import resolve
from .transport.session import Session

DISK_MIN_FREE = 5 * 2**30  # below this, a venv build or a cache write can fail half-way
CLOCK_SKEW_MAX_S = 5.0


def _since(kg: dict | None, then, now, *, absent_then="not in") -> str | None:
    """How `now` compares with the known-good's `then`: changed since, or already so then."""
    if not kg:
        return None
    label = known_good_label(kg)
    if then == now:
        return f"already so in {label}"
    if then is None:
        return f"{absent_then} {label}"
    return f"changed since {label}: it had {then}"


def _cuda_tuple(v: str | None) -> tuple[int, ...] | None:
    if not v or not re.fullmatch(r"\d+(\.\d+)*", v):
        return None
    return tuple(int(x) for x in v.split(".")[:2])


def pinned(spec: ContainerSpec) -> codemod.Pin | str | None:
    """What the hosts file pins (code.ref of code.repo, resolved here as deploy resolves it), for findings'
    `pin`: a str says why it cannot be read; None without code.repo."""
    return codemod.pin_of(spec.code.repo, spec.code.ref)


def findings(facts: Facts, spec: ContainerSpec, pin: codemod.Pin | str | None = None) -> list[Finding]:
    """Every finding about one container. Pure: facts and spec in, findings out (tested as data). `pin`:
    `pinned(spec)`, for `checkout-stale` (a deployed commit that is not what the hosts file pins now)."""
    kg = facts.known_good
    out: list[Finding] = []
    add = out.append
    v, t, g, c, co, j = facts.venv, facts.torch, facts.gpus, facts.cache, facts.checkout, facts.jobs
    kg_pkgs = (kg or {}).get("packages")  # None: the known-good's venv was gone when it was recorded

    def pkg_since(name: str, now: str | None) -> str | None:
        return _since(kg, kg_pkgs.get(name), now) if kg_pkgs is not None else None

    # The venv against its lock.
    if not v.exists:
        add(Finding("venv-missing", "error", f"no venv at {v.path}", None,
                    "nothing can run without the pinned venv", "remote deploy"))
    elif not v.ours:
        add(Finding("venv-unmanaged", "error", f"{v.path} was not built by remote (no remote-venv.json)", None,
                    "its packages are whatever was installed by hand: nobody knows what runs", "remote deploy"))
    elif not v.runs:
        add(Finding("venv-broken", "error", f"the venv's interpreter does not run: {v.error}", None,
                    "no training or warmup can start", "remote deploy"))
    for name, p in sorted(v.added.items()):
        origin = f", from {p.origin}" if p.origin else ""
        add(Finding("package-added", "error", f"{name} {p.version} added (not in the lock; installed by "
                    f"{p.installer or 'an unknown installer'}{origin})", pkg_since(name, p.version),
                    "a package the lock does not know can replace or patch what training imports (the story's "
                    "SGLang and flashinfer pulled other torch builds)", "remote deploy"))
    for name, locked in sorted(v.removed.items()):
        add(Finding("package-removed", "error", f"{name} {locked} removed (the lock has it)",
                    pkg_since(name, None), "an import of it fails, or falls back to something else",
                    "remote deploy"))
    for name, (locked, p) in sorted(v.changed.items()):
        a, b = locked.partition("+")[2], p.version.partition("+")[2]
        how = f"; another build ({a or 'none'} → {b or 'none'}): from another index" if a != b else ""
        origin = f"; from {p.origin}" if p.origin else ""
        add(Finding("package-changed", "error", f"{name} {locked} → {p.version} (installed by "
                    f"{p.installer or 'an unknown installer'}{how}{origin})",
                    pkg_since(name, p.version),
                    "the lock's version is the one that was verified and warmed; another build compiles other kernels "
                    "(a cold cache) or does not match the driver", "remote deploy"))

    # torch, its CUDA build, the driver and the GPUs.
    if v.exists and v.runs and t.error and any(venvmod.normalize(p.split("==")[0]) == "torch"
                                               for p in spec.venv.packages):
        add(Finding("torch-import", "error", f"import torch fails: {t.error}", None,
                    "training cannot start", "remote deploy"))
    expected = venvmod.expected_cuda(spec.venv)
    if t.version and expected:
        want, why = expected
        got = t.cuda_build
        ok = (want == "cpu" and not got) or (want != "cpu" and _cuda_tuple(got) == _cuda_tuple(want))
        if not ok:
            add(Finding("torch-cuda-build", "error", f"torch {t.version} is built for CUDA {got or 'none (CPU)'}, "
                        f"{why} wants {want}", _since(kg, (kg or {}).get("cuda_build"), got),
                        "a CUDA build the driver does not support fails at the first kernel, or runs another "
                        "kernel set", "remote deploy"))
    built, supported = _cuda_tuple(t.cuda_build), _cuda_tuple(g.cuda_driver)
    if built and supported and built > supported:
        add(Finding("driver-too-old", "error", f"torch is built for CUDA {t.cuda_build} but driver {g.driver} "
                    f"supports CUDA up to {g.cuda_driver}", _since(kg, (kg or {}).get("driver"), g.driver),
                    "torch.cuda.is_available() is False or the first kernel fails",
                    "pin a torch build for this driver (venv.packages, e.g. +cu128), then remote deploy"))
    if g.error:
        add(Finding("nvidia-smi", "error", g.error, None, "the GPUs cannot be checked",
                    "check the container's GPU passthrough and the host driver"))
    if kg and g.driver and kg.get("driver") and kg["driver"] != g.driver:
        add(Finding("driver-changed", "warning", f"driver {kg['driver']} → {g.driver}",
                    f"changed since {known_good_label(kg)}", "a new driver can change kernels' speed or support",
                    None))
    if kg and spec.cluster and kg.get("node") and kg["node"] != spec.host.node_name:  # moved within the cluster
        add(Finding("node-changed", "warning", f"container {facts.ctid} is on node {spec.host.node_name}, not "
                    f"{printable(str(kg['node']))[:64]}", f"changed since {known_good_label(kg)}",
                    "another node can have another GPU, driver or device majors",
                    f"remote doctor --gpu -c {facts.ctid}"))
    gp = facts.gpu
    if kg and gp is not None:  # the host's module and the container's driver libraries (remote.facts.gpu)
        then, now = kg.get("host_module"), gp.proc_version
        if then and now and then != now:
            add(Finding("host-module-changed", "warning", f"the host's NVIDIA module {then} → {now}",
                        f"changed since {known_good_label(kg)}", "a new kernel module changes what every GPU job "
                        "runs on, and the container's libraries must match it", f"remote doctor --gpu -c {facts.ctid}"))
        then_libs, now_libs = kg.get("driver_libs"), gp.lib_versions
        if then_libs is not None and then_libs != now_libs:
            def show(libs):
                return ", ".join(f"{k} {v}" for k, v in sorted(libs.items())) or "none"
            add(Finding("driver-libs-changed", "warning", f"the container's driver libraries: {show(now_libs)}",
                        f"changed since {known_good_label(kg)}: it had {show(then_libs)}",
                        "libraries of another version than the host's module fail (NVML: Driver/library version "
                        "mismatch) or run other code", f"remote doctor --gpu -c {facts.ctid}"))
    if g.smi and not g.error:
        from .ops.jobenv import user_env

        problem = gpu_problem(t, g, user_env(spec))
        if problem:
            add(Finding("gpus-unseen", "error", problem[0], None,
                        "a job asking for a device torch does not see fails, or runs on the CPU", problem[1]))
        kg_names = (kg or {}).get("gpu_names")
        if kg and kg_names is not None and list(kg_names) != list(g.names):
            add(Finding("gpus-changed", "warning", f"GPUs {', '.join(g.names) or 'none'}",
                        f"changed since {known_good_label(kg)}: it had {', '.join(kg_names) or 'none'}",
                        "other GPUs give another throughput and another compile cache", None))
        marked = set(j.marked)
        foreign = [p for p in g.processes if p["pid"] not in marked]
        if foreign:
            add(Finding("gpu-foreign-processes", "warning", "GPU processes of no run: " + ", ".join(
                f"{p['pid']} {p['name']} ({p['used_mib']} MiB)" + (f": {p['command']}" if p.get("command") else "")
                for p in foreign), None,
                "they hold GPU memory and compute a run expects to have (in an LXC container nvidia-smi may "
                "show the host's pids)", "end them (`remote exec -c N 'kill PID'`) or find who started them"))

    # The compile cache.
    if v.ours and t.version:
        kg_cache = ((kg or {}).get("cache") or {}).get("fingerprint")
        if not c.present:
            add(Finding("cache-missing", "error", f"compile cache {c.folder} is missing or empty (deleted, or never warmed)",
                        f"gone since {known_good_label(kg)}, which ran with it" if kg and kg_cache == c.fingerprint
                        else _since(kg, kg_cache, None),
                        "a cold cache makes every thread compile at once: the race that hangs or crashes the story's "
                        "training, and minutes of compiling", "remote warmup"))
        elif spec.warmup.command and co.record:
            missing = wm.missing_in(list(c.warmups), spec, deployed_of(facts))
            if missing:
                add(Finding("cache-cold", "error", "no warmup for this commit, lock, command and environment: "
                            + "; ".join(missing), None,
                            "the first steps would compile from threads at once (the race); train's preflight "
                            "refuses", "remote warmup"))
        if c.present and spec.warmup.command and co.record:
            out.extend(cache_findings(facts, spec))
        if kg and kg_cache and kg_cache != c.fingerprint:
            add(Finding("cache-versions-changed", "warning", f"compile cache for {c.fingerprint}",
                        f"changed since {known_good_label(kg)}: it used {kg_cache}",
                        "another torch/CUDA/triton set means a cold cache and other kernels", "remote deploy"))
    if c.tmp_artifacts:
        add(Finding("tmp-compile-artifacts", "warning", "compile artifacts in torch's defaults: " + ", ".join(
            f"{p} ({a.get('files', 0)} files)" for p, a in sorted(c.tmp_artifacts.items())), None,
            "something compiled outside the tools' persistent cache; /tmp is cleaned, which is how the story's cache "
            "vanished", "run it through `remote exec`/`remote train` (they set the cache); then remove these"))

    # The checkout.
    if not co.exists or not co.git:
        add(Finding("checkout-missing", "error", f"no git checkout at {co.path}", None, "nothing to run",
                    "remote deploy"))
    elif co.git_error:
        add(Finding("checkout-git", "error", f"git fails in {co.path}: {co.git_error}", None,
                    "the checkout's commit and edits cannot be known", "fix what git says (e.g. `git config "
                    "--global --add safe.directory <path>` for dubious ownership), or remote deploy"))
    else:
        if isinstance(pin, str):
            add(Finding("checkout-unpinned", "info", f"the checkout was not compared with the hosts file's "
                        f"code.ref: {pin}", None, "a deployed commit that is not the pinned one goes unnoticed",
                        None))
        if co.deployed and co.head != co.deployed:
            add(Finding("checkout-moved", "error", f"checkout at {(co.head or 'nothing')[:12]}, deployed "
                        f"{co.deployed[:12]}", _since(kg, (kg or {}).get("commit"), co.head),
                        "the code that runs is not the code that was deployed and warmed", "remote deploy"))
        elif isinstance(pin, codemod.Pin) and codemod.stale(pin, co.record):
            add(Finding("checkout-stale", "warning", str(codemod.stale(pin, co.record)), None,
                        "a run trains the deployed commit, not the one the hosts file names; train's preflight "
                        "refuses it", "remote deploy"))
        elif kg and kg.get("commit") and co.head and kg["commit"] != co.head:
            add(Finding("commit-changed", "info", f"commit {co.head[:12]}",
                        f"changed since {known_good_label(kg)}: it ran {kg['commit'][:12]}",
                        "a new commit may be why throughput differs", None))
        if co.edited:
            add(Finding("checkout-edited", "error", f"edited file(s) in {co.path}: {', '.join(co.edited[:8])}"
                        + (f" and {len(co.edited) - 8} more" if len(co.edited) > 8 else ""),
                        f"not in {known_good_label(kg)} (it ran a clean checkout)" if kg else None,
                        "hacks patched into the code run instead of the commit (the story's model-code patches)",
                        "remote deploy (saves the edits as a patch first)"))
        if co.untracked:
            add(Finding("checkout-untracked", "info", f"untracked file(s) in {co.path}: {', '.join(co.untracked[:8])}"
                        + (f" and {len(co.untracked) - 8} more" if len(co.untracked) > 8 else ""), None,
                        "deploy leaves them where they are; code that imports one runs something git does not know",
                        None))

    # Jobs: every live run counts, not only the latest.
    if len(j.live) > 1:
        add(Finding("runs-concurrent", "warning", f"{len(j.live)} runs are live at once: {', '.join(j.live)}", None,
                    "they share the GPUs, the checkout and the venv; a deploy is refused until they end",
                    f"remote stop -c {facts.ctid} --run RUN (or `remote stop -c {facts.ctid}`: every live run)"))
    for rid, pids in sorted(j.orphans.items()):
        add(Finding("orphan-processes", "error", f"processes of run {rid}, which is not running: "
                    f"{' '.join(map(str, pids))}", None, "they hold GPUs and memory that a new run needs",
                    f"remote stop -c {facts.ctid} --run {rid}"))
    if j.lost:
        add(Finding("run-lost", "warning", f"run {j.current} ended without an exit record", None,
                    "the container restarted or its wrapper was killed: its result is unknown",
                    f"remote logs -c {facts.ctid} --run {j.current}"))

    # Where the venv, the cache and the runs live.
    for d in facts.disk:
        if d.free is not None and d.free < DISK_MIN_FREE:
            add(Finding("disk-low", "warning", f"{d.free / 2**30:.1f} GiB free where {d.path} lives", None,
                        "a venv build, a cache write or a checkpoint fails half-way on a full disk",
                        "free space there"))
    if abs(facts.clock_skew_s) > CLOCK_SKEW_MAX_S:
        add(Finding("clock-skew", "warning", f"the container's clock is {facts.clock_skew_s:+.1f}s off the "
                    "controller's", None, "run ids, uptimes and lease expiry are read from clocks",
                    "enable NTP on the host (the container uses the host's clock)"))

    # The compile-race layout of the training command (train's preflight warns the same).
    for note in layout.compile_layout_notes(layout.devices_from_command(spec.train.command), t.version):
        add(Finding("compile-layout", "warning", note, None, "threads that compile on one device race",
                    "see docs/internals/compile-race.md"))

    # The latest run's compile health (the compile watch's compile.jsonl, remote/ops/compilelog.py).
    out.extend(compilelog.findings(compilelog.from_probe(j.compile), j.current))

    if not kg:
        add(Finding("no-known-good", "info", "no known-good run recorded", None,
                    "findings cannot say what changed since the last good run",
                    f"remote known-good -c {facts.ctid} --run ID (recorded by itself when a run meets the baseline)"))
    return out


HASH_DETAILS = "TORCH_LOGS=+torch._inductor.codecache"  # torch logs each FX graph's hash details at debug level


def deployed_of(facts: Facts) -> Deployed:
    """The deploy records the probe read, as warmup and train read them (one parse: remote/facts/deployed.py)."""
    return Deployed.of(facts.checkout.record, facts.venv.record)


def cache_findings(facts: Facts, spec: ContainerSpec) -> list[Finding]:
    """The compile cache's passport (info), and `cache-missed`: the latest run compiled although the cache
    was warmed (or copied) for this commit, lock, command and environment. Pure."""
    c, j = facts.cache, facts.jobs
    state = deployed_of(facts)
    want = wm.expected_passport(spec, state)
    out = []
    if c.passport:
        out.append(Finding("cache-passport", "info", f"compile cache {c.fingerprint} made for "
                           + passport_line(c.passport), None,
                           "what its entries serve: a copy or an import is refused where a field differs", None))
    st = j.cache_stats or {}
    missed = st.get("fxgraph_miss", 0) + st.get("autograd_miss", 0)
    warmed = not wm.missing_in(list(c.warmups), spec, state)
    if missed and warmed:
        seeded = [r.get("copied_from") for r in c.warmups if r.get("copied_from") is not None]
        fields = pp.differences(c.passport, want) if c.passport else []
        why = ("its passport differs from what this run needs: " + pp.describe(c.passport, want, fields)
               if fields else
               "no passport field differs: torch's cache key differed for a reason it does not record (code that "
               "builds a different graph each run, other input shapes or dtypes, a config set in the code)")
        out.append(Finding(
            "cache-missed", "warning",
            f"run {j.current} compiled on a {'seeded (copied from ' + str(seeded[-1]) + ')' if seeded else 'warmed'} "
            f"cache: {st.get('fxgraph_miss', 0)} FX-graph and {st.get('autograd_miss', 0)} AOTAutograd miss(es), "
            f"{st.get('fxgraph_hit', 0) + st.get('autograd_hit', 0)} hit(s) in {st.get('processes', 0)} process(es)",
            None, why + "; a miss compiles (minutes on a GPU) and reopens the compile race",
            f"see the key's parts: `remote exec -c {facts.ctid} -- env {HASH_DETAILS} "
            f"<the warmup command>` and the same for the train command, then compare their `FX graph cache hash "
            f"details` lines"))
    return out


def diagnose(session: Session, ctids: list[int], *, fresh: bool = False) -> list[Diagnosis]:
    """One diagnosis per container, all containers at once (bounded per host); a container that cannot be
    probed is a diagnosis with its error. `fresh`: ask torch again rather than use a kept answer."""
    from . import executor

    for ctid in ctids:  # each host's transport made here, in one thread: threads would each make their own
        session.container(ctid, venv_on_path=False)

    def one(ctid: int) -> Diagnosis:
        t = resolve(session, ctid)
        spec = t.spec
        try:
            facts = gather(t, fresh=fresh)
        except RemoteError as exc:
            return Diagnosis(spec.ctid, spec.host.name, (), str(exc))
        return Diagnosis(spec.ctid, spec.host.name, tuple(findings(facts, spec, pinned(spec))), None, facts)

    return executor.values(session.config, ctids, one)



def healthy(found: list[Finding]) -> bool:
    """No finding that makes a container unhealthy (Finding.healthy: info notes leave it healthy)."""
    return all(f.healthy for f in found)
