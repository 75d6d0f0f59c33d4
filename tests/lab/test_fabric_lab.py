"""Lab tier: remote.fabric with a hosts file of two hosts: the Connection's login goes to the host it
reaches and to no other; a container of the other host is refused, never run on the Connection's host;
a missing key names the Connection's connect_kwargs; a `local: true` entry is refused, not ignored."""

from __future__ import annotations

import subprocess

import pytest
from support import LAB_CONTAINERS, free_port

from remote import config
from remote.errors import ConfigError, RemoteError
from remote.transport.pct import classify

pytestmark = pytest.mark.lab
A, B = LAB_CONTAINERS[:2]

WRONG_HOST = ("A Fabric Connection with a hosts file of several hosts",
              "its login applies to the host it reaches only; a container of another host is refused naming "
              "both hosts, never run on the Connection's host")


def two_hosts(tmp_path, lab, *, local=False):
    """pve1: the lab's host; pve2: another one (127.0.0.2, where nothing listens), which holds B."""
    path = tmp_path / "hosts.yaml"
    here = "\n    local: true" if local else ""
    path.write_text(f"""hosts:
  pve1:
    address: 127.0.0.1
    port: {lab.port}
    known_hosts: {lab.known_hosts}{here}
  pve2:
    address: 127.0.0.2
    port: {free_port()}
    user: admin
    known_hosts: {lab.known_hosts}
    connect_timeout: 3
containers:
  {A}: {{host: pve1}}
  {B}: {{host: pve2}}
""")
    return path


def connection(lab, key=None):
    import fabric

    return fabric.Connection("127.0.0.1", port=lab.port, user="root",
                             connect_kwargs={"key_filename": str(key or lab.key_file)})


@pytest.mark.fault(*WRONG_HOST)
def test_a_container_of_another_host_is_refused_naming_both(lab, tmp_path):
    import remote.fabric

    hosts = two_hosts(tmp_path, lab)
    with pytest.raises(ConfigError) as e:
        remote.fabric.exec(connection(lab), B, ["hostname"], hosts=hosts)
    text = str(e.value)
    assert f"container {B} is on pve2" in text and "pve1" in text and "Connection to pve2" in text
    with pytest.raises(ConfigError, match="pve2"):
        remote.fabric.deploy(connection(lab), B, hosts=hosts)
    # its own host's container works through the Connection
    r = remote.fabric.exec(connection(lab), A, ["sh", "-c", "echo $((6*7))"], hosts=hosts)
    assert (r.exit_code, r.text) == (0, "42\n")


@pytest.mark.fault(*WRONG_HOST)
def test_a_fleet_applies_the_connection_to_its_host_only(lab, tmp_path):
    import remote.fabric

    with remote.fabric.fleet(connection(lab), hosts=two_hosts(tmp_path, lab)) as fl:
        hosts = fl.config.hosts
        assert (hosts["pve2"].address, hosts["pve2"].user, hosts["pve2"].key_file) == ("127.0.0.2", "admin", None)
        assert hosts["pve1"].user == "root" and hosts["pve1"].key_file == str(lab.key_file)
        assert fl.container(A).exec(["true"]).exit_code == 0
        with pytest.raises(RemoteError, match="pve2"):  # tried at pve2's own address: never ran on pve1
            fl.container(B).exec(["true"])


def test_a_connection_matching_no_host_of_several_is_refused(lab, tmp_path):
    import fabric

    import remote.fabric

    c = fabric.Connection("127.0.0.9", port=lab.port, user="root")
    with pytest.raises(ConfigError, match=r"reaches 127.0.0.9, which is none of this file's hosts \(pve1: 127.0.0.1, "
                                          r"pve2: 127.0.0.2\)"):
        remote.fabric.fleet(c, hosts=two_hosts(tmp_path, lab))


def test_a_local_entry_refuses_the_connection(lab, tmp_path):
    import remote.fabric

    with pytest.raises(ConfigError, match=r"hosts.pve1.local.*Connection to 127.0.0.1 would be ignored"):
        remote.fabric.exec(connection(lab), A, ["true"], hosts=two_hosts(tmp_path, lab, local=True))


def test_a_key_refused_under_fabric_names_the_connections_key_filename(lab, tmp_path):
    import remote.fabric

    other = tmp_path / "id_other"  # a key the host does not know
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    with pytest.raises(RemoteError) as e:
        remote.fabric.exec(connection(lab, other), A, ["true"], known_hosts=lab.known_hosts)
    text = str(e.value)
    assert "connect_kwargs key_filename" in text and "key_filename in the Connection's connect_kwargs" in text
    assert "hosts." not in text, text


def test_the_pct_hint_without_a_hosts_file_names_no_hosts_file_key():
    made = config.Host("127.0.0.1", "127.0.0.1", given_by="fabric.Connection no-hosts-file")
    err = classify("bash: line 1: pct: command not found\n", 127, A, made)
    assert err is not None and "hosts.127.0.0.1.pct" not in str(err)
    assert "in a hosts file passed as hosts=" in str(err)
    filed = classify("bash: line 1: pct: command not found\n", 127, A, config.Host("pve1", "127.0.0.1"))
    assert filed is not None and "set hosts.pve1.pct to its full path" in str(filed)
