"""`sudo: true`: the one program list, the drop-in printed from it, the argv built from it, sudo's failures;
the snapshot helpers as data (remote.ops.snapshots)."""

import datetime
import re
import shlex
from pathlib import Path

import pytest
from support import NOT_ALLOWED  # shared with tests/lab/test_sudo_lab.py

from remote import config as cfg
from remote import sudo
from remote.cli import run as cli_run
from remote.errors import ConfigError, HostPermissionError
from remote.lab.testing import Expect, FakeTransport
from remote.ops import snapshots as snaps
from remote.target import resolve
from remote.transport import Capabilities
from remote.transport.pct import Container
from remote.transport.session import MUX_PYTHON


def host(**keys):
    return cfg.parse({"hosts": {"pve1": {"address": "pve1", **keys}}, "containers": {200: {"host": "pve1"}}},
                     "hosts.yaml").hosts["pve1"]


def test_the_drop_in_allows_exactly_the_root_programs_of_the_list():
    rule = sudo.rule_of(sudo.sudoers("trainer", ["/usr/sbin/pct"]), "trainer")
    assert rule[0] == "/usr/sbin/pct ^exec [1-9][0-9]* --keep-env 0 -- .+$"
    assert "/usr/sbin/pct list" in rule and "/usr/sbin/pvesm status" in rule
    assert len(rule) == len([p for p in sudo.PROGRAMS if p.root])  # one command per form: no pct with any arguments
    assert all(" " in r for r in rule)  # every program with its arguments
    assert not any(p.path in " ".join(rule) for p in sudo.PROGRAMS if not p.root)  # the mux's python3: never root
    # Every root command remote builds for a sudo host is one the rule allows, at its exact path.
    h = host(sudo=True, user="trainer")
    argv = sudo.host_argv(h, "pvesm", "status")
    assert argv == ["sudo", "-n", "/usr/sbin/pvesm", "status"] and "/usr/sbin/pvesm status" in rule
    assert MUX_PYTHON == sudo.program("python3").path


def test_the_drop_in_names_the_hosts_files_pct_and_programs_beside_it():
    text = sudo.sudoers("trainer", ["/opt/pve/bin/pct", "/usr/sbin/pct"])
    rule = sudo.rule_of(text, "trainer")
    # pvesh: a cluster's guest list, on Proxmox in /usr/bin; the carry's coreutils at their own paths, named once
    carry = ["/usr/bin/install", "/usr/bin/sha256sum", "/usr/bin/rm"]
    assert [r.split(" ")[0] for r in rule] == ["/opt/pve/bin/pct"] * 12 + carry + ["/opt/pve/bin/pvesh", "/opt/pve/bin/pvesm"] \
        + ["/usr/sbin/pct"] * 12 + ["/usr/bin/pvesh", "/usr/sbin/pvesm"]
    assert "/usr/bin/pvesh get /cluster/resources --type vm --output-format json" in rule
    assert all(line.startswith(("#", "Defaults:trainer ", "trainer ", "    /")) for line in text.splitlines())
    with pytest.raises(ValueError):
        sudo.sudoers("bad user;id")


def chain(*rows: str) -> str:
    return "".join(row.replace(" | ", "\t") + "\n" for row in rows)


def test_a_program_under_folders_only_root_can_write_is_safe_even_where_it_is_missing():
    out = chain("/usr/sbin/pct | / | 0 755 directory", "/usr/sbin/pct | /usr | 0 755 directory",
                "/usr/sbin/pct | /usr/sbin | 0 755 directory", "/usr/sbin/pct | /usr/sbin/pct | missing",
                "/usr/sbin/pct | @program | missing ", "/usr/sbin/pct | @end | done")
    assert sudo.unsafe(out, ["/usr/sbin/pct"]) == {}


@pytest.mark.parametrize("rows, why", [
    (["/ | 0 755 directory", "/srv | 0 777 directory", "/srv/pct | 0 755 regular file"], r"/srv is writable by others"),
    (["/ | 0 755 directory", "/tmp | 0 1777 directory", "/tmp/pct | missing"], r"/tmp is writable by others"),
    (["/ | 0 755 directory", "/opt | 0 775 directory", "/opt/pct | 0 755 regular file"], r"/opt is writable by its group"),
    (["/ | 0 755 directory", "/home | 0 755 directory", "/home/u | 1000 755 directory"], r"/home/u is owned by uid 1000"),
    (["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 1000 755 regular file"], r"/srv/pct is owned by uid 1000"),
    # a link in a safe folder that resolves into an unsafe one: its target's chain decides
    (["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 0 777 symbolic link", "/ | 0 755 directory",
      "/tmp | 0 1777 directory", "/tmp/pct | 0 755 regular file"], r"/tmp is writable by others"),
    (["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 0 755 ###"], r"unreadable answer"),
    # a link part-way, in a folder anyone can write, to a safe program (issue 45 item 1)
    (["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 0 777 symbolic link", "/ | 0 755 directory",
      "/tmp | 0 1777 directory", "/tmp/x | 0 1777 directory", "/tmp/x/pct | 0 777 symbolic link",
      "/ | 0 755 directory", "/usr | 0 755 directory", "/usr/sbin | 0 755 directory",
      "/usr/sbin/pct | 0 755 regular file"], r"/tmp is writable by others"),
    (["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 0 644 regular file", "@program | other /srv/pct"],
     r"neither an ELF binary nor a `#!` script"),
    (["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 0 755 regular file",
      "@program | script /srv/pct\t/usr/bin/env", "@interpreter:/ | 0 755 directory",
      "@interpreter:/usr | 0 755 directory", "@interpreter:/usr/bin | 0 755 directory",
      "@interpreter:/usr/bin/env | 0 755 regular file", "@interpreter-is | elf /usr/bin/env"], r"looks it up on PATH"),
    (["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 0 755 regular file",
      "@program | script /srv/pct\t/srv/py", "@interpreter:/ | 0 755 directory",
      "@interpreter:/srv | 0 775 directory", "@interpreter:/srv/py | 0 755 regular file",
      "@interpreter-is | elf /srv/py"], r"its interpreter's chain: /srv is writable by its group"),
    (["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 0 755 regular file",
      "@program | script /srv/pct\t/bin/sh", "@interpreter:/ | 0 755 directory",
      "@interpreter:/bin | 0 777 symbolic link", "@interpreter:/ | 0 755 directory",
      "@interpreter:/usr | 0 755 directory", "@interpreter:/usr/bin | 0 755 directory",
      "@interpreter:/usr/bin/sh | 0 755 regular file", "@interpreter-is | script /usr/bin/sh"], r"is a script itself"),
    (["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 0 755 regular file",
      "@program | script /srv/pct\t/usr/bin/bash", "@interpreter-is | elf /usr/bin/bash", "@sources | 3:. /srv/lib.sh"],
     r"runs other files as root \(line 3:\. /srv/lib.sh\)"),
    (["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 0 755 regular file",
      "@program | script /srv/pct\t/usr/bin/python3", "@interpreter-is | elf /usr/bin/python3.11",
      "@beside:/srv/pct | 0 755 f", "@beside:/srv/helper.py | 0 666 f"], r"/srv/helper.py is writable by others"),
    (["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 0 755 regular file",
      "@program | script /srv/pct\t/usr/bin/python3", "@interpreter-is | elf /usr/bin/python3.11",
      "@beside:/srv/json.py | 0 777 l"], r"/srv/json.py, beside the script /srv/pct, is a symbolic link"),
])
def test_a_program_that_someone_but_root_could_replace_is_unsafe(rows, why):
    if not any(row.startswith("@program") for row in rows):
        rows = [*rows, "@program | elf /srv/pct"]
    out = chain(*(f"/srv/pct | {row}" for row in [*rows, "@end | done"]))
    assert re.search(why, sudo.unsafe(out, ["/srv/pct"])["/srv/pct"])


def test_an_elf_program_or_proxmoxs_own_script_under_root_only_folders_is_safe():
    safe = ["/ | 0 755 directory", "/usr | 0 755 directory", "/usr/sbin | 0 755 directory",
            "/usr/sbin/pct | 0 755 regular file"]
    perl = ["@program | script /usr/sbin/pct\t/usr/bin/perl", "@interpreter:/ | 0 755 directory",
            "@interpreter:/usr | 0 755 directory", "@interpreter:/usr/bin | 0 755 directory",
            "@interpreter:/usr/bin/perl | 0 755 regular file", "@interpreter-is | elf /usr/bin/perl"]
    for end in (["@program | elf /usr/sbin/pct"], perl):
        assert sudo.unsafe(chain(*(f"/usr/sbin/pct | {r}" for r in [*safe, *end, "@end | done"])), ["/usr/sbin/pct"]) == {}


def test_an_answer_that_says_what_the_program_is_twice_is_unsafe():
    """A second `@program` (a name with a newline in it, were one ever printed) must not overrule the first."""
    rows = ["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/pct | 0 755 regular file",
            "@program | script /srv/pct\t/srv/open/python3", "@program | elf /srv/pct", "@end | done"]
    assert "@program said twice" in sudo.unsafe(chain(*(f"/srv/pct | {r}" for r in rows)), ["/srv/pct"])["/srv/pct"]


def test_a_program_the_host_said_nothing_of_is_unsafe():
    assert sudo.unsafe("", ["/usr/sbin/pct"]) == {"/usr/sbin/pct": "the host did not say who owns its folders"}


def test_the_rule_names_the_paths_it_checks():
    carry = ["/usr/bin/install", "/usr/bin/sha256sum", "/usr/bin/rm"]  # the system's, never beside pct
    assert sudo.rule_paths("/usr/sbin/pct") == ["/usr/sbin/pct", *carry, "/usr/bin/pvesh", "/usr/sbin/pvesm"]
    assert sudo.rule_paths("/srv/lab/bin/pct") == ["/srv/lab/bin/pct", *carry, "/srv/lab/bin/pvesh", "/srv/lab/bin/pvesm"]


def test_a_sudo_host_calls_pct_through_sudo_n_at_its_exact_path():
    assert host(sudo=True).pct == "sudo -n /usr/sbin/pct"
    assert host(sudo=True, pct="/opt/bin/pct").pct == "sudo -n /opt/bin/pct"
    assert host().pct == "pct" and sudo.host_argv(host(), "pvesm", "status") == ["pvesm", "status"]
    with pytest.raises(ValueError):  # nothing but the one argument the rule allows
        sudo.host_argv(host(sudo=True), "pvesm", "set", "local")


@pytest.mark.fault("sudo: true with a pct command line", promise="hosts.NAME.pct must be pct's exact path with sudo: true "
                   "(remote adds `sudo -n`): exit 2 naming the key")
@pytest.mark.parametrize("pct", ["sudo -n /usr/sbin/pct", "bin/pct", "/usr/bin/sudo"])
def test_sudo_with_a_pct_that_is_no_exact_path_is_refused(pct):
    with pytest.raises(ConfigError, match=r"hosts\.pve1\.pct: with sudo: true, pct is the exact path"):
        host(sudo=True, pct=pct)


def sudo_container(t):
    return Container(t, 200, pct="sudo -n /usr/sbin/pct")


@pytest.mark.fault("sudo rule without a program", promise="a program the sudo rule does not allow is named (told apart from "
                   "a rule that wants a password by `sudo -n -l`)")
def test_a_program_the_rule_lacks_is_named():
    t = FakeTransport([Expect(lambda a: a[:4] == ("sudo", "-n", "/usr/sbin/pct", "status"), 1,
                              stderr="sudo: a password is required\n"),
                       Expect(("sudo", "-n", "-l", "/usr/sbin/pct", "status", "200"), 1)])
    with pytest.raises(HostPermissionError, match=r"does not allow .* /usr/sbin/pct status.*the sudo rule lacks it"):
        sudo_container(t).status()
    t.assert_done()


@pytest.mark.fault("sudo wants a password", promise="a sudo rule that wants a password fails at once (`sudo -n`, never a "
                   "prompt), named, with the drop-in to install")
def test_a_rule_that_wants_a_password_is_named():
    t = FakeTransport([Expect(lambda a: a[:3] == ("sudo", "-n", "/usr/sbin/pct"), 1,
                              stderr="sudo: a password is required\n"),
                       Expect(lambda a: a[:3] == ("sudo", "-n", "-l"), 1, stderr="sudo: a password is required\n")])
    with pytest.raises(HostPermissionError, match=r"wants a password .*NOPASSWD.*init --sudoers"):
        sudo_container(t).run(["true"])


@pytest.mark.fault("non-root host user without sudo", promise="pct's `please run as root` names `sudo: true` and the drop-in")
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
    assert sudo.rule_of(sudo.sudoers("ops", [sudo.pct_path("sudo -n /opt/pct")]), "ops")[0].startswith("/opt/pct ^exec ")


# -- the rule allows what remote runs, and nothing else of pct's -----------------------------------------------

def pct_subcommands_in_the_code() -> set[str]:
    """Every pct subcommand remote's code names where it builds a pct command line."""
    from pathlib import Path

    root = Path(sudo.__file__).parent
    found: set[str] = set()
    for f in root.rglob("*.py"):
        if "lab" in f.relative_to(root).parts:  # the lab's own pct double and its setup run as root, not through sudo
            continue
        text = f.read_text()
        found |= set(re.findall(r"_pct\(\s*(?:[a-z_.]+,\s*)*\"([a-z]+)\"", text))
        found |= set(re.findall(r"pct_argv\([^,()]+,\s*\"([a-z]+)\"", text))
    found |= set(re.findall(r'"\$\{pct\[@\]\}" ([a-z]+)', (root / "sh" / "gpu-host.sh").read_text()))
    return found


def test_every_pct_subcommand_in_the_code_is_in_the_rule():
    allowed = {p.args[0] for p in sudo.PROGRAMS if p.name == "pct" and p.args}
    found = pct_subcommands_in_the_code()
    assert {"exec", "status", "config", "list", "snapshot", "delsnapshot", "listsnapshot", "rollback"} <= found
    assert found - set(sudo.ROOT_ONLY) <= allowed, f"pct {found - allowed} runs without a line in remote.sudo.PROGRAMS"
    assert not set(sudo.ROOT_ONLY) & allowed  # what only root may run is never in the rule


class PctHost(Capabilities):
    """A host answering pct as Proxmox does, just enough for the snapshot and lifecycle paths; every argv kept."""

    name = "pve1"

    def __init__(self, running: bool = False):
        self.argv: list[tuple[str, ...]] = []
        self.running = running

    def describe(self, argv) -> str:
        return shlex.join(argv)

    def run(self, argv, *, stdin=None, deadline=None, on_output=None):
        from remote.transport import Result

        argv = tuple(argv)
        self.argv.append(argv)
        words = argv[2:] if argv[:2] == ("sudo", "-n") else argv
        out = {"status": f"status: {'running' if self.running else 'stopped'}\n", "listsnapshot": LISTING,
               "config": "rootfs: local-zfs:subvol-200-disk-0,size=8G\n",
               "status-pvesm": "Name Type Status\nlocal-zfs zfspool active\n"}
        key = "status-pvesm" if words[0].endswith("pvesm") else words[1] if len(words) > 1 else ""
        return Result(argv, 0, out.get(key, "").encode(), b"", 0.0)


class PctSession:
    def __init__(self, t: PctHost):
        self.t = t
        self.config = cfg.parse({"hosts": {"pve1": {"address": "pve1", "user": "trainer", "sudo": True}},
                                 "containers": {200: {"host": "pve1"}}}, "hosts.yaml")
        self.events: list = []  # what operations reported (remote.target's typed events)

    echo = staticmethod(lambda line: None)

    def sink(self, event):
        self.events.append(event)

    def container(self, ctid, **_):
        return Container(self.t, int(ctid), pct=self.config.hosts["pve1"].pct)

    def container_for(self, spec, venv_on_path=True):
        return self.container(spec.ctid)

    def host_run(self, host, argv, deadline=None):
        return self.t.run(argv)


@pytest.mark.fault("sudo rule allows only remote's pct command lines",
                   promise="the drop-in allows each pct subcommand remote runs with its fixed arguments, on the hosts "
                   "file's containers; `sudo -l` says no to push, pull, set, enter, mount, destroy, create, restore, "
                   "unlock, resize, migrate and to other arguments")
def test_the_command_lines_remote_builds_are_allowed_and_no_other():
    t = PctHost()
    session = PctSession(t)
    spec = session.config.containers[200]
    ct = session.container(200)
    ct.run(["echo", "hi"], timeout=5)
    ct.script("echo \"$1\"", "x", env={"A": "1"})
    ct.status()
    ct.start()
    ct.stop()
    snaps.before_deploy(resolve(session, 200), "0123456789ab", today=datetime.date(2026, 12, 1))
    snaps.rollback(resolve(session, 200))
    with pytest.raises(snaps.UnknownSnapshot, match="before-upgrade is not one of remote's .* as root on pve1"):
        snaps.rollback(resolve(session, 200), snapshot="before-upgrade")  # another's: refused before pct runs
    assert not any("before-upgrade" in argv for argv in t.argv)
    subcommands = set()
    for argv in t.argv:
        assert argv[:2] == ("sudo", "-n"), argv
        name = argv[2].rsplit("/", 1)[-1]
        assert sudo.allows(name, argv[3:], [200]), shlex.join(argv)
        subcommands.add(argv[3])
    assert subcommands == {"exec", "status", "start", "stop", "config", "listsnapshot", "snapshot", "delsnapshot",
                           "rollback"}  # (pvesm's `status` among them)
    assert ("sudo", "-n", "/usr/sbin/pct", "delsnapshot", "200", "remote-20261201-1") in t.argv  # remote's own only
    # Nothing else of pct's: the subcommands remote never runs, and other arguments to those it does.
    for args in NOT_ALLOWED:
        assert not sudo.allows("pct", args.split(), [200]), args
    assert not sudo.allows("pct", ["exec", "201", "--keep-env", "0", "--", "id"], [200])
    assert sudo.allows("pct", ["exec", "201", "--keep-env", "0", "--", "id"])  # a drop-in made without a hosts file




@pytest.mark.parametrize("sudo_key", [True, False])
@pytest.mark.parametrize("pct", ["/bin/sh,/usr/sbin/pct", "/usr/sbin/../../bin/sh", "/usr/sbin/pct:x",
                                 "sudo -n '/bin/sh, /usr/sbin/pct'"])
def test_a_pct_path_that_is_not_plain_is_refused_naming_the_key(pct, sudo_key):
    with pytest.raises(ConfigError, match=r"hosts\.pve1\.pct: .*(plain absolute path|exact path)"):
        host(sudo=sudo_key, pct=pct)


def test_the_drop_in_refuses_a_pct_path_that_would_widen_the_rule():
    with pytest.raises(ValueError, match="plain absolute path"):
        sudo.sudoers("trainer", ["/bin/sh,/usr/sbin/pct"])
    with pytest.raises(ValueError, match="plain absolute path"):
        sudo.rule_commands(["/usr/sbin/../../bin/sh"])
    assert sudo.rule_of(sudo.sudoers("trainer", ["/opt/pve+1/pct"]), "trainer")[0].startswith("/opt/pve+1/pct ^exec ")


@pytest.mark.fault("sudo rule's snapshot and rollback forms",
                   promise="`pct snapshot` only with remote's name and description (the commit or venv spec hash: no "
                   "option passes inside it); `pct rollback` only to remote's own snapshots, another's refused before "
                   "pct runs, naming how to do it as root (a rollback restores the snapshot's container config)")
def test_the_snapshot_description_and_rollback_forms_pass_nothing_else():
    ok = ["snapshot 200 remote-20261201-1 --description before deploy of " + "0123456789abcdef" * 2 + "01234567",
          "snapshot 200 remote-20261201-2 --description before deploy of venv spec 0123456789abcdef",
          "rollback 200 remote-20261201-1 --start 1"]
    for line in ok:
        assert sudo.allows("pct", line.split(" ", 4) if line.startswith("snapshot") else line.split(), [200]), line
    for line in ("before deploy of 0123abc --vmstate 1", "before deploy of x", "before deploy of 0123abc\n--x"):
        assert not sudo.allows("pct", ["snapshot", "200", "remote-20261201-1", "--description", line], [200]), line
    assert not sudo.allows("pct", ["rollback", "200", "before-upgrade", "--start", "1"], [200])
    assert "/usr/sbin/pct ^rollback (200) remote-[0-9]{8}-[0-9]+ --start [01]$" in \
        sudo.rule_of(sudo.sudoers("trainer", ctids=[200]), "trainer")


def test_a_hosts_files_drop_in_for_a_host_without_containers_is_refused_not_widened(tmp_path, monkeypatch):
    """sudoers() reads no ids as any id: a drop-in made from a file whose sudo host has none of its containers
    would have allowed `pct exec` into every container of the host (another tenant's)."""
    from remote.api.setup import sudoers_dropin
    from remote.ops import hostsinit

    monkeypatch.setattr(hostsinit, "unsafe_paths", lambda host, paths: {})  # the host's folders: only root's
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  pve1: {address: pve1, user: trainer, sudo: true}\n  pve2: {address: pve2}\n"
                    "containers:\n  300: {host: pve2}\n")
    with pytest.raises(ConfigError, match=r"containers: none is on host pve1: .*every container of the host"):
        sudoers_dropin("trainer", path)
    path.write_text(path.read_text() + "  200: {host: pve1}\n")
    rule = sudo.rule_of(sudoers_dropin("trainer", path), "trainer")
    assert rule[0] == "/usr/sbin/pct ^exec (200) --keep-env 0 -- .+$"


@pytest.mark.parametrize("rows", [
    ["/ | 0 755 directory"],  # cut short after the root folder: /srv (mode 0777 here, unseen) never told
    ["/ | 0 755 directory", "/srv | 0 755 directory"],
    ["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/other | 0 755 regular file"],
    # the program a link whose target the host never walked (/tmp/pct, say)
    ["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/lab | 0 755 directory", "/srv/lab/pct | 0 777 symbolic link"],
    ["/ | 0 755 directory", "/srv | 0 755 directory", "/srv/lab | 0 755 directory", "/srv/lab/pct | 0 777 symbolic link",
     "/ | 0 755 directory"],
])
def test_an_answer_that_stops_before_the_program_is_unsafe(rows):
    """A host whose answer ends part-way (garbage, a cut stream) said nothing of the folders below: unsafe."""
    out = chain(*(f"/srv/lab/pct | {row}" for row in rows))
    assert sudo.unsafe(out, ["/srv/lab/pct"]) == {"/srv/lab/pct": "the host did not say who owns its folders"}


@pytest.mark.fault("docs", promise="safety.md's example drop-in is the one `remote init --sudoers trainer` prints for "
                   "containers 200 and 201, line for line (the pvesh guest-list line included)")
def test_the_safety_guides_example_drop_in_is_the_one_remote_prints():
    text = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "safety.md").read_text()
    example = text.split("For a host whose `pct` is the default and a hosts file with containers 200 and 201:")[1]
    example = example.split("```")[1].strip("\n")
    printed = sudo.sudoers("trainer", ctids=[200, 201]).rstrip("\n")
    assert printed.endswith("\n" + example), example
