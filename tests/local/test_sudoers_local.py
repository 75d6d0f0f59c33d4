"""`remote init --sudoers USER --hosts FILE`: one drop-in per `sudo: true` host, with that host's containers
only, and never naming a program that anyone but root could replace (asked of the host itself: here, local
hosts, so rootchain.sh runs on this machine as it would on a Proxmox host)."""

from __future__ import annotations

import os

import pytest

from remote import sudo
from remote.cli import run as cli_run


def write(tmp_path, text: str):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(text)
    return hosts


@pytest.mark.fault("init --sudoers", promise="`remote init --sudoers USER --hosts FILE` refuses a host whose pct (or "
                   "pvesh/pvesm beside it) lies under a folder that anyone but root can write, naming the host and "
                   "the path: such a rule would be a root grant")
def test_a_pct_in_a_folder_others_can_write_is_refused_naming_host_and_path(tmp_path, capsys):
    open_folder = tmp_path / "bin"
    open_folder.mkdir()
    os.chmod(open_folder, 0o777)
    hosts = write(tmp_path, f"hosts:\n  lab: {{local: true, sudo: true, pct: {open_folder}/pct}}\n"
                            "containers:\n  200: {host: lab}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing a user could pipe into /etc/sudoers.d/
    assert "hosts.lab.pct" in err and "on lab," in err and "writable by others" in err
    assert str(open_folder) in err and "Traceback" not in err


@pytest.mark.fault("init --sudoers", promise="the drop-in is built only from `sudo: true` hosts, one per host, each "
                   "allowing only the containers the file places on that host")
def test_one_drop_in_per_sudo_host_with_only_its_containers(tmp_path, capsys):
    hosts = write(tmp_path, "hosts:\n"
                            "  pve1: {local: true, sudo: true, pct: /usr/sbin/pct}\n"
                            "  pve2: {local: true, sudo: true, pct: /usr/sbin/pct}\n"
                            f"  lab: {{local: true, pct: {tmp_path}/pct}}\n"  # root login, a writable folder: not named
                            "containers:\n  200: {host: pve1}\n  300: {host: pve2}\n  400: {host: lab}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 2
    err = capsys.readouterr().err
    assert "name the host" in err and "pve1, pve2" in err
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts), "--host", "pve1"]) == 0
    out = capsys.readouterr().out
    assert out == sudo.sudoers("trainer", ["/usr/sbin/pct"], [200], host="pve1")
    rule = sudo.rule_of(out, "trainer")
    assert rule[0] == "/usr/sbin/pct ^exec (200) --keep-env 0 -- .+$"
    assert not any(str(tmp_path) in r for r in rule)
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts), "--host", "lab"]) == 2
    assert "hosts.lab.sudo" in capsys.readouterr().err


def test_a_file_without_a_sudo_host_gets_no_drop_in(tmp_path, capsys):
    hosts = write(tmp_path, "hosts:\n  pve1: {local: true}\ncontainers:\n  200: {host: pve1}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "no host has `sudo: true`" in err


@pytest.mark.fault("init --sudoers", promise="a `sudo: true` host the file places no container on gets no drop-in "
                   "(one with no ids would allow every container of the host), in one line, exit 2")
def test_a_sudo_host_without_containers_gets_no_drop_in(tmp_path, capsys):
    hosts = write(tmp_path, "hosts:\n  pve1: {local: true, sudo: true, pct: /usr/sbin/pct}\n  pve2: {local: true}\n"
                            "containers:\n  300: {host: pve2}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "none is on host pve1" in err and "Traceback" not in err
