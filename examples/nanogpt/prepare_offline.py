"""nanoGPT's data/shakespeare_char/prepare.py without the network (ours, not vendored).

prepare.py downloads tiny Shakespeare; machines without the internet (CI, the lab, a GPU node behind a wall)
cannot. This writes the same three files in the same format, from text generated here, deterministically (the
same bytes on every machine and Python version: a generator of our own, not `random`):

    data/shakespeare_char/train.bin   uint16 character ids, the first 90% of the text
    data/shakespeare_char/val.bin     uint16 character ids, the last 10%
    data/shakespeare_char/meta.pkl    {'vocab_size': N, 'itos': {...}, 'stoi': {...}}

The text is play-like (speaker names, verse lines from a small grammar), so a character model's loss falls
steadily as it learns words, speakers and line shapes; it is not Shakespeare. Usage:

    python prepare_offline.py [--out DIR] [--chars N]      (default DIR data/shakespeare_char, N 400000)
"""

import argparse
import hashlib
import os
import pickle

SPEAKERS = ["ROMEO", "JULIET", "HAMLET", "OPHELIA", "KING LEAR", "CORDELIA", "PROSPERO", "MIRANDA", "BRUTUS",
            "PORTIA", "MACBETH", "LADY MACBETH", "OTHELLO", "DESDEMONA", "FIRST CITIZEN", "SECOND CITIZEN"]
NOUNS = ["heart", "night", "crown", "sword", "love", "grave", "king", "queen", "blood", "heaven", "tongue", "eye",
         "hand", "soul", "death", "day", "friend", "lord", "lady", "storm", "sea", "star", "name", "world", "time",
         "honour", "fortune", "grief", "father", "daughter", "son", "brother", "ghost", "field", "moon", "rose"]
ADJS = ["gentle", "noble", "sweet", "cruel", "fair", "dark", "proud", "poor", "true", "false", "bloody", "old",
        "young", "wise", "mad", "brave", "cold", "heavy", "bright", "foul", "dear", "wretched", "honest", "idle"]
VERBS = ["loves", "hates", "fears", "keeps", "breaks", "seeks", "knows", "wakes", "sleeps", "weeps", "speaks",
         "calls", "bears", "holds", "gives", "takes", "tells", "sees", "hears", "kills", "serves", "follows"]
OPENERS = ["O", "Alas,", "Good my lord,", "Nay,", "Now", "Then", "Hark!", "Come,", "Peace!", "Why,", "Ay,",
           "Fie,", "Well,", "Sirrah,", "Madam,", "Behold,"]
ENDS = [".", ".", ".", "!", "?", ";", ","]
PRONOUNS = ["thou", "I", "he", "she", "we", "they", "my lord", "the king", "this man", "that villain"]


class Lcg:
    """A 64-bit linear congruential generator (Knuth's MMIX constants): the same numbers everywhere."""

    def __init__(self, seed: int) -> None:
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def below(self, n: int) -> int:
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        return (self.state >> 33) % n

    def pick(self, words: list) -> str:
        return words[self.below(len(words))]


def phrase(r: Lcg) -> str:
    """One verse line: a few grammatical shapes, so that words, their order and their ends can be learnt."""
    shape = r.below(5)
    if shape == 0:
        s = f"the {r.pick(ADJS)} {r.pick(NOUNS)} {r.pick(VERBS)} my {r.pick(NOUNS)}"
    elif shape == 1:
        s = f"{r.pick(PRONOUNS)} {r.pick(VERBS)} the {r.pick(NOUNS)} of {r.pick(ADJS)} {r.pick(NOUNS)}"
    elif shape == 2:
        s = f"{r.pick(OPENERS)} {r.pick(ADJS)} {r.pick(NOUNS)}, thy {r.pick(NOUNS)} {r.pick(VERBS)} me"
    elif shape == 3:
        s = f"what {r.pick(NOUNS)} is this that {r.pick(VERBS)} so {r.pick(ADJS)}"
    else:
        s = f"{r.pick(OPENERS)} {r.pick(PRONOUNS)} {r.pick(VERBS)} not the {r.pick(NOUNS)}"
    return s[0].upper() + s[1:] + r.pick(ENDS)


def text(chars: int, seed: int = 1337) -> str:
    """Play-like text of at least `chars` characters: speeches of 1-4 lines, each under a speaker's name."""
    r = Lcg(seed)
    parts: list[str] = []
    size = 0
    while size < chars:
        speech = r.pick(SPEAKERS) + ":\n" + "\n".join(phrase(r) for _ in range(1 + r.below(4))) + "\n\n"
        parts.append(speech)
        size += len(speech)
    return "".join(parts)


def write(out: str, data: str) -> dict:
    """prepare.py's own steps and formats, from `data` instead of the downloaded input.txt."""
    import numpy as np  # here, not above: text() is importable where numpy is not (the unit tests)

    chars = sorted(list(set(data)))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    n = len(data)
    train_ids = np.array([stoi[c] for c in data[:int(n * 0.9)]], dtype=np.uint16)
    val_ids = np.array([stoi[c] for c in data[int(n * 0.9):]], dtype=np.uint16)
    os.makedirs(out, exist_ok=True)
    train_ids.tofile(os.path.join(out, "train.bin"))
    val_ids.tofile(os.path.join(out, "val.bin"))
    with open(os.path.join(out, "meta.pkl"), "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": itos, "stoi": stoi}, f)
    return {"chars": n, "vocab_size": len(chars), "train": len(train_ids), "val": len(val_ids)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "shakespeare_char"),
                   help="the folder of train.bin, val.bin and meta.pkl (default: data/shakespeare_char beside this file)")
    p.add_argument("--chars", type=int, default=400_000, help="length of the generated text (default 400000)")
    args = p.parse_args()
    data = text(args.chars)
    info = write(args.out, data)
    print(f"length of dataset in characters: {info['chars']:,}")
    print(f"vocab size: {info['vocab_size']:,}")
    print(f"train has {info['train']:,} tokens")
    print(f"val has {info['val']:,} tokens")
    print(f"text sha256 {hashlib.sha256(data.encode()).hexdigest()} -> {args.out}")


if __name__ == "__main__":
    main()
