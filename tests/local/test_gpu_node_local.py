"""remote/sh/gpu-node.sh (gpu fix's repair in place) against real mounts and device nodes, in a mount
namespace of its own (unshare -m, as root): a bind of /dev/null over the node unmounted, layer by layer; a
wrong node made again only where MAKE is 1; exit 3 naming what the node still is."""

import os
import shutil
import subprocess

import pytest
from support import needs

from remote import shell


@pytest.fixture(autouse=True)
def root_and_unshare():
    """Root and unshare (a mount namespace of its own): skipped without them, a failure under CI=true."""
    needs(os.geteuid() == 0, "root (a mount namespace of its own)", "run the tests as root, as .ci/run does")
    needs(shutil.which("unshare") is not None, "unshare", "apt-get install util-linux")


def run_in_namespace(tmp_path, setup: str, *args: str) -> subprocess.CompletedProcess:
    """`setup` (shell, $d the folder on a private tmpfs), then gpu-node.sh with `args` ($d/... paths), then the
    node's stat: all in one private mount namespace, so no mount outlives it."""
    script = tmp_path / "gpu-node.sh"
    script.write_text(shell.load("gpu-node"))
    body = (f'd={tmp_path}/dev; mkdir -p "$d"; mount -t tmpfs t "$d"; {setup}; bash {script} "$@"; rc=$?; '
            'echo "rc=$rc"; stat -c "%F %t:%T %a %g" "$1" 2>&1; umount -l "$d"')
    return subprocess.run(["unshare", "-m", "--propagation", "private", "bash", "-c", body, "inner",
                           *[a.replace("$d", f"{tmp_path}/dev") for a in args]],
                          capture_output=True, text=True, timeout=60)


def test_a_node_bound_over_twice_is_unmounted_to_the_right_node(tmp_path):
    r = run_in_namespace(tmp_path, 'mknod -m 0666 "$d/nvidia-uvm" c 509 0; mount --bind /dev/null "$d/nvidia-uvm"; '
                                   'mount --bind /dev/zero "$d/nvidia-uvm"', "$d/nvidia-uvm", "509", "0", "0666", "44", "0")
    assert r.stdout.count("unmounted ") == 2 and "rc=0" in r.stdout, r.stdout + r.stderr
    assert "character special file 1fd:0 666 0" in r.stdout


def test_a_wrong_node_is_made_again_only_where_make_is_asked(tmp_path):
    r = run_in_namespace(tmp_path, 'mknod -m 0666 "$d/nvidia-uvm" c 510 0', "$d/nvidia-uvm", "509", "0", "0666", "44", "0")
    assert "rc=3" in r.stdout and "still character special file 1fe:0" in r.stderr and "509:0" in r.stderr
    r = run_in_namespace(tmp_path, 'mknod -m 0666 "$d/nvidia-uvm" c 510 0; mount --bind /dev/null "$d/nvidia-uvm"',
                         "$d/nvidia-uvm", "509", "0", "0666", "44", "1")
    assert "unmounted " in r.stdout and "made " in r.stdout and "rc=0" in r.stdout, r.stdout + r.stderr
    assert "character special file 1fd:0 666 44" in r.stdout


def test_a_missing_node_is_made_where_make_is_asked(tmp_path):
    r = run_in_namespace(tmp_path, "true", "$d/nvidia-caps/nvidia-cap12", "508", "12", "0444", "44", "1")
    assert "rc=0" in r.stdout and "character special file 1fc:c 444 44" in r.stdout, r.stdout + r.stderr
