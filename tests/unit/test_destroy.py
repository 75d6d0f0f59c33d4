"""remote destroy's parts that need no host: the hosts-file entry removed as text (its comments, its id in groups,
default_container; everything else kept), a file it cannot edit refused unchanged, and a sudo login refused
before any command runs."""

from __future__ import annotations

import pytest

import remote
from remote.errors import RootRequired
from remote.ops import hostsinit
from remote.testing import MockTransport, Reply

FILE = """\
# my fleet
hosts:
  pve1: {address: pve1}
containers:
  # the drafter box
  200: {host: pve1}   # ct200, running
  # made by remote create
  301:  # ct301
    host: pve1
    # GPU (pct config):
    #   dev0: /dev/nvidia0

  302: {host: pve1}
groups:
  pair: [200, 301]
  three:
    - 200
    - 301
    - 302
default_container: 301
train: {command: python train.py}  # how to train
"""


def test_the_entry_goes_with_its_comments_and_its_id_in_groups(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text(FILE)
    path.chmod(0o600)
    removed = hostsinit.remove_container(str(path), 301)
    assert removed == ("  # made by remote create", "  301:  # ct301", "    host: pve1", "    # GPU (pct config):",
                       "    #   dev0: /dev/nvidia0", "  pair: [200, 301]", "    - 301", "default_container: 301")
    assert path.read_text() == FILE.replace(
        "  # made by remote create\n  301:  # ct301\n    host: pve1\n    # GPU (pct config):\n    #   dev0: /dev/nvidia0\n",
        "").replace("[200, 301]", "[200]").replace("    - 301\n", "").replace("default_container: 301\n", "")
    assert path.stat().st_mode & 0o777 == 0o600
    assert hostsinit.remove_container(str(path), 999) == ()


@pytest.mark.fault("remote destroy of an id that is also an exit status", promise="only the entry and the id in "
                   "`groups:` lists go: train.restart_on's [137, 200] (or a `- 200` item outside groups) is kept")
def test_an_id_in_a_list_outside_groups_is_kept(tmp_path):
    path = tmp_path / "hosts.yaml"
    text = FILE.replace("train: {command: python train.py}  # how to train\n",
                        "train:\n  command: python train.py\n  restarts: 2\n  restart_on: [137, 200]\n")
    path.write_text(text)
    removed = hostsinit.remove_container(str(path), 200)
    assert "  restart_on: [137, 200]" not in removed
    assert "  restart_on: [137, 200]\n" in path.read_text() and "  pair: [301]\n" in path.read_text()


def test_a_file_it_cannot_edit_safely_is_refused_unchanged(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text(FILE.replace("  pair: [200, 301]", "  solo: [301]"))
    before = path.read_text()
    with pytest.raises(remote.ConfigError, match="solo.*remove that group by hand"):
        hostsinit.remove_container(str(path), 301)
    inline = "hosts: {pve1: {address: pve1}}\ncontainers: {200: {host: pve1}}\n"
    path.write_text(inline)
    with pytest.raises(remote.ConfigError, match="inline"):
        hostsinit.remove_container(str(path), 200)
    assert path.read_text() == inline and before != inline
    path.write_text(FILE)
    assert hostsinit.remove_container(str(path), 302, write=False) and path.read_text() == FILE


def test_a_sudo_login_is_refused_before_anything_runs():
    mock = MockTransport(lambda command: Reply(status=1, stderr="not expected"))
    hosts = {"hosts": {"pve1": {"address": "pve1", "user": "trainer", "sudo": True}}, "containers": {200: {"host": "pve1"}}}
    with remote.open(hosts, transport=mock) as fleet, pytest.raises(RootRequired, match="sudo: true"):
        fleet.destroy(200)
    assert mock.calls == []
