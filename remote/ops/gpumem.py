"""GPU memory that is no run's, as train's preflight judges it (issue 39): a process of no run holding a GPU's
memory is named (pid, MiB, command); a launch is refused where less memory is free than the last good run used."""

from __future__ import annotations

from .. import facts
from ..config import ContainerSpec
from ..naming import printable
from .compilelog import number


def check(raw: dict, g, spec: ContainerSpec) -> tuple[str | None, str | None]:
    """(problem, warning) about GPU memory that is no run's: each GPU process of no run is named (pid, MiB,
    command) as a warning; the launch is refused where the memory left for the run (every GPU's total less
    what is in use, the memory of runs' own processes given back) is below the peak the last good run's
    watch saw (known-good's gpu_mem_peak_mib). Pure."""
    use = facts.gpu_use(g, facts.marked_of(raw))
    if not use:
        return None, None
    foreign = use["foreign"]
    held = sum(p["used_mib"] or 0 for p in foreign)
    named = "; ".join(facts.process_text(p) for p in foreign[:5]) + (f"; and {len(foreign) - 5} more"
                                                                     if len(foreign) > 5 else "")
    fix = (f"end them (`remote exec -c {spec.ctid} 'kill PID'`) or find who started them (in an LXC container "
           "nvidia-smi may show the host's pids)")
    kg: dict = raw["known_good"] if isinstance(raw.get("known_good"), dict) else {}
    need = number(kg.get("gpu_mem_peak_mib"))
    total, used = use["total_mib"], use["used_mib"]
    if need and total is not None and used is not None:
        ours = sum(p["used_mib"] or 0 for p in use["processes"] if p not in foreign)  # runs' (train --force)
        left = total - used + ours
        if left < need:
            return (f"the GPUs have {left / 1024:.1f} GiB free of {total / 1024:.1f} GiB, less than the last good "
                    f"run {printable(str(kg.get('run')))[:40]} used ({need / 1024:.1f} GiB at its peak): "
                    + (f"processes of no run hold {held / 1024:.1f} GiB: {named}: {fix}" if foreign else
                       "no process of this container's is listed as holding it (another container's, or the "
                       "host's): check nvidia-smi on the host")), None
    if foreign:
        return None, (f"GPU processes of no run hold {held / 1024:.1f} GiB: {named}: they take memory and compute "
                      f"this run expects; {fix}")
    return None, None
