"""Unit tier: the pct double's verbs that make containers (create, clone, set, template, destroy) and `pveam list`,
run in-process over a temporary lab folder: Proxmox's checks, messages and config file, with no LXC (what a
start does with the config is the lab tier's: tests/lab/test_make_lab.py)."""

import os
import sys

import pytest

from remote.lab import TEMPLATE
from remote.lab import pct_double as double

VOLID = f"local:vztmpl/{TEMPLATE}"


@pytest.fixture
def pct(tmp_path, monkeypatch, capsys):
    """Runs the double as `pct ARGS` (or `pveam ARGS`): (exit status, stdout, stderr)."""
    for name, value in (("LXC_PATH", tmp_path / "lxc"), ("LOCK_DIR", tmp_path / "lock"),
                        ("STORAGE_DIR", tmp_path / "storage")):
        monkeypatch.setattr(double, name, str(value))
    monkeypatch.setattr(double, "NODE", "pve")
    monkeypatch.setattr(double, "GPU_SYSROOT", "")
    monkeypatch.setattr(double, "BACKEND", "lxc")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))  # the double resets it
    monkeypatch.delenv("REMOTE_LAB_PVE_USER", raising=False)
    monkeypatch.delenv("REMOTE_GPU_SYSROOT", raising=False)
    running: set[str] = set()
    monkeypatch.setattr(double, "state", lambda vmid: "running" if vmid in running else "stopped")
    cache = tmp_path / "storage" / "local" / "template" / "cache"
    cache.mkdir(parents=True)
    (cache / TEMPLATE).write_bytes(b"x" * 4096)
    (tmp_path / "lxc").mkdir()

    def run(*argv, prog="pct"):
        monkeypatch.setattr(sys, "argv", [prog])
        code = 0
        try:
            double.main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        finally:
            while double.HELD:  # the config locks a pct process holds until it ends
                os.close(double.HELD.pop())
        out, err = capsys.readouterr()
        return code, out, err

    run.running = running
    run.lxc = tmp_path / "lxc"
    run.sysroot = tmp_path / "sysroot"
    return run


def conf(pct, vmid) -> str:
    return (pct.lxc / str(vmid) / "pve.conf").read_text()


def test_create_writes_the_config_as_proxmox_does(pct):
    code, out, err = pct("create", "260", VOLID, "--hostname", "gpu1", "--cores", "4", "--memory", "8192",
                         "--rootfs", "local-lvm:16", "--unprivileged", "1", "--features", "nesting=1",
                         "--net0", "name=eth0,bridge=vmbr0,ip=dhcp", "--dev0", "/dev/null,mode=0666,gid=44")
    assert code == 0, err
    assert "extracting archive" in out and "Detected container architecture: amd64" in out
    assert conf(pct, 260) == ("arch: amd64\ncores: 4\ndev0: /dev/null,gid=44,mode=0666\nfeatures: nesting=1\n"
                              "hostname: gpu1\nmemory: 8192\nnet0: name=eth0,bridge=vmbr0,ip=dhcp\nostype: debian\n"
                              "rootfs: local-lvm:vm-260-disk-0,size=16G\nunprivileged: 1\n")
    code, out, _ = pct("config", "260")
    assert out.splitlines()[-1] == "unprivileged: 1" and "rootfs: local-lvm:vm-260-disk-0,size=16G" in out
    assert pct("status", "260")[1] == "status: stopped\n"
    assert "260" in pct("list")[1]
    lxc_conf = (pct.lxc / "260" / "config").read_text()
    assert "lxc.uts.name = gpu1" in lxc_conf and f"overlay:/:{pct.lxc / '260' / 'upper'}" in lxc_conf


def test_create_refuses_with_proxmoxs_words_and_leaves_nothing(pct):
    assert pct("create", "260", VOLID)[0] == 0
    before = conf(pct, 260)
    cases = [
        (("create", "260", VOLID, "--cores", "2"), "unable to create CT 260 - CT 260 already exists on node 'pve'\n"),
        (("create", "261", "local:vztmpl/nope.tar.zst"), "unable to create CT 261 - volume 'local:vztmpl/nope.tar.zst' does not exist\n"),
        (("create", "261", "elsewhere:vztmpl/x.tar.zst"), "storage 'elsewhere' does not exist\n"),
        (("create", "261", VOLID, "--storage", "tank"), "storage 'tank' does not exist\n"),
        (("create", "261", VOLID, "--rootfs", "tank:8"), "storage 'tank' does not exist\n"),
        (("create", "261", VOLID, "--dev0", "/dev/no-such-node"), "Device /dev/no-such-node does not exist\n"),
        (("create", "261", VOLID, "--dev0", "/dev/shm"), "Path /dev/shm is not a device\n"),
    ]
    for argv, message in cases:
        code, _, err = pct(*argv)
        assert (code, err) == (255, message), argv
    for argv, line in [(("create", "261", VOLID, "--cores", "x"), "cores: type check ('integer') failed - got 'x'"),
                       (("create", "261", VOLID, "--memory", "8"), "memory: value must have a minimum value of 16"),
                       (("create", "261", VOLID, "--dev0", "/etc/passwd"), "dev0: invalid format - /etc/passwd is not a valid device path"),
                       (("create", "261", VOLID, "--dev0", "/dev/../etc/shadow"), "dev0: invalid format - /dev/../etc/shadow is not a valid device path"),
                       (("create", "261", VOLID, "--hostname", "no_underscores"), "hostname: invalid format - value does not look like a valid DNS name"),
                       (("create", "26", VOLID), "vmid: invalid format - value does not look like a valid VM ID"),
                       (("create", "261"), "ostemplate: property is missing and it is not optional")]:
        code, _, err = pct(*argv)
        assert code == 255 and err.startswith(f"400 Parameter verification failed.\n{line}\n"), (argv, err)
    assert sorted(os.listdir(pct.lxc)) == ["260"] and conf(pct, 260) == before


def test_set_devices_mount_points_and_delete(pct):
    pct("create", "260", VOLID, "--hostname", "a")
    assert pct("set", "260", "--dev0", "path=/dev/null,gid=44", "--mp0", "/srv,mp=/data,ro=1", "--cores", "2")[0] == 0
    text = conf(pct, 260)
    assert "dev0: /dev/null,gid=44\n" in text and "mp0: /srv,mp=/data,ro=1\n" in text and "cores: 2\n" in text
    assert "lxc.cgroup" not in text
    assert pct("set", "260", "--dev1", "/dev/nvidia9")[2] == "Device /dev/nvidia9 does not exist\n"
    assert pct("set", "260", "--mp1", "/srv")[2].startswith(
        "400 Parameter verification failed.\nmp1: invalid format - format error\nmp1.mp: property is missing")
    assert pct("set", "260")[2] == "no options specified\n"
    assert pct("set", "260", "--delete", "dev0,cores")[0] == 0
    assert "dev0" not in conf(pct, 260) and "cores" not in conf(pct, 260) and "mp0: /srv" in conf(pct, 260)
    assert pct("set", "260", "--delete", "rootfs")[2] == "unable to delete required option 'rootfs'\n"
    assert pct("set", "999", "--cores", "2")[2] == "Configuration file 'nodes/pve/lxc/999.conf' does not exist\n"


def test_device_passthrough_is_root_at_pam_only(pct, monkeypatch):
    """Proxmox's check_ct_modify_config_perm: no API token or other user may touch devN (nor bind mounts),
    whatever its role; pct over SSH as root is root@pam."""
    pct("create", "260", VOLID, "--dev0", "/dev/null")
    monkeypatch.setenv("REMOTE_LAB_PVE_USER", "root@pam!ci")
    denied = "403 Permission check failed (configuring device passthrough is only allowed for root@pam)\n"
    assert pct("set", "260", "--dev1", "/dev/zero")[1:] == ("", denied)
    assert pct("set", "260", "--delete", "dev0")[2] == denied
    assert pct("create", "261", VOLID, "--dev0", "/dev/null")[2] == denied
    assert pct("set", "260", "--mp0", "/srv,mp=/srv")[2] == \
        "403 Permission check failed (mount point type bind is only allowed for root@pam)\n"
    assert pct("set", "260", "--cores", "2")[0] == 0  # the rest is the role's business
    assert "dev0: /dev/null\n" in conf(pct, 260) and "dev1" not in conf(pct, 260)


def test_devices_resolve_under_the_gpu_sysroot(pct, monkeypatch):
    """With a fake driver (REMOTE_GPU_SYSROOT), every devN path is a path in its root: the host's /dev/null is
    not there, a regular file there is no device."""
    (pct.sysroot / "dev").mkdir(parents=True)
    (pct.sysroot / "dev" / "nvidia0").write_text("")
    monkeypatch.setenv("REMOTE_GPU_SYSROOT", str(pct.sysroot))
    pct("create", "260", VOLID)
    assert pct("set", "260", "--dev0", "/dev/null")[2] == "Device /dev/null does not exist\n"
    assert pct("set", "260", "--dev0", "/dev/nvidia0")[2] == "Path /dev/nvidia0 is not a device\n"


def test_destroy_template_and_clone(pct):
    pct("create", "260", VOLID, "--hostname", "base", "--dev0", "/dev/null,gid=44")
    (pct.lxc / "260" / "upper" / "root").mkdir(parents=True)
    (pct.lxc / "260" / "upper" / "root" / "made-inside").write_text("x")
    pct.running.add("260")
    assert pct("destroy", "260")[2] == "CT 260 is running - destroy failed\n"
    assert pct("template", "260")[2] == "you can't convert a CT to template if the CT is running\n"
    pct.running.clear()
    raw = "lxc.mount.entry: /dev/null dev/null2 none bind,optional,create=file\n"  # written by hand, as on a host
    (pct.lxc / "260" / "pve.conf").write_text(conf(pct, 260) + raw)
    assert pct("template", "260")[0] == 0 and "template: 1\n" in conf(pct, 260)
    assert pct("start", "260")[2] == "you can't start a CT if it's a template\n"
    assert pct("clone", "260", "261")[2] == "Linked clone feature for 'local:260/vm-260-disk-0.raw' is not available\n"
    code, out, err = pct("clone", "260", "261", "--full", "--hostname", "copy")
    assert code == 0 and out == "create full clone of drive rootfs (local:260/vm-260-disk-0.raw)\n", err
    assert conf(pct, 261) == ("arch: amd64\ndev0: /dev/null,gid=44\nhostname: copy\nostype: debian\n"
                              "rootfs: local:261/vm-261-disk-0.raw,size=4G\n" + raw)
    assert (pct.lxc / "261" / "upper" / "root" / "made-inside").read_text() == "x"
    assert pct("clone", "260", "261", "--full")[2] == "unable to create CT 261 - CT 261 already exists on node 'pve'\n"
    assert pct("clone", "260", "262", "--storage", "local-zfs")[0] == 0  # a linked clone where the storage can
    for vmid in ("260", "261", "262"):
        assert pct("destroy", vmid, "--purge")[0] == 0
    assert os.listdir(pct.lxc) == []
    assert pct("destroy", "260")[2] == "Configuration file 'nodes/pve/lxc/260.conf' does not exist\n"


def test_pveam_lists_the_storages_templates(pct):
    code, out, _ = pct("list", "local", prog="pveam")
    assert code == 0 and out.splitlines() == [f"{'NAME':<70} SIZE     ", f"{VOLID:<70} 0.00MB   "]
    assert pct("list", "local-lvm", prog="pveam")[1] == ""  # no template content there
    assert pct("list", "tank", prog="pveam")[2] == "storage 'tank' does not exist\n"


@pytest.mark.fault("A lab container whose Proxmox config sets `memory` (and `swap`)",
                   promise="pct start writes them as the container's cgroup memory limit, as Proxmox does: v2's "
                           "memory.max and memory.swap.max, or v1's limit_in_bytes (memsw only with swap accounting)")
def test_memory_and_swap_become_the_containers_cgroup_limit(tmp_path):
    from remote.lab import pct_make

    assert pct_make.memory_lines({}, str(tmp_path)) == []  # unset: unlimited (Proxmox's default is 512 MiB)
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert pct_make.memory_lines({"memory": "1024", "swap": "0"}, str(v2)) == [
        "lxc.cgroup2.memory.max = 1073741824", "lxc.cgroup2.memory.swap.max = 0"]
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "unified").mkdir()
    (v1 / "unified" / "cgroup.controllers").write_text("hugetlb\n")  # a hybrid host: memory is still v1
    assert pct_make.memory_lines({"memory": "64"}, str(v1)) == ["lxc.cgroup.memory.limit_in_bytes = 67108864"]
    (v1 / "memory" / "memory.memsw.limit_in_bytes").write_text("max\n")
    assert pct_make.memory_lines({"memory": "64"}, str(v1))[1] == "lxc.cgroup.memory.memsw.limit_in_bytes = 603979776"
