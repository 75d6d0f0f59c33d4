"""Every value an operation returns, defined once: the ops build them, the API returns the same objects.

Frozen dataclasses, typed, with no rendering (the command line's format module turns them into text and
JSON). Below the operations and the transport: this package imports only remote.errors. One module an
area (commands, deploy, health, runs, many, gpu); every name is exported here.

    Result        a finished command                 CacheCopy     a compile cache copied between containers
    DeployPlan    what a deploy changed, or would    Transfer      a push or pull, verified
    Warmup        a warmup's devices and cache gain  CacheHolding  what a container's compile cache holds
    WarmupDevice  one device's warmup (Warmup.per_device)
    Snapshot      a Proxmox snapshot                 RolledBack    a container rolled back to one
    Finding       one thing doctor found             Stopped       a stopped run (and the others with it)
    Checkpoint    a run's checkpoint, complete or not Saved        what stop(save=True) left
    Diagnosis     doctor on one container            GpuReport     doctor --gpu: GpuHost and GpuContainer
    RunStatus     a run's state, read now            RunSummary    one row of `runs`
    Metric        one value of metrics.jsonl         KnownGood     a run recorded as known-good
    PulledRun     a run's files brought home         ImportedCache a compile-cache bundle loaded
    HostStatus, ContainerStatus, JobStatus, FleetStatus           `status`: hosts, containers, their jobs
    CompileEvent  one line of compile.jsonl          CompileHealth a run's compile events summed
    Outcome, GroupResult                                           one call on many containers
    CreateStep, Created                                            `remote create`: a container made, step by step
    Destroyed                                                      `remote destroy`: a container removed, its entry too
    MoveStep, Moved, DrainedRun, Drained                           `remote move`, `remote host drain/resume`
"""

from __future__ import annotations

from .commands import Result, Transfer
from .deploy import CacheCopy, CacheHolding, DeployPlan, ImportedCache, RolledBack, Snapshot, Warmup, WarmupDevice
from .gpu import Created, CreateStep, Destroyed, GpuFix, HostSetup
from .health import Diagnosis, Finding, GpuContainer, GpuHost, GpuReport
from .many import GroupResult, Outcome
from .moves import Drained, DrainedRun, Moved, MoveStep
from .runs import (
                   Checkpoint,
                   CompileEvent,
                   CompileHealth,
                   ContainerStatus,
                   FleetStatus,
                   HostStatus,
                   JobStatus,
                   KnownGood,
                   LiveRun,
                   Metric,
                   PulledRun,
                   RunStatus,
                   RunSummary,
                   Saved,
                   SaveOutcome,
                   State,
                   Stopped,
)

__all__ = [  # the API re-exports these as they are (remote.api)
    "Result", "Transfer", "DeployPlan", "Warmup", "WarmupDevice", "CacheHolding", "CacheCopy", "ImportedCache", "Snapshot", "RolledBack", "Finding", "RunStatus", "LiveRun", "RunSummary", "Metric",
    "Diagnosis", "GpuReport", "GpuHost", "GpuContainer", "Stopped", "Checkpoint", "Saved", "SaveOutcome", "KnownGood", "PulledRun", "CompileEvent", "CompileHealth", "JobStatus", "ContainerStatus",
    "HostStatus", "FleetStatus", "Outcome", "GroupResult", "State", "GpuFix", "HostSetup", "CreateStep", "Created", "Destroyed",
    "MoveStep", "Moved", "DrainedRun", "Drained",
]
