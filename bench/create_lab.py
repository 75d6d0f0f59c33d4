"""`remote create` to healthy in the lab (a private lab of this run's own: real sshd, real LXC, the pct double):

1. the whole `remote create ID --host lab --template ... --gpu none` command, process start included, each
   step's time from `--json` (preflight, create, start, packages, hosts file);
2. the same create again (a no-op: one `pct config`), whole command;
3. then `remote doctor -c ID` healthy, and `remote deploy -c ID` (from the test labs' wheel folder) as what
   follows create on a bare node.

Each container is destroyed after its round (`pct destroy --purge 1`); the lab is taken down however it ends.

    python bench/create_lab.py [--ids 295-297] [--repeat 3] [--deploy] [--gpu all]

With --gpu: the lab's host has the simulated NVIDIA driver (remote/lab/fakegpu.py, two GPUs), and each create
also makes the driver's user space, the devN and mpN lines, the ldconfig and the proof (cuInit, nvidia-smi,
doctor --gpu's findings): what create adds for a GPU, without a GPU's own start-up times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlab import hosts_file, parse_ids, private_lab, remote_cli  # noqa: E402

SECTIONS = """venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6]
  find_links: [{wheels}]
"""


@contextlib.contextmanager
def gpu_lab(containers):
    """A private lab whose host has the simulated NVIDIA driver (two GPUs), taken down however it ends."""
    import shutil
    import tempfile

    from benchlab import WHEELS, free_port

    from remote.lab import Lab

    where = Path(tempfile.mkdtemp(prefix="remote-bench-", dir="/var/tmp"))
    lab = Lab(dir=where / "lab", port=free_port(), wheels_dir=WHEELS, fake_gpu=2)
    try:
        lab.up(tuple(containers))
        yield lab
    finally:
        lab.down(purge=True)
        shutil.rmtree(where, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ids", default="295-297", help="container ids the rounds create (machine-wide LXC ids)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--deploy", action="store_true", help="also deploy the last container made (a venv from wheels)")
    p.add_argument("--gpu", default="none", help="--gpu of each create (all, 0,1: a lab with the simulated driver)")
    args = p.parse_args()
    ids = parse_ids(args.ids, args.repeat)
    own = 294  # the lab's own container (the lab needs one to come up)
    with gpu_lab((own,)) if args.gpu != "none" else private_lab((own,)) as lab:
        hosts = hosts_file(lab, lab.dir / "bench-hosts.yaml", (own,), SECTIONS, wheels=lab.wheels_dir)
        made, again, steps = [], [], {}
        for ctid in ids:
            argv = ("create", str(ctid), "--host", "lab", "--template", lab.template, "--storage", "local",
                    "--cores", "2", "--memory", "2048", "--disk", "4", "--gpu", args.gpu)
            took, r = remote_cli(hosts, *argv, "--json", timeout=900)
            got = json.loads(r.stdout)
            made.append(took)
            for s in got["steps"]:
                steps.setdefault(s["name"], []).append(s["seconds"])
            took2, r2 = remote_cli(hosts, *argv, "--json", timeout=300)
            assert not json.loads(r2.stdout)["made"], r2.stdout
            again.append(took2)
            doctor_s, d = remote_cli(hosts, "doctor", "-c", str(ctid), check=False, timeout=300)
            print(f"{ctid}: create {took:.2f} s (library {got['seconds']:.2f} s), again {took2:.2f} s, "
                  f"doctor exit {d.returncode} in {doctor_s:.2f} s", flush=True)
            if args.deploy and ctid == ids[-1]:
                dep, _ = remote_cli(hosts, "deploy", "-c", str(ctid), timeout=900)
                print(f"{ctid}: deploy after create {dep:.2f} s", flush=True)
            from remote import config
            from remote.transport import SshTransport

            t = SshTransport(config.load(str(hosts)).hosts["lab"])
            t.run(["pct", "stop", str(ctid)])
            t.run(["pct", "destroy", str(ctid), "--purge", "1"])
            t.close()
        med = statistics.median
        print(f"create to healthy (whole command), median of {len(made)}: {med(made):.2f} s "
              f"(min {min(made):.2f}, max {max(made):.2f}); the same create again: {med(again):.2f} s")
        print("steps, medians: " + ", ".join(f"{k} {med(v):.2f} s" for k, v in steps.items()))


if __name__ == "__main__":
    main()
