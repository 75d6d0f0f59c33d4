"""What `sudo: true` and a snapshot before deploy cost, measured side by side on a lab of its own.

As root, on a machine with sudo, under the lab lock, from the repository root:
    flock /tmp/remote-lab.lock python bench/sudo.py [--rounds 7]
Brings up a lab (one container on the pct double's local-btrfs storage), a `trainer` user whose sudo rule
is `remote init --sudoers trainer`'s drop-in, deploys once, then alternates, as `remote` runs in its own
process with its kept connection warm:
  - a no-op `remote deploy` as root and as trainer with sudo: true (goal: sudo adds <= 10%);
  - a warm `remote exec -- true`, the same two ways (goal: <= 10%);
  - a changing deploy (a new commit: the code is synced) with deploy.snapshot always and never (goal: <= 2 s),
    the snapshot a btrfs subvolume snapshot as Proxmox takes on a BTRFS storage;
  - the double's own `pct snapshot` (what the storage costs, apart from remote's round trips).
Medians; the user and the lab are removed at the end.
"""

from __future__ import annotations

import argparse
import os
import pwd
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchlab import private_lab, remote_cli

CT, USER = 244, "trainer"
DROP_IN = Path("/etc/sudoers.d/remote-bench-trainer")
SECTIONS = """
venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6]
  find_links: [{wheels}]
  requirements: requirements.txt
code:
  repo: {repo}
"""


def remote(hosts: Path, *args: str) -> float:
    return remote_cli(hosts, *args)[0]


def commit(repo: Path) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@b.invalid", "commit", "-q",
                    "--allow-empty", "-m", "bench"], check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--wheels", default=os.path.join(tempfile.gettempdir(), "remote-test-wheels"))
    args = ap.parse_args()
    made = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", "-p", "*", USER], check=True)
        made = True

    def prepare(lab) -> None:
        lab.dir.chmod(0o755)  # trainer's sshd reads the authorized keys (public) in there
        lab.set_storage(CT, "local-btrfs")

    try:
        with private_lab((CT,), wheels=Path(args.wheels), prepare=prepare,
                         folder=Path(tempfile.mkdtemp(prefix="remote-bench-sudo-", dir="/var/tmp"))) as lab:
            try:
                measure(lab, args)
            finally:
                from remote.transport import keeper  # the kept connections of these hosts files only

                for f in lab.dir.glob("*.yaml"):
                    keeper.disconnect(str(f))
                DROP_IN.unlink(missing_ok=True)
    finally:
        if made:
            subprocess.run(["pkill", "-u", USER], capture_output=True)
            subprocess.run(["userdel", "-r", USER], capture_output=True)


def measure(lab, args) -> None:
    base = lab.hosts_yaml((CT,)) + SECTIONS.format(wheels=lab.wheels, repo=lab.dir / "dflash")
    as_root = lab.dir / "root.yaml"
    as_root.write_text(base)
    as_trainer = lab.dir / "trainer.yaml"
    as_trainer.write_text(base.replace("    user: root\n", f"    user: {USER}\n    sudo: true\n"
                                       f"    pct: {lab.dir / 'bin' / 'pct'}\n"))
    rule = remote_cli(None, "init", "--sudoers", USER, "--hosts", str(as_trainer))[1].stdout
    tmp = DROP_IN.with_name(".remote-bench.tmp")
    tmp.write_text(rule)
    subprocess.run(["visudo", "-cf", str(tmp)], check=True, capture_output=True)
    tmp.chmod(0o440)
    tmp.rename(DROP_IN)
    always = lab.dir / "always.yaml"
    always.write_text(base + "deploy:\n  snapshot: always\n")
    never = lab.dir / "never.yaml"
    never.write_text(base + "deploy:\n  snapshot: never\n")

    remote(as_root, "deploy", "-c", str(CT))  # the one real deploy
    for f in (as_root, as_trainer, always, never):  # every kept connection warm
        remote(f, "exec", "-c", str(CT), "--command", "true")
    times: dict[str, list[float]] = {k: [] for k in ("deploy root", "deploy sudo", "exec root", "exec sudo",
                                                     "change never", "change always")}
    for _ in range(args.rounds):
        times["deploy root"].append(remote(as_root, "deploy", "-c", str(CT)))
        times["deploy sudo"].append(remote(as_trainer, "deploy", "-c", str(CT)))
        times["exec root"].append(remote(as_root, "exec", "-c", str(CT), "--command", "true"))
        times["exec sudo"].append(remote(as_trainer, "exec", "-c", str(CT), "--command", "true"))
    for _ in range(max(3, args.rounds // 2)):
        commit(lab.dir / "dflash")
        times["change never"].append(remote(never, "deploy", "-c", str(CT)))
        commit(lab.dir / "dflash")
        times["change always"].append(remote(always, "deploy", "-c", str(CT)))
    pct = str(lab.dir / "bin" / "pct")
    for i in range(3):  # the double's own part: copying the writable layer (a ZFS snapshot is O(1))
        start = time.perf_counter()
        subprocess.run([pct, "snapshot", str(CT), f"bench-{i}"], check=True, capture_output=True)
        times.setdefault("double snapshot", []).append(time.perf_counter() - start)
        subprocess.run([pct, "delsnapshot", str(CT), f"bench-{i}"], check=True, capture_output=True)
    upper = lab.upper(CT)
    size = subprocess.run(["du", "-sm", str(upper)], capture_output=True, text=True).stdout.split()[0]
    count = sum(len(f) for _, _, f in os.walk(upper))
    print(f"the container's writable layer: {size} MiB in {count} files")
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:14s} median {med[k]:.3f}s  ({', '.join(f'{x:.3f}' for x in v)})")
    print(f"no-op deploy: sudo / root = {med['deploy sudo'] / med['deploy root']:.3f} (goal <= 1.10)")
    print(f"warm exec:    sudo / root = {med['exec sudo'] / med['exec root']:.3f} (goal <= 1.10)")
    print(f"snapshot before a changing deploy adds {med['change always'] - med['change never']:+.3f}s (goal <= 2 s)")


if __name__ == "__main__":
    main()
