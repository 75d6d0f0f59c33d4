"""Lab tier: the namespace lab (remote/lab/ns.py), as used where there is no LXC and no sshd (a GPU machine).

Real namespaces, overlay mounts and the pct double's namespace backend; the host is `local: true`. The
tasks run as the `remote` command does, in their own process.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import LAB_WHEELS, wait_until

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
CT = 250  # its own id (support.SELF_MADE_LAB_MODULES: it runs beside the other labs)


@pytest.fixture(scope="module")
def ns_lab(tmp_path_factory):
    from remote.lab.ns import NsLab

    lab = NsLab(dir=tmp_path_factory.mktemp("nslab"), wheels_dir=LAB_WHEELS)
    lab.up([CT])
    yield lab
    lab.down(purge=True)


def pct(lab, *args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(lab.pct), *args], capture_output=True, text=True, cwd="/", **kw)


def inside(lab, script: str, *extra: str) -> subprocess.CompletedProcess:
    return pct(lab, "exec", str(CT), *extra, "--", "bash", "-c", script)


def test_exec_keeps_proxmox_semantics(ns_lab, monkeypatch):
    monkeypatch.setenv("FROM_HOST", "1")
    cleared = pct(ns_lab, "exec", str(CT), "--keep-env", "0", "--", "env")
    assert sorted(cleared.stdout.split()) == sorted(
        ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "container=lxc", "TERM=linux"])
    kept = inside(ns_lab, 'echo "$FROM_HOST|$PATH|$container"')
    assert kept.stdout == "1|/sbin:/bin:/usr/sbin:/usr/bin|lxc\n", kept.stderr
    r = pct(ns_lab, "exec", str(CT), "--", "no-such-program")
    assert r.returncode == 127 and 'Failed to exec "no-such-program"' in r.stderr and r.stderr.startswith("lxc-attach:")
    assert inside(ns_lab, "exit 7").returncode == 7
    assert inside(ns_lab, "kill -9 $$").returncode == 128 + 9
    r = pct(ns_lab, "exec", str(CT), "ls", "-la")  # pct's own option parsing, before the container
    assert r.returncode == 255 and "Unknown option: la" in r.stderr
    assert pct(ns_lab, "exec", "999", "--", "true").stderr.startswith("Configuration file 'nodes/lab/lxc/999.conf'")


def test_a_container_has_its_own_namespaces_and_root(ns_lab):
    r = inside(ns_lab, "hostname; cat /proc/1/cmdline | tr '\\0' ' '; echo; echo $$; ls /dev")
    host, init, pid, *dev = r.stdout.split("\n")
    assert host == f"lab{CT}" and "ns-init" in init and int(pid) > 1, r.stdout + r.stderr
    assert {"null", "zero", "urandom", "pts", "shm"} <= set(dev)
    for ns in ("mnt", "pid", "uts", "ipc"):
        mine = os.readlink(f"/proc/self/ns/{ns}")
        theirs = inside(ns_lab, f"readlink /proc/1/ns/{ns}").stdout.strip()
        assert theirs and theirs != mine, ns
    # The overlay root: the host's files are there, what the container writes is not on the host.
    marker = f"/root/ns-lab-marker-{os.getpid()}"
    assert inside(ns_lab, f"test -x /usr/bin/env && echo x > {marker} && cat {marker}").stdout == "x\n"
    assert not os.path.exists(marker)
    assert (ns_lab.lxc / str(CT) / "upper" / marker.lstrip("/")).read_text() == "x\n"


def test_push_pull_and_the_lifecycle(ns_lab, tmp_path):
    src = tmp_path / "src"
    src.write_bytes(b"\x00\xffdata")
    assert pct(ns_lab, "push", str(CT), str(src), "/root/pushed", "--perms", "600").returncode == 0
    assert inside(ns_lab, "stat -c %a /root/pushed").stdout == "600\n"
    assert pct(ns_lab, "pull", str(CT), "/root/pushed", str(tmp_path / "back")).returncode == 0
    assert (tmp_path / "back").read_bytes() == b"\x00\xffdata"
    r = pct(ns_lab, "push", str(CT), str(src), "/no/such/dir/x")
    assert r.returncode == 0 and "failed to create file: /no/such/dir/x" in r.stderr  # pct's exit 0 on a failed copy

    assert pct(ns_lab, "list").stdout.splitlines()[1].split()[:2] == [str(CT), "running"]
    assert pct(ns_lab, "start", str(CT)).stderr == f"CT {CT} already running\n"
    sleeper = inside(ns_lab, "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $!").stdout.strip()
    init = ns_lab.init_pid(CT)
    assert pct(ns_lab, "stop", str(CT)).returncode == 0
    assert pct(ns_lab, "status", str(CT)).stdout == "status: stopped\n"
    assert not os.path.exists(f"/proc/{init}")  # PID 1 gone, and with it every process of the container
    assert int(sleeper) > 1 and not _host_processes_in(init)
    assert pct(ns_lab, "exec", str(CT), "--", "true").stderr == f"container '{CT}' not running!\n"
    assert pct(ns_lab, "stop", str(CT)).stderr == f"CT {CT} not running\n"
    assert pct(ns_lab, "start", str(CT)).returncode == 0
    assert inside(ns_lab, "wc -c < /root/pushed").stdout == "6\n"  # the upper layer outlives a restart


def _host_processes_in(init_pid) -> list[int]:
    """Host processes whose PID namespace was that of the stopped container's PID 1 (none may be left)."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                status = (p / "status").read_text()
            except OSError:
                continue
            if any(line.startswith("NSpid:") and len(line.split()) > 2 for line in status.splitlines()):
                found.append(int(p.name))
    return [p for p in found if _ppid_chain_reaches(p, init_pid)]


def _ppid_chain_reaches(pid, target) -> bool:
    while pid > 1:
        try:
            pid = int(next(l for l in Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("PPid:")).split()[1])
        except (OSError, StopIteration):
            return False
        if pid == int(target):
            return True
    return False


def test_pid_1_reaps_orphans(ns_lab):
    """A detached job's processes end up under PID 1: it must reap them (no zombies), as LXC's init does."""
    r = inside(ns_lab, "(sh -c 'exit 0' & ) ; sleep 1; ps -eo stat=,pid=,ppid= | awk '$1 ~ /^Z/'")
    assert r.returncode == 0 and r.stdout == "", r.stdout


def test_devn_nodes_and_mount_points_at_start(ns_lab, tmp_path):
    """As Proxmox's start: a devN node appears in the container's /dev with the gid and mode asked (the host's
    /dev/nvidia* nodes come only this way), an mpN is bound (read-only with ro=1), a device gone fails the start."""
    node = Path(f"/dev/nvidia-remote-test-{os.getpid()}")
    null = os.stat("/dev/null")
    os.mknod(node, null.st_mode, null.st_rdev)
    (tmp_path / "hello").write_text("hi\n")
    try:
        assert pct(ns_lab, "set", str(CT), "--dev7", f"{node},gid=44,mode=0660", "--mp0",
                   f"{tmp_path},mp=/mnt/shared,ro=1").returncode == 0
        pct(ns_lab, "stop", str(CT))
        assert pct(ns_lab, "start", str(CT)).returncode == 0
        r = inside(ns_lab, f"stat -c '%t:%T %g %a' {node} && echo ok > {node} && cat /mnt/shared/hello && "
                           "{ touch /mnt/shared/x 2>/dev/null || echo read-only; }")
        rdev = f"{os.major(null.st_rdev):x}:{os.minor(null.st_rdev):x}"
        assert r.returncode == 0 and r.stdout == f"{rdev} 44 660\nhi\nread-only\n", r.stderr
        pct(ns_lab, "stop", str(CT))
        node.unlink()
        r = pct(ns_lab, "start", str(CT))
        assert r.returncode == 255 and r.stderr == f"Device {node} does not exist\n"
    finally:
        node.unlink(missing_ok=True)
        pct(ns_lab, "set", str(CT), "--delete", "dev7,mp0")
        if pct(ns_lab, "status", str(CT)).stdout != "status: running\n":
            pct(ns_lab, "start", str(CT))
    assert inside(ns_lab, f"test -e {node}").returncode == 1


def test_create_and_destroy_on_namespaces(ns_lab):
    made = str(CT + 60)
    r = pct(ns_lab, "create", made, ns_lab.template, "--hostname", "made-ns")
    assert r.returncode == 0, r.stderr
    try:
        assert pct(ns_lab, "start", made).returncode == 0
        r = pct(ns_lab, "exec", made, "--", "sh", "-c", "hostname; python3 -c pass && git --version >/dev/null && echo tools")
        assert r.stdout == "made-ns\ntools\n", r.stdout + r.stderr
        assert pct(ns_lab, "destroy", made).stderr == f"CT {made} is running - destroy failed\n"
    finally:
        pct(ns_lab, "destroy", made, "--force", "1")
    assert not (ns_lab.lxc / made).exists()


@pytest.fixture(scope="module")
def ns_hosts(ns_lab, tmp_path_factory) -> Path:
    """The hosts file `remote lab up --backend ns` wrote, as it is: it deploys, warms up and trains the demo."""
    path = tmp_path_factory.mktemp("nscfg") / "hosts.yaml"
    written = (ns_lab.dir / "hosts.yaml").read_text()
    assert written.startswith(ns_lab.hosts_yaml([CT])) and "local: true" in written
    assert (ns_lab.dir / "hosts-bare.yaml").read_text() == ns_lab.hosts_yaml([CT])
    path.write_text(written)
    return path


def task(hosts: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", *args], env=env,
                       capture_output=True, text=True, timeout=timeout, cwd=hosts.parent)
    assert "Traceback" not in r.stderr, r.stderr
    return r


@pytest.mark.fault("the namespace lab's hosts file for a new user",
                   promise="`remote lab up --backend ns` writes a hosts file that deploys, warms up and trains the demo as "
                   "it is; without a demo repository (a tool-only install) it says so, and so does `lab up`")
def test_deploy_train_and_stop_through_the_namespace_lab(ns_lab, ns_hosts):
    """The story's tasks with no SSH and no LXC, from the hosts file the lab wrote: deploy, exec in the job
    environment, train, doctor, stop."""
    r = task(ns_hosts, "deploy", "-c", str(CT))
    assert r.returncode == 0 and "torch 2.13.0+cpu" in r.stdout, r.stdout + r.stderr
    r = task(ns_hosts, "exec", "-c", str(CT), "--command", 'echo "$(hostname) $VIRTUAL_ENV"; python -c "import torch"')
    assert r.returncode == 0 and r.stdout.startswith(f"lab{CT} /root/venv"), r.stdout + r.stderr
    r = task(ns_hosts, "train", "-c", str(CT), "--warmup", "--detach")
    assert r.returncode == 0, r.stdout + r.stderr
    assert wait_until(lambda: "Ktok/s" in task(ns_hosts, "logs", "-c", str(CT)).stdout, timeout=300)
    r = task(ns_hosts, "stop", "-c", str(CT))
    assert r.returncode == 0 and "no process of it is left" in r.stdout, r.stdout + r.stderr
    r = task(ns_hosts, "deploy", "-c", str(CT), "--check")
    assert r.returncode == 0 and "nothing to do" in r.stdout, r.stdout + r.stderr


def test_backend_is_chosen_by_what_is_installed(monkeypatch, tmp_path):
    from remote.lab import Lab
    from remote.lab.ns import NsLab, choose_backend, open_lab
    from remote.errors import RemoteError

    monkeypatch.setenv("PATH", str(tmp_path))  # no lxc-start, no sshd
    assert choose_backend(None) == "ns" and choose_backend("lxc") == "lxc"
    assert isinstance(open_lab(tmp_path / "a"), NsLab)
    with pytest.raises(RemoteError, match="--backend: expected one of lxc, ns"):
        choose_backend("docker")
    (tmp_path / "b" / "ns").mkdir(parents=True)  # an existing namespace lab is found again
    assert isinstance(open_lab(tmp_path / "b", backend=None), NsLab)
    assert type(open_lab(tmp_path / "c", backend="lxc")) is Lab


@pytest.mark.fault("Offline wheelhouse lacks a pin, or holds another CUDA build",
                   promise="deploy fails naming it; the current venv stays in use")
def test_offline_deploy_from_a_wheelhouse_made_of_the_containers_venv(ns_lab, ns_hosts, tmp_path):
    """The air-gapped story: the deployed venv repacked into a wheelhouse in the container, then a deploy that
    may only read that folder (uv --no-index --offline): the same pins, the CUDA build checked; a wheelhouse
    that lacks a pin or a torch of the wrong build fails the deploy and leaves the venv in place."""
    task(ns_hosts, "deploy", "-c", str(CT))  # the online venv (a no-op after the test above)
    assert pct(ns_lab, "push", str(CT), str(ROOT / "scripts" / "wheelhouse-from-venv"), "/root/wheelhouse-from-venv",
               "--perms", "755").returncode == 0
    r = inside(ns_lab, "/usr/bin/python3 /root/wheelhouse-from-venv /root/venv /root/wheelhouse torch numpy")
    assert r.returncode == 0 and "torch-2.13.0+cpu-" in r.stdout, r.stdout + r.stderr
    offline = ns_hosts.read_text().replace(f"find_links: [{LAB_WHEELS}]",
                                           "find_links: [/root/wheelhouse]\n  index_url: none\n  cuda: cpu")
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(offline)
    r = task(hosts, "deploy", "-c", str(CT), "--dry")
    assert "--no-index --offline --find-links /root/wheelhouse" in r.stdout, r.stdout
    r = task(hosts, "deploy", "-c", str(CT))
    assert r.returncode == 0 and "torch 2.13.0+cpu (CUDA build none)" in r.stdout, r.stdout + r.stderr
    assert "https://" not in inside(ns_lab, "cat /root/venv/remote-lock.txt").stdout

    # A wheelhouse without numpy: uv says so, the venv stays the one just built.
    inside(ns_lab, "mkdir -p /root/partial && cp /root/wheelhouse/*.whl /root/partial/ && rm /root/partial/numpy-*")
    hosts.write_text(offline.replace("/root/wheelhouse]", "/root/partial]"))
    before = inside(ns_lab, "readlink /root/venv").stdout
    r = task(hosts, "deploy", "-c", str(CT))
    assert r.returncode != 0 and "numpy" in r.stdout + r.stderr and "left in place" in r.stderr, r.stdout + r.stderr
    assert inside(ns_lab, "readlink /root/venv").stdout == before

    # A CUDA build that the wheelhouse's torch is not: verify refuses it.
    hosts.write_text(offline.replace("cuda: cpu", "cuda: '13.0'"))
    r = task(hosts, "deploy", "-c", str(CT))
    assert r.returncode != 0 and "venv.cuda 13.0 wants CUDA 13.0, torch 2.13.0+cpu reports CUDA none" in r.stderr, \
        r.stdout + r.stderr
    assert inside(ns_lab, "readlink /root/venv").stdout == before


@pytest.mark.fault("The namespace lab's /sys", promise="read-only at every mount below it too (cgroups, securityfs, "
                   "...), not only at its top: a container cannot write the host's /sys")
def test_sys_is_read_only_at_every_mount_below_it_too(ns_lab):
    r = inside(ns_lab, "awk '$5 == \"/sys\" || index($5, \"/sys/\") == 1 { print $5, $6 }' /proc/self/mountinfo")
    mounts = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    assert "/sys" in mounts, r.stdout + r.stderr
    assert len(mounts) > 1, f"no mount below /sys to check (cgroups are one on every LXC host): {r.stdout}"
    assert {point: opts for point, opts in mounts.items() if "ro" not in opts.split(",")} == {}
    # By trying: a folder in the host's cgroup tree (a cgroup, or a folder on its tmpfs) is a write.
    probe = f"/sys/fs/cgroup/remote-ns-probe-{os.getpid()}"
    try:
        r = inside(ns_lab, f"mkdir {probe}")
        assert r.returncode != 0 and "Read-only file system" in r.stderr, (r.returncode, r.stderr)
    finally:
        if os.path.isdir(probe):  # the container wrote the host's /sys: undo it
            os.rmdir(probe)


def test_without_a_demo_repository_the_hosts_file_and_lab_up_say_so(tmp_path, monkeypatch, capsys):
    """A tool-only install has no examples/: no demo repository, and nothing silent about it."""
    import remote.cli as cli
    import remote.lab as labmod
    from remote.lab.ns import NsLab

    text = NsLab(dir=tmp_path).demo_sections()
    assert text.startswith("# No demo repository") and all(line.startswith("#") for line in text.splitlines())

    class Up:  # the lab itself is the tests above; here only what `lab up` prints about it
        backend, dir, port = "ns", tmp_path, 2222

        def up(self, ids, second=()):
            pass

    monkeypatch.setattr(labmod, "EXAMPLES", tmp_path / "no-examples")
    monkeypatch.setattr("remote.lab.ns.open_lab", lambda **kw: Up())
    assert cli.run(["lab", "up", "--backend", "ns"]) == 0
    out = capsys.readouterr().out
    assert "note: no demo repository" in out and "comes with a checkout of remote" in out, out
    assert "(deploys the demo drafter)" not in out


def test_a_simulated_driver_on_namespaces(tmp_path_factory):
    """The namespace lab with a simulated driver: a container created with devN lines for the driver's nodes gets
    them (made from the sysroot's: NVIDIA's major 195) and nothing else of the GPUs."""
    from remote.lab.ns import NsLab

    lab = NsLab(dir=tmp_path_factory.mktemp("nsgpu"), fake_gpu=2)
    made = str(CT + 61)
    try:
        lab.up([], wheels=False)
        r = pct(lab, "create", made, lab.template, "--dev0", "/dev/nvidia1,gid=44,mode=0660", "--dev1", "/dev/nvidiactl")
        assert r.returncode == 0, r.stderr
        assert pct(lab, "start", made).returncode == 0
        r = pct(lab, "exec", made, "--", "sh", "-c", "stat -c '%n %t:%T %g %a' /dev/nvidia*")
        assert r.stdout.splitlines() == ["/dev/nvidia1 c3:1 44 660", "/dev/nvidiactl c3:ff 0 666"], r.stderr
    finally:
        pct(lab, "destroy", made, "--force", "1")
        lab.down(purge=True)
