"""hosts.yaml -> frozen, validated objects.

One loader for every section. Unknown keys are rejected, types and ranges checked, references
resolved; every error names the file, the key path and what was expected. The `venv`, `code`,
`warmup` and `train` sections are global and can be overridden key by key per container.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError

ENV_VAR = "REMOTE_HOSTS_FILE"
CONTAINER_VAR = "REMOTE_CONTAINER"  # the container a task works on when --container is absent
CONTAINER_KEY = "container"  # the library's word for the container argument (the command line says --container)
CHOOSE = "the container argument"  # how to name one, in the library's words
DEFAULT_FILE = "hosts.yaml"
UV_VERSION = "0.13.9"  # the uv bootstrapped inside containers; pinned so deploys are reproducible

_MISSING = object()


@dataclass(frozen=True)
class Host:
    name: str
    address: str  # an address, or a Host alias of ~/.ssh/config (remote.transport.sshconfig)
    port: int | None = None  # None: ~/.ssh/config's Port, else 22
    user: str | None = None  # None: ~/.ssh/config's User, else root
    key_file: str | None = None
    known_hosts: str | None = None
    connect_timeout: float = 10.0
    pct: str = "pct"  # how pct is called there: with sudo, `sudo -n <pct_path>` (remote.sudo)
    sudo: bool = False  # every program remote runs as root there goes through `sudo -n` at its exact path
    pct_path: str | None = None  # the `pct` key as written (the path a sudo rule names)
    local: bool = False  # run on this machine (the controller is the Proxmox host)
    max_parallel: int = 4  # containers of this host that a fleet task works on at once
    control_persist: float = 60.0  # seconds a kept connection waits for the next command; 0: none (transport.keeper)
    cluster: str | None = None  # the Proxmox cluster this host is a node of (remote.cluster); None: a host of its own
    node: str | None = None  # its Proxmox node name where it differs from the entry's name
    # "": all from the hosts file; else remote.fabric's words: "fabric.Connection", plus "key_filename" when
    # the key came from its connect_kwargs and "no-hosts-file" when no hosts file was given
    given_by: str = ""

    @property
    def node_name(self) -> str:
        """The Proxmox node this host is (what the cluster's guest list names)."""
        return self.node or self.name


def setting(host: Host, key: str) -> str:
    """Where the user sets `key` of `host`: the hosts file's hosts.NAME.KEY, or, for a host made from a
    Fabric Connection without a hosts file, a hosts file to pass."""
    if "no-hosts-file" in host.given_by.split():
        return f"`{key}` under this host in a hosts file passed as hosts= (a fabric.Connection has no {key})"
    return f"hosts.{host.name}.{key}"


@dataclass(frozen=True)
class VenvSpec:
    path: str = "/root/venv"
    python: str = "python3"
    uv_version: str = UV_VERSION
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    requirements: str | None = None
    offline: bool = False  # install from find_links only (`offline: true` or `index_url: none`): an air-gapped host
    cuda: str | None = None  # the CUDA build torch must report ("13.0", "cpu") where the torch pin does not say


@dataclass(frozen=True)
class CodeSpec:
    repo: str | None = None  # local git repository, absolute after loading
    ref: str = "HEAD"
    path: str = "/root/dflash"


@dataclass(frozen=True)
class WarmupSpec:
    command: str | None = None
    devices: tuple[str, ...] = ()
    cache_dir: str = "/root/.cache/torch-compile"
    timeout: float = 1800.0
    # copy a cache another container made for exactly this instead of compiling: that trusts its jobs'
    # code (inductor entries are Python and .so files this container loads); false: always compile here
    copy_from_others: bool = True


@dataclass(frozen=True)
class MetricSpec:
    """How a run's log reports its speed: a regex whose group 1 is the value, its unit, its direction."""

    pattern: str
    unit: str | None = None
    higher_is_better: bool = True


@dataclass(frozen=True)
class TrainSpec:
    command: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    run_dir: str = "/root/runs"
    metric: MetricSpec | None = None  # None: the built-in forms (tok/s, it/s, s/it, samples/s, ...)
    baseline: float | None = None
    tolerance: float = 0.2
    outputs: tuple[str, ...] = ()  # a run's results, relative to the checkout (`remote pull --run`)
    master_port: int = 29500  # a multi-node run's rendezvous port on its first node ({master_port})
    rendezvous_timeout: int = 300  # seconds a multi-node run's nodes wait for each other before failing
    stall: float | None = None  # seconds without a new log line (a metric value, with train.metric): stalled
    on_stall: str = "warn"  # warn | stop | restart (docs/guide/watch.md)
    restarts: int = 0  # how many times a failed run is started again
    restart_on: tuple[int, ...] = ()  # the exit statuses that restart it; () = any non-zero


SNAPSHOT_MODES = ("auto", "always", "never")


@dataclass(frozen=True)
class DeploySpec:
    snapshot: str = "auto"  # auto: a Proxmox snapshot before a changing deploy where the storage can take one
    keep_snapshots: int = 3  # remote's own snapshots kept per container (older ones of remote's deleted)


@dataclass(frozen=True)
class ContainerSpec:
    ctid: int
    host: Host
    venv: VenvSpec = field(default_factory=VenvSpec)
    code: CodeSpec = field(default_factory=CodeSpec)
    warmup: WarmupSpec = field(default_factory=WarmupSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    deploy: DeploySpec = field(default_factory=DeploySpec)
    address: str | None = None  # where other containers reach this one (a multi-node run's {master_addr})
    cluster: str | None = None  # the cluster holding it: `host` is then a hint, its node found in the cluster's list
    host_given: bool = True  # False: only `cluster:` was written (host is the cluster's first host until resolved)


@dataclass(frozen=True)
class Config:
    file: str
    hosts: dict[str, Host]
    containers: dict[int, ContainerSpec]
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)  # name -> container ids (--container NAME)
    default_container: int | None = None  # `default_container:`, for tasks given no --container

    def container(self, ctid: int | str | None) -> ContainerSpec:
        """The container `ctid`; when None: $REMOTE_CONTAINER, else default_container, else the only one."""
        if ctid is None:
            env = os.environ.get(CONTAINER_VAR, "").strip()
            if env:
                if not env.isdigit() or int(env) not in self.containers:
                    raise ConfigError(self.file, f"${CONTAINER_VAR}",
                                      f"{env!r} is not a container of this file (known: {_ids(self.containers)})")
                return self.containers[int(env)]
            if self.default_container is not None:
                return self.containers[self.default_container]
            if len(self.containers) == 1:
                return next(iter(self.containers.values()))
            raise ConfigError(self.file, "containers",
                              f"several containers configured ({_ids(self.containers)}): name one ({CHOOSE}), "
                              f"or set default_container: in the file (or ${CONTAINER_VAR})")
        try:
            key = int(ctid)
        except (TypeError, ValueError):
            raise ConfigError(self.file, CONTAINER_KEY, f"expected a container id, got {ctid!r}") from None
        if key not in self.containers:
            raise ConfigError(self.file, CONTAINER_KEY,
                              f"container {key} is not in this file (known: {_ids(self.containers)})")
        return self.containers[key]


def _ids(d: dict) -> str:
    return ", ".join(str(k) for k in d) or "none"


class _Number:
    """A YAML number that remembers how it was written: where a setting is a string, `ref: 0123456` and
    `UMASK: 0022` mean those characters, not YAML 1.1's octal 42798 and 18."""

    text: str


class _Int(_Number, int):
    pass


class _Float(_Number, float):
    pass


def _keep_text(kind):
    import yaml

    base = yaml.SafeLoader.yaml_constructors[f"tag:yaml.org,2002:{'int' if kind is _Int else 'float'}"]

    def construct(loader, node):
        value = kind(base(loader, node))
        value.text = node.value
        return value
    return construct


def _text(value) -> str:
    """A scalar as the string it was written as (a number's own characters)."""
    return getattr(value, "text", None) or str(value)


class _Section:
    """Reads one mapping, key by key, and complains precisely."""

    def __init__(self, file: str, path: str, data: Any):
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(file, path or "(top level)", f"expected a mapping, got {_kind(data)}")
        self.file, self.path, self.data = file, path, data
        self.seen: set[object] = set()  # keys read (YAML keys need not be strings)

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else str(name)

    def take(self, name: str, kind: type | tuple, default: Any = _MISSING,
             check: Callable[[Any], str | None] | None = None) -> Any:
        self.seen.add(name)
        if name not in self.data or self.data[name] is None:
            if default is _MISSING:
                raise ConfigError(self.file, self.key(name), "required key is missing" + self._typo_of(name))
            return default
        value = self.data[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            expected = " or ".join(k.__name__.replace("str", "string") for k in kinds)
            raise ConfigError(self.file, self.key(name), f"expected {expected}, got {_kind(value)} {value!r}")
        if isinstance(value, (_Int, _Float)) and str not in kinds:  # a plain number where a number is meant
            value = float(value) if isinstance(value, float) else int(value)
        if check and (problem := check(value)):
            raise ConfigError(self.file, self.key(name), problem)
        return value

    def _typo_of(self, name: str) -> str:
        """A key beside a missing one that reads like a typo of it (`hots` for `host`): named, since the
        missing key is the error that shows and the unknown key would only be found after it."""
        import difflib

        others = [str(k) for k in self.data if k not in self.seen and isinstance(k, (str, int))]
        close = difflib.get_close_matches(name, others, n=1, cutoff=0.6)
        return f" (unknown key {self.key(close[0])} beside it: a typo of {name}?)" if close else ""

    def strings(self, name: str, default: tuple = ()) -> tuple[str, ...]:
        value = self.take(name, list, default=list(default))
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, (str, int)):
                raise ConfigError(self.file, f"{self.key(name)}[{i}]", f"expected a string, got {_kind(item)}")
        return tuple(_text(v) for v in value)

    def section(self, name: str) -> _Section:
        self.seen.add(name)
        return _Section(self.file, self.key(name), self.data.get(name))

    def done(self, allowed_extra: tuple = ()) -> None:
        unknown = [k for k in self.data if k not in self.seen and k not in allowed_extra]
        if unknown:
            allowed = ", ".join(sorted(str(k) for k in self.seen))
            raise ConfigError(self.file, self.key(str(unknown[0])), f"unknown key (allowed here: {allowed})")


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "nothing"}.get(type(value), type(value).__name__)


def _range(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"expected a value from {lo} to {hi}, got {v}"


def _nonempty(v: str) -> str | None:
    return None if v.strip() else "must not be empty"


def _abspath(v: str) -> str | None:
    return None if v.startswith("/") else f"expected an absolute path inside the container, got {v!r}"


def _cuda(v) -> str | None:
    return None if re.fullmatch(r"\d+\.\d+|cpu", str(v)) else f"expected a CUDA version such as '13.0', or 'cpu', got {v!r}"


def _regex(v: str) -> str | None:
    try:
        groups = re.compile(v).groups
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    return None if groups else "needs a group around the number, e.g. 'time ([\\d.]+)ms'"


def _host(s: _Section, name: str) -> Host:
    from .sudo import pct_command, plain_path

    local = s.take("local", bool, False)
    raw_pct = s.take("pct", str, "pct", _nonempty)
    sudo = s.take("sudo", bool, False)
    if sudo and (raw_pct != "pct" and not raw_pct.startswith("/") or len(raw_pct.split()) != 1
                 or "sudo" in raw_pct.split("/")[-1]):
        raise ConfigError(s.file, s.key("pct"), f"with sudo: true, pct is the exact path of pct on the host "
                          f"(e.g. /usr/sbin/pct, the default), got {raw_pct!r}: remote adds `sudo -n` itself")
    try:
        pct_words = shlex.split(raw_pct)
    except ValueError as exc:
        raise ConfigError(s.file, s.key("pct"), f"not a command line: {exc}") from None
    # Every host's pct path goes into `remote init --sudoers USER --hosts FILE`'s rule: a plain path only.
    if any(w.startswith("/") and not plain_path(w) for w in pct_words):
        raise ConfigError(s.file, s.key("pct"), f"pct is the plain absolute path of pct on the host (letters, digits, "
                          f"_ . + - and /, no `..`; e.g. /usr/sbin/pct), or `pct` to find it on PATH; got {raw_pct!r}")
    host = Host(
        name=name,
        # The controller is the host itself: nothing to connect to.
        address=s.take("address", str, "localhost" if local else _MISSING, _nonempty),
        port=s.take("port", int, None, _range(1, 65535)),
        user=s.take("user", str, None, _nonempty),
        key_file=_expand(s.take("key_file", str, None), s.file),
        known_hosts=_expand(s.take("known_hosts", str, None), s.file),
        connect_timeout=s.take("connect_timeout", float, 10.0, _range(0.1, 600)),
        pct=pct_command(raw_pct, sudo),
        sudo=sudo,
        pct_path=raw_pct,
        local=local,
        max_parallel=s.take("max_parallel", int, 4, _range(1, 256)),
        control_persist=s.take("control_persist", float, 60.0, _range(0, 86400)),
        cluster=s.take("cluster", str, None, _name),
        node=s.take("node", str, None, _name),
    )
    s.done()
    if host.node is not None and host.cluster is None:
        raise ConfigError(s.file, s.key("node"), "a node name belongs to a host of a cluster: add `cluster: NAME` "
                          "(the same name on every host of that Proxmox cluster), or drop node:")
    if host.local and host.cluster is not None:
        raise ConfigError(s.file, s.key("cluster"), "a local host cannot be one node of a cluster (remote reaches "
                          "the other nodes over SSH): give each node an address instead of local: true")
    return host


def _name(v: str) -> str | None:
    return None if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v) else f"expected a name (letters, digits, . _ -), got {v!r}"


def _clusters(file: str, hosts: dict[str, Host]) -> dict[str, list[Host]]:
    """cluster name -> its hosts, in file order; one host per node name."""
    clusters: dict[str, list[Host]] = {}
    for h in hosts.values():
        if h.cluster is None:
            continue
        for other in clusters.get(h.cluster, []):
            if other.node_name == h.node_name:
                raise ConfigError(file, f"hosts.{h.name}.node", f"hosts {other.name} and {h.name} are both node "
                                  f"{h.node_name!r} of cluster {h.cluster!r}: set node: to each host's Proxmox node name")
        clusters.setdefault(h.cluster, []).append(h)
    return clusters


def _expand(path: str | None, file: str) -> str | None:
    """~ expanded; relative paths are relative to the hosts file."""
    if path is None:
        return None
    p = Path(os.path.expanduser(path))
    return str(p if p.is_absolute() else (Path(file).resolve().parent / p))


# Per-section readers: `base` holds the global values that a container section overrides.
def _venv(s: _Section, base: VenvSpec) -> VenvSpec:
    spec = VenvSpec(
        path=s.take("path", str, base.path, _abspath),
        python=s.take("python", str, base.python, _nonempty),
        uv_version=s.take("uv_version", str, base.uv_version, _nonempty),
        index_url=s.take("index_url", str, base.index_url),
        extra_index_urls=s.strings("extra_index_urls", base.extra_index_urls),
        find_links=s.strings("find_links", base.find_links),
        packages=s.strings("packages", base.packages),
        requirements=s.take("requirements", str, base.requirements),
        offline=s.take("offline", bool, base.offline),
        cuda=s.take("cuda", (str, float), base.cuda, _cuda),
    )
    s.done()
    if spec.index_url is not None and spec.index_url.strip().lower() == "none":  # no index at all
        spec = replace(spec, index_url=None, offline=True)
    if spec.cuda is not None:
        spec = replace(spec, cuda=str(spec.cuda))
    if spec.offline and (spec.index_url or spec.extra_index_urls):
        raise ConfigError(s.file, s.key("offline"), "an offline venv uses no index: drop index_url and "
                          "extra_index_urls, or set offline: false")
    if spec.offline and not spec.find_links:
        raise ConfigError(s.file, s.key("find_links"), "an offline venv installs from find_links only: list the "
                          "folders in the container that hold the wheels (e.g. made by scripts/wheelhouse-from-venv)")
    if spec.path.rstrip("/") in ("", "/root", "/"):
        raise ConfigError(s.file, s.key("path"), f"refusing to manage {spec.path!r}: name a folder of its own")
    return spec


def _code(s: _Section, base: CodeSpec) -> CodeSpec:
    repo = s.take("repo", str, None)
    spec = CodeSpec(
        repo=_expand(repo, s.file) if repo is not None else base.repo,
        ref=s.take("ref", (str, int), base.ref),
        path=s.take("path", str, base.path, _abspath),
    )
    s.done()
    return CodeSpec(spec.repo, _text(spec.ref), spec.path)


def _warmup(s: _Section, base: WarmupSpec) -> WarmupSpec:
    spec = WarmupSpec(
        command=s.take("command", str, base.command, _nonempty),
        devices=s.strings("devices", base.devices),
        cache_dir=s.take("cache_dir", str, base.cache_dir, _abspath),
        timeout=s.take("timeout", float, base.timeout, _range(1, 86400)),
        copy_from_others=s.take("copy_from_others", bool, base.copy_from_others),
    )
    s.done()
    if spec.command and "{device}" in spec.command and not spec.devices:
        raise ConfigError(s.file, s.key("devices"), "warmup.command uses {device}: list the devices to warm up, "
                          "e.g. devices: [5, 6, 7] (or drop {device} to run the command once)")
    if spec.cache_dir.rstrip("/") == "/tmp" or spec.cache_dir.startswith("/tmp/"):
        raise ConfigError(s.file, s.key("cache_dir"),
                          "the compile cache must live outside /tmp (tmp cleaners delete it); "
                          "use e.g. /root/.cache/torch-compile")
    return spec


def _train(s: _Section, base: TrainSpec) -> TrainSpec:
    env = s.take("env", dict, dict(base.env))
    for k, v in env.items():
        if not isinstance(k, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise ConfigError(s.file, s.key(f"env.{k}"), "expected an environment variable name")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ConfigError(s.file, s.key(f"env.{k}"), f"expected a string, got {_kind(v)}")
    spec = TrainSpec(
        command=s.take("command", str, base.command, _nonempty),
        env=tuple(sorted((k, _text(v)) for k, v in env.items())),
        run_dir=s.take("run_dir", str, base.run_dir, _abspath),
        metric=_metric(s, base.metric),
        baseline=s.take("baseline", float, base.baseline, _range(0, 1e12)),
        tolerance=s.take("tolerance", float, base.tolerance, _range(0, 1)),
        outputs=s.strings("outputs", base.outputs),
        master_port=s.take("master_port", int, base.master_port, _range(1, 65535)),
        rendezvous_timeout=s.take("rendezvous_timeout", int, base.rendezvous_timeout, _range(1, 86400)),
        stall=s.take("stall", float, base.stall, _range(1, 7 * 86400)),
        on_stall=s.take("on_stall", str, base.on_stall, _one_of(ON_STALL)),
        restarts=s.take("restarts", int, base.restarts, _range(0, 1000)),
        restart_on=_exit_codes(s, base.restart_on),
    )
    s.done()
    if spec.on_stall == "restart" and not spec.restarts:
        raise ConfigError(s.file, s.key("on_stall"), "restart needs train.restarts: N (how many times a run may "
                          "be started again, e.g. restarts: 3)")
    if spec.on_stall != "warn" and spec.stall is None:
        raise ConfigError(s.file, s.key("on_stall"), f"{spec.on_stall} needs train.stall: SECONDS (how long "
                          "without output counts as stalled, e.g. stall: 600)")
    for i, out in enumerate(spec.outputs):
        if not out.strip() or ".." in Path(out).parts:
            raise ConfigError(s.file, f"{s.key('outputs')}[{i}]",
                              f"expected a path in the checkout (or absolute) without '..', got {out!r}")
    return spec


ON_STALL = ("warn", "stop", "restart")


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"expected one of {', '.join(choices)}, got {v!r}"


def _exit_codes(s: _Section, base: tuple[int, ...]) -> tuple[int, ...]:
    """`restart_on: [exit statuses]`, each 1 to 255 (0 is success, never restarted)."""
    codes = s.take("restart_on", list, list(base))
    for i, code in enumerate(codes):
        if isinstance(code, bool) or not isinstance(code, int) or not 1 <= code <= 255:
            raise ConfigError(s.file, f"{s.key('restart_on')}[{i}]", f"expected an exit status from 1 to 255, got {code!r}")
    return tuple(codes)


def _metric(s: _Section, base: MetricSpec | None) -> MetricSpec | None:
    """`metric: REGEX` (higher is better, no unit) or `metric: {pattern, unit, higher_is_better}`."""
    raw = s.take("metric", (str, dict), None)
    if raw is None:
        return base
    if isinstance(raw, str):
        return MetricSpec(s.take("metric", str, check=_regex))
    m = s.section("metric")
    spec = MetricSpec(pattern=m.take("pattern", str, check=_regex), unit=m.take("unit", str, None, _nonempty),
                      higher_is_better=m.take("higher_is_better", bool, True))
    m.done()
    return spec


def _deploy(s: _Section, base: DeploySpec) -> DeploySpec:
    spec = DeploySpec(
        snapshot=s.take("snapshot", str, base.snapshot,
                        lambda v: None if v in SNAPSHOT_MODES else f"expected one of {', '.join(SNAPSHOT_MODES)}, got {v!r}"),
        keep_snapshots=s.take("keep_snapshots", int, base.keep_snapshots, _range(1, 100)),
    )
    s.done()
    return spec


_FEATURES: dict[str, tuple[Callable[[_Section, Any], Any], Callable[[], Any]]] = {"venv": (_venv, VenvSpec), "code": (_code, CodeSpec),
             "warmup": (_warmup, WarmupSpec), "train": (_train, TrainSpec), "deploy": (_deploy, DeploySpec)}


def parse(data: Any, file: str) -> Config:
    """Validate the parsed YAML `data` of `file`."""
    top = _Section(file, "", data)
    hosts_s = top.section("hosts")
    hosts = {}
    for name in hosts_s.data:
        if not isinstance(name, str):
            raise ConfigError(file, f"hosts.{name}", "host names must be strings")
        hosts[name] = _host(hosts_s.section(name), name)
    if not hosts:
        raise ConfigError(file, "hosts", "no hosts defined")
    clusters = _clusters(file, hosts)
    globals_ = {key: reader(top.section(key), default()) for key, (reader, default) in _FEATURES.items()}
    containers_s = top.section("containers")
    containers = {}
    for raw_id in containers_s.data:
        key = f"containers.{raw_id}"
        try:
            ctid = int(raw_id)
        except (TypeError, ValueError):
            raise ConfigError(file, key, "container ids are integers from 100 to 999999999") from None
        if isinstance(raw_id, bool) or not 100 <= ctid <= 999_999_999:
            raise ConfigError(file, key, f"container id out of range: expected 100 to 999999999, got {raw_id}")
        if ctid in containers:
            raise ConfigError(file, key, "container listed twice")
        c = containers_s.section(raw_id)
        cluster = c.take("cluster", str, None)  # without it, host: is required (a cluster's container: a hint)
        host = c.take("host", str, None if cluster is not None else _MISSING)
        if host is not None and host not in hosts:
            raise ConfigError(file, c.key("host"), f"unknown host {host!r} (known: {_ids(hosts)})")
        if cluster is not None and cluster not in clusters:
            raise ConfigError(file, c.key("cluster"), f"unknown cluster {cluster!r}: no host says `cluster: {cluster}` "
                              f"(clusters: {_ids(clusters)})")
        if host is not None and cluster is not None and hosts[host].cluster != cluster:
            raise ConfigError(file, c.key("cluster"), f"host {host} is not a node of cluster {cluster!r} (its "
                              f"cluster: {hosts[host].cluster or 'none'}): drop one of host: and cluster:")
        features = {k: reader(c.section(k), globals_[k]) for k, (reader, _) in _FEATURES.items()}
        address = c.take("address", str, None, _nonempty)
        c.done()
        placed = hosts[host] if host is not None else clusters[cluster][0]
        containers[ctid] = ContainerSpec(ctid=ctid, host=placed, address=address, cluster=placed.cluster,
                                         host_given=host is not None, **features)
    if not containers:
        raise ConfigError(file, "containers", "no containers defined")
    groups = _groups(top.section("groups"), containers)
    default = top.take("default_container", int, None)
    if default is not None and default not in containers:
        raise ConfigError(file, "default_container", f"container {default} is not in this file (known: {_ids(containers)})")
    top.done()
    return Config(file=file, hosts=hosts, containers=containers, groups=groups, default_container=default)


def _groups(s: _Section, containers: dict[int, ContainerSpec]) -> dict[str, tuple[int, ...]]:
    """`groups: {drafters: [200, 201]}`: names usable as --container, each a list of configured ids."""
    groups = {}
    for name in s.data:
        key = s.key(str(name))
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name) or name == "all":
            raise ConfigError(s.file, key, "group names are words that start with a letter (and not 'all')")
        ids = s.take(name, list)
        if not ids:
            raise ConfigError(s.file, key, "expected a list of container ids, got an empty list")
        seen = []
        for i, raw in enumerate(ids):
            if isinstance(raw, bool) or not isinstance(raw, int):
                raise ConfigError(s.file, f"{key}[{i}]", f"expected a container id, got {_kind(raw)} {raw!r}")
            if raw not in containers:
                raise ConfigError(s.file, f"{key}[{i}]", f"unknown container {raw} (known: {_ids(containers)})")
            if raw not in seen:
                seen.append(raw)
        groups[name] = tuple(int(i) for i in seen)
    s.done()
    return groups


def find_file(explicit: str | None = None) -> str:
    """The hosts file: `explicit`, else $REMOTE_HOSTS_FILE, else ./hosts.yaml."""
    return explicit or os.environ.get(ENV_VAR) or DEFAULT_FILE


def load(path: str | None = None) -> Config:
    """Load and validate the hosts file."""
    file = find_file(path)
    try:
        text = Path(file).read_text()
    except FileNotFoundError:
        raise ConfigError(file, "", f"file not found (set ${ENV_VAR} or run from the folder holding {DEFAULT_FILE})") from None
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read: {exc.strerror}") from None
    data = _parsed(text)
    if data is _MISSING:
        data = _read_yaml(file, text)
        _keep_parsed(text, data)
    config = parse(data, file)
    _check_files(config)
    return config


def _read_yaml(file: str, text: str) -> Any:
    import yaml  # here, not at the top: `remote --help` never needs it, nor a command whose file is parsed

    try:
        return yaml.load(text, Loader=_loader())
    except DuplicateKey as exc:
        raise ConfigError(file, exc.path, f"given twice (lines {exc.first} and {exc.second}): "
                          "the second would silently win; keep one") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(file, "", f"{where}not valid YAML: {getattr(exc, 'problem', exc)}") from None


# -- the parsed file, kept: a command whose hosts file is unchanged does not import yaml -------------------
# importing yaml and running its pure-Python loader is ~10-20% of a warm one-off command. What the loader
# made (before any check: those run every time) is kept as JSON in the user's own runtime folder, under
# the sha256 of the file's text, so an edit is a new entry. A cache that is missing, unreadable, not ours
# or not understood is ignored and the file read again.

def _cache_dir() -> Path | None:
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base) / "remote" / "hosts-parsed"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()
    except OSError:
        return None
    if st.st_uid != os.geteuid() or st.st_mode & 0o077:  # someone else's, or others may write: not used
        return None
    return folder


def _cache_file(text: str) -> Path | None:
    import hashlib

    folder = _cache_dir()
    return folder / (hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40] + ".json") if folder else None


def _parsed(text: str) -> Any:
    """What the loader made of this text before, or _MISSING."""
    path = _cache_file(text)
    if path is None:
        return _MISSING
    try:
        import json

        return _decode(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return _MISSING


def _keep_parsed(text: str, data: Any) -> None:
    path = _cache_file(text)
    if path is None:
        return
    try:
        encoded = _encode(data)
    except TypeError:  # a YAML type kept as is (a date, a set, bytes): read the file each time
        return
    import json
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(encoded, f)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _encode(value: Any) -> Any:
    """The loader's output as JSON, every type kept: {"m": [[key, value], ...]} a mapping (keys need not be
    strings), {"l": [...]} a list, {"i"/"f": text, "v": value} a number that remembers its text."""
    if isinstance(value, _Int):
        return {"i": value.text, "v": int(value)}
    if isinstance(value, _Float):
        return {"f": value.text, "v": float(value)}
    if value is None or type(value) in (str, int, float, bool):
        return value
    if type(value) is dict:
        return {"m": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if type(value) is list:
        return {"l": [_encode(v) for v in value]}
    raise TypeError(type(value).__name__)


def _decode(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    if "m" in value:
        return {_decode(k): _decode(v) for k, v in value["m"]}
    if "l" in value:
        return [_decode(v) for v in value["l"]]
    number = _Int(value["v"]) if "i" in value else _Float(value["v"])
    number.text = value["i"] if "i" in value else value["f"]
    return number


def _check_files(config: Config) -> None:
    """A key_file or known_hosts that is not there: exit 2 now, naming it, rather than at connect time."""
    for h in config.hosts.values():
        if h.local:
            continue
        if h.key_file and not os.path.isfile(h.key_file):
            raise ConfigError(config.file, f"hosts.{h.name}.key_file", f"no such file: {h.key_file} (fix the path, "
                              "or leave key_file out to use ssh-agent and ~/.ssh/config's IdentityFile)")
        if h.known_hosts and not os.path.isfile(h.known_hosts):
            raise ConfigError(config.file, f"hosts.{h.name}.known_hosts", f"no such file: {h.known_hosts} (fix the "
                              "path, or create it: check the host's fingerprint on the host with `ssh-keygen -lf "
                              f"/etc/ssh/ssh_host_ed25519_key.pub`, then `ssh-keyscan -p PORT ADDRESS >> {h.known_hosts}`)")


class DuplicateKey(Exception):
    def __init__(self, path: str, first: int, second: int):
        self.path, self.first, self.second = path, first, second


@functools.cache
def _loader() -> type:
    """yaml's SafeLoader, but a key given twice in one mapping is an error (YAML says keys are unique;
    PyYAML keeps the last one without a word)."""
    import yaml

    class Loader(yaml.SafeLoader):
        """yaml.safe_load's loader: numbers keep their source text (_Number), a key twice is an error."""

        def construct_document(self, node):
            self._remote_root = node  # for the key path in the message
            return super().construct_document(node)

        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`, whose keys may be overridden
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class says so
                    break
                if first is not None:
                    raise DuplicateKey(_path_of(self, node, key), first, key_node.start_mark.line + 1)
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    Loader.add_constructor("tag:yaml.org,2002:int", _keep_text(_Int))
    Loader.add_constructor("tag:yaml.org,2002:float", _keep_text(_Float))
    return Loader


def _path_of(loader, node, key) -> str:
    """The key path of `key` in mapping `node` (hosts.pve1.port), found from the document's root."""
    import yaml

    def walk(current, path):
        if current is node:
            return path
        if isinstance(current, yaml.MappingNode):
            for k, v in current.value:
                found = walk(v, path + [str(getattr(k, "value", "?"))])
                if found is not None:
                    return found
        elif isinstance(current, yaml.SequenceNode):
            for i, v in enumerate(current.value):
                found = walk(v, path[:-1] + [f"{path[-1]}[{i}]"] if path else [f"[{i}]"])
                if found is not None:
                    return found
        return None

    root = getattr(loader, "_remote_root", None)
    path = walk(root, []) if root is not None else None
    return ".".join((path or []) + [str(key)])
