"""~/.ssh/config resolution as data: config text + a hosts-file host in, connect parameters out."""

import pytest

from remote.config import Host
from remote.errors import ConfigError
from remote.transport import sshconfig
from remote.transport.sshconfig import resolve

HOME = "/home/u"


def r(text="", **host):
    data = dict(name="pve1", address="pve1")
    data.update(host)
    return resolve(Host(**data), text, home=HOME, local_user="u")


def test_no_config_gives_ssh_defaults_and_root():
    t = r()
    assert (t.hostname, t.port, t.user, t.agent, t.via) == ("pve1", 22, "root", True, None)
    assert t.identities == (f"{HOME}/.ssh/id_ed25519", f"{HOME}/.ssh/id_ecdsa", f"{HOME}/.ssh/id_rsa")
    assert t.identities_from == "default"
    assert t.known_hosts == (f"{HOME}/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")


ALIAS = """
Host pve1
    HostName 10.0.0.5
    Port 2200
    User admin
    IdentityFile ~/.ssh/pve_key
    IdentityFile /keys/second
    UserKnownHostsFile ~/.ssh/kh_pve /etc/kh_extra

Host *
    User nobody
    Port 2999
"""


def test_alias_takes_hostname_port_user_identities_and_known_hosts():
    t = r(ALIAS)
    assert (t.label, t.alias, t.hostname, t.port, t.user) == ("pve1", "pve1", "10.0.0.5", 2200, "admin")
    assert t.identities == (f"{HOME}/.ssh/pve_key", "/keys/second") and t.identities_from == "IdentityFile"
    assert t.known_hosts == (f"{HOME}/.ssh/kh_pve", "/etc/kh_extra", "/etc/ssh/ssh_known_hosts")
    assert t.address == "[10.0.0.5]:2200"


def test_first_value_wins_and_host_star_fills_the_rest():
    t = r(ALIAS, address="other")
    assert (t.hostname, t.port, t.user) == ("other", 2999, "nobody")


def test_hosts_file_keys_override_the_config():
    t = r(ALIAS, port=22, user="root", key_file="/k/id", known_hosts="/k/kh")
    assert (t.hostname, t.port, t.user) == ("10.0.0.5", 22, "root")
    assert (t.identities, t.identities_from, t.agent) == (("/k/id",), "key_file", False)
    assert t.known_hosts == ("/k/kh",)


def test_identities_only_and_identity_agent_none_leave_the_agent_out():
    assert r("Host pve1\n IdentitiesOnly yes\n IdentityFile /k\n").agent is False
    assert r("Host pve1\n IdentityAgent none\n").agent is False
    assert r("Host pve1\n IdentityFile /k\n").agent is True


JUMPS = """
Host pve1
    HostName 192.168.7.5
    ProxyJump bastion

Host bastion
    HostName bastion.example.org
    Port 2022
    User jumper
    IdentityFile ~/.ssh/bastion
    UserKnownHostsFile ~/.ssh/kh_bastion

Host inner
    HostName 10.9.9.9
    ProxyJump outer

Host outer
    HostName outer.example.org
    ProxyJump bastion
"""


def test_proxyjump_resolves_the_jump_host_from_its_own_entry():
    t = r(JUMPS)
    j = t.via
    assert (t.hostname, t.port, t.user) == ("192.168.7.5", 22, "root")
    assert (j.label, j.alias, j.hostname, j.port, j.user) == (
        "jump host bastion", "bastion", "bastion.example.org", 2022, "jumper")
    assert j.identities == (f"{HOME}/.ssh/bastion",) and j.via is None
    assert j.known_hosts == (f"{HOME}/.ssh/kh_bastion", "/etc/ssh/ssh_known_hosts")


def test_a_jump_host_also_trusts_the_hosts_file_known_hosts_but_not_its_key_file():
    j = r(JUMPS, known_hosts="/p/kh", key_file="/p/id").via
    assert j.known_hosts[-1] == "/p/kh" and j.identities == (f"{HOME}/.ssh/bastion",) and j.agent


def test_proxyjump_spec_user_and_port_override_the_jump_entry():
    j = r("Host pve1\n ProxyJump admin@bastion:2200\n" + JUMPS).via
    assert (j.hostname, j.port, j.user) == ("bastion.example.org", 2200, "admin")


def test_jump_host_without_entry_uses_ssh_defaults_for_the_local_user():
    j = r("Host pve1\n ProxyJump [::1]:2222\n").via
    assert (j.hostname, j.port, j.user, j.identities_from) == ("::1", 2222, "u", "default")


def test_a_jump_hosts_own_proxyjump_is_followed():
    t = r(JUMPS, address="inner")
    assert [h.alias for h in t.hops()] == ["bastion", "outer"]
    assert t.via.hostname == "outer.example.org" and t.via.via.hostname == "bastion.example.org"


def test_a_proxyjump_list_chains_in_order_like_ssh_J():
    t = r("Host pve1\n ProxyJump outer,bastion\n" + JUMPS)
    # outer first (its own ProxyJump bastion applies), then bastion, then the target
    assert [h.alias for h in t.hops()] == ["bastion", "outer", "bastion"]


def test_proxyjump_none_means_direct():
    assert r("Host pve1\n ProxyJump none\nHost *\n ProxyJump bastion\n").via is None


@pytest.mark.parametrize("text, key, message", [
    ("Host pve1\n ProxyJump pve1\n", "ProxyJump pve1", "loop"),
    ("Host pve1\n ProxyJump a\nHost a\n ProxyJump pve1\n", "ProxyJump", "loop"),
    ("Host pve1\n Port twenty\n", "Host pve1: Port", "1 to 65535"),
    ("Host pve1\n ProxyJump a@@b\n", "ProxyJump a@@b", "[user@]host[:port]"),
    ("Host pve1\n ProxyCommand nc %h %p\n", "ProxyCommand", "use ProxyJump"),
    ("Host pve1\nHostName\n", "", "Unparsable line"),
])
def test_bad_config_is_a_config_error_naming_the_file_and_entry(text, key, message):
    with pytest.raises(ConfigError) as e:
        r(text)
    assert e.value.file == "~/.ssh/config" and key in e.value.key and message in e.value.message


def test_read_expands_includes_relative_to_dot_ssh(tmp_path):
    ssh = tmp_path / ".ssh"
    (ssh / "config.d").mkdir(parents=True)
    (ssh / "config").write_text("Include config.d/*.conf\nHost *\n User fallback\n")
    (ssh / "config.d" / "b.conf").write_text("Host pve1\n HostName from-b\n")
    (ssh / "config.d" / "a.conf").write_text("Host pve1\n Port 2201\n")
    text = sshconfig.read(home=str(tmp_path))
    t = resolve(Host(name="pve1", address="pve1"), text, home=str(tmp_path))
    assert (t.hostname, t.port, t.user) == ("from-b", 2201, "fallback")
    assert sshconfig.read(home=str(tmp_path / "nobody")) == ""


def test_an_include_loop_is_a_config_error(tmp_path):
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Include config\n")
    with pytest.raises(ConfigError, match="Include"):
        sshconfig.read(home=str(tmp_path))


JUMPED = """
Host pve1
    HostName 10.0.0.5
    User admin
    ProxyJump bastion
    IdentityFile /keys/a
    IdentityFile /keys/b
Host bastion
    HostName 192.0.2.1
"""


def fabric_connection(host="pve1", text=JUMPED, **kw):
    import fabric  # a requirement of remote (pyproject.toml): never skipped
    import paramiko

    return fabric.Connection(host, config=fabric.Config(ssh_config=paramiko.SSHConfig.from_text(text)), **kw)


@pytest.mark.fault("A Fabric Connection set up through ~/.ssh/config (ProxyJump, several IdentityFile)", "remote.fabric "
                   "honours it: the Connection's name is looked up in ~/.ssh/config by remote's transport (the jump "
                   "host and every IdentityFile applied, every hop verified); only a gateway passed to the Connection "
                   "or two key files passed to it are refused")
def test_a_fabric_connection_made_through_ssh_config_is_honoured():
    from remote import fabric as rfabric

    c = fabric_connection()
    assert c.gateway is not None and len(c.connect_kwargs["key_filename"]) == 2  # what Fabric made of the config
    config, name = rfabric._config(c, [200], None, None)
    host = config.hosts[name]
    assert (name, host.address, host.key_file, host.user) == ("pve1", "pve1", None, "admin")
    t = resolve(host, JUMPED, home=HOME, local_user="u")
    assert (t.hostname, t.identities, t.identities_from) == ("10.0.0.5", ("/keys/a", "/keys/b"), "IdentityFile")
    assert t.via is not None and (t.via.alias, t.via.hostname) == ("bastion", "192.0.2.1")
    # A key passed to the Connection is the one used; the config's are Fabric's additions, left to remote.
    c = fabric_connection(connect_kwargs={"key_filename": "/keys/mine"})
    assert rfabric._config(c, [200], None, None)[0].hosts["pve1"].key_file == "/keys/mine"
    with pytest.raises(ConfigError, match="one key file, got 2"):
        rfabric._config(fabric_connection(connect_kwargs={"key_filename": ["/k/1", "/k/2"]}), [200], None, None)
    with pytest.raises(ConfigError, match="gateway"):  # a gateway passed to it: not what ~/.ssh/config says
        rfabric._config(fabric_connection(gateway=fabric_connection("other", text="")), [200], None, None)
    with pytest.raises(ConfigError, match="gateway"):
        rfabric._config(fabric_connection(text="", gateway=fabric_connection("bastion", text="")), [200], None, None)
