"""The lab without LXC and sshd: containers made of Linux namespaces, on a host reached as `local: true`.

Where a machine has no LXC and no sshd (a GPU machine you can only run commands on), `remote lab up
--backend ns` (chosen by itself there) makes the same look-alike Proxmox host as the LXC lab, minus SSH:
    bin/pct      the pct double (remote/lab/pct_double.py) with its namespace backend
    bin/ns-init  each container's PID 1 (remote/lab/ns_init.py)
    ns/<id>/     each container: config, upper/ (everything written inside it), init.pid, console.log
A container is an overlay root over the machine's own `/` in its own mount, PID, UTS and IPC namespaces,
the host network, the GPU device nodes, a reaping PID 1. `pct exec` keeps Proxmox's semantics (no shell,
PATH reset, `--keep-env 0` clears the environment); the hosts file names the host `local: true` with
`pct: <lab>/bin/pct`, so every task runs here with no SSH at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import DEFAULT_CONTAINERS, EXAMPLES, Lab, LabError, _run, _system_python, address

BACKENDS = ("lxc", "ns")


def lxc_available() -> bool:
    """Whether the LXC lab can run here (its tools and sshd are installed)."""
    path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"
    return all(shutil.which(t, path=path) for t in ("sshd", "ssh-keygen", "lxc-start", "lxc-attach"))


def choose_backend(backend: str | None) -> str:
    """The lab backend: the one asked for, else LXC where it is installed and namespaces elsewhere."""
    if backend in (None, "", "auto"):
        return "lxc" if lxc_available() else "ns"
    if backend not in BACKENDS:
        raise LabError(f"--backend: expected one of {', '.join(BACKENDS)} (or auto), got {backend!r}")
    return backend


def open_lab(dir: str | os.PathLike | None = None, backend: str | None = None, **kwargs) -> Lab:
    """The lab in `dir` (default: $REMOTE_LAB_DIR or /var/lib/remote-lab): a namespace lab where that folder
    holds one (or `backend` says so), else the LXC lab."""
    kwargs = {**kwargs, **({"dir": Path(dir)} if dir else {})}
    probe = NsLab(**kwargs)
    if backend in (None, "", "auto") and (probe.dir / "ns").is_dir():
        return probe
    return probe if choose_backend(backend) == "ns" else Lab(**kwargs)


@dataclass
class NsLab(Lab):
    backend = "ns"

    @property
    def lxc(self) -> Path:  # the containers' folder (the pct double's LXC_PATH)
        return self.dir / "ns"

    def second(self) -> Lab:
        raise LabError("the namespace lab has one host: a second look-alike host needs the LXC lab (--backend lxc)")

    def up(self, containers=DEFAULT_CONTAINERS, second=(), wheels=True) -> None:
        """Install the pct double and ns-init, start the containers (idempotent). With `wheels`, the pinned
        CPU torch wheel of the lab's default hosts files too, where it can be had: a GPU machine without an
        index deploys its own torch (scripts/wheelhouse-from-venv), so its absence is a note, not an error."""
        if second:
            self.second()
        self._check_tools()
        if wheels:
            try:
                self.provide_wheels()
            except LabError as exc:
                print(f"note: no CPU torch wheel for the lab's default hosts files ({exc})")
        for d in (self.dir / "bin", self.lxc):
            d.mkdir(parents=True, exist_ok=True)
        self._upper_fs()
        self._fake_gpu()
        self._pct_double()
        for ctid in containers:
            self.start_container(ctid)
        self._templates()
        if EXAMPLES.is_dir():
            self.demo_repo()
            self.plain_repo()
        # hosts-bare.yaml: for a file of one's own sections (bench/gpu_*.sh)
        self.write_hosts_files(self.containers())

    def _check_tools(self) -> None:
        if os.geteuid() != 0:
            raise LabError("the namespace lab needs root (mount and PID namespaces, overlay mounts): run as root")
        missing = [t for t in ("unshare", "mount") if not shutil.which(t, path=os.environ.get("PATH", "") + ":/usr/bin:/bin")]
        if missing:
            raise LabError(f"the namespace lab needs {', '.join(missing)} (util-linux)")

    def _pct_double(self) -> None:
        init = self.dir / "bin" / "ns-init"
        init.write_text(f"#!{_system_python()}\n" + Path(__file__).with_name("ns_init.py").read_text())
        init.chmod(0o755)
        super()._pct_double()
        target = self.dir / "bin" / "pct"
        source = (target.read_text().replace('BACKEND = "lxc"', 'BACKEND = "ns"')
                  .replace('NS_INIT = "/var/lib/remote-lab/bin/ns-init"', f"NS_INIT = {str(init)!r}"))
        target.write_text(source)

    @property
    def pct(self) -> Path:
        return self.dir / "bin" / "pct"

    def _upper_fs(self) -> None:
        """Overlay needs an upper layer on a filesystem that supports it (not overlayfs itself, as a
        container image's root often is): where the lab's folder cannot hold one, a tmpfs is mounted on
        <lab>/ns (its containers then keep their files until the lab is purged or the machine restarts)."""
        if os.path.ismount(self.lxc) or _overlay_upper_works(self.lxc):
            return
        r = _run(["mount", "-t", "tmpfs", "-o", "mode=0755", "remote-lab-ns", str(self.lxc)])
        if r.returncode != 0 or not _overlay_upper_works(self.lxc):
            raise LabError(f"overlay mounts with an upper layer in {self.lxc} fail, and on a tmpfs too: "
                           f"{r.stderr.strip() or 'see dmesg'}; set REMOTE_LAB_DIR to a folder on ext4 or xfs")
        print(f"note: {self.lxc} is on a filesystem overlay cannot write to; the containers' files live on a tmpfs")

    def _container_config(self, ctid: int, reap: bool = True) -> str:
        return f"hostname: lab{ctid}\nbackend: ns\nreap: {1 if reap else 0}\n"

    def _pve_conf(self, ctid: int) -> str:
        """As the LXC lab's, plus a `devN:` line for every NVIDIA node of the machine (what a Proxmox GPU container
        configured with `devN` passthrough has: the container's only way to its GPUs, written once). With GPUs the
        uvm nodes are always named: where the machine has not made them yet, the start fails naming the node
        (`nvidia-modprobe -u -c 0` makes them), not a container whose CUDA cannot start."""
        import glob
        import stat

        if self.gpu_sysroot_path():  # a simulated driver: containers get its nodes only through devN lines of their own
            return super()._pve_conf(ctid)
        nodes = [n for n in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*"))
                 if os.path.exists(n) and stat.S_ISCHR(os.stat(n).st_mode)]
        if any(n[len("/dev/nvidia"):].isdigit() for n in nodes):
            nodes += [n for n in ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools") if n not in nodes]
        return super()._pve_conf(ctid) + "".join(f"dev{i}: {n}\n" for i, n in enumerate(nodes))

    def start_container(self, ctid: int, reap: bool = True) -> None:
        """Start container `ctid` (idempotent); with reap=False its PID 1 never reaps orphans."""
        ct = self.lxc / str(ctid)
        self._write_etc_hosts(ct, ctid)  # as Proxmox does (and the LXC lab): its own name only
        (ct / "upper" / "etc" / "hostname").write_text(f"lab{ctid}\n")
        (ct / "config").write_text(self._container_config(ctid, reap))
        self._write_pve_conf(ct, ctid)
        if self.state(ctid) == "RUNNING":
            return
        r = self.run_pct("start", str(ctid))
        if r.returncode != 0:
            raise LabError(f"container {ctid} failed to start: {r.stderr.strip()}")

    def stop_container(self, ctid: int) -> None:
        if self.state(ctid) == "RUNNING":
            self.run_pct("stop", str(ctid))

    def run_pct(self, *args: str) -> subprocess.CompletedProcess:
        return _run([str(self.pct), *args], cwd="/")

    def state(self, ctid: int) -> str:
        if not (self.lxc / str(ctid) / "config").exists() or not self.pct.exists():
            return "STOPPED"
        return "RUNNING" if self.run_pct("status", str(ctid)).stdout.strip() == "status: running" else "STOPPED"

    def init_pid(self, ctid: int) -> int | None:
        try:
            return int((self.lxc / str(ctid) / "init.pid").read_text()) if self.state(ctid) == "RUNNING" else None
        except (OSError, ValueError):
            return None

    def down(self, purge: bool = False) -> None:
        """Stop the containers; with purge, also delete everything they wrote (and the tmpfs, if one)."""
        for ctid in self.containers():
            self.stop_container(ctid)
        if purge and self.dir.exists():
            if os.path.ismount(self.lxc):
                _run(["umount", "-l", str(self.lxc)])
            shutil.rmtree(self.dir)

    def hosts_yaml(self, containers=DEFAULT_CONTAINERS, second=()) -> str:
        """A hosts file for this lab: the host is this machine (`local: true`), pct the lab's double."""
        if second:
            self.second()
        lines = ["hosts:", f"  {self.node}:", "    address: 127.0.0.1", "    local: true", f"    pct: {self.pct}",
                 "containers:"]
        lines += [f"  {c}:\n    host: {self.node}\n    address: {address(c)}" for c in containers]
        return "\n".join(lines) + "\n"




def _overlay_upper_works(folder: Path) -> bool:
    """Whether an overlay mount with its upper layer in `folder` succeeds (tried in a throwaway mount namespace)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".probe-") as d:
        for sub in ("lower", "upper", "work", "merged"):
            os.mkdir(os.path.join(d, sub))
        r = _run(["unshare", "--mount", "--propagation", "private", "mount", "-t", "overlay", "overlay", "-o",
                  f"lowerdir={d}/lower,upperdir={d}/upper,workdir={d}/work", f"{d}/merged"])
        return r.returncode == 0
