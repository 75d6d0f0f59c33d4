"""Lab tier: a non-root `trainer` login on the lab's sshd, whose sudo rule is exactly the drop-in that
`remote init --sudoers trainer` printed (hosts.lab.sudo: true); Proxmox snapshots around deploy and
`remote rollback`, through that rule, over the pct double's snapshot verbs.

The lab of this module is its own (a folder trainer's sshd can read its authorized keys in, containers
of its own ids); each task runs as the `remote` command does, in its own process.
"""

import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support import LAB_SECTIONS, LAB_WHEELS, free_port, provide_wheels

from remote import sudo

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
CT = 242
USER = "trainer"
DROP_IN = Path("/etc/sudoers.d/remote-test-trainer")


def task(hosts: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", *args], env=env,
                       capture_output=True, text=True, timeout=timeout, cwd=hosts.parent)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def install_rule(text: str) -> None:
    """A sudoers drop-in, checked by visudo first (a broken one would lock sudo for everyone)."""
    tmp = DROP_IN.with_name(".remote-test-trainer.tmp")
    tmp.write_text(text)
    subprocess.run(["visudo", "-cf", str(tmp)], check=True, capture_output=True)
    tmp.chmod(0o440)
    tmp.rename(DROP_IN)


@pytest.fixture(scope="module")
def trainer():
    """The non-root user; made here (and removed after) where the machine has none."""
    if not shutil.which("sudo") or not shutil.which("visudo", path="/usr/sbin:/usr/bin"):
        pytest.fail("the sudo tests need sudo: scripts/setup installs it (apt-get install sudo)")
    made = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        # `*`, not useradd's locked `!`: sshd (UsePAM no) refuses a locked account even with a key.
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", "-p", "*", USER], check=True)
        made = True
    yield pwd.getpwnam(USER)
    DROP_IN.unlink(missing_ok=True)
    if made:
        subprocess.run(["pkill", "-u", USER], capture_output=True)  # only trainer's own sessions
        subprocess.run(["userdel", "-r", USER], capture_output=True)


@pytest.fixture(scope="module")
def sudo_lab(trainer):
    from remote.lab import Lab

    # Under folders only root can write (not /var/tmp): `init --sudoers` refuses a pct that others could replace.
    parent = Path("/var/lib/remote-test-labs")
    parent.mkdir(mode=0o755, exist_ok=True)
    lab = Lab(dir=Path(tempfile.mkdtemp(prefix="remote-sudo-lab-", dir=parent)), port=free_port(),
              wheels_dir=LAB_WHEELS)
    lab.dir.chmod(0o755)  # trainer's sshd reads the authorized keys (public) in there; the client key stays 0600
    lab.set_storage(CT, "local-btrfs")
    try:
        provide_wheels(lab)  # under the lock the other labs take (support.py)
        lab.up((CT,), wheels=False)
        # The container sees this machine's root as its lower layer, /tmp included: hide whatever compiled there
        # outside the lab (as test_doctor_lab's story does), or doctor rightly warns of it.
        in_ct(lab, "sh", "-c", "rm -rf /tmp/torchinductor_* /root/.triton")
        yield lab
    finally:
        from remote.transport import keeper

        for f in lab.dir.glob("hosts*.yaml"):
            keeper.disconnect(str(f))
        lab.down(purge=True)


def hosts_file(lab, name: str, *, sudo_key: bool = True, extra: str = "") -> Path:
    text = lab.hosts_yaml((CT,)).replace("    user: root\n", f"    user: {USER}\n"
                                         + (f"    sudo: true\n    pct: {lab.dir / 'bin' / 'pct'}\n" if sudo_key else ""))
    path = lab.dir / name
    path.write_text(text + LAB_SECTIONS.format(repo=lab.dir / "dflash") + extra)
    return path


@pytest.fixture(scope="module")
def hosts(sudo_lab) -> Path:
    path = hosts_file(sudo_lab, "hosts.yaml")
    r = task(path, "init", "--sudoers", USER, "--hosts", str(path))
    assert r.returncode == 0, r.stderr
    rule = sudo.rule_of(r.stdout, USER)
    assert rule[0] == f"{sudo_lab.dir}/bin/pct ^exec ({CT}) --keep-env 0 -- .+$"
    assert rule[-1] == f"{sudo_lab.dir}/bin/pvesm status" and f"{sudo_lab.dir}/bin/pct" not in rule
    assert rule[-2] == f"{sudo_lab.dir}/bin/pvesh get /cluster/resources --type vm --output-format json"
    install_rule(r.stdout)
    return path


def lab_pct(lab, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(lab.dir / "bin" / "pct"), *args], capture_output=True, text=True)


def ours(lab) -> list[str]:
    from remote.ops.snapshots import parse_listsnapshot

    return [s.name for s in parse_listsnapshot(lab_pct(lab, "listsnapshot", str(CT)).stdout) if s.ours]


def in_ct(lab, *argv) -> str:
    return lab_pct(lab, "exec", str(CT), "--", *argv).stdout


def new_commit(lab) -> str:
    repo = lab.dir / "dflash"
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "a change to deploy"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


def root_processes_outside_the_rule(uid: int, allowed: list[str]) -> list[str]:
    """Every process descending from a process of `uid` that runs as root, unless the first root process on
    its way up is `sudo -n <a command of the rule>` started by `uid`'s process."""
    procs = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            status = (d / "status").read_text()
            cmd = (d / "cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        procs[int(d.name)] = (int(fields["PPid"]), int(fields["Uid"].split()[1]), [c.decode(errors="replace") for c in cmd])

    def allowed_sudo(cmd: list[str]) -> bool:
        if cmd[:2] != ["sudo", "-n"] or len(cmd) < 3:
            return False
        for rule in allowed:
            path, _, args = rule.partition(" ")
            if cmd[2] != path:
                continue
            if args.startswith("^") and args.endswith("$"):  # sudo's regular expression, on the joined arguments
                if re.fullmatch(args[1:-1], " ".join(cmd[3:]), re.DOTALL):
                    return True
            elif " ".join(cmd[3:]) == args:
                return True
        return False

    bad = []
    for pid, (ppid, euid, cmd) in procs.items():
        if euid != 0:
            continue
        chain, p = [pid], ppid
        while p in procs and procs[p][1] == 0:
            chain.append(p)
            p = procs[p][0]
        if p not in procs or procs[p][1] != uid:
            continue  # not started by trainer (sshd's own monitor, the lab, the containers' init)
        top = procs[chain[-1]][2]
        if not allowed_sudo(top):
            bad.append(f"{pid}: {' '.join(cmd)} (under {' '.join(top)})")
    return bad


def uid_of(proc: Path) -> int | None:
    """The owner of /proc/PID, or None for a process that ended since /proc was listed."""
    try:
        return proc.stat().st_uid
    except FileNotFoundError:
        return None


def trainers_files(uid: int) -> set[str]:
    """Files of trainer's where a staged copy would be: the shared temp folders and trainer's home."""
    found = set()
    for top in ("/tmp", "/var/tmp", "/dev/shm", pwd.getpwuid(uid).pw_dir):
        for dirpath, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not d.startswith(("remote-sudo-lab-", "pytest-of-"))]
            for name in files + dirs:
                path = os.path.join(dirpath, name)
                try:
                    if os.lstat(path).st_uid == uid:
                        found.add(path)
                except OSError:
                    pass
    return found


def test_every_task_runs_as_a_user_limited_to_the_drop_in(sudo_lab, hosts, trainer, tmp_path):
    rule = sudo.rule_of(DROP_IN.read_text(), USER)
    files_before = trainers_files(trainer.pw_uid)
    r = task(hosts, "deploy", "-c", str(CT))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "snapshot remote-" in r.stdout  # local-btrfs: a snapshot before the first (changing) deploy
    # The kept connection holds the mux and the agent now: trainer's processes, pct through the rule only.
    sessions = [p for p in Path("/proc").iterdir() if p.name.isdigit() and uid_of(p) == trainer.pw_uid]
    assert sessions, "no process of trainer's: the tasks did not log in as trainer"
    assert root_processes_outside_the_rule(trainer.pw_uid, rule) == []

    r = task(hosts, "warmup", "-c", str(CT))
    assert r.returncode == 0 and "warmup done" in r.stdout, r.stdout + r.stderr
    r = task(hosts, "train", "-c", str(CT), "--detach")
    assert r.returncode == 0, r.stdout + r.stderr
    r = task(hosts, "logs", "-c", str(CT), "--follow")
    assert r.returncode == 0 and "Ktok/s" in r.stdout, r.stdout + r.stderr
    r = task(hosts, "stop", "-c", str(CT))
    assert r.returncode == 0, r.stdout + r.stderr
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.txt").write_text("through sudo\n")
    r = task(hosts, "push", "-c", str(CT), "--src", str(src), "--dest", "/root/sudo-in")
    assert r.returncode == 0 and "verified by sha256" in r.stdout, r.stdout + r.stderr
    r = task(hosts, "pull", "-c", str(CT), "--src", "/root/sudo-in", "--dest", str(tmp_path / "out"))
    assert r.returncode == 0 and (tmp_path / "out" / "a.txt").read_text() == "through sudo\n", r.stdout + r.stderr
    r = task(hosts, "doctor", "-c", str(CT))
    assert r.returncode == 0, r.stdout + r.stderr
    r = task(hosts, "exec", "-c", str(CT), "--command", "id -un")
    assert r.returncode == 0 and r.stdout == "root\n", r.stdout + r.stderr
    assert root_processes_outside_the_rule(trainer.pw_uid, rule) == []
    assert trainers_files(trainer.pw_uid) - files_before == set()  # nothing staged on the host, pushed or pulled


def sudo_allows(*argv: str) -> bool:
    """What the real sudo says of the installed drop-in: may trainer run argv (`sudo -l -U trainer argv`)?"""
    r = subprocess.run(["sudo", "-l", "-U", USER, *argv], capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode == 0


@pytest.mark.fault("sudo rule allows only remote's pct command lines",
                   promise="the drop-in allows each pct subcommand remote runs with its fixed arguments, on the hosts "
                   "file's containers; `sudo -l` says no to push, pull, set, enter, mount, destroy, create, restore, "
                   "unlock, resize, migrate and to other arguments")
def test_sudo_itself_refuses_every_pct_command_line_remote_does_not_run(sudo_lab, hosts):
    from support import EXAMPLE_CT, NOT_ALLOWED

    pct = str(sudo_lab.dir / "bin" / "pct")
    ct = str(CT)
    for line in [*NOT_ALLOWED, f"exec {CT + 1} --keep-env 0 -- id", f"config {CT + 1}", f"status {CT + 1}"]:
        args = line.replace(str(EXAMPLE_CT), ct).split()
        assert not sudo_allows(pct, *args), f"sudo lets {USER} run pct {line}"
    assert not sudo_allows(str(sudo_lab.dir / "bin" / "pvesm"), "set", "local", "--disable", "1")
    for line in [f"exec {ct} --keep-env 0 -- env -C /root HOME=/root bash -c 'set -e; id' remote",
                 f"status {ct}", f"start {ct}", f"stop {ct}", f"config {ct}", "list", f"listsnapshot {ct}",
                 f"snapshot {ct} remote-20261201-1 --description before deploy of 0123456789ab",
                 f"delsnapshot {ct} remote-20261201-1",
                 f"snapshot {ct} remote-20261201-1 --description before deploy of venv spec 0123456789abcdef",
                 f"rollback {ct} remote-20261201-1 --start 0"]:
        assert sudo_allows(pct, *shlex.split(line)), f"sudo does not let {USER} run pct {line}"
    assert sudo_allows(str(sudo_lab.dir / "bin" / "pvesm"), "status")
    # What remote's own tasks run passes the rule (test_every_task_runs_as_a_user_limited_to_the_drop_in runs them
    # all as trainer); a container the file does not list is refused by sudo, named.
    other = hosts_file(sudo_lab, "hosts-other.yaml", extra="")
    text = other.read_text().replace(f"  {CT}:", f"  {CT + 1}:", 1)
    assert text != other.read_text()
    other.write_text(text)
    r = task(other, "exec", "-c", str(CT + 1), "--command", "true", timeout=120)
    assert r.returncode == 1 and "does not allow trainer to run" in r.stderr, r.stdout + r.stderr


def test_snapshots_auto_one_per_changing_deploy_none_for_a_no_op_three_kept_anothers_untouched(sudo_lab, hosts):
    assert lab_pct(sudo_lab, "snapshot", str(CT), "by-hand", "--description", "mine").returncode == 0
    before = ours(sudo_lab)
    assert len(before) == 1  # the first deploy's
    r = task(hosts, "deploy", "-c", str(CT))
    assert r.returncode == 0 and "nothing to do" in r.stdout, r.stdout + r.stderr
    assert ours(sudo_lab) == before  # a no-op deploy takes none
    for _ in range(3):
        commit = new_commit(sudo_lab)
        r = task(hosts, "deploy", "-c", str(CT))
        assert r.returncode == 0 and "snapshot remote-" in r.stdout, r.stdout + r.stderr
    now = ours(sudo_lab)
    assert len(now) == 3 and before[0] not in now  # the oldest of remote's deleted
    listing = lab_pct(sudo_lab, "listsnapshot", str(CT)).stdout
    assert "by-hand" in listing and f"before deploy of {commit}" in listing
    r = task(hosts, "snapshots", "-c", str(CT))
    assert r.returncode == 0 and "by-hand" in r.stdout and r.stdout.count("remote  remote-") == 3, r.stdout


def test_rollback_restores_a_file_changed_after_the_snapshot_and_is_refused_while_a_run_is_live(sudo_lab, hosts):
    in_ct(sudo_lab, "sh", "-c", "echo before > /root/marker")
    new_commit(sudo_lab)
    r = task(hosts, "deploy", "-c", str(CT))
    assert r.returncode == 0 and "snapshot remote-" in r.stdout, r.stdout + r.stderr
    in_ct(sudo_lab, "sh", "-c", "echo after > /root/marker")

    r = task(hosts, "train", "-c", str(CT), "--warmup", "--detach")
    assert r.returncode == 0, r.stdout + r.stderr
    r = task(hosts, "rollback", "-c", str(CT))
    assert r.returncode == 3 and "still running" in r.stderr, r.stdout + r.stderr
    assert in_ct(sudo_lab, "cat", "/root/marker") == "after\n"  # refused: nothing rolled back
    assert task(hosts, "stop", "-c", str(CT)).returncode == 0

    r = task(hosts, "rollback", "-c", str(CT))
    assert r.returncode == 0 and "started again" in r.stdout, r.stdout + r.stderr
    assert "restored: run folders (/root/runs)" in r.stdout
    assert in_ct(sudo_lab, "cat", "/root/marker") == "before\n"
    r = task(hosts, "exec", "-c", str(CT), "--command", "cat /root/marker")  # the container answers again
    assert r.returncode == 0 and r.stdout == "before\n", r.stdout + r.stderr


def test_a_storage_without_snapshots_is_noted_and_the_deploy_done_and_always_refuses(sudo_lab, hosts):
    sudo_lab.set_storage(CT, "local")
    try:
        before = ours(sudo_lab)
        commit = new_commit(sudo_lab)
        r = task(hosts, "deploy", "-c", str(CT))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "no snapshot: container 242's rootfs is on storage local (dir), which cannot take snapshots" in r.stdout
        assert in_ct(sudo_lab, "git", "-C", "/root/dflash", "rev-parse", "HEAD").strip() == commit
        assert ours(sudo_lab) == before

        always = hosts_file(sudo_lab, "hosts-always.yaml", extra="deploy:\n  snapshot: always\n")
        head = new_commit(sudo_lab)
        r = task(always, "deploy", "-c", str(CT))
        assert r.returncode == 1 and "deploy.snapshot is always" in r.stderr, r.stdout + r.stderr
        assert in_ct(sudo_lab, "git", "-C", "/root/dflash", "rev-parse", "HEAD").strip() == commit != head
    finally:
        sudo_lab.set_storage(CT, "local-btrfs")


@pytest.mark.fault("non-root host user without sudo", promise="pct's `please run as root` names `sudo: true` and the drop-in")
def test_the_same_user_without_sudo_gets_the_named_error_and_nothing_changes(sudo_lab, hosts):
    plain = hosts_file(sudo_lab, "hosts-nosudo.yaml", sudo_key=False)
    head = in_ct(sudo_lab, "git", "-C", "/root/dflash", "rev-parse", "HEAD")
    snaps = lab_pct(sudo_lab, "listsnapshot", str(CT)).stdout
    new_commit(sudo_lab)
    r = task(plain, "deploy", "-c", str(CT))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "must run as root" in r.stderr and "`sudo: true`" in r.stderr and "init --sudoers" in r.stderr
    assert in_ct(sudo_lab, "git", "-C", "/root/dflash", "rev-parse", "HEAD") == head
    assert lab_pct(sudo_lab, "listsnapshot", str(CT)).stdout == snaps


@pytest.mark.fault("sudo wants a password", promise="a sudo rule that wants a password fails at once (`sudo -n`, never a "
                   "prompt), named, with the drop-in to install")
def test_a_rule_that_wants_a_password_fails_at_once_named(sudo_lab, hosts):
    from remote.transport import keeper

    good = DROP_IN.read_text()
    keeper.disconnect(str(hosts))  # no agent started under the good rule is left to answer
    install_rule(good.replace("NOPASSWD: ", ""))
    try:
        r = task(hosts, "exec", "-c", str(CT), "--command", "true", timeout=120)  # a prompt would hang here
        assert r.returncode == 1 and "wants a password" in r.stderr and "NOPASSWD" in r.stderr, r.stdout + r.stderr
    finally:
        install_rule(good)


@pytest.mark.fault("sudo rule without a program", promise="a program the sudo rule does not allow is named (told apart from "
                   "a rule that wants a password by `sudo -n -l`)")
def test_a_rule_without_one_program_names_it(sudo_lab, hosts):
    from remote.transport import keeper

    good = DROP_IN.read_text()
    pvesm = re.compile(r",\s*(\\\n\s*)?" + re.escape(f"{sudo_lab.dir}/bin/pvesm status"))
    assert pvesm.search(good)
    keeper.disconnect(str(hosts))
    install_rule(pvesm.sub("", good))
    try:
        head = in_ct(sudo_lab, "git", "-C", "/root/dflash", "rev-parse", "HEAD")
        new_commit(sudo_lab)
        r = task(hosts, "deploy", "-c", str(CT), timeout=120)
        assert r.returncode == 1 and "does not allow trainer to run" in r.stderr and "pvesm" in r.stderr, \
            r.stdout + r.stderr
        assert in_ct(sudo_lab, "git", "-C", "/root/dflash", "rev-parse", "HEAD") == head
    finally:
        install_rule(good)


def test_the_pct_doubles_snapshots_follow_proxmoxs_rules(sudo_lab):
    ct = str(CT)
    r = lab_pct(sudo_lab, "snapshot", ct, "current")
    assert r.returncode == 255 and r.stderr == "unable to use snapshot name 'current' (reserved name)\n"
    r = lab_pct(sudo_lab, "snapshot", ct, "x" * 41)
    assert r.returncode == 255 and "snapname: value may only be 40 characters long" in r.stderr
    assert lab_pct(sudo_lab, "snapshot", ct, "rules-1").returncode == 0
    r = lab_pct(sudo_lab, "snapshot", ct, "rules-1")
    assert r.returncode == 255 and r.stderr == "snapshot name 'rules-1' already used\n"
    r = lab_pct(sudo_lab, "delsnapshot", ct, "no-such")
    assert r.returncode == 255 and r.stderr == "snapshot 'no-such' does not exist\n"
    assert lab_pct(sudo_lab, "listsnapshot", ct).stdout.splitlines()[-1].strip().startswith("`-> current")
    # A rollback kills a running container and starts it again only with --start 1.
    assert lab_pct(sudo_lab, "rollback", ct, "rules-1").returncode == 0
    assert lab_pct(sudo_lab, "status", ct).stdout == "status: stopped\n"
    assert lab_pct(sudo_lab, "start", ct).returncode == 0
    assert lab_pct(sudo_lab, "delsnapshot", ct, "rules-1").returncode == 0
    sudo_lab.set_storage(CT, "local")
    try:
        r = lab_pct(sudo_lab, "snapshot", ct, "rules-2")
        assert r.returncode == 255 and r.stderr == "snapshot feature is not available\n"
    finally:
        sudo_lab.set_storage(CT, "local-btrfs")
