"""The hosts file's sections read key by key (_Section) into the objects of remote.config.model: hosts,
clusters, and the venv, code, warmup, train and deploy sections a container may override key by key."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..naming import is_repo_url
from .model import (
    CHECKPOINT_SIGNALS,
    SNAPSHOT_MODES,
    CheckpointSpec,
    CodeSpec,
    DeploySpec,
    Host,
    MetricSpec,
    TrainSpec,
    VenvSpec,
    WarmupSpec,
)
from .yamlfile import _MISSING, _Float, _Int, _text


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
            import difflib

            allowed = sorted(str(k) for k in self.seen)
            close = difflib.get_close_matches(str(unknown[0]), allowed, n=1, cutoff=0.6)
            raise ConfigError(self.file, self.key(str(unknown[0])), "unknown key"
                              + (f" (did you mean {close[0]}?)" if close else "")
                              + f" (allowed here: {', '.join(allowed)})")


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
    from ..sudo import pct_command, plain_path

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


def _not_option(v: Any) -> str | None:
    # git reads a word that starts with '-' as an option wherever a ref goes (`git fetch origin --upload-pack=CMD`
    # runs CMD on this machine): no branch, tag or commit is named so.
    return f"expected a branch, tag or commit, got {v!r} (it starts with '-')" if str(v).startswith("-") else None


def _code(s: _Section, base: CodeSpec) -> CodeSpec:
    repo = s.take("repo", str, None)
    spec = CodeSpec(
        # A URL is cloned by deploy (remote.ops.code.fetch_url), never read as a path relative to this file.
        repo=repo if repo is not None and is_repo_url(repo) else _expand(repo, s.file) if repo is not None else base.repo,
        ref=s.take("ref", (str, int), base.ref, _not_option),
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
        checkpoint=_checkpoint(s, base.checkpoint),
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


def _signal(v: str) -> str | None:
    name = v.upper().removeprefix("SIG")
    return None if v == "none" or name in CHECKPOINT_SIGNALS else \
        f"expected none or a signal name ({', '.join(CHECKPOINT_SIGNALS)}), got {v!r}"


def _checkpoint(s: _Section, base: CheckpointSpec | None) -> CheckpointSpec | None:
    """`checkpoint: {path, resume, signal, grace, complete}`; a container's section overrides the global one key
    by key. `path` relative: to code.path (resolved where the checkout is known)."""
    if s.data.get("checkpoint") is None:
        s.seen.add("checkpoint")
        return base
    c = s.section("checkpoint")
    old = base or CheckpointSpec("")
    path = c.take("path", str, old.path or _MISSING, _nonempty)
    for bad in ("\n", "\0"):
        if bad in path:
            raise ConfigError(s.file, c.key("path"), "a path on one line, without NUL")
    if ".." in Path(path).parts:
        raise ConfigError(s.file, c.key("path"), f"expected a path without '..', got {path!r}")
    signal = c.take("signal", str, old.signal or "none", _signal)
    complete = c.take("complete", str, old.complete, _nonempty)
    if complete is not None and (complete.startswith("/") or ".." in Path(complete).parts):
        raise ConfigError(s.file, c.key("complete"), f"expected a glob inside the checkpoint folder (e.g. "
                          f"'.done'), got {complete!r}")
    spec = CheckpointSpec(path=path, resume=c.take("resume", str, old.resume),
                          signal=None if signal == "none" else signal.upper().removeprefix("SIG"),
                          grace=c.take("grace", float, old.grace, _range(1, 86400)), complete=complete)
    c.done()
    if re.search(r"[{}]", spec.resume.replace("{checkpoint}", "")):
        raise ConfigError(s.file, c.key("resume"), "the only placeholder is {checkpoint} (the latest checkpoint's "
                          f"path), got {spec.resume!r}")
    return spec


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
