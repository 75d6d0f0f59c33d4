"""What a hosts file becomes: frozen, typed objects (a host, the per-container sections, the whole config)
and the words the library uses for them. Nothing here reads a file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import ConfigError

__all__ = [  # remote.config re-exports these as they are
    "ENV_VAR", "CONTAINER_VAR", "CONTAINER_KEY", "CHOOSE", "DEFAULT_FILE", "UV_VERSION", "SNAPSHOT_MODES", "Host",
    "setting", "VenvSpec", "CodeSpec", "WarmupSpec", "MetricSpec", "CheckpointSpec", "TrainSpec", "DeploySpec", "ContainerSpec", "Config",
]

ENV_VAR = "REMOTE_HOSTS_FILE"
CONTAINER_VAR = "REMOTE_CONTAINER"  # the container a task works on when --container is absent
CONTAINER_KEY = "container"  # the library's word for the container argument (the command line says --container)
CHOOSE = "the container argument"  # how to name one, in the library's words
DEFAULT_FILE = "hosts.yaml"
UV_VERSION = "0.13.9"  # the uv bootstrapped inside containers; pinned so deploys are reproducible


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


CHECKPOINT_SIGNALS = ("TERM", "INT", "HUP", "USR1", "USR2", "QUIT", "ALRM", "WINCH", "PWR")


@dataclass(frozen=True)
class CheckpointSpec:
    """Where a job saves its checkpoints and how it resumes from one (train.checkpoint; docs/reference/hosts-file.md).
    `path`: a file, a folder or a glob, relative to code.path unless absolute (resolved by remote.ops.checkpoints)."""

    path: str
    resume: str = ""  # words added to the command on a resume; {checkpoint}: the latest's path, quoted once
    signal: str | None = None  # the signal the job saves on (TERM, USR1, ...); None: wait for its next save
    grace: float = 300.0  # seconds `stop --save` waits for a new complete checkpoint
    complete: str | None = None  # a folder checkpoint is complete when this glob matches inside it


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
    checkpoint: CheckpointSpec | None = None  # None: remote knows nothing of the job's checkpoints


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
            if not self.containers:
                raise ConfigError(self.file, "containers", "no containers in this file yet: `remote create CTID --host "
                                  "HOST --template VOLID` makes one and adds it (docs/guide/bare-node.md)")
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
