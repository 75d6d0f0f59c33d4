"""Warm the compile cache for one device: exactly the training configuration's first full step."""

from __future__ import annotations

import argparse
import json
import sys
import time

from .model import Config, TargetStub, Worker, device_name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", required=True, help="the drafter device index to compile for")
    args = ap.parse_args(argv)
    import remote_guard

    device = device_name(args.device)
    guard = remote_guard.CompileGuard([device])
    cfg = Config.for_device(device)
    worker = Worker(cfg, device, TargetStub(cfg).to(device), device, compile=guard.compile)
    start = time.monotonic()
    with guard.first_step(device):
        worker.step()
    report = {"device": args.device, "seconds": round(time.monotonic() - start, 3), **guard.report()}
    remote_guard.export_if_asked()
    print("REMOTE_WARMUP " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
