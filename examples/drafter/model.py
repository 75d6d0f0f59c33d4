"""The drafter, the stub target and one training step."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


@dataclass(frozen=True)
class Config:
    vocab: int = 2048
    dim: int = 256
    heads: int = 4
    layers: int = 2
    target_dim: int = 384
    block: int = 16  # draft block size: bidirectional inside a block, causal across blocks
    seq: int = 512
    batch: int = 4

    @classmethod
    def for_device(cls, device: str, **overrides) -> "Config":
        small = dict(dim=64, heads=2, layers=1, target_dim=96, seq=128, batch=2, vocab=512)
        return cls(**{**(small if str(device) == "cpu" else {}), **overrides})


def block_causal(block: int):
    def mask_mod(b, h, q_idx, kv_idx):
        return q_idx // block >= kv_idx // block
    return mask_mod


class TargetStub(nn.Module):
    """Stands in for the frozen target model: token ids -> hidden states."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.target_dim)
        self.proj = nn.Linear(cfg.target_dim, cfg.target_dim)

    @torch.no_grad()
    def forward(self, tokens):
        return torch.tanh(self.proj(self.embed(tokens)))


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.heads = cfg.heads
        self.norm1, self.norm2 = nn.LayerNorm(cfg.dim), nn.LayerNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.out = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(cfg.dim, 4 * cfg.dim), nn.GELU(), nn.Linear(4 * cfg.dim, cfg.dim))

    def forward(self, x, block_mask):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if x.device.type == "cpu":  # flex_attention has no CPU backward
            q, k, v = q.detach(), k.detach(), v.detach()
        y = flex_attention(q, k, v, block_mask=block_mask)
        x = x + self.out(y.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


class Drafter(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.ctx = nn.Linear(cfg.target_dim, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, tokens, hidden, block_mask):
        x = self.embed(tokens) + self.ctx(hidden)
        for blk in self.blocks:
            x = blk(x, block_mask)
        return self.head(x)


def drafter_forward(model: Drafter, tokens, hidden, block_mask):
    """The compiled unit: a plain function (remote_guard compiles a copy per thread), each device's module passed in."""
    return model(tokens, hidden, block_mask)


class Worker:
    """One drafter device: its model, optimizer, mask and data."""

    def __init__(self, cfg: Config, device: str, target: TargetStub, target_device: str, compile=None,
                 seed: int = 0):
        torch.manual_seed(seed)
        self.cfg, self.device, self.target, self.target_device = cfg, device, target, target_device
        self.model = Drafter(cfg).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4)
        # `compile` is remote_guard's CompileGuard.compile (each calling thread runs its own compiled copy), or None.
        self.forward = compile(drafter_forward) if compile else drafter_forward
        self.block_mask = None
        self.gen = torch.Generator(device="cpu").manual_seed(seed)

    def step(self) -> float:
        """One full training step: block mask (first time), forward, backward, optimizer step."""
        cfg = self.cfg
        if self.block_mask is None:
            self.block_mask = create_block_mask(block_causal(cfg.block), B=None, H=None, Q_LEN=cfg.seq,
                                                KV_LEN=cfg.seq, device=self.device)
        tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq + 1), generator=self.gen)
        hidden = self.target(tokens[:, :-1].to(self.target_device)).to(self.device, non_blocking=True)
        inputs, labels = tokens[:, :-1].to(self.device), tokens[:, 1:].to(self.device)
        logits = self.forward(self.model, inputs, hidden, self.block_mask)
        loss = F.cross_entropy(logits.view(-1, cfg.vocab).float(), labels.reshape(-1))
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()


def device_name(index: str) -> str:
    return f"cuda:{index}" if torch.cuda.is_available() else "cpu"
