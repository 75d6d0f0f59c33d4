"""examples/nanogpt: the vendored nanoGPT files are upstream's, byte for byte (the list in its README), and
prepare_offline.py's text is the same everywhere (the resume proof compares losses across machines)."""

import hashlib
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NANOGPT = ROOT / "examples" / "nanogpt"
VENDORED = {"train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py", "LICENSE"}


def listed() -> dict[str, str]:
    text = (NANOGPT / "README.md").read_text()
    return {path: digest for digest, path in re.findall(r"^([0-9a-f]{64})  (\S+)$", text, re.M)}


def test_the_vendored_files_are_upstreams_unchanged():
    sums = listed()
    assert set(sums) == VENDORED, f"examples/nanogpt/README.md lists {sorted(sums)}"
    for path, digest in sums.items():
        got = hashlib.sha256((NANOGPT / path).read_bytes()).hexdigest()
        assert got == digest, (f"examples/nanogpt/{path} differs from upstream nanoGPT 3adf61e1: the vendored "
                               "files stay unmodified (put changes in the hosts file's command, not the code)")


def test_the_license_is_kept():
    assert (NANOGPT / "LICENSE").read_text().startswith("MIT License\n\nCopyright (c) 2022 Andrej Karpathy")


def test_the_offline_text_is_deterministic():
    spec = importlib.util.spec_from_file_location("prepare_offline", NANOGPT / "prepare_offline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # numpy is imported only when files are written
    data = mod.text(400_000)
    assert hashlib.sha256(data.encode()).hexdigest() == \
        "dc2e4c08a122acb7ff9222407f6672752ea7111fe21ad66cecf348a42886b866"
    assert len(set(data)) == 54 and data.startswith("PORTIA:\n")
