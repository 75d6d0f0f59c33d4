import subprocess
import sys
from pathlib import Path

import pytest

from remote import config
from remote.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent.parent

GOOD = """
hosts:
  pve1: {address: 10.1.2.6, key_file: keys/id, known_hosts: ~/kh}
venv: {packages: [torch==2.11.0+cu128], find_links: [/opt/wheels]}
code: {repo: ../dflash, ref: main}
containers:
  200: {host: pve1}
  201:
    host: pve1
    venv: {path: /root/venv2}
    train: {baseline: 21.5, env: {NCCL_DEBUG: WARN}}
"""


def load_text(tmp_path, text, name="hosts.yaml"):
    p = tmp_path / name
    p.write_text(text)
    _key_files(tmp_path)
    return config.load(str(p))


def _key_files(tmp_path):
    """GOOD's key_file and known_hosts: load() refuses files that are not there."""
    (tmp_path / "keys").mkdir(exist_ok=True)
    (tmp_path / "keys" / "id").touch()
    (Path.home() / "kh").touch()


def test_shipped_hosts_file_targets_the_lab():
    import yaml

    c = config.parse(yaml.safe_load((ROOT / "hosts.yaml").read_text()), "hosts.yaml")  # the lab's keys: once it is up
    assert c.hosts["lab"].address == "127.0.0.1" and c.hosts["lab"].port == 2222
    assert c.container(None).ctid == 200


def test_good_file_with_defaults_overrides_and_paths(tmp_path):
    c = load_text(tmp_path, GOOD)
    h = c.hosts["pve1"]
    assert (h.port, h.user, h.pct, h.connect_timeout) == (None, None, "pct", 10.0)  # ~/.ssh/config, else 22, root
    assert h.key_file == str(tmp_path / "keys" / "id")  # relative to the hosts file
    assert h.known_hosts == str(Path.home() / "kh")
    a, b = c.containers[200], c.containers[201]
    assert a.venv.path == "/root/venv" and b.venv.path == "/root/venv2"
    assert a.venv.packages == b.venv.packages == ("torch==2.11.0+cu128",)  # override is per key
    assert a.code.repo == str((tmp_path / "../dflash").resolve()) or a.code.repo.endswith("dflash")
    assert b.train.baseline == 21.5 and b.train.env == (("NCCL_DEBUG", "WARN"),)
    assert a.train.baseline is None


@pytest.mark.fault("30 malformed hosts files",
                   promise="each refused with file, key path and expectation; exit 2; nothing connected")
@pytest.mark.parametrize("text, key, words", [
    ("hosts: {h: {address: x, prot: 22}}\ncontainers: {200: {host: h}}", "hosts.h.prot", "unknown key"),
    ("hosts: {h: {address: x, port: 70000}}\ncontainers: {200: {host: h}}", "hosts.h.port", "1 to 65535"),
    ("hosts: {h: {address: x, port: '22'}}\ncontainers: {200: {host: h}}", "hosts.h.port", "expected int"),
    ("hosts: {h: {port: 22}}\ncontainers: {200: {host: h}}", "hosts.h.address", "required"),
    ("hosts: {h: {address: x}}\ncontainers: {99: {host: h}}", "containers.99", "100 to 999999999"),
    ("hosts: {h: {address: x}}\ncontainers: {1000000000: {host: h}}", "containers.1000000000", "out of range"),
    ("hosts: {h: {address: x}}\ncontainers: {abc: {host: h}}", "containers.abc", "integers"),
    ("hosts: {h: {address: x}}\ncontainers: {200: {host: pve2}}", "containers.200.host",
     "unknown host 'pve2' (known: h)"),
    ("hosts: {h: {address: x}}\ncontainers: {200: {}}", "containers.200.host", "required"),
    ("hosts: {h: {address: x}}\ncontainers: {200: {host: h}}\nvenv: {path: /root}", "venv.path", "refusing"),
    ("hosts: {h: {address: x}}\ncontainers: {200: {host: h}}\nvenv: {path: venv}", "venv.path", "absolute"),
    ("hosts: {h: {address: x}}\ncontainers: {200: {host: h}}\nwarmup: {cache_dir: /tmp/c}", "warmup.cache_dir",
     "outside /tmp"),
    ("hosts: {h: {address: x}}\ncontainers: {200: {host: h, train: {metric: '('}}}", "containers.200.train.metric",
     "regular expression"),
    ("hosts: {h: {address: x}}\ncontainers: {200: {host: h}}\ntrain: {tolerance: 2}", "train.tolerance", "0 to 1"),
    ("hosts: {h: {address: x}}\ncontainers: {200: {host: h}}\nvenv: {packages: [[a]]}", "venv.packages[0]",
     "expected a string"),
    ("hosts: {h: {address: x}}\ncontainers: {200: {host: h}}\nextra: 1", "extra", "unknown key"),
    ("hosts: []\ncontainers: {}", "hosts", "expected a mapping"),
    ("hosts: {h: {address: x, local: 'yes'}}\ncontainers: {200: {host: h}}", "hosts.h.local", "expected bool"),
])
def test_bad_files_name_file_key_and_expectation(tmp_path, text, key, words):
    with pytest.raises(ConfigError) as e:
        load_text(tmp_path, text)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'hosts.yaml'}: {key}: "), msg
    assert words in msg
    assert e.value.exit_code == 2


@pytest.mark.fault("30 malformed hosts files",
                   promise="each refused with file, key path and expectation; exit 2; nothing connected")
def test_invalid_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"line 1, column \d+: not valid YAML"):
        load_text(tmp_path, "hosts: {a: [}")
    with pytest.raises(ConfigError, match="file not found"):
        config.load(str(tmp_path / "nope.yaml"))


def test_env_var_picks_the_file(tmp_path, monkeypatch):
    p = tmp_path / "elsewhere.yaml"
    p.write_text(GOOD)
    _key_files(tmp_path)
    monkeypatch.setenv("REMOTE_HOSTS_FILE", str(p))
    assert config.load().file == str(p)
    monkeypatch.delenv("REMOTE_HOSTS_FILE")
    monkeypatch.chdir(tmp_path)
    assert config.find_file() == "hosts.yaml"


def test_container_selection(tmp_path):
    c = load_text(tmp_path, GOOD)
    with pytest.raises(ConfigError, match="several containers configured .*name one \\(the container argument\\)"):
        c.container(None)
    with pytest.raises(ConfigError, match=r"container 300 is not in this file \(known: 200, 201\)"):
        c.container("300")
    assert c.container("201").ctid == 201


@pytest.mark.fault("30 malformed hosts files",
                   promise="each refused with file, key path and expectation; exit 2; nothing connected")
def test_cli_bad_file_exits_2_without_traceback_or_connection(tmp_path):
    (tmp_path / "hosts.yaml").write_text(
        "hosts: {h: {address: 127.0.0.1, port: 1}}\ncontainers: {200: {host: pve2}}\n")
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", "status"],
                       cwd=tmp_path, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin",
                                                                            "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2, r
    assert "hosts.yaml: containers.200.host: unknown host 'pve2' (known: h)" in r.stderr
    assert "Traceback" not in r.stderr and "cannot connect" not in r.stderr


@pytest.mark.fault("YAML numbers in string settings", "a string setting written as a number keeps its characters "
                   "(`ref: 0123456`, `UMASK: 0022`), never YAML 1.1's octal value")
def test_numbers_in_string_settings_keep_their_characters(tmp_path):
    p = tmp_path / "hosts.yaml"
    p.write_text("hosts: {h: {address: 10.0.0.1}}\ncontainers: {200: {host: h}}\n"
                 "code: {repo: /src, ref: 0123456}\ntrain: {command: x, env: {UMASK: 0022, N: 1_000, F: 1.50}, "
                 "outputs: [007]}\n")
    spec = config.load(str(p)).container(200)
    assert spec.code.ref == "0123456"
    assert dict(spec.train.env) == {"UMASK": "0022", "N": "1_000", "F": "1.50"}
    assert spec.train.outputs == ("007",)
    assert spec.host.port is None and isinstance(spec.train.tolerance, float)  # port unset: ~/.ssh/config or 22


def test_numbers_stay_plain_numbers_where_a_number_is_meant(tmp_path):
    """A socket call (paramiko's getaddrinfo) takes a plain int only: the numbers that keep their text never
    leave the loader as settings that are numbers."""
    import socket

    p = tmp_path / "hosts.yaml"
    p.write_text("hosts: {h: {address: 127.0.0.1, port: 2222, max_parallel: 3}}\ncontainers: {200: {host: h}}\n"
                 "groups: {g: [200]}\ntrain: {master_port: 29500, tolerance: 0.25, rendezvous_timeout: 30}\n")
    cfg = config.load(str(p))
    spec = cfg.container(200)
    values = [spec.host.port, spec.host.max_parallel, spec.train.master_port, spec.train.tolerance,
              spec.train.rendezvous_timeout, *cfg.groups["g"], *cfg.containers]
    assert all(type(v) in (int, float) for v in values), [type(v) for v in values]
    socket.getaddrinfo(spec.host.address, spec.host.port)  # raised "Int or String expected" with a subclass


KEEPS = ("hosts: {h: {address: 10.0.0.1, port: 2222}}\ncontainers: {200: {host: h}, 0x12C: {host: h}}\n"
         "code: {repo: /src, ref: 0123456}\ntrain: {command: x, env: {UMASK: 0022, F: 1.50}, outputs: [007], "
         "tolerance: .25, master_port: 29500}\n")


def test_a_parsed_file_is_kept_so_the_next_command_needs_no_yaml(tmp_path):
    """The second process that loads an unchanged file imports no yaml and gets the same settings."""
    p = tmp_path / "hosts.yaml"
    p.write_text(KEEPS)
    code = ("import sys; from remote import config; c = config.load(sys.argv[1]); "
            "print('yaml' in sys.modules, repr(c.containers), c.containers[200].code.ref)")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "run"),
           "PYTHONPATH": str(ROOT)}
    (tmp_path / "run").mkdir(mode=0o700)
    first, second = (subprocess.run([sys.executable, "-c", code, str(p)], env=env, capture_output=True, text=True,
                                    check=True).stdout for _ in range(2))
    assert first.startswith("True ") and second.startswith("False ")
    assert first[5:] == second[6:] and second.rstrip().endswith(" 0123456")


def test_what_is_kept_reads_back_exactly_and_an_edit_or_a_broken_entry_reads_the_file(tmp_path, monkeypatch):
    p = tmp_path / "hosts.yaml"
    p.write_text(KEEPS)
    fresh = config.load(str(p))
    monkeypatch.setattr(config, "_read_yaml", lambda file, text: pytest.fail("the kept entry was not used"))
    kept = config.load(str(p))
    assert kept == fresh and kept.container(300).ctid == 300 and dict(kept.container(200).train.env) == \
        {"UMASK": "0022", "F": "1.50"} and type(kept.container(200).host.port) is int
    monkeypatch.undo()
    p.write_text(KEEPS.replace("0123456", "0777"))  # an edit: a new entry
    assert config.load(str(p)).container(200).code.ref == "0777"
    entry = config._cache_file(p.read_text())
    entry.write_text('{"m": [[1, ')  # broken: ignored, the file read again (and kept anew)
    assert config.load(str(p)).container(200).code.ref == "0777"
    assert config._parsed(p.read_text()) is not config._MISSING


def test_a_cache_folder_others_may_write_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    folder = tmp_path / "run" / "remote" / "hosts-parsed"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    assert config._cache_dir() is None
    folder.chmod(0o700)
    assert config._cache_dir() == folder


def test_a_bare_nodes_file_loads_and_a_task_that_needs_a_container_says_create_makes_one(tmp_path):
    """Issue 37: a file with hosts and no container yet (what `remote init` writes for a bare node) loads; asking
    it for a container names `remote create`."""
    from remote.errors import ConfigError
    from remote.ops import hostsinit

    text = hostsinit.render(config.Host(name="pve", address="10.0.0.1"), {}, [])
    assert "containers: {}   # none yet: `remote create CTID --host HOST" in text
    hostsinit.write(str(tmp_path / "hosts.yaml"), text, False)
    loaded = config.load(str(tmp_path / "hosts.yaml"))
    assert loaded.containers == {} and set(loaded.hosts) == {"pve"}
    with pytest.raises(ConfigError, match="no containers in this file yet: `remote create CTID --host HOST"):
        loaded.container(None)
    assert hostsinit.add_container(str(tmp_path / "hosts.yaml"), 210, "pve", "made by remote create")
    assert config.load(str(tmp_path / "hosts.yaml")).container(None).ctid == 210
