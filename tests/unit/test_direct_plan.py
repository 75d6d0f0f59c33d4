"""The ssh command line of a cold one-off `remote exec` (remote.transport.direct.plan): exactly what remote
resolves for the host (its address, port, user, key and known_hosts), nothing of ssh's own configuration,
host keys checked and never added or updated; no plan (the usual path) where ssh cannot do as remote does."""

from __future__ import annotations

import pytest

from remote.config import Host
from remote.transport import direct


def options(argv) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-o")


@pytest.mark.fault("A cold one-off `remote exec` (no kept connection)",
                   "its one command over OpenSSH's ssh (what the command by hand pays), its output and exit status "
                   "exactly; the keeper starts behind it and the next exec is warm through it (bench/oneoff.py)")
def test_the_plan_is_the_hosts_entry_and_checks_host_keys_strictly(tmp_path, monkeypatch):
    key = tmp_path / "id"
    key.write_text("x")
    known = tmp_path / "known"
    known.write_text("[10.0.0.5]:2222 ssh-ed25519 AAAA\n")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    p = direct.plan(Host("pve1", "10.0.0.5", port=2222, user="trainer", key_file=str(key), known_hosts=str(known)),
                    ssh_config="")
    assert p is not None
    argv = list(p.argv)
    assert argv[1:3] == ["-F", "/dev/null"] and argv[-2:] == ["--", "10.0.0.5"]
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "trainer"
    assert argv[argv.index("-i") + 1] == str(key) and argv.count("-i") == 1
    o = options(argv)
    assert {k: o[k] for k in ("BatchMode", "StrictHostKeyChecking", "UpdateHostKeys", "UserKnownHostsFile",
                              "GlobalKnownHostsFile", "IdentitiesOnly")} == {
        "BatchMode": "yes", "StrictHostKeyChecking": "yes", "UpdateHostKeys": "no", "UserKnownHostsFile": str(known),
        "GlobalKnownHostsFile": "/dev/null", "IdentitiesOnly": "yes"}
    assert p.env is not None and "SSH_AUTH_SOCK" not in p.env  # key_file alone, as remote offers it


def test_no_plan_where_ssh_cannot_do_as_remote_does(tmp_path, monkeypatch):
    known = tmp_path / "known"
    known.write_text("@cert-authority *.lab ssh-ed25519 AAAA\n")
    assert direct.plan(Host("h", "10.0.0.5", known_hosts=str(known)), ssh_config="") is None  # ssh would trust the CA
    jump = "Host 10.0.0.5\n  ProxyJump gate\n"
    assert direct.plan(Host("h", "10.0.0.5", known_hosts=str(tmp_path / "none")), ssh_config=jump) is None
    assert direct.plan(Host("h", "10.0.0.5", known_hosts=str(tmp_path / "a b")), ssh_config="") is None
    monkeypatch.setenv("PATH", str(tmp_path))  # no ssh here
    assert direct.plan(Host("h", "10.0.0.5", known_hosts=str(tmp_path / "none")), ssh_config="") is None


@pytest.mark.fault("A cold one-off `remote exec` to a host whose key or known_hosts path holds `%` or starts with `~`",
                   "no ssh plan (the usual path runs it): ssh would expand the path into another file than the one "
                   "remote checks the host's key with")
@pytest.mark.parametrize("path", ["kh%d", "kh%%", "~nobody/kh"])
def test_no_plan_where_ssh_would_expand_a_path_into_another(tmp_path, path):
    where = path if path.startswith("~") else str(tmp_path / path)
    assert direct.plan(Host("h", "10.0.0.5", known_hosts=where), ssh_config="") is None
    assert direct.plan(Host("h", "10.0.0.5", key_file=where, known_hosts=str(tmp_path / "kh")), ssh_config="") is None
    assert direct.plan(Host("h", "10.0.0.5", known_hosts=str(tmp_path / "kh")), ssh_config="") is not None


@pytest.mark.parametrize("host", [Host("h", "10.0.0.5"), Host("h", "pve1", port=2200, user="u", key_file="/k"),
                                  Host("h", "pve1", known_hosts="/kh", key_file="~/.ssh/id")], ids=str)
def test_without_an_ssh_config_the_plan_resolves_as_remote_does_without_paramiko(host):
    from remote.transport.sshconfig import resolve

    assert direct.plain_target(host) == resolve(host, "", local_user="nobody")


def test_a_cold_plan_imports_no_paramiko(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from remote.config import Host; from remote.transport import direct; "
            "direct.plan(Host('h', '10.0.0.5')); print('paramiko' in sys.modules)")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no ~/.ssh/config there
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                       cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert r.stdout.strip() == "False"
