"""One-off commands, each a whole `remote` process, warm (a kept connection alive) and cold (none), beside
the same command by hand (`ssh host pct exec ID -- true`), measured side by side in one run; then what an
idle kept connection costs (CPU over a quiet spell, memory).

Run against a lab that is up, with a deployed container (`remote deploy -c ID` first), from the repository root:
    python bench/oneoff.py --hosts hosts.yaml --container 200 [--rounds 7] [--idle 20] [--exec-only]
(--exec-only: warm and cold `remote exec` beside the command by hand, no deploy needed; --breakdown: where
the cold one's time goes, part by part (whole processes, then the keeper's start in steps). --baseline DIR: a
cold `remote exec` of another checkout of remote (e.g. `git worktree add /tmp/base main`) in the same
rounds, with keepers of its own, so two trees compare side by side on a shared machine.) A cold command
runs its one command over OpenSSH's ssh and leaves its keeper starting behind it; each round waits for that
keeper before it times anything else (the command by hand, the next warm ones), so warm is always warm and
no keeper's start loads the machine under another timing.
Each round runs every command once, in turn, so load on the machine falls on all of them alike; medians
are printed. The processes run `python -c "from remote.cli import main; main()"` with this interpreter
(a pyenv or venv shim in front of `remote` adds its own start-up), with byte-code caching on (in a
temporary folder, not the checkout) and a runtime folder of their own, whose keepers are ended at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # this checkout's remote, the one its commands run, before any other (an editable install)

from remote.cli.format import deploy_text  # noqa: E402
from remote import config  # noqa: E402
from remote.target import resolve as target_of  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default=os.environ.get("REMOTE_HOSTS_FILE", "hosts.yaml"))
    ap.add_argument("--container", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--idle", type=float, default=20.0, help="seconds of a quiet keeper to measure its CPU")
    ap.add_argument("--exec-only", action="store_true", help="only warm and cold exec and the command by hand")
    ap.add_argument("--baseline", help="another checkout of remote whose cold exec runs in the same rounds")
    ap.add_argument("--breakdown", action="store_true", help="where a cold exec's time goes, part by part")
    ap.add_argument("--cpu", metavar="LAB_DIR", help="instead: the CPU time each way takes on the lab of LAB_DIR "
                    "(root, cgroup v1 cpuacct): robust where other work loads the machine (see _cpu_rounds)")
    args = ap.parse_args()
    cfg = config.load(args.hosts)
    h = cfg.container(args.container).host
    tmp = tempfile.mkdtemp(prefix="rt-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(XDG_RUNTIME_DIR=tmp, PYTHONPYCACHEPREFIX=os.path.join(tmp, "pycache"), PYTHONPATH=ROOT,
               REMOTE_HOSTS_FILE=os.path.abspath(args.hosts))
    remote = [sys.executable, "-c", "from remote.cli import main; main()"]
    ct = str(args.container)
    ssh = ["ssh", "-p", str(h.port), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"]
    if h.key_file:
        ssh += ["-i", h.key_file]
    if h.known_hosts:
        ssh += ["-o", f"UserKnownHostsFile={h.known_hosts}"]
    ssh += [f"{h.user}@{h.address}", *h.pct.split(), "exec", ct, "--", "true"]

    def timed(argv, expect: str | None = None) -> float:
        start = time.perf_counter()
        r = subprocess.run(argv, env=env, capture_output=True, text=True)
        took = time.perf_counter() - start
        if r.returncode != 0 or (expect and expect not in r.stdout):
            sys.exit(f"failed: {' '.join(argv[3:] if argv[0] == sys.executable else argv)}\n{r.stdout}{r.stderr}")
        return took

    def disconnect(e: dict = env) -> None:
        subprocess.run([*remote, "disconnect"], env=e, capture_output=True, check=True)

    base_env = None
    if args.baseline:
        base_tmp = os.path.join(tmp, "baseline")
        os.makedirs(base_tmp, mode=0o700)
        base_env = {**env, "XDG_RUNTIME_DIR": base_tmp, "PYTHONPYCACHEPREFIX": os.path.join(base_tmp, "pycache"),
                    "PYTHONPATH": os.path.abspath(args.baseline)}

    if args.cpu:
        try:
            _cpu_rounds(args, remote, ssh, env, base_env, disconnect)
        finally:
            disconnect()
            if base_env is not None:
                disconnect(base_env)
            shutil.rmtree(tmp, ignore_errors=True)
        return
    try:
        # `exec -c ID -- argv` where the CLI has it, else `--command`.
        probe = subprocess.run([*remote, "exec", "-c", ct, "--", "true"], env=env, capture_output=True)
        exec_argv = [*remote, "exec", "-c", ct, *(["--", "true"] if probe.returncode == 0 else ["--command", "true"])]
        timed([*remote, "status", "-c", ct] if args.exec_only else [*remote, "deploy", "-c", ct],
              None if args.exec_only else "nothing to do")  # warms the byte-code cache and the keeper
        _wait_keeper(ROOT, args.hosts, h.name, env)
        cases = {"warm exec": [], "warm status": [], "warm no-op deploy": [], "cold exec": [], "by hand": []}
        if args.exec_only:
            del cases["warm status"], cases["warm no-op deploy"]
        if base_env is not None:
            cases["cold exec, baseline"] = []
            probe_b = subprocess.run([*remote, "exec", "-c", ct, "--", "true"], env=base_env, capture_output=True)
            _wait_keeper(args.baseline, args.hosts, h.name, base_env)  # its byte-code cache warmed too
        for _ in range(args.rounds):
            cases["warm exec"].append(timed(exec_argv))
            if not args.exec_only:
                cases["warm status"].append(timed([*remote, "status", "-c", ct]))
                cases["warm no-op deploy"].append(timed([*remote, "deploy", "-c", ct], "nothing to do"))
            disconnect()
            cases["cold exec"].append(timed(exec_argv))
            # The keeper the cold command left starting behind it, before anything else is timed: its start
            # must not load the machine under the command by hand (nor under the next round's warm ones); it
            # starts the container's agent too.
            _wait_keeper(ROOT, args.hosts, h.name, env, agents=True)
            cases["by hand"].append(timed(ssh))
            if base_env is not None:
                disconnect(base_env)
                argv_b = [*remote, "exec", "-c", ct, *(["--", "true"] if probe_b.returncode == 0 else ["--command", "true"])]
                start = time.perf_counter()
                r = subprocess.run(argv_b, env=base_env, capture_output=True, text=True)
                cases["cold exec, baseline"].append(time.perf_counter() - start)
                if r.returncode != 0:
                    sys.exit(f"failed: the baseline's cold exec\n{r.stdout}{r.stderr}")
                _wait_keeper(args.baseline, args.hosts, h.name, base_env)
        med = {k: statistics.median(v) for k, v in cases.items()}
        goals = {"warm exec": 0.25, "warm status": 0.4, "warm no-op deploy": 0.5}
        print(f"one-off commands, container {ct} on {h.name}, medians of {args.rounds} rounds (s):")
        for k, v in med.items():
            goal = f"  (goal <= {goals[k]:g} s)" if k in goals else ""
            print(f"  {k:<18} {v:6.3f}  [{min(cases[k]):.3f} .. {max(cases[k]):.3f}]{goal}")
        print(f"  warm exec / by hand: {med['warm exec'] / med['by hand']:.2f}x  (goal <= 0.5x)")
        print(f"  cold exec / by hand: {med['cold exec'] / med['by hand']:.2f}x  (goal <= 1.5x)")
        if base_env is not None:
            print(f"  baseline ({args.baseline}) cold exec / by hand: {med['cold exec, baseline'] / med['by hand']:.2f}x; "
                  f"cold exec / baseline's: {med['cold exec'] / med['cold exec, baseline']:.2f}x")
        print(f"  `{' '.join(ssh)}`")
        if args.breakdown:
            _breakdown(args, remote, ssh, env, disconnect)
        if args.exec_only:
            return

        # What a cold no-op deploy pays, in this process (connection included), three ways: one plain
        # `pct exec` for the probe (deploy before the agents), the agent with no keeper (the mux's session
        # and the agent's start-up before the one probe), and through the warm keeper (the probe alone).
        ways = {"plain pct exec, new connection": dict(agent=False), "agent, new connection": dict(agent=True),
                "agent in the warm keeper": dict(agent=True, keep=True)}
        times: dict[str, list[float]] = {k: [] for k in ways}
        timed([*remote, "deploy", "-c", ct], "nothing to do")
        for _ in range(args.rounds):
            for k, kw in ways.items():
                times[k].append(_noop_deploy(args.hosts, args.container, kw, env))
        print("no-op deploy in one process, connecting included (medians, s):")
        for k, v in times.items():
            print(f"  {k:<32} {statistics.median(v):6.3f}")

        # An idle keeper: CPU over a quiet spell (its heartbeats and the agents' pings), and memory.
        timed(exec_argv)
        info = json.loads(subprocess.run(
            [sys.executable, "-c", IDLE_INFO, ROOT, os.path.abspath(args.hosts), h.name], env=env,
            capture_output=True, text=True, check=True).stdout)
        pid = info["pid"]
        before = _cpu_seconds(pid)
        time.sleep(args.idle)
        cpu = (_cpu_seconds(pid) - before) / args.idle
        rss, pss = _memory_kb(pid)
        print(f"idle keeper (pid {pid}, agents {info['agents']}): {100 * cpu:.3f}% of a core over {args.idle:g}s "
              f"(goal < 0.1%), RSS {rss / 1024:.1f} MB, PSS {pss / 1024:.1f} MB (goal < 30 MB)")
    finally:
        disconnect()
        if base_env is not None:
            disconnect(base_env)
        shutil.rmtree(tmp, ignore_errors=True)


IDLE_INFO = """
import json, sys
sys.path.insert(0, sys.argv[1])
from remote import config
from remote.transport.keeper import KeptTransport
print(json.dumps(KeptTransport(config.load(sys.argv[2]).hosts[sys.argv[3]], sys.argv[2]).info()))
"""


WAIT_KEEPER = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from remote import config
from remote.transport.keeper import KeptTransport
kept = KeptTransport(config.load(sys.argv[2]).hosts[sys.argv[3]], sys.argv[2])
end = time.monotonic() + float(sys.argv[4])
agents = sys.argv[5] == "1"  # and the agent it starts behind a cold exec, so that nothing of it runs on under a timing
def ready():
    info = kept.info()
    return info is not None and (not agents or bool(info.get("agents")))
while not ready():
    if time.monotonic() > end:
        there = sorted(os.listdir(kept.path.parent)) if kept.path.parent.is_dir() else []
        sys.exit(f"no kept connection for {sys.argv[3]} within {sys.argv[4]}s: no keeper answers at {kept.path} "
                 f"(in that folder: {', '.join(there) or 'nothing'})")
    time.sleep(0.05)
"""


def _wait_keeper(tree: str, hosts: str, name: str, env: dict, timeout: float = 60.0, agents: bool = False) -> None:
    """Wait for the keeper of host `name` that `tree`'s commands (run with `env`) leave. Asked in a child of
    that checkout's own code: a keeper's socket is named by its tree's rule (hosts file, entry, version), which
    need not be the rule of the remote this process imported."""
    r = subprocess.run([sys.executable, "-c", WAIT_KEEPER, os.path.abspath(tree), os.path.abspath(hosts), name,
                        str(timeout), "1" if agents else "0"], env={**env, "PYTHONPATH": os.path.abspath(tree)},
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr.strip() or f"waiting for {name}'s kept connection failed ({r.returncode})")


def _noop_deploy(hosts: str, ctid: int, session_kwargs: dict, env: dict) -> float:
    from remote.ops.deploy import deploy
    from remote.transport.session import Session

    saved = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = env["XDG_RUNTIME_DIR"]  # the bench's keepers, not the user's
    try:
        start = time.perf_counter()
        with Session(config.load(hosts), **session_kwargs) as s:
            summary = deploy(target_of(s, ctid))
        took = time.perf_counter() - start
    finally:
        if saved is None:
            os.environ.pop("XDG_RUNTIME_DIR")
        else:
            os.environ["XDG_RUNTIME_DIR"] = saved
    if not summary.noop:
        sys.exit(f"deploy {ctid} was not a no-op:\n{deploy_text(summary)}")
    return took


# The keeper's cold start, part by part, in one process that does what a cold `remote exec` and its keeper do
# one after the other: import the keeper's client, start the keeper (a new Python, paramiko, the SSH handshake),
# then the first container command (the mux's session with the login shell's rc files, the agent's `pct exec`
# and start-up, the command), then a second (one round trip to that agent). Times in seconds, as JSON.
PARTS = """
import json, os, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from remote import config
from remote.transport.keeper import KeptTransport
from remote.transport.session import Session
t1 = time.perf_counter()
cfg = config.load(sys.argv[2])
spec = cfg.container(int(sys.argv[3]))
KeptTransport(spec.host, sys.argv[2])._start()
t2 = time.perf_counter()
with Session(cfg, agent=True, keep=True) as s:
    ct = s.container(spec.ctid)
    ct.run(["true"], timeout=60)
    t3 = time.perf_counter()
    ct.run(["true"], timeout=60)
    t4 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "keeper ready": t2 - t1, "first command": t3 - t2, "second command": t4 - t3}))
"""

# The SSH side in this process's Python: paramiko's import, a connection (handshake, key auth) with its first
# command, a second command on it (a session: the login shell), and `pct exec ID -- true` on it.
DIRECT = """
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
import paramiko  # noqa: F401
t1 = time.perf_counter()
from remote import config
from remote.transport.ssh import SshTransport
spec = config.load(sys.argv[2]).container(int(sys.argv[3]))
t = SshTransport(spec.host)
t2 = time.perf_counter()
t.run(["true"], deadline=60)
t3 = time.perf_counter()
t.run(["true"], deadline=60)
t4 = time.perf_counter()
t.run([*spec.host.pct.split(), "exec", str(spec.ctid), "--", "true"], deadline=60)
t5 = time.perf_counter()
t.close()
print(json.dumps({"import paramiko": t1 - t0, "connect + first command": t3 - t2, "second command (login shell)":
                  t4 - t3, "pct exec ID -- true": t5 - t4}))
"""


def _breakdown(args, remote: list, ssh: list, env: dict, disconnect) -> None:
    """Where a cold `remote exec` spends its time: whole processes (Python's start, the CLI's, OpenSSH by hand
    with and without pct) and the keeper's start part by part (PARTS, DIRECT), medians of the rounds."""
    ct = str(args.container)
    hosts = os.path.abspath(args.hosts)
    py = [sys.executable, "-c"]
    login = ssh[:next(i for i, a in enumerate(ssh) if "@" in a) + 1]  # `ssh ... user@host`, no command yet
    whole = {"python -c pass": py + ["pass"], "python -c 'import paramiko'": py + ["import paramiko"],
             "remote --version": [*remote, "--version"], "ssh host true (by hand)": [*login, "true"],
             "ssh host pct exec ID -- true": ssh,
             # what the cold exec's guard (remote/sh/linkguard.py) adds in the container: the system python3's start
             "ssh host pct exec ID -- python3 -I -S -c pass": [*ssh[:-1], "python3", "-I", "-S", "-c", "pass"]}
    direct = _direct_argv(args.hosts, args.container)
    if direct:  # the cold exec's own command: ssh with remote's options, the guard and jobexec.sh in the container
        whole["ssh (remote's options) pct exec ID -- guard jobexec.sh true"] = direct
    times: dict[str, list[float]] = {k: [] for k in whole}
    parts: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for k, argv in whole.items():
            start = time.perf_counter()
            if argv is direct:
                proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
                assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # PIPE
                proc.stdin.write(b"0\n")  # the guard's header; its stdin stays open: the link is there
                proc.stdin.flush()
                proc.stdout.read()
                err = proc.stderr.read()
                code = proc.wait()
                proc.stdin.close()
            else:
                r = subprocess.run(argv, env=env, capture_output=True)
                code, err = r.returncode, r.stderr
            if code != 0:
                sys.exit(f"breakdown failed: {k}\n{err.decode(errors='replace')}")
            times[k].append(time.perf_counter() - start)
        for script in (PARTS, DIRECT):
            disconnect()
            r = subprocess.run([*py, script, ROOT, hosts, ct], env=env, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"breakdown failed:\n{r.stderr}")
            for k, v in json.loads(r.stdout).items():
                parts.setdefault(k, []).append(v)
    print(f"where a cold exec's time goes, medians of {args.rounds} rounds (s):")
    for k, v in {**times, **parts}.items():
        print(f"  {k:<34} {statistics.median(v):6.3f}  [{min(v):.3f} .. {max(v):.3f}]")


CPUACCT = "/sys/fs/cgroup/cpuacct"


def _usage(group: str) -> float:
    with open(f"{CPUACCT}/{group}/cpuacct.usage") as f:
        return int(f.read()) / 1e9


def _keeper_up(rundir: str) -> bool:
    """A keeper serves a socket of this runtime folder and has an agent up (the keeper's info request, spoken
    here: a kind byte, a 4-byte length, JSON), asked without a Python of its own (its CPU would be counted)."""
    import glob
    import socket
    import struct

    for path in glob.glob(os.path.join(rundir, "remote", "*.sock")):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        try:
            s.connect(path)
            req = json.dumps({"op": "info"}).encode()
            s.sendall(b"q" + struct.pack(">I", len(req)) + req)
            data = b""
            while True:
                while len(data) < 5:
                    chunk = s.recv(65536)
                    if not chunk:
                        return False
                    data += chunk
                kind, n = data[:1], struct.unpack(">I", data[1:5])[0]
                while len(data) < 5 + n:
                    chunk = s.recv(65536)
                    if not chunk:
                        return False
                    data += chunk
                payload, data = data[5:5 + n], data[5 + n:]
                if kind == b"x":
                    return bool(json.loads(payload).get("agents"))
        except (OSError, ValueError):
            pass
        finally:
            s.close()
    return False


def _cpu_rounds(args, remote: list, ssh: list, env: dict, base_env: dict | None, disconnect) -> None:
    """The CPU time (user + system, every process of it) each way of running `true` in the container takes, in
    cgroups: this process and what it starts (remote, ssh, a keeper) in one, the lab's sshd with its sessions (the
    login shell, pct, lxc-attach) in another, and the container's own (what lxc-attach runs there: the guard, an
    agent, `true`). Where other work loads the machine, wall times stretch with the load and with each other's
    luck; the CPU a way spends does not (on an idle machine a one-off command's wall time is about its CPU time:
    its steps run one after another). A cold exec's keeper starts once the command has ended: its CPU is given
    apart ("keeper behind"), and waited for before anything else is measured."""
    ct = str(args.container)
    made = []
    with open(os.path.join(args.cpu, "sshd.pid")) as f:
        sshd = int(f.read())
    for name, pid in (("remote-bench-client", os.getpid()), ("remote-bench-sshd", sshd)):
        os.makedirs(f"{CPUACCT}/{name}", exist_ok=True)
        made.append(name)
        with open(f"{CPUACCT}/{name}/cgroup.procs", "w") as f:
            f.write(str(pid))
    container = f"lxc.payload.{ct}"
    groups = ("remote-bench-client", "remote-bench-sshd", container)

    def measured(argv, e=env, then=None) -> float:
        before = sum(_usage(g) for g in groups)
        r = subprocess.run(argv, env=e, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"failed: {' '.join(argv)}\n{r.stdout}{r.stderr}")
        if then:
            then()
        return sum(_usage(g) for g in groups) - before

    def keeper(e: dict) -> None:
        end = time.monotonic() + 120
        while not _keeper_up(e["XDG_RUNTIME_DIR"]):
            if time.monotonic() > end:
                sys.exit("no keeper came up behind the cold exec")
            time.sleep(0.02)

    exec_argv = [*remote, "exec", "-c", ct, "--", "true"]
    try:
        subprocess.run(exec_argv, env=env, capture_output=True, check=True)  # byte-code caches, the hosts file's
        keeper(env)
        if base_env is not None:
            subprocess.run(exec_argv, env=base_env, capture_output=True, check=True)
        cases: dict[str, list[float]] = {"warm exec": [], "cold exec": [], "keeper behind": [], "by hand": []}
        if base_env is not None:
            cases["cold exec, baseline"] = []
        for _ in range(args.rounds):
            cases["warm exec"].append(measured(exec_argv))
            disconnect()
            cases["cold exec"].append(measured(exec_argv))
            start = sum(_usage(g) for g in groups)
            keeper(env)
            cases["keeper behind"].append(sum(_usage(g) for g in groups) - start)
            cases["by hand"].append(measured(ssh))
            if base_env is not None:
                disconnect(base_env)
                cases["cold exec, baseline"].append(measured(exec_argv, base_env))
        med = {k: statistics.median(v) for k, v in cases.items()}
        print(f"CPU time of each way (s; user + system of every process of it), container {ct}, medians of "
              f"{args.rounds} rounds:")
        for k, v in med.items():
            print(f"  {k:<20} {v:6.3f}  [{min(cases[k]):.3f} .. {max(cases[k]):.3f}]")
        print(f"  cold exec / by hand: {med['cold exec'] / med['by hand']:.2f}x  (goal <= 1.5x); with the keeper "
              f"behind it: {(med['cold exec'] + med['keeper behind']) / med['by hand']:.2f}x")
        print(f"  warm exec / by hand: {med['warm exec'] / med['by hand']:.2f}x")
        if base_env is not None:
            print(f"  baseline cold exec / by hand: {med['cold exec, baseline'] / med['by hand']:.2f}x")
    finally:
        for name in made:  # everything back where it was, the groups removed
            with open(f"{CPUACCT}/{name}/cgroup.procs") as f:
                pids = f.read().split()
            for pid in pids:
                try:
                    with open(f"{CPUACCT}/cgroup.procs", "w") as f:
                        f.write(pid)
                except OSError:
                    pass
            try:
                os.rmdir(f"{CPUACCT}/{name}")
            except OSError as exc:
                print(f"note: {CPUACCT}/{name} left: {exc}", file=sys.stderr)


def _direct_argv(hosts: str, ctid: int) -> list[str] | None:
    """The ssh command line a cold `remote exec -c ctid -- true` runs (remote.transport.direct), as this checkout
    builds it; None where it would not go over ssh."""
    from remote import shell
    from remote.ops import jobenv
    from remote.transport import direct
    from remote.transport.pct import exec_argv, exec_env

    spec = config.load(hosts).container(ctid)
    plan = direct.plan(spec.host)
    if plan is None:
        return None
    env = jobenv.tool_env_at(spec, f"{spec.warmup.cache_dir}/{jobenv.CACHE_MARK}")
    env["REMOTE_JOB_VARS"] = " ".join(env)
    inner = ["bash", "-c", shell.load("jobexec"), "jobexec", spec.venv.path, spec.code.path,
             "1" if spec.code.repo else "0", jobenv.CACHE_MARK, "true"]
    full = exec_argv(spec.host.pct, ctid, direct.guarded(inner), env=exec_env(env), cwd="/root")
    import shlex

    return [*plan.argv, shlex.join(full)]


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _memory_kb(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        values = {line.split(":")[0]: int(line.split()[1]) for line in f if line.split()[-1:] == ["kB"]}
    return values["Rss"], values["Pss"]


if __name__ == "__main__":
    main()
