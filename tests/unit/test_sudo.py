"""`sudo: true`: the one program list, the drop-in printed from it, the argv built from it, sudo's failures;
the snapshot helpers as data (remote.ops.snapshots)."""

import datetime

import pytest

from remote import config as cfg
from remote import sudo
from remote.cli import run as cli_run
from remote.errors import ConfigError, HostPermissionError
from remote.lab.testing import Expect, FakeTransport
from remote.ops import snapshots as snaps
from remote.transport.pct import Container
from remote.transport.session import MUX_PYTHON


def host(**keys):
    return cfg.parse({"hosts": {"pve1": {"address": "pve1", **keys}}, "containers": {200: {"host": "pve1"}}},
                     "hosts.yaml").hosts["pve1"]


def test_the_drop_in_allows_exactly_the_root_programs_of_the_list():
    rule = sudo.rule_of(sudo.sudoers("trainer", ["/usr/sbin/pct"]), "trainer")
    expected = [p.path + ("" if p.args is None else " " + " ".join(p.args)) for p in sudo.PROGRAMS if p.root]
    assert rule == expected and rule  # pct with any arguments, pvesm only as `pvesm status`
    assert not any(p.path in " ".join(rule) for p in sudo.PROGRAMS if not p.root)  # the mux's python3: never root
    # Every root command remote builds for a sudo host is one the rule allows, at its exact path.
    h = host(sudo=True, user="trainer")
    for p in sudo.PROGRAMS:
        if p.root:
            argv = sudo.host_argv(h, p.name, *(p.args or ("list",)))
            assert argv[:2] == ["sudo", "-n"]
            assert any(" ".join(argv[2:]) == r or (" " not in r and argv[2] == r) for r in rule), argv
    assert MUX_PYTHON == sudo.program("python3").path


def test_the_drop_in_names_the_hosts_files_pct_and_programs_beside_it():
    text = sudo.sudoers("trainer", ["/opt/pve/bin/pct", "/usr/sbin/pct"])
    guests = "pvesh get /cluster/resources --type vm --output-format json"  # a cluster's guest list (remote.cluster)
    assert sudo.rule_of(text, "trainer") == ["/opt/pve/bin/pct", "/opt/pve/bin/pvesm status", f"/opt/pve/bin/{guests}",
                                             "/usr/sbin/pct", "/usr/sbin/pvesm status", f"/usr/bin/{guests}"]
    assert all(line.startswith(("#", "Defaults:trainer ", "trainer ")) for line in text.splitlines())
    with pytest.raises(ValueError):
        sudo.sudoers("bad user;id")


@pytest.mark.fault("init --sudoers", "`remote init --sudoers USER` prints only the drop-in on stdout (advice on stderr "
                   "or as # comments), so `> /etc/sudoers.d/remote` works")
def test_init_sudoers_prints_only_the_drop_in(tmp_path, capsys):
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  pve1: {address: pve1, sudo: true, pct: /srv/lab/bin/pct}\ncontainers:\n  200: {host: pve1}\n")
    assert cli_run(["init", "--sudoers", "trainer", "--hosts", str(hosts)]) == 0
    out, err = capsys.readouterr()
    assert out == sudo.sudoers("trainer", ["/srv/lab/bin/pct"])
    assert "visudo -cf" in out + err
    assert sudo.rule_of(out, "trainer") == ["/srv/lab/bin/pct", "/srv/lab/bin/pvesm status",
                                            "/srv/lab/bin/pvesh get /cluster/resources --type vm --output-format json"]


def test_a_sudo_host_calls_pct_through_sudo_n_at_its_exact_path():
    assert host(sudo=True).pct == "sudo -n /usr/sbin/pct"
    assert host(sudo=True, pct="/opt/bin/pct").pct == "sudo -n /opt/bin/pct"
    assert host().pct == "pct" and sudo.host_argv(host(), "pvesm", "status") == ["pvesm", "status"]
    with pytest.raises(ValueError):  # nothing but the one argument the rule allows
        sudo.host_argv(host(sudo=True), "pvesm", "set", "local")


@pytest.mark.fault("sudo: true with a pct command line", "hosts.NAME.pct must be pct's exact path with sudo: true "
                   "(remote adds `sudo -n`): exit 2 naming the key")
@pytest.mark.parametrize("pct", ["sudo -n /usr/sbin/pct", "bin/pct", "/usr/bin/sudo"])
def test_sudo_with_a_pct_that_is_no_exact_path_is_refused(pct):
    with pytest.raises(ConfigError, match=r"hosts\.pve1\.pct: with sudo: true, pct is the exact path"):
        host(sudo=True, pct=pct)


def sudo_container(t):
    return Container(t, 200, pct="sudo -n /usr/sbin/pct")


@pytest.mark.fault("sudo rule without a program", "a program the sudo rule does not allow is named (told apart from "
                   "a rule that wants a password by `sudo -n -l`)")
def test_a_program_the_rule_lacks_is_named():
    t = FakeTransport([Expect(lambda a: a[:4] == ("sudo", "-n", "/usr/sbin/pct", "status"), 1,
                              stderr="sudo: a password is required\n"),
                       Expect(("sudo", "-n", "-l", "/usr/sbin/pct", "status", "200"), 1)])
    with pytest.raises(HostPermissionError, match=r"does not allow .* /usr/sbin/pct status.*the sudo rule lacks it"):
        sudo_container(t).status()
    t.assert_done()


@pytest.mark.fault("sudo wants a password", "a sudo rule that wants a password fails at once (`sudo -n`, never a "
                   "prompt), named, with the drop-in to install")
def test_a_rule_that_wants_a_password_is_named():
    t = FakeTransport([Expect(lambda a: a[:3] == ("sudo", "-n", "/usr/sbin/pct"), 1,
                              stderr="sudo: a password is required\n"),
                       Expect(lambda a: a[:3] == ("sudo", "-n", "-l"), 1, stderr="sudo: a password is required\n")])
    with pytest.raises(HostPermissionError, match=r"wants a password .*NOPASSWD.*init --sudoers"):
        sudo_container(t).run(["true"])


@pytest.mark.fault("non-root host user without sudo", "pct's `please run as root` names `sudo: true` and the drop-in")
def test_please_run_as_root_names_the_key_and_the_drop_in():
    t = FakeTransport([Expect(lambda a: a[0] == "pct", 255, stderr="please run as root\n")])
    with pytest.raises(HostPermissionError, match=r"`sudo: true` for hosts\.fake .*remote init --sudoers"):
        Container(t, 200).status()


LISTING = """\
`-> before-upgrade          2026-11-30 10:00:00  by hand
 `-> remote-20261201-1      2026-12-01 09:00:00  before deploy of 1111111111aa
  `-> remote-20261201-2     2026-12-01 09:30:00  before deploy of 2222222222bb
   `-> remote-20261201-3    2026-12-01 10:00:00  before deploy of 3333333333cc
    `-> remote-20261201-4   2026-12-01 11:00:00  before deploy of 4444444444dd
     `-> remote-20261201-9x 2026-12-01 11:30:00  no-description
      `-> current           You are here!
"""


def test_listsnapshot_parsed_and_only_remotes_own_pruned():
    found = snaps.parse_listsnapshot(LISTING)
    assert [s.name for s in found][:2] == ["before-upgrade", "remote-20261201-1"]
    assert [s.ours for s in found] == [False, True, True, True, True, False]
    assert found[-1].description == ""
    assert [s.name for s in snaps.to_delete(found, 3)] == ["remote-20261201-1"]
    assert snaps.next_name(found, datetime.date(2026, 12, 1)) == "remote-20261201-5"
    assert snaps.next_name(found, datetime.date(2026, 12, 2)) == "remote-20261202-1"


def test_storage_support_read_from_config_and_pvesm():
    config = "arch: amd64\nmp0: /srv/runs,mp=/root/runs\nrootfs: local-zfs:subvol-200-disk-0,size=8G\nlxc.foo: 1\n"
    assert snaps.rootfs_storage(config) == "local-zfs"
    assert snaps.mount_points(config) == ["/root/runs"]
    pvesm = "Name  Type  Status  Total  Used  Available  %\nlocal  dir  active 1 1 1 1%\nlocal-zfs zfspool active 1 1 1 1%\n"
    assert snaps.parse_pvesm_status(pvesm) == {"local": "dir", "local-zfs": "zfspool"}
    spec = cfg.parse({"hosts": {"a": {"address": "a"}}, "containers": {200: {"host": "a"}}}, "h.yaml").containers[200]
    kept, restored = snaps.where_things_live(spec, config)
    assert [k.split(" (")[0] for k in kept] == ["run folders", "the known-good record"]
    assert "the venv (/root/venv)" in restored


def test_init_with_sudo_writes_a_file_whose_host_runs_pct_through_sudo():
    import yaml

    from remote.ops import hostsinit

    h = cfg.Host(name="pve1", address="pve1", user="trainer", pct=sudo.pct_command("pct", True), sudo=True)
    text = hostsinit.render(h, {"user": "trainer", "sudo": True}, [(200, "running", "gpu")])
    assert "    sudo: true\n" in text
    loaded = cfg.parse(yaml.safe_load(text), "hosts.yaml").hosts["pve1"]
    assert loaded.sudo and loaded.pct == "sudo -n /usr/sbin/pct" and loaded.user == "trainer"


def test_the_drop_in_takes_pct_from_an_older_files_sudo_command_line():
    assert sudo.pct_path("sudo -n /usr/local/sbin/pct") == "/usr/local/sbin/pct"
    assert sudo.pct_path("pct") == "/usr/sbin/pct"
    assert sudo.rule_of(sudo.sudoers("ops", [sudo.pct_path("sudo -n /opt/pct")]), "ops")[0] == "/opt/pct"
