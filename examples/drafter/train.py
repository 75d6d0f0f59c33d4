"""Train the drafter with one thread per drafter device; prints throughput in Ktok/s."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import torch

from .model import Config, TargetStub, Worker, device_name


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--target-gpus", default="0", help="comma-separated target device indices")
    ap.add_argument("--drafter-gpus", default="1", help="comma-separated drafter device indices (one thread each)")
    ap.add_argument("--steps", type=int, default=100, help="steps per drafter thread")
    ap.add_argument("--log-interval", type=float, default=2.0, help="seconds between throughput lines")
    ap.add_argument("--no-guard", action="store_true", help="no compile guard: threads compile at once (the race)")
    ap.add_argument("--eager", action="store_true", help="no torch.compile at all")
    ap.add_argument("--stagger", type=float, default=0.0,
                    help="thread i starts its first step i*STAGGER seconds late (uneven per-device setup)")
    return ap.parse_args(argv)


def process_age() -> float:
    """Seconds since this process started (imports included), from /proc; 0.0 where there is none."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.monotonic() - process_age()
    drafters = [d for d in args.drafter_gpus.split(",") if d]
    targets = [t for t in args.target_gpus.split(",") if t]
    devices = [device_name(d) for d in drafters]
    cfg = Config.for_device(devices[0])
    import remote_guard

    guard = remote_guard.CompileGuard(devices, enabled=not args.no_guard and not args.eager)
    print(f"drafter: {len(devices)} thread(s) on {', '.join(devices)}, target on {', '.join(map(device_name, targets))}; "
          f"torch {torch.__version__}; guard {'on' if guard.enabled else 'off'}; "
          f"fx flag {'global' if remote_guard.fx_flag_is_global() else 'thread-local'}", flush=True)
    target_devices = [device_name(t) for t in targets]
    target_models = {d: TargetStub(cfg).to(d) for d in set(target_devices)}
    workers = [Worker(cfg, dev, target_models[target_devices[i % len(target_devices)]],
                      target_devices[i % len(target_devices)], compile=None if args.eager else guard.compile, seed=i)
               for i, dev in enumerate(devices)]
    tokens_done = [0] * len(workers)
    steady_since: list[float] = []
    first_steady: list[float] = []  # when each thread finished its first steady-state step
    errors: list[BaseException] = []
    losses = [float("nan")] * len(workers)

    def run(i: int, w: Worker) -> None:
        try:
            time.sleep(i * args.stagger)
            if i == 0:
                print(f"drafter: first step begins {time.monotonic() - started:.2f}s after process start", flush=True)
            with guard.first_step(w.device):
                losses[i] = w.step()
            steady_since.append(time.monotonic())
            for n in range(args.steps - 1):
                losses[i] = w.step()
                tokens_done[i] += cfg.batch * cfg.seq
                if n == 0:
                    first_steady.append(time.monotonic())
                    if len(first_steady) == len(workers):
                        print(f"drafter: first steady step of every thread {first_steady[-1] - started:.2f}s "
                              "after process start", flush=True)
        except BaseException as exc:  # reported by the main thread, loudly
            errors.append(exc)
            raise

    threads = [threading.Thread(target=run, args=(i, w), name=f"drafter-{w.device}-{i}", daemon=True)
               for i, w in enumerate(workers)]
    start = time.monotonic()
    for t in threads:
        t.start()
    # Throughput lines cover whole intervals of steady state: the first one starts once every thread
    # has finished its first (compiling) step, so the ramp is never reported as throughput.
    last_tokens, last_time = None, None
    while any(t.is_alive() for t in threads):
        deadline = time.monotonic() + args.log_interval
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        now, total = time.monotonic(), sum(tokens_done)
        if len(steady_since) < len(workers):
            continue
        # Only whole intervals with every thread working: the last, partial one is not throughput.
        if last_time is not None and total > last_tokens and all(t.is_alive() for t in threads):
            rate = (total - last_tokens) / (now - last_time) / 1000
            print(f"step {total // (cfg.batch * cfg.seq)} | loss {sum(losses) / len(losses):.3f} | "
                  f"{rate:.2f} Ktok/s", flush=True)
        last_tokens, last_time = total, now
    if errors:
        print(f"drafter: FAILED: {type(errors[0]).__name__}: {errors[0]}", file=sys.stderr, flush=True)
        return 1
    print(f"drafter: done, {sum(tokens_done)} tokens in {time.monotonic() - start:.1f}s; "
          + guard.report_line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
