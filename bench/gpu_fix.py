"""Re-matching GPU containers after a driver upgrade (issue 37's goal: <= 10 s per container), on a lab whose
host has the simulated NVIDIA driver (remote/lab/fakegpu.py).

1. A private lab with `--gpus` simulated GPUs and the containers `--ids`, each given a GPU as `remote create`
   gives one (gpuconfig's devN and mpN lines, the host's driver folder, nvidia-link: tests/lab/test_gpufix_lab.py's
   given_a_gpu, run with the lab host's environment).
2. `--repeat` rounds: the driver upgraded (on disk), the host "rebooted" (the new module loaded, the uvm nodes
   gone), every container's cuInit now 803; then `remote gpu fix --host lab --all` through the library
   (Fleet.gpu_fix_host), timed whole and per container (each Outcome's seconds), every container's cuInit
   read again afterwards.

    python bench/gpu_fix.py [--ids 284,285] [--gpus 2] [--repeat 3]     (root and the lab's tools)

Prints one JSON object (the figures docs/evidence/benchmarks.md quotes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from benchlab import ROOT, private_lab

import remote

CUINIT = "python3 -c 'import ctypes; print(ctypes.CDLL(\"libcuda.so.1\").cuInit(0))'"


@dataclass
class Ran:
    exit_code: int
    out: str
    err: str


class LabHost:
    """The lab host's commands run here, with what its sshd sets (PATH with the pct double first, the simulated
    driver's root): the set-up, not what is measured."""

    def __init__(self, lab):
        self.env = {**os.environ, "PATH": f"{lab.dir}/bin:{os.environ['PATH']}",
                    "REMOTE_GPU_SYSROOT": lab.gpu_sysroot_path()}

    def run(self, argv) -> Ran:
        r = subprocess.run(list(argv), capture_output=True, text=True, env=self.env)
        return Ran(r.returncode, r.stdout, r.stderr)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", default="284,285")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "lab"))
    sys.path.insert(0, str(ROOT / "tests"))
    from test_gpufix_lab import given_a_gpu

    ids = [int(i) for i in args.ids.split(",")]
    rounds = []
    with private_lab(ids, up_wheels=False, fake_gpu=args.gpus, fake_gpu_version="570.148.08") as lab:
        host = LabHost(lab)
        for i, ctid in enumerate(ids):
            given_a_gpu(host, ctid, i % args.gpus)
        with remote.open(str(lab.dir / "hosts-bare.yaml")) as fleet:
            def cuinit(ctid: int) -> str:
                return fleet.container(ctid).exec(CUINIT, job_env=False).out.strip()

            for n in range(args.repeat):
                version = f"575.{n + 1}.0"
                lab.fake_gpu_upgrade(version)
                lab.fake_gpu_reboot()
                before = {ctid: cuinit(ctid) for ctid in ids}
                t0 = time.perf_counter()
                result = fleet.gpu_fix_host("lab")
                whole = time.perf_counter() - t0
                rounds.append({"version": version, "seconds": round(whole, 3),
                               "per_container": {c: round(o.seconds, 3) for c, o in result.items()},
                               "ok": result.ok, "errors": {c: o.message for c, o in result.items() if o.error},
                               "cuinit_before": before, "cuinit_after": {ctid: cuinit(ctid) for ctid in ids},
                               "restarted": {c: bool(o.value and o.value.restarted) for c, o in result.items()}})
    per = [s for r in rounds for s in r["per_container"].values()]
    print(json.dumps({"containers": len(ids), "gpus": args.gpus, "rounds": rounds,
                      "per_container_median_s": round(statistics.median(per), 3) if per else None,
                      "per_container_max_s": max(per) if per else None, "goal_s": 10.0}, indent=1))


if __name__ == "__main__":
    main()
