"""The local Proxmox look-alike: a real sshd on loopback, real LXC containers, a `pct` double.

Everything lives under one folder (default /var/lib/remote-lab, or $REMOTE_LAB_DIR):
    ssh/      host key, client key, authorized_keys, known_hosts, sshd_config
    bin/pct   the pct double (remote/lab/pct_double.py), first on the sshd session's PATH
    wheels/   the pinned CPU torch wheel the lab's hosts files install (remote/lab/wheels.py)
    lxc/<id>/ each container: config, and `upper/` holding everything written inside it (on local-btrfs:
              vol/layer/upper, in a subvolume of a btrfs image mounted at vol/, and vol/snapshots/)
    storage/local/template/cache/   the `local` storage's template volumes (`pct create ID local:vztmpl/...`)
    hosts.yaml, hosts-bare.yaml     hosts files for this lab (its folder, port and key), as `lab up` wrote them
Containers take this machine's root as a read-only lower layer (overlay), use the host network
and need no image: they start in about a second and see the host's Python, git and wheels.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import RemoteError
from . import fakegpu, pct_make

DEFAULT_DIR = "/var/lib/remote-lab"
DEFAULT_PORT = 2222
DEFAULT_CONTAINERS = (200,)
TEMPLATE = "debian-12-standard_12.7-1_amd64.tar.zst"  # the template volume of the lab's `local` storage
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"  # present in a checkout of remote

# An init that never reaps (some minimal container inits don't): orphans that exit stay zombies.
_INIT_NO_REAP = """import os, signal, time
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
signal.signal(signal.SIGPWR, lambda *a: os._exit(0))
while True:
    time.sleep(3600)
"""

_SSHD_CONFIG = """\
Port {port}
ListenAddress {listen}
HostKey {ssh}/host_ed25519
AuthorizedKeysFile {ssh}/authorized_keys
PidFile {dir}/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 100
MaxStartups 100:30:200
SetEnv PATH={dir}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin{gpu_env}
Subsystem sftp internal-sftp
"""


class LabError(RemoteError):
    pass


def _run(argv, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kwargs)


SECOND = "pve2"  # the second host's folder inside the lab's, and its pct node name is lab2
PORT_FILE = "port"  # <lab>/port: the port its sshd was brought up on, which a later `lab up` without --port keeps


def saved_port(folder: str | os.PathLike) -> int | None:
    """The port the lab in `folder` was last brought up on (None: never, or a file that is not a port)."""
    try:
        text = (Path(folder) / PORT_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


@dataclass
class Lab:
    backend = "lxc"  # remote/lab/ns.py's NsLab: "ns"
    dir: Path = Path(os.environ.get("REMOTE_LAB_DIR", DEFAULT_DIR))
    port: int = DEFAULT_PORT
    node: str = "lab"  # the host's name in hosts files and its pct node name
    wheels_dir: Path | None = None  # the wheel folder, where not <dir>/wheels (test labs share one)
    listen: str = "127.0.0.1"  # sshd's loopback address (a lab cluster's nodes have one each: remote/lab/cluster.py)
    fake_gpu: int = 0  # GPUs of a simulated NVIDIA driver for the lab's host (remote/lab/fakegpu.py); 0: none
    fake_gpu_version: str = "570.148.08"  # the simulated driver's version, loaded and on disk

    def __post_init__(self):
        self.dir = Path(self.dir)

    def second(self) -> Lab:
        """A second look-alike Proxmox host: its own folder, sshd (on port + 1), keys and pct node.
        Container ids must differ from the first host's (LXC names them system-wide)."""
        return Lab(dir=self.dir / SECOND, port=self.port + 1, node="lab2")

    @property
    def ssh(self) -> Path:
        return self.dir / "ssh"

    @property
    def lxc(self) -> Path:
        return self.dir / "lxc"

    @property
    def wheels(self) -> Path:
        """The lab's wheel folder (the hosts files' venv.find_links): the pinned CPU torch wheel."""
        return Path(self.wheels_dir) if self.wheels_dir else self.dir / "wheels"

    @property
    def key_file(self) -> Path:
        return self.ssh / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.ssh / "known_hosts"

    # -- bring up ------------------------------------------------------------------------------
    def up(self, containers=DEFAULT_CONTAINERS, second=(), wheels=True) -> None:
        """Start sshd and the containers (idempotent); with `second`, also a second host with those containers.
        First, with `wheels`, the pinned CPU torch wheel into the lab's wheel folder (remote/lab/wheels.py)."""
        if set(containers) & set(second):
            raise LabError(f"container ids must differ between the two hosts: {sorted(set(containers) & set(second))}")
        self._check_tools()
        if wheels:
            self.provide_wheels()
        for d in (self.ssh, self.dir / "bin", self.lxc):
            d.mkdir(parents=True, exist_ok=True)
        self._keys()
        self._templates()
        self._fake_gpu()
        self._pct_double()
        self._sshd()
        (self.dir / PORT_FILE).write_text(f"{self.port}\n")  # kept: the next `lab up` here listens there again
        for ctid in containers:
            self.start_container(ctid)
        if EXAMPLES.is_dir() and self.node == "lab":
            self.demo_repo()
            self.plain_repo()
        if second:
            self.second().up(second, wheels=False)
        if self.node == "lab":
            self.write_hosts_files(self.own_containers(), second=self.second().own_containers() if second else ())

    def own_containers(self) -> list[int]:
        return self.containers()

    def write_hosts_files(self, containers, second=()) -> None:
        """<lab>/hosts-bare.yaml (hosts: and containers: of this lab, its folder, port and keys) and
        <lab>/hosts.yaml (that plus the demo drafter's sections): `REMOTE_HOSTS_FILE=<lab>/hosts.yaml remote
        deploy warmup train` works for a lab in any folder on any port, with no hand edits."""
        bare = self.hosts_yaml(containers, second=second)
        (self.dir / "hosts-bare.yaml").write_text(bare)
        (self.dir / "hosts.yaml").write_text(bare + self.demo_sections())

    def demo_sections(self) -> str:
        """The sections that make the lab's hosts.yaml deploy, warm up and train the demo drafter (where
        `up` made its repository: in a checkout of remote), on the pinned CPU torch of the lab's wheels."""
        from .wheels import TORCH

        if not (self.dir / "dflash" / ".git").is_dir():
            return ("# No demo repository: examples/ comes with a checkout of remote, not with an install. Add\n"
                    "# venv:, code: (repo: your project's repository), warmup: and train: sections for your own\n"
                    "# project (docs/reference/hosts-file.md), or run `remote lab up` from a checkout of remote.\n")
        return DEMO_SECTIONS.format(torch=TORCH, wheels=self.wheels, repo=self.dir / "dflash")

    def provide_wheels(self) -> Path:
        """The pinned CPU torch wheel in self.wheels, for the containers' Python: from a folder pip is
        configured with or the default lab's, else downloaded; a LabError says what to put where."""
        from . import wheels

        default = Path(DEFAULT_DIR) / "wheels"
        try:
            return wheels.provide(self.wheels, _system_python(), also=[default] if default != self.wheels else [])
        except wheels.WheelError as e:
            raise LabError(str(e)) from None

    def _check_tools(self) -> None:
        if os.geteuid() != 0:
            raise LabError("the lab needs root (sshd on a port, LXC containers): run as root")
        missing = [t for t in ("sshd", "ssh-keygen", "lxc-start", "lxc-attach") if not shutil.which(t, path=_sbin_path())]
        if missing:
            raise LabError(f"the lab needs {', '.join(missing)}: apt-get install openssh-server lxc")

    def _keys(self) -> None:
        for name in ("host_ed25519", "id_ed25519"):
            if not (self.ssh / name).exists():
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"remote-lab-{name}", "-f",
                      str(self.ssh / name)]).check_returncode()
        (self.ssh / "authorized_keys").write_text((self.ssh / "id_ed25519.pub").read_text())
        host_pub = (self.ssh / "host_ed25519.pub").read_text().split()
        self.known_hosts.write_text(f"[{self.listen}]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        os.chmod(self.key_file, 0o600)

    def _pct_double(self) -> None:
        source = (Path(__file__).with_name("pct_double.py")).read_text()
        source = (source.replace('LXC_PATH = "/var/lib/remote-lab/lxc"', f"LXC_PATH = {str(self.lxc)!r}")
                  .replace('LOCK_DIR = "/var/lib/remote-lab/lock"', f"LOCK_DIR = {str(self.dir / 'lock')!r}")
                  .replace('STORAGE_DIR = "/var/lib/remote-lab/storage"', f"STORAGE_DIR = {str(self.storage)!r}")
                  .replace('GPU_SYSROOT = ""', f"GPU_SYSROOT = {self.gpu_sysroot_path()!r}")
                  .replace('NODE = "lab"', f"NODE = {self.node!r}"))  # NsLab sets BACKEND and NS_INIT
        source = self._double_source(source)
        # One double: its pvesm side answers `pvesm status`, pveam `list`, pvesh `get`.
        for name in ("pct", "pvesm", "pveam", "pvesh"):
            target = self.dir / "bin" / name
            target.write_text(f"#!{_system_python()}\n" + source)
            target.chmod(0o755)
        # Its cluster half (pct migrate, pvesh), making half (create, clone, set, destroy, pveam, a start's
        # devN and mpN) and snapshot half (snapshot, listsnapshot, delsnapshot, rollback), loaded on demand
        # from beside it: the double itself stays one file, run as a program.
        for half in ("pct_cluster.py", "pct_make.py", "pct_snap.py"):
            (self.dir / "bin" / half).write_text(Path(__file__).with_name(half).read_text())

    @property
    def storage(self) -> Path:
        """The storages' folders (the pct double's STORAGE_DIR): storage/<name>/template/cache/ holds templates."""
        return self.dir / "storage"

    @property
    def template(self) -> str:
        """The template volume `pct create` takes in this lab (`pveam list local` lists it)."""
        return f"local:vztmpl/{TEMPLATE}"

    def _templates(self) -> None:
        """The `local` storage's template, as `pveam download local NAME` leaves it (its content is not read:
        a created container is made as the lab's own are, over this machine's root)."""
        import io
        import tarfile

        cache = self.storage / "local" / "template" / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        if (cache / TEMPLATE).exists():
            return
        data = b'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("./etc/os-release")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        (cache / (TEMPLATE + ".tmp")).write_bytes(buf.getvalue())
        (cache / (TEMPLATE + ".tmp")).rename(cache / TEMPLATE)

    def gpu_sysroot_path(self) -> str:
        """The simulated NVIDIA driver's root (REMOTE_GPU_SYSROOT of the lab's host, the double's GPU_SYSROOT):
        <lab>/gpu once a lab was brought up with fake_gpu (until purged), else "" (remote/lab/fakegpu.py)."""
        root = self.dir / "gpu"
        return str(root) if self.fake_gpu or (root / fakegpu.STATE).exists() else ""

    @property
    def gpu(self) -> fakegpu.FakeGpu:
        """The simulated driver (install, upgrade, reboot, planted faults); a LabError in a lab without one."""
        if not self.gpu_sysroot_path():
            raise LabError(f"the lab in {self.dir} has no simulated GPU: bring it up with fake_gpu=N")
        return fakegpu.FakeGpu(Path(self.gpu_sysroot_path()), python=_system_python())

    def _fake_gpu(self) -> None:
        if self.fake_gpu:
            self.gpu.install(self.fake_gpu, self.fake_gpu_version)

    def fake_gpu_upgrade(self, version: str) -> None:
        """A driver upgrade on the lab's host: on disk now, loaded after fake_gpu_reboot()."""
        self.gpu.upgrade(version)

    def fake_gpu_reboot(self) -> None:
        """The lab's host restarted: the driver on disk loaded, the uvm nodes absent until nvidia-modprobe -u -c 0
        (the containers keep running: stop and start them as a host's boot would, where a test needs it)."""
        self.gpu.reboot()

    def fake_gpu_remove_node(self, name: str) -> None:
        """A planted fault: a node gone from the host's /dev ("nvidia-uvm", "nvidiactl", "nvidia1", ...)."""
        self.gpu.remove_node(name)

    def _double_source(self, source: str) -> str:
        """The pct double's source as this lab installs it (a lab cluster's node sets CLUSTER_DIR)."""
        return source

    def sshd_running(self) -> bool:
        return _alive(self.dir / "sshd.pid")

    def _sshd(self) -> None:
        sysroot = self.gpu_sysroot_path()
        config = _SSHD_CONFIG.format(port=self.port, ssh=self.ssh, dir=self.dir, listen=self.listen,
                                     gpu_env=f" REMOTE_GPU_SYSROOT={sysroot}" if sysroot else "")
        conf_file = self.ssh / "sshd_config"
        if self.sshd_running() and conf_file.exists() and conf_file.read_text() == config:
            return
        self._stop_sshd()
        conf_file.write_text(config)
        Path("/run/sshd").mkdir(exist_ok=True)
        r = _run(self._sshd_argv(conf_file))
        if r.returncode != 0:
            raise LabError(f"sshd failed to start: {r.stderr.strip()} (see {self.dir / 'sshd.log'})")
        _wait_port(self.port, self.listen)

    def _sshd_argv(self, conf_file: Path) -> list[str]:
        """How this host's sshd starts (a cluster node's: in a UTS namespace of its own, remote.lab.cluster)."""
        sshd = shutil.which("sshd", path=_sbin_path())
        if sshd is None:
            raise LabError("the lab needs sshd (apt-get install openssh-server)")
        return [sshd, "-f", str(conf_file), "-E", str(self.dir / "sshd.log")]

    def _container_config(self, ctid: int) -> str:
        """Its LXC config before the passthrough part the double's `pct start` adds (devN, mpN)."""
        return pct_make.lxc_base_config(str(self.lxc / str(ctid)), str(ctid), f"lab{ctid}", _system_python())

    def _pve_conf(self, ctid: int) -> str:
        """The container's Proxmox config as `pct config` reads it (the double's <ct>/pve.conf)."""
        return f"arch: amd64\nhostname: lab{ctid}\nostype: debian\nrootfs: local:{ctid}/rootfs,size=8G\n"

    def _write_pve_conf(self, ct: Path, ctid: int) -> None:
        """Written once: what a test or a user adds to it (GPU lines) stays, as /etc/pve/lxc/<id>.conf does."""
        conf = ct / "pve.conf"
        if not conf.exists():
            conf.write_text(self._pve_conf(ctid))

    def upper(self, ctid: int) -> Path:
        """The container's writable layer: on local-btrfs a btrfs subvolume on the container's own volume."""
        ct = self.lxc / str(ctid)
        return ct / "vol" / "layer" / "upper" if os.path.ismount(ct / "vol") else ct / "upper"

    def _btrfs_volume(self, ctid: int) -> None:
        """For a container on local-btrfs: a btrfs image mounted at lxc/<id>/vol/ (made once, 8 GiB sparse)
        and its writable layer in a subvolume there (vol/layer/upper, the overlay's work folder beside it),
        so the pct double snapshots it as Proxmox's btrfs storage does."""
        ct = self.lxc / str(ctid)
        storage = ct / "storage"
        if not storage.exists() or storage.read_text().strip() != "local-btrfs" or os.path.ismount(ct / "vol"):
            return
        if not shutil.which("mkfs.btrfs", path=_sbin_path()) or not shutil.which("btrfs", path=_sbin_path()):
            raise LabError("a container on local-btrfs needs btrfs-progs: apt-get install btrfs-progs")
        image = ct / "btrfs.img"
        if not image.exists():
            with open(image, "wb") as f:
                f.truncate(8 << 30)
            _run(["mkfs.btrfs", "-q", str(image)]).check_returncode()
        (ct / "vol").mkdir(exist_ok=True)
        r = _run(["mount", "-o", "loop", str(image), str(ct / "vol")])
        if r.returncode != 0:
            raise LabError(f"cannot mount the btrfs volume of container {ctid}: {r.stderr.strip()}")
        if not (ct / "vol" / "layer").exists():  # the layer and the overlay's work folder: one subvolume
            _run(["btrfs", "subvolume", "create", str(ct / "vol" / "layer")]).check_returncode()
            (ct / "vol" / "layer" / "upper").mkdir()

    def _unmount_volumes(self) -> None:
        for ctid in self.containers():
            if os.path.ismount(self.lxc / str(ctid) / "vol"):
                _run(["umount", str(self.lxc / str(ctid) / "vol")])

    def _write_etc_hosts(self, ct: Path, ctid: int) -> None:
        """As Proxmox does at every start: the container's own hostname on 127.0.1.1 and no other container's
        name (nothing resolves those: a multi-node run reaches its nodes by `address`, never by name)."""
        (self.upper(ctid) / "etc").mkdir(parents=True, exist_ok=True)
        hosts = self.upper(ctid) / "etc" / "hosts"
        keep = [line for line in hosts.read_text().splitlines() if line.split()[:1] != ["127.0.1.1"]] \
            if hosts.exists() else ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        hosts.write_text("\n".join([*keep, f"127.0.1.1 lab{ctid}"]) + "\n")

    def start_container(self, ctid: int, reap: bool = True) -> None:
        """Start container `ctid` (idempotent); with reap=False its init never reaps orphans."""
        ct = self.lxc / str(ctid)
        self._btrfs_volume(ctid)
        self._write_etc_hosts(ct, ctid)
        (ct / "init.py").write_text(pct_make.INIT_SOURCE if reap else _INIT_NO_REAP)
        (ct / "config").write_text(self._container_config(ctid))
        self._write_pve_conf(ct, ctid)
        if self.state(ctid) == "RUNNING":
            return
        # As Proxmox's pct start: the config's devN and mpN applied, then lxc-start.
        r = _run([str(self.dir / "bin" / "pct"), "start", str(ctid)], cwd="/")
        if r.returncode != 0:
            raise LabError(f"container {ctid} failed to start: {r.stderr.strip()} (log: {ct / 'lxc.log'})")
        for _ in range(100):
            if self.state(ctid) == "RUNNING":
                return
            time.sleep(0.1)
        raise LabError(f"container {ctid} did not reach RUNNING (log: {ct / 'lxc.log'})")

    def set_storage(self, ctid: int, storage: str) -> None:
        """The storage container `ctid`'s rootfs lives on, for the pct double (`local`: a directory storage,
        no snapshots; `local-btrfs`: a btrfs volume of its own, snapshots as cheap as Proxmox's; `local-zfs`,
        `local-lvm`: snapshots by copying). Set before the container starts: local-btrfs takes effect then."""
        (self.lxc / str(ctid)).mkdir(parents=True, exist_ok=True)
        (self.lxc / str(ctid) / "storage").write_text(storage + "\n")

    def state(self, ctid: int) -> str:
        return _run(["lxc-info", "-P", str(self.lxc), "-n", str(ctid), "-sH"]).stdout.strip() or "STOPPED"

    def containers(self) -> list[int]:
        if not self.lxc.is_dir():
            return []
        return sorted(int(p.name) for p in self.lxc.iterdir() if (p / "config").exists())

    def demo_repo(self) -> Path:
        """<lab>/dflash: the demo drafter's repository (examples/drafter as drafter/)."""
        return self._example_repo("dflash", {"drafter": EXAMPLES / "drafter", "requirements.txt": EXAMPLES / "requirements.txt",
                                             "README.md": EXAMPLES / "README.md"})

    def plain_repo(self) -> Path:
        """<lab>/plain: a training repository that never heard of remote (examples/plain at its root)."""
        return self._example_repo("plain", {"": EXAMPLES / "plain"})

    def _example_repo(self, name: str, sources: dict[str, Path]) -> Path:
        """A git repository made from example folders; a new commit only when they changed."""
        repo = self.dir / name
        repo.mkdir(parents=True, exist_ok=True)
        git = ["git", "-C", str(repo), "-c", "user.name=remote lab", "-c", "user.email=lab@remote.invalid"]
        if not (repo / ".git").exists():
            _run([*git, "init", "-q"]).check_returncode()
        wanted = {}
        for prefix, src in sources.items():
            for f in [src] if src.is_file() else src.rglob("*"):
                if f.is_file() and "__pycache__" not in f.parts:
                    wanted[str(Path(prefix, f.relative_to(src)))] = f
        for old in _run([*git, "ls-files", "-z"]).stdout.split("\0"):
            if old and old not in wanted:
                (repo / old).unlink(missing_ok=True)
        for rel, src in wanted.items():
            dest = repo / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists() or dest.read_bytes() != src.read_bytes():
                shutil.copyfile(src, dest)
        _run([*git, "add", "-A"]).check_returncode()
        if _run([*git, "diff", "--cached", "--quiet"]).returncode != 0:
            _run([*git, "commit", "-q", "-m", f"{name} from remote/examples"]).check_returncode()
        return repo

    # -- tear down -----------------------------------------------------------------------------
    def down(self, purge: bool = False) -> None:
        """Stop containers and sshd; with purge, also delete everything the containers wrote."""
        if self.node == "lab" and (self.dir / SECOND).is_dir():
            self.second().down(purge=False)
        for ctid in self.containers():
            if self.state(ctid) == "RUNNING":
                _run(["lxc-stop", "-P", str(self.lxc), "-n", str(ctid), "-k"])
        self._unmount_volumes()
        self._stop_sshd()
        if purge and self.dir.exists():
            shutil.rmtree(self.dir)

    def _stop_sshd(self) -> None:
        pidfile = self.dir / "sshd.pid"
        if _alive(pidfile):
            pid = int(pidfile.read_text())
            os.kill(pid, signal.SIGTERM)
            for _ in range(50):
                if not _alive(pidfile):
                    break
                time.sleep(0.1)

    def hosts_yaml(self, containers=DEFAULT_CONTAINERS, second=()) -> str:
        """A hosts file for this lab (used by tests; the shipped hosts.yaml is the default lab's); with
        `second`, those containers on the second host. Each container has an address of its own on the
        loopback (containers share the host network, whose 127.0.0.0/8 is all local): where a multi-node
        run's nodes reach each other, their names resolving only inside themselves."""
        labs = [(self, containers)] + ([(self.second(), second)] if second else [])
        lines = ["hosts:"]
        for lab, _ in labs:
            lines += [f"  {lab.node}:", "    address: 127.0.0.1", f"    port: {lab.port}", "    user: root",
                      f"    key_file: {lab.key_file}", f"    known_hosts: {lab.known_hosts}"]
        lines.append("containers:")
        for lab, ids in labs:
            lines += [f"  {c}:\n    host: {lab.node}\n    address: {address(c)}" for c in ids]
        return "\n".join(lines) + "\n"


DEMO_SECTIONS = """\
# The demo drafter (examples/drafter, committed to {repo} by `remote lab up`) on the pinned CPU
# torch: `remote deploy`, `remote train --warmup`, `remote logs --follow` work as they are. For your own
# project: code.repo its repository, venv/warmup/train what it needs (docs/reference/hosts-file.md); on a GPU, the
# torch build of your driver (README.md).
venv:
  packages: [{torch}, numpy==2.2.6]
  find_links: [{wheels}]
  requirements: requirements.txt
code:
  repo: {repo}
  path: /root/dflash
warmup:
  command: python -m drafter.warmup --device {{device}}
  devices: [0]
  cache_dir: /root/.cache/torch-compile
train:
  command: python -m drafter.train --target-gpus 0 --drafter-gpus 0 --steps 200 --log-interval 0.5
  run_dir: /root/runs
"""


def address(ctid: int) -> str:
    """Container ctid's address in the lab: a loopback address of its own (127.0.0.210 for 210)."""
    return f"127.0.{ctid // 256 % 256}.{ctid % 256 or 1}"


def _sbin_path() -> str:
    return os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"


def _system_python() -> str:
    """A Python every container sees at the same path (the host's system one when there is one)."""
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _alive(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False


def _wait_port(port: int, listen: str = "127.0.0.1", timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex((listen, port)) == 0:
                return
        time.sleep(0.05)
    raise LabError(f"sshd is not listening on {listen}:{port}")
