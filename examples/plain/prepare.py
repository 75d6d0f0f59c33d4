"""Make data/tokens.bin: a corpus of uint16 character tokens (standard library only, so it runs anywhere)."""

import argparse
import array
import os
import random

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--tokens", type=int, default=200_000)
ap.add_argument("--out", default="data/tokens.bin")
args = ap.parse_args()
rng = random.Random(0)
words = ["the", "drafter", "guesses", "tokens", "target", "checks", "them", "fast", "and", "well"]
text = " ".join(rng.choice(words) for _ in range(args.tokens // 5))[: args.tokens]
os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
with open(args.out, "wb") as f:
    array.array("H", (ord(c) - 32 for c in text)).tofile(f)
print(f"wrote {len(text)} tokens to {args.out}")
