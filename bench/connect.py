"""Time to fail on a mute host: a TCP server that accepts and never speaks, against connect_timeout.

    python bench/connect.py [--timeouts 1,3,10] [--runs 3] [--before CHECKOUT]

For each connect_timeout: the library's SshTransport (one connect, then a second command on the same
transport, as a task's fallback path would), and whole `remote` commands (status, exec, push) through
the CLI, each against the same mute server. The goal: every one fails within connect_timeout + a few
seconds (before issue 16: 33 s for `exec` with the default 10 s). With --before, the same commands of
another checkout of remote (e.g. `git worktree add /tmp/before main`) run side by side. No sshd or lab needed.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from remote import config  # noqa: E402
from remote.errors import TransportError  # noqa: E402
from remote.transport import SshTransport  # noqa: E402


def mute_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held = []

    def serve():
        while True:
            try:
                held.append(srv.accept()[0])
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def library(port: int, timeout: float, keys: dict) -> float:
    host = config.Host(name="mute", address="127.0.0.1", port=port, connect_timeout=timeout, **keys)
    t = SshTransport(host)
    start = time.monotonic()
    for _ in range(2):
        try:
            t.run(["true"])
        except TransportError:
            pass
    return time.monotonic() - start


def cli(task: list[str], hosts: Path, tmp: Path, code: Path = ROOT) -> float:
    env = {**os.environ, "PYTHONPATH": str(code), "REMOTE_HOSTS_FILE": str(hosts), "HOME": str(tmp)}
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *task],
                       capture_output=True, text=True, env=env)
    took = time.monotonic() - start
    assert r.returncode == 1 and (code != ROOT or "no SSH greeting" in r.stdout + r.stderr), r.stdout + r.stderr
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeouts", default="1,3,10")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", type=Path, help="another checkout of remote: its CLI measured alongside")
    args = ap.parse_args()
    srv, port = mute_server()
    with tempfile.TemporaryDirectory(prefix="bench-connect-") as d:
        tmp = Path(d)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "id")], check=True)
        (tmp / "kh").write_text("")
        (tmp / "f").write_text("x")
        keys = {"key_file": str(tmp / "id"), "known_hosts": str(tmp / "kh")}
        print(f"{'connect_timeout':>15} {'what':<28} {'median s':>9} {'max s':>7} {'over timeout':>13}")
        for timeout in (float(x) for x in args.timeouts.split(",")):
            hosts = tmp / "hosts.yaml"
            hosts.write_text(f"hosts:\n  mute:\n    address: 127.0.0.1\n    port: {port}\n    key_file: {keys['key_file']}\n"
                             f"    known_hosts: {keys['known_hosts']}\n    connect_timeout: {timeout:g}\n"
                             "containers:\n  200:\n    host: mute\n")
            rows = {"library: 2 commands": lambda: library(port, timeout, keys)}
            tasks = {"status": ["status"], "exec -c 200": ["exec", "-c", "200", "--command", "true"],
                     "push -c 200": ["push", "-c", "200", "--src", str(tmp / "f"), "--dest", "/root/f"]}
            for name, task in tasks.items():
                rows[f"remote {name}"] = lambda task=task: cli(task, hosts, tmp)
                if args.before:
                    rows[f"  before: remote {name}"] = lambda task=task: cli(task, hosts, tmp, args.before)
            for what, measure in rows.items():
                times = [measure() for _ in range(args.runs)]
                print(f"{timeout:>15g} {what:<28} {statistics.median(times):>9.2f} {max(times):>7.2f} "
                      f"{max(times) - timeout:>+12.2f}s")
    srv.close()


if __name__ == "__main__":
    main()
