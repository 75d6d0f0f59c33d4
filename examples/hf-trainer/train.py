"""A small HF Trainer job of the kind remote runs unmodified: a GPT-2-shaped model from scratch (no download)
on nanoGPT's character data (examples/nanogpt/prepare_offline.py), saving `checkpoint-N` folders every
--save_steps and resuming with the Trainer's own `--resume_from_checkpoint PATH` (TrainingArguments' flag).

    python train.py --output_dir out --max_steps 200 --save_steps 20 [--resume_from_checkpoint out/checkpoint-100]

Every argument is a TrainingArguments field (HfArgumentParser), plus --data (the folder of train.bin) and the
model's size. docs/guide/resume.md gives its hosts-file lines; tests/lab/test_nanogpt_resume_lab.py runs it.
"""

import os
from dataclasses import dataclass

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class Args:
    data: str = "data/shakespeare_char"
    block_size: int = 64
    n_layer: int = 2
    n_embd: int = 64


class Blocks(torch.utils.data.Dataset):
    """Fixed windows of the uint16 ids (deterministic: a resumed run sees the same data order)."""

    def __init__(self, path: str, block: int):
        self.ids = np.fromfile(path, dtype=np.uint16).astype(np.int64)
        self.block = block

    def __len__(self):
        return (len(self.ids) - 1) // self.block

    def __getitem__(self, i):
        x = torch.from_numpy(self.ids[i * self.block:(i + 1) * self.block])
        return {"input_ids": x, "labels": x}


def main():
    args, targs = HfArgumentParser((Args, TrainingArguments)).parse_args_into_dataclasses()
    vocab = int(np.fromfile(os.path.join(args.data, "train.bin"), dtype=np.uint16).max()) + 1
    model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=args.block_size, n_embd=args.n_embd,
                                       n_layer=args.n_layer, n_head=2))
    trainer = Trainer(model=model, args=targs, train_dataset=Blocks(os.path.join(args.data, "train.bin"), args.block_size))
    trainer.train(resume_from_checkpoint=targs.resume_from_checkpoint)


if __name__ == "__main__":
    main()
