"""A small character-level language model trained with DDP: plain PyTorch, nothing else.

Run it the usual way:
    torchrun --nproc-per-node 3 train.py --max-iters 200
It reads data/tokens.bin (made by prepare.py; not in git), compiles the model with torch.compile,
logs `iter N: loss X, time Yms` from rank 0 and writes its checkpoint to out/ckpt.pt.
"""

from __future__ import annotations

import argparse
import os
import time

STARTED = time.time()  # before torch is imported: the first step line counts from the process start

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int, context: int):
        super().__init__()
        self.context = context
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(context, dim))
        self.mix = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) + self.pos
        h = h + self.mix(h)
        return self.head(h)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default="data/tokens.bin")
    ap.add_argument("--out", default="out")
    ap.add_argument("--max-iters", type=int, default=200)
    ap.add_argument("--log-interval", type=int, default=10)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--sleep", type=float, default=0.0, help="extra seconds per iteration (a slower machine)")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    ddp = "RANK" in os.environ
    if ddp:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        rank, world = dist.get_rank(), dist.get_world_size()
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}" if torch.cuda.is_available() else "cpu"
    else:
        rank, world, device = 0, 1, "cuda" if torch.cuda.is_available() else "cpu"
    master = rank == 0
    torch.manual_seed(1234 + rank)
    data = np.memmap(args.data, dtype=np.uint16, mode="r")
    vocab = int(data.max()) + 1
    print(f"rank {rank}/{world}: {len(data)} tokens, vocab {vocab}, device {device}", flush=True)

    model = TinyLM(vocab, args.dim, args.context).to(device)
    if ddp:
        model = DDP(model)
    model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def batch():
        ix = torch.randint(len(data) - args.context - 1, (args.batch,))
        x = torch.stack([torch.from_numpy(data[i:i + args.context].astype(np.int64)) for i in ix.tolist()])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + args.context].astype(np.int64)) for i in ix.tolist()])
        return x.to(device), y.to(device)

    t0 = time.time()
    for it in range(args.max_iters + 1):
        x, y = batch()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.sleep:
            time.sleep(args.sleep)
        t1 = time.time()
        if it == 0 and master:  # compile (or a cache hit) and the first step: what a warm cache shortens
            print(f"first step done {t1 - STARTED:.2f}s after process start", flush=True)
        if it % args.log_interval == 0 and master and it > 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {(t1 - t0) * 1000:.2f}ms", flush=True)
        t0 = t1
    if master:
        os.makedirs(args.out, exist_ok=True)
        raw = model._orig_mod.module if ddp else model._orig_mod
        torch.save({"model": raw.state_dict(), "iters": args.max_iters, "loss": loss.item()},
                   os.path.join(args.out, "ckpt.pt"))
        print(f"saved {args.out}/ckpt.pt", flush=True)
    if ddp:
        dist.barrier()  # every rank leaves together (gloo can abort a rank that tears down while others work)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
