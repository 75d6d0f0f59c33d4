"""Bad inputs, by the hundred: malformed hosts files and fuzzed argv (rows of docs/evidence/reliability.md)."""

from __future__ import annotations

import random
import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remote import config
from remote.errors import ConfigError
from remote.transport.pct import exec_argv
from remote.lab.testing import inner_argv
from remote.transport import _check_argv

H = "hosts: {h: {address: x}}\n"
C = "containers: {200: {host: h}}\n"

# (file text, the key path the error must name). Each is one way a hand-edited file goes wrong.
MALFORMED = [
    ("", ""),                                                        # empty file
    ("- a\n- b\n", ""),                                              # a list, not a mapping
    ("hosts: {a: [}\n", ""),                                         # YAML syntax
    ("hosts:\n\t h: {}\n", ""),                                      # a tab in the indentation
    (C, "hosts"),                                                    # no hosts
    (H + "containers: [200]\n", "containers"),                        # a list, not a mapping
    ("hosts: {}\n" + C, "hosts"),                                    # empty hosts
    (H + "containers: {200: {host: h, address: ''}}\n", "containers.200.address"),  # an empty address
    ("hosts: {h: {adress: x}}\n" + C, "hosts.h.address"),            # a typo: the required key is missing
    ("hosts: {h: {address: x, port: 0}}\n" + C, "hosts.h.port"),
    ("hosts: {h: {address: x, port: -22}}\n" + C, "hosts.h.port"),
    ("hosts: {h: {address: x, port: 65536}}\n" + C, "hosts.h.port"),
    ("hosts: {h: {address: x, port: 22.5}}\n" + C, "hosts.h.port"),
    ("hosts: {h: {address: x, port: ssh}}\n" + C, "hosts.h.port"),
    ("hosts: {h: {address: [x]}}\n" + C, "hosts.h.address"),
    ("hosts: {h: {address: x, user: 7}}\n" + C, "hosts.h.user"),
    ("hosts: {h: {address: x, connect_timeout: -1}}\n" + C, "hosts.h.connect_timeout"),
    ("hosts: {h: {address: x, local: 1}}\n" + C, "hosts.h.local"),
    ("hosts: {h: [address, x]}\n" + C, "hosts.h"),
    (H + "containers: {200: {host: h, colour: red}}\n", "containers.200.colour"),
    (H + "containers: {200: {host: [h]}}\n", "containers.200.host"),
    (H + "containers: {200: h}\n", "containers.200"),
    (H + "containers: {0200x: {host: h}}\n", "containers.0200x"),
    (H + "containers: {-200: {host: h}}\n", "containers.-200"),
    (H + C + "venv: {packages: torch}\n", "venv.packages"),
    (H + C + "venv: {path: /}\n", "venv.path"),
    (H + C + "warmup: {command: 'x --device {device}'}\n", "warmup.devices"),
    (H + C + "warmup: {timeout: -5}\n", "warmup.timeout"),
    (H + C + "train: {env: {'A B': x}}\n", "train.env.A B"),
    (H + C + "train: {env: {A: [1]}}\n", "train.env.A"),
    (H + C + "train: {baseline: fast}\n", "train.baseline"),
    (H + C + "train: {metric: {pattern: 'a(', unit: x}}\n", "train.metric.pattern"),
    (H + C + "code: {repo: [a]}\n", "code.repo"),
]


@pytest.mark.fault("30 malformed hosts files",
                   promise="each refused with file, key path and expectation; exit 2; nothing connected")
@pytest.mark.parametrize("text, key", MALFORMED, ids=[f"{i:02d}" for i in range(len(MALFORMED))])
def test_a_malformed_hosts_file_is_refused_naming_the_key(tmp_path, text, key):
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        config.load(str(path))
    assert e.value.exit_code == 2
    assert str(e.value).startswith(f"{path}: {key + ': ' if key else ''}"), str(e.value)
    assert len(str(e.value)) > len(str(path)) + len(key) + 4  # it says what was expected, not only where


@pytest.mark.fault("A typo'd key hiding a required one",
                   promise="the missing key and the unknown key beside it that reads like its typo are both named")
@pytest.mark.parametrize("text, missing, typo", [
    (H + "containers: {200: {hots: h}}\n", "containers.200.host", "containers.200.hots"),
    ("hosts: {h: {adress: x}}\n" + C, "hosts.h.address", "hosts.h.adress"),
    (H + C + "train: {metric: {patern: 'x', unit: x}}\n", "train.metric.pattern", "train.metric.patern"),
])
def test_a_typo_hiding_a_required_key_names_the_unknown_key_too(tmp_path, text, missing, typo):
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        config.load(str(path))
    assert str(e.value) == (f"{path}: {missing}: required key is missing (unknown key {typo} beside it: a typo of "
                            f"{missing.rsplit('.', 1)[1]}?)"), str(e.value)
    # A missing key with nothing like it beside: only the missing key.
    path.write_text(H + "containers: {200: {address: 127.0.0.2}}\n")
    with pytest.raises(ConfigError, match=r"containers\.200\.host: required key is missing$"):
        config.load(str(path))


def test_there_are_at_least_30_malformed_files():
    assert len(MALFORMED) >= 30


# Any text at all, as argv items: controls, quotes, shell syntax, non-ASCII; NUL is refused separately.
ITEM = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=20)
ARGV = st.lists(ITEM, min_size=1, max_size=8).filter(lambda a: "=" not in a[0])
ENV = st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), ITEM, max_size=3)


def survives_the_one_quoting(argv, env, cwd, timeout):
    full = exec_argv("sudo -n /usr/sbin/pct", 200, argv, env=env, cwd=cwd, timeout=timeout)
    _check_argv(full)  # what the transport accepts
    assert shlex.split(shlex.join(full)) == full  # the host's login shell splits it back exactly
    assert inner_argv(full, timed=timeout is not None) == tuple(argv)  # what runs in the container is exactly argv
    i = full.index("--")
    assert full[:i] == ["sudo", "-n", "/usr/sbin/pct", "exec", "200", "--keep-env", "0"]
    assert full[i + 1:i + 4] == ["env", "-C", cwd]


@pytest.mark.fault("10,000 fuzzed argv", promise="quoted exactly once: the host shell hands pct exactly the argv")
@settings(max_examples=1_000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(argv=ARGV, env=ENV, cwd=ITEM.filter(bool), timeout=st.none() | st.floats(0.5, 1e6))
def test_fuzzed_argv_survive_the_one_quoting_exactly(argv, env, cwd, timeout):
    """Hypothesis's search (edge cases first, a failure shrunk to its smallest argv); the bulk follows."""
    survives_the_one_quoting(argv, env, cwd, timeout)


def random_item(rng: random.Random) -> str:
    """Any text but NUL and surrogates, as ITEM: mostly ASCII (controls, quotes, shell syntax), some of the rest."""
    def char() -> str:
        c = rng.randint(1, 127) if rng.random() < 0.7 else rng.randint(128, 0x10FFFF)
        return chr(c) if not 0xD800 <= c <= 0xDFFF else "'"  # a surrogate cannot be encoded: a quote instead
    return "".join(char() for _ in range(rng.randint(0, 20)))


@pytest.mark.fault("10,000 fuzzed argv", promise="quoted exactly once: the host shell hands pct exactly the argv")
def test_10000_fuzzed_argv_survive_the_one_quoting_exactly():
    """10,000 argv, env and cwd drawn from a seeded generator (the same every run, a tenth of hypothesis's
    cost per case): the same property as above, in bulk."""
    rng = random.Random(20261202)
    names = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789"
    for _ in range(10_000):
        argv = [random_item(rng) for _ in range(rng.randint(1, 8))]
        argv[0] = argv[0].replace("=", "")
        env = {rng.choice(names[:53]) + "".join(rng.choices(names, k=rng.randint(0, 8))): random_item(rng)
               for _ in range(rng.randint(0, 3))}
        cwd = random_item(rng) or "/"
        timeout = None if rng.random() < 0.5 else rng.uniform(0.5, 1e6)
        survives_the_one_quoting(argv, env, cwd, timeout)


@pytest.mark.fault("10,000 fuzzed argv", promise="quoted exactly once: the host shell hands pct exactly the argv")
def test_argv_that_cannot_be_passed_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="NUL"):
        _check_argv(["echo", "a\0b"])
    with pytest.raises(ValueError, match="contains '='"):
        exec_argv("pct", 200, ["A=1", "x"])
    with pytest.raises(ValueError, match="invalid environment variable"):
        exec_argv("pct", 200, ["x"], env={"1X": "y"})
