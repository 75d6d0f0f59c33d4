"""The GPU config writer as data: a host's facts and a selection in, devN/mpN lines and `pct set` plans out."""

import pytest

from remote.errors import GpuConfigError
from remote.ops import gpuconfig as gc

from support import gpu_host as host  # noqa: E402
from support import gpu_sample as data  # noqa: E402

TWO_GPUS = data("nodes-509.txt") + "/dev/nvidia1 character special file c3 1 0 0 666\n"
SMI_TWO = "0, 00000000:01:00.0, Enabled, [N/A], 580.95.05\n1, 00000000:02:00.0, Enabled, [N/A], 580.95.05\nrc=0"
MIG_NODES = (data("nodes-509.txt") + "/dev/nvidia-caps/nvidia-cap1 character special file 1fe 1 0 0 400\n"
             "/dev/nvidia-caps/nvidia-cap2 character special file 1fe 2 0 0 444\n")
MIG_SMI = "0, 00000000:01:00.0, Enabled, Enabled, 580.95.05\nrc=0"
NO_DRIVER = dict(proc="", sys_version="", modinfo="", modules="", devices="", nodes="", smi="")


def lines(selection, h, **kw) -> list[str]:
    return gc.spec_lines(gc.wanted_lines(gc.parse_selection(selection), h, **kw))


def test_all_passes_every_gpu_and_the_control_nodes_with_the_video_gid():
    assert lines("all", host(nodes=TWO_GPUS, smi=SMI_TWO)) == [
        "dev0: /dev/nvidia0,gid=44,mode=0666", "dev1: /dev/nvidia1,gid=44,mode=0666",
        "dev2: /dev/nvidiactl,gid=44,mode=0666", "dev3: /dev/nvidia-uvm,gid=44,mode=0666",
        "dev4: /dev/nvidia-uvm-tools,gid=44,mode=0666", "mp0: /var/lib/remote/nvidia,mp=/opt/remote/nvidia,ro=1"]


def test_a_list_passes_exactly_the_chosen_gpus():
    got = lines("1", host(nodes=TWO_GPUS, smi=SMI_TWO), gid=993)
    assert got[0] == "dev0: /dev/nvidia1,gid=993,mode=0666"
    assert not any("/dev/nvidia0," in line for line in got)


def test_none_writes_nothing_even_on_a_host_without_a_driver():
    assert lines("none", host(**NO_DRIVER)) == []
    assert gc.wanted_lines(gc.parse_selection(None), host()).empty


def test_a_gpu_index_the_host_lacks_is_refused_naming_what_it_has():
    with pytest.raises(GpuConfigError, match=r"no GPU 3 \(it has: 0, 1\)"):
        lines("0,3", host(nodes=TWO_GPUS, smi=SMI_TWO))


def test_gpu_on_a_host_without_the_module_is_refused():
    with pytest.raises(GpuConfigError, match="no NVIDIA kernel module loaded.*--gpu none") as e:
        lines("all", host(**NO_DRIVER))
    assert e.value.exit_code == 2


@pytest.mark.parametrize("bad", ["0;1", "gpu0", "-1", "0,,1", "al"])
def test_a_malformed_selection_is_one_clear_line(bad):
    with pytest.raises(GpuConfigError, match="write all, none or GPU indices"):
        gc.parse_selection(bad)


def test_the_uvm_nodes_are_wanted_even_before_the_host_has_made_them():
    no_uvm = "\n".join(line for line in data("nodes-509.txt").splitlines() if "uvm" not in line)
    got = lines("0", host(nodes=no_uvm))
    assert "dev2: /dev/nvidia-uvm,gid=44,mode=0666" in got


# Two GPUs with MIG on: GPU 0's instance gi1/ci0 and GPU 1's gi2/ci0 made (nvidia-smi mig -cgi ... -C).
MIG_TWO = TWO_GPUS + "".join(f"/dev/nvidia-caps/nvidia-cap{m} character special file 1fe {m:x} 0 0 {mode}\n"
                             for m, mode in ((1, 400), (2, 444), (12, 444), (13, 444), (147, 444), (148, 444)))
MIG_MINORS = "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu1/gi2/access 147\n" \
             "gpu1/gi2/ci0/access 148\n"


def mig_host(minors=MIG_MINORS):
    from remote.facts import gpu
    from support import GPU_MARK, gpu_host_text

    smi = "0, 00000000:01:00.0, Enabled, Enabled, 580.95.05\n1, 00000000:02:00.0, Enabled, Enabled, 580.95.05\nrc=0"
    text = gpu_host_text(nodes=MIG_TWO, smi=smi, end=False) + f"{GPU_MARK} mig-minors\n{minors}{GPU_MARK} end\n"
    return gpu.parse_host(text, GPU_MARK)


@pytest.mark.fault("`remote create --gpu 1` on a MIG host",
                   promise="only GPU 1's instance access nodes are passed (0444); never nvidia-cap1/cap2 (create and "
                           "destroy instances others share, monitor) nor another GPU's")
def test_mig_passes_only_the_chosen_gpus_instance_caps():
    got = lines("1", mig_host())
    caps = [line for line in got if "caps" in line]
    assert caps == ["dev4: /dev/nvidia-caps/nvidia-cap147,gid=44,mode=0444",
                    "dev5: /dev/nvidia-caps/nvidia-cap148,gid=44,mode=0444"], got
    assert len([line for line in lines("all", mig_host()) if "caps" in line]) == 4
    assert not any("caps" in line for line in lines("0", mig_host(minors="")))  # not known: none passed
    assert not any("caps" in line for line in lines("0", host(nodes=MIG_NODES)))


def test_never_a_cgroup_key_nor_an_idmap_privileged_or_not():
    for selection in ("all", "0"):
        for line in lines(selection, host(nodes=MIG_NODES, smi=MIG_SMI)):
            assert not line.startswith("lxc."), line


def test_the_gid_is_the_containers_own_not_a_mapped_host_id():
    with pytest.raises(GpuConfigError, match="0..65535"):
        gc.dev_value("/dev/nvidia0", 100044)


# -- the plan: the container's config now -> `pct set` arguments -----------------------------------------------

def wanted(selection="0", **kw) -> gc.Wanted:
    return gc.wanted_lines(gc.parse_selection(selection), host(**kw))


NEW = "arch: amd64\ncores: 4\nhostname: t\nrootfs: local:200/vm-200-disk-0.raw,size=8G\nunprivileged: 1\n"


def test_a_new_container_gets_every_line():
    p = gc.plan(NEW, wanted())
    assert p.pct_args() == ["--dev0", "/dev/nvidia0,gid=44,mode=0666", "--dev1", "/dev/nvidiactl,gid=44,mode=0666",
                            "--dev2", "/dev/nvidia-uvm,gid=44,mode=0666", "--dev3",
                            "/dev/nvidia-uvm-tools,gid=44,mode=0666", "--mp0",
                            "/var/lib/remote/nvidia,mp=/opt/remote/nvidia,ro=1"]
    assert p.diff[0] == "+ dev0: /dev/nvidia0,gid=44,mode=0666"


def test_a_config_already_as_wanted_plans_nothing():
    text = NEW + "\n".join(gc.spec_lines(wanted())) + "\n"
    p = gc.plan(text, wanted())
    assert p.empty and p.pct_args() == [] and p.diff == ()


def test_devn_lines_of_the_old_form_are_rewritten_in_place_and_a_deleted_one_added():
    text = data("pct-config-dev.txt").replace("dev2: /dev/nvidia-uvm\n", "")  # the uvm line deleted by hand
    p = gc.plan(text, wanted())
    assert ("dev0", "/dev/nvidia0,gid=44,mode=0666") in p.set
    assert ("dev2", "/dev/nvidia-uvm,gid=44,mode=0666") in p.set  # the lowest free devN
    assert p.delete == ()


def test_an_unwanted_gpu_and_a_duplicate_are_deleted_and_other_devices_kept():
    text = NEW + "dev0: /dev/nvidia1,gid=44,mode=0666\ndev1: /dev/fuse\ndev5: /dev/nvidia0,gid=44,mode=0666\n" \
                 "dev6: /dev/nvidia0\n"
    p = gc.plan(text, wanted())
    assert set(p.delete) == {"dev0", "dev6"}
    assert "dev1" not in dict(p.set) and "dev1" not in p.delete  # /dev/fuse is not ours
    assert "dev5" not in dict(p.set)  # already right
    args = p.pct_args()
    assert args[-2:] == ["--delete", "dev0,dev6"]
    assert not set(dict(p.set)) & set(p.delete)  # pct refuses to set and delete one key


def test_gpu_none_removes_every_gpu_line_and_the_mount():
    text = NEW + "\n".join(gc.spec_lines(wanted())) + "\nmp1: local:200/vm-200-disk-1.raw,mp=/data\n"
    p = gc.plan(text, gc.Wanted())
    assert p.delete == ("dev0", "dev1", "dev2", "dev3", "mp0")
    assert p.set == ()


def test_raw_nvidia_lines_and_cgroup_v1_keys_are_listed_to_drop():
    p = gc.plan(data("pct-config-raw.txt") + "lxc.cgroup.devices.allow: c 195:* rwm\n", wanted())
    assert "lxc.cgroup.devices.allow: c 195:* rwm" in p.raw
    assert any(line.startswith("lxc.mount.entry: /dev/nvidia0") for line in p.raw)
    assert not any(a.startswith("--lxc") for a in p.pct_args())


def test_the_mount_is_rewritten_when_it_differs():
    text = NEW + "mp3: /var/lib/remote/nvidia,mp=/usr/lib/nvidia\n"
    p = gc.plan(text, wanted())
    assert ("mp3", "/var/lib/remote/nvidia,mp=/opt/remote/nvidia,ro=1") in p.set


def test_a_snapshot_section_is_not_the_current_config():
    text = NEW + "\n[before]\ndev0: /dev/nvidia0,gid=44,mode=0666\n"
    assert gc.plan(text, wanted()).set[0][0] == "dev0"
