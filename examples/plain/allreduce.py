"""A multi-node check: every rank all-reduces a known tensor and checks the sum (gloo on CPU, NCCL on GPUs).

    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 2 --rdzv-backend c10d \
        --rdzv-endpoint HOST:29500 allreduce.py --steps 5

Rank r contributes r + 1 in every element, so the sum is world * (world + 1) / 2. Each rank prints its
result; any mismatch exits 1. With --steps and --sleep it keeps all-reducing (a run to stop or break).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds between all-reduces")
    args = ap.parse_args()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = f"cuda:{int(os.environ['LOCAL_RANK'])}" if backend == "nccl" else "cpu"
    expected = world * (world + 1) / 2
    node = os.environ.get("GROUP_RANK", "?")
    for step in range(1, args.steps + 1):
        t = torch.full((8,), float(rank + 1), device=device)
        dist.all_reduce(t)
        if not torch.all(t == expected):
            print(f"allreduce MISMATCH on rank {rank}: {t.tolist()} != {expected}", flush=True)
            sys.exit(1)
        if rank == 0 and args.steps > 1:
            print(f"step {step}: allreduce ok", flush=True)
        if args.sleep:
            time.sleep(args.sleep)
    print(f"allreduce ok: rank {rank}/{world} on node {node}: sum {t[0].item():g} == {expected:g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
