"""Push and pull of a big file and of a tree of small files: the library vs. by hand, side by side in one run.

    python bench/transfer.py [--size-mb 1024] [--files 20000] [--quick] [--hand-sample 300]

Brings up a private lab (its own folder and port, loopback only; needs root like the lab) and tears it
down after, unless --hosts names a hosts file of a lab that is up. Measured each way:
  library   remote.ops.files.push/pull in a child process: streamed, sha256-verified; its peak RSS is
            read there with resource.getrusage (the goal is < 200 MB)
  by hand   file: `scp` to the lab host, then `ssh host pct push` (pull: `pct pull`, then `scp` back);
            nothing is verified.
            tree: `scp -r` to the host plus one `pct push` per file (pull: one `pct pull` per file plus
            `scp -r` back), the per-file part run in one SSH session, on --hand-sample files and
            scaled to the whole tree (20,000 pct calls would take most of an hour);
            also a tar by hand (`tar c | ssh host 'pct exec 200 -- tar x'`), the fairest hand method.
--quick shrinks the sizes (64 MiB, 2,000 files) for a smoke run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REMOTE_DIR = "/root/bench-xfer"

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
import remote

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

plan = json.loads(sys.argv[3])
out = {}
with remote.open(sys.argv[2]) as fleet:  # the public API, as a user's script pushes and pulls
    ct = fleet.container(plan["ct"])
    ct.push(plan["warm"], plan["remote"] + "/warm")  # connected, agent started, modules imported
    out["rss_start_mb"] = peak_mb()
    for name, direction, src, dest in plan["steps"]:
        os.sync()  # the previous step's writes are not this one's cost
        start = time.perf_counter()
        done = ct.push(src, dest) if direction == "push" else ct.pull(src, dest)
        out[name] = {"seconds": time.perf_counter() - start, "bytes": done.bytes, "files": done.files}
    out["rss_peak_mb"] = peak_mb()
print(json.dumps(out))
"""


def make_file(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 8 << 20)
            f.write(os.urandom(n))
            left -= n


def make_tree(root: Path, count: int, seed: int = 1) -> int:
    """count small files (0-8 KiB, mean 4 KiB) in 2 levels of folders; returns the bytes."""
    rng = random.Random(seed)
    total = 0
    for i in range(count):
        d = root / f"shard{i % 100:03d}" / f"part{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        size = rng.randint(0, 8192)
        (d / f"sample-{i:06d}.bin").write_bytes(rng.randbytes(size))
        total += size
    return total


def timed(argv, **kwargs) -> float:
    os.sync()  # as before each library step: earlier writes are not this step's cost
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, **kwargs)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="the big file, MiB (default 1024)")
    ap.add_argument("--files", type=int, default=20000, help="files in the tree (default 20000)")
    ap.add_argument("--quick", action="store_true", help="64 MiB and 2,000 files")
    ap.add_argument("--hand-sample", type=int, default=300, help="files pushed/pulled one pct call each, scaled up")
    ap.add_argument("--container", type=int, default=200)
    ap.add_argument("--hosts", help="hosts file of a lab that is up (default: a private lab for this run)")
    ap.add_argument("--workdir", help="local scratch folder (default: a temporary one)")
    args = ap.parse_args()
    if args.quick:
        args.size_mb, args.files = 64, 2000

    from benchlab import hosts_file, private_lab

    from remote import config

    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-transfer-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.ExitStack() as stack:
            if args.hosts:
                hosts = Path(args.hosts)
            else:
                lab = stack.enter_context(private_lab([args.container], wheels=None, folder=work / "lab"))
                hosts = hosts_file(lab, work / "hosts.yaml", [args.container])
            h = config.load(str(hosts)).container(args.container).host
            run(args, work, hosts, h)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

def run(args, work: Path, hosts: Path, h) -> None:
    ct = str(args.container)
    ssh = ["ssh", "-p", str(h.port), "-i", h.key_file, "-o", f"UserKnownHostsFile={h.known_hosts}",
           "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{h.user}@{h.address}"]
    scp = ["scp", "-q", "-P", str(h.port), "-i", h.key_file, "-o", f"UserKnownHostsFile={h.known_hosts}",
           "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"]
    target = f"{h.user}@{h.address}"
    pct = shlex.split(h.pct)

    def on_host(*argv: str) -> list[str]:
        return [*ssh, shlex.join(argv)]

    def in_ct(*argv: str) -> list[str]:
        return on_host(*pct, "exec", ct, "--", *argv)

    size = args.size_mb << 20
    big = work / "big.bin"
    tree = work / "tree"
    print(f"making a {args.size_mb} MiB file and a tree of {args.files:,} files ...", file=sys.stderr)
    make_file(big, size)
    tree_bytes = make_tree(tree, args.files)
    (work / "warm").write_bytes(b"warm")
    tree_files = sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file())
    subprocess.run(in_ct("mkdir", "-p", REMOTE_DIR), check=True, capture_output=True)

    # -- the library, in a child process whose peak RSS is what the controller costs ------------------
    plan = {"ct": args.container, "remote": REMOTE_DIR, "warm": str(work / "warm"), "steps": [
        ("file_push", "push", str(big), f"{REMOTE_DIR}/lib/big.bin"),
        ("file_pull", "pull", f"{REMOTE_DIR}/lib/big.bin", str(work / "lib-back.bin")),
        ("tree_push", "push", str(tree), f"{REMOTE_DIR}/lib/tree"),
        ("tree_pull", "pull", f"{REMOTE_DIR}/lib/tree", str(work / "lib-back-tree")),
    ]}
    print("library transfers ...", file=sys.stderr)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", CHILD, root, str(hosts), json.dumps(plan)], capture_output=True,
                       text=True, check=True)
    lib = json.loads(r.stdout)

    # -- by hand ------------------------------------------------------------------------------------------
    print("by hand: file ...", file=sys.stderr)
    hand = {}
    staged = f"/tmp/bench-xfer-{os.getpid()}"
    hand["file_push"] = (timed([*scp, str(big), f"{target}:{staged}.bin"])
                         + timed(on_host(*pct, "push", ct, f"{staged}.bin", f"{REMOTE_DIR}/hand.bin")))
    subprocess.run(on_host("rm", "-f", f"{staged}.bin"), check=True)
    hand["file_pull"] = (timed(on_host(*pct, "pull", ct, f"{REMOTE_DIR}/hand.bin", f"{staged}.pull"))
                         + timed([*scp, f"{target}:{staged}.pull", str(work / "hand-back.bin")]))
    subprocess.run(on_host("rm", "-f", f"{staged}.pull"), check=True)

    print(f"by hand: tree (scp -r, and one pct push/pull per file on {args.hand_sample} files) ...", file=sys.stderr)
    sample = tree_files[:: max(1, len(tree_files) // args.hand_sample)][:args.hand_sample]
    dirs = sorted({os.path.dirname(f) for f in tree_files})
    t_scp = timed([*scp, "-r", str(tree), f"{target}:{staged}.tree"])
    subprocess.run(in_ct("mkdir", "-p", *(f"{REMOTE_DIR}/hand-tree/{d}" for d in dirs)), check=True)
    loop = "; ".join(shlex.join([*pct, "push", ct, f"{staged}.tree/{f}", f"{REMOTE_DIR}/hand-tree/{f}"]) for f in sample)
    t_each = timed([*ssh, loop]) / len(sample)
    hand["tree_push"] = t_scp + t_each * len(tree_files)
    hand["tree_push_measured"] = f"scp -r {t_scp:.1f}s + {len(sample)} x pct push at {1000 * t_each:.0f} ms"
    loop = "; ".join(shlex.join([*pct, "pull", ct, f"{REMOTE_DIR}/lib/tree/{f}", f"{staged}.tree/{f}"]) for f in sample)
    t_each = timed([*ssh, loop]) / len(sample)
    t_scp = timed([*scp, "-r", f"{target}:{staged}.tree", str(work / "hand-back-tree")])
    hand["tree_pull"] = t_scp + t_each * len(tree_files)
    hand["tree_pull_measured"] = f"{len(sample)} x pct pull at {1000 * t_each:.0f} ms + scp -r {t_scp:.1f}s"
    subprocess.run(on_host("rm", "-rf", f"{staged}.tree"), check=True)

    print("by hand: tree as a tar stream ...", file=sys.stderr)
    os.sync()
    tar = subprocess.Popen(["tar", "-c", "-f", "-", "-C", str(tree), "."], stdout=subprocess.PIPE)
    start = time.perf_counter()
    subprocess.run(in_ct("tar", "-x", "-f", "-", "-C", f"{REMOTE_DIR}/lib"), stdin=tar.stdout, check=True,
                   capture_output=True)
    tar.wait()
    hand["tree_push_tar"] = time.perf_counter() - start
    (work / "hand-tar-back").mkdir()
    os.sync()
    start = time.perf_counter()
    with subprocess.Popen(in_ct("tar", "-c", "-f", "-", "-C", f"{REMOTE_DIR}/lib/tree", "."),
                          stdout=subprocess.PIPE) as src:
        subprocess.run(["tar", "-x", "-f", "-", "-C", str(work / "hand-tar-back")], stdin=src.stdout, check=True)
    hand["tree_pull_tar"] = time.perf_counter() - start
    subprocess.run(in_ct("rm", "-rf", REMOTE_DIR), check=True)

    # -- report -----------------------------------------------------------------------------------------------
    def mbs(nbytes, seconds):
        return nbytes / 1e6 / seconds

    print(f"\ntransfers on the lab (loopback): a {args.size_mb} MiB file, a tree of {args.files:,} files "
          f"({tree_bytes / 1e6:.0f} MB); library: streamed + sha256-verified; by hand: not verified")
    rows = [("file push", "file_push", size, "file_push"), ("file pull", "file_pull", size, "file_pull"),
            ("tree push", "tree_push", tree_bytes, "tree_push"), ("tree pull", "tree_pull", tree_bytes, "tree_pull")]
    print(f"  {'':10} {'library':>20} {'by hand':>20}  speed-up")
    for label, key, nbytes, hkey in rows:
        tl, th = lib[key]["seconds"], hand[hkey]
        print(f"  {label:10} {tl:7.2f}s {mbs(nbytes, tl):7.1f} MB/s {th:7.2f}s {mbs(nbytes, th):7.1f} MB/s"
              f"  {th / tl:6.2f}x")
    print(f"  by hand, tree push: {hand['tree_push_measured']}, scaled to {args.files:,} files")
    print(f"  by hand, tree pull: {hand['tree_pull_measured']}, scaled to {args.files:,} files")
    for label, key, hkey in (("tree push", "tree_push", "tree_push_tar"), ("tree pull", "tree_pull", "tree_pull_tar")):
        tl, th = lib[key]["seconds"], hand[hkey]
        print(f"  {label} vs a tar stream by hand: {th:.2f}s ({mbs(tree_bytes, th):.1f} MB/s), "
              f"library {th / tl:.2f}x of it")
    print(f"  controller peak RSS during the library transfers: {lib['rss_peak_mb']:.0f} MB "
          f"({lib['rss_start_mb']:.0f} MB before the first one; goal < 200 MB)")


if __name__ == "__main__":
    main()
