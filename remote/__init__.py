"""remote: drive PyTorch training inside Proxmox LXC GPU containers over SSH.

The public API (docs/reference/library.md): `remote.open(hosts)` gives a Fleet; `fleet.container(id)` a Container
with exec, push, pull, deploy, warmup, train (a Run), doctor (Findings). Errors are remote.errors' tree,
importable from here. remote.testing's MockTransport lets a user's tests run without a host
(`remote.open(..., transport=MockTransport(handler))`). Names load on first use: `import remote` imports no transport, paramiko or yaml.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())  # a library: the application configures logging

__all__ = [
    "__version__",
    # the progress events' types (remote.events: Event, StepStarted, Output, Note, Done, Failed), a module
    "events",
    # the API (remote.api)
    "open", "Fleet", "Group", "GroupResult", "Outcome", "Container", "Result", "Transfer", "DeployPlan", "Warmup",
    "Run", "Stopped", "Finding", "Diagnosis", "CacheCopy", "CacheHolding", "GpuReport",
    "Snapshot", "RolledBack",
    # typed values (remote.results), returned by the API
    "State", "RunStatus", "RunSummary", "Metric", "KnownGood", "PulledRun", "ImportedCache", "FleetStatus",
    "HostStatus", "ContainerStatus", "JobStatus", "CompileEvent", "CompileHealth", "Created", "CreateStep", "Destroyed",
    "LiveRun", "GpuHost", "GpuContainer", "Checkpoint", "Saved", "SaveOutcome", "Moved", "MoveStep", "Drained", "DrainedRun",
    "WarmupDevice",
    # the exception tree (remote.errors)
    "RemoteError", "ConfigError", "TransportError", "HostKeyError", "AuthenticationError", "ConnectError",
    "ConnectTimeout", "CommandError", "CommandTimeout", "PctError", "ContainerNotFound", "ContainerNotRunning",
    "ContainerLocked", "ContainerCommandNotFound", "TransferError", "DeployError", "WarmupError", "JobError",
    "UnknownRun", "CheckpointRefused", "BusyError", "JobRunning", "SaveRefused", "JobTimeout", "GpuConfigError", "CreateRefused",
    "CreateError", "HostPermissionError", "TransferPathError", "SnapshotError", "RootRequired", "GpuFixError",
    "HostSetupError",
]
_ERRORS = frozenset(__all__[__all__.index("RemoteError"):])
_API = frozenset(__all__[__all__.index("open"):__all__.index("State")])
_RESULTS = frozenset(__all__[__all__.index("State"):__all__.index("RemoteError")])

if TYPE_CHECKING:
    from . import events
    from .api import (
        CacheCopy,
        CacheHolding,
        Container,
        DeployPlan,
        Diagnosis,
        Finding,
        Fleet,
        GpuReport,
        Group,
        GroupResult,
        Outcome,
        Result,
        RolledBack,
        Run,
        Snapshot,
        Stopped,
        Transfer,
        Warmup,
        open,
    )
    from .errors import (
        AuthenticationError,
        BusyError,
        CheckpointRefused,
        CommandError,
        CommandTimeout,
        ConfigError,
        ConnectError,
        ConnectTimeout,
        ContainerCommandNotFound,
        ContainerLocked,
        ContainerNotFound,
        ContainerNotRunning,
        CreateError,
        CreateRefused,
        DeployError,
        GpuConfigError,
        GpuFixError,
        HostKeyError,
        HostPermissionError,
        HostSetupError,
        JobError,
        JobRunning,
        JobTimeout,
        PctError,
        RemoteError,
        RootRequired,
        SaveRefused,
        SnapshotError,
        TransferError,
        TransferPathError,
        TransportError,
        UnknownRun,
        WarmupError,
    )
    from .results import (
        Checkpoint,
        CompileEvent,
        CompileHealth,
        ContainerStatus,
        Created,
        CreateStep,
        Destroyed,
        Drained,
        DrainedRun,
        FleetStatus,
        GpuContainer,
        GpuHost,
        HostStatus,
        ImportedCache,
        JobStatus,
        KnownGood,
        LiveRun,
        Metric,
        Moved,
        MoveStep,
        PulledRun,
        RunStatus,
        RunSummary,
        Saved,
        SaveOutcome,
        State,
        WarmupDevice,
    )


def __getattr__(name: str) -> Any:
    if name == "events":  # a module: `import remote` then `remote.events.StepStarted`
        import importlib

        value = importlib.import_module(f"{__name__}.events")
    elif name in _API:
        from . import api

        value = getattr(api, name)
    elif name in _RESULTS:
        from . import results

        value = getattr(results, name)
    elif name in _ERRORS:
        from . import errors

        value = getattr(errors, name)
    else:
        raise AttributeError(f"module 'remote' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
