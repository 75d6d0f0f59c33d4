"""The whole public API from a plain script, as a user would write it (tests/lab/test_library_lab.py runs it).

argv: HOSTS CTID WORKDIR. Prints one JSON object of what it saw; the library itself must print nothing."""

import json
import sys
from pathlib import Path

import remote

hosts, ctid, work = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
seen: dict = {}
lines_seen: list[str] = []

with remote.open(hosts, progress=lines_seen.append) as fleet:
    ct = fleet.container(ctid)
    seen["repr"] = repr(ct)
    plan = ct.deploy()
    seen["deploy"] = {"applied": plan.applied, "torch": (plan.torch or {}).get("torch")}
    again = ct.deploy(check=True)
    seen["check"] = {"applied": again.applied, "changed": list(again.changed)}
    w = ct.warmup()
    seen["warmup"] = {"devices": list(w.devices)}
    r = ct.exec(["python", "-c", "import sys; sys.stdout.write('out'); sys.stderr.buffer.write(b'\\xff\\x00'); sys.exit(3)"])
    seen["exec"] = {"exit_code": r.exit_code, "stdout": r.stdout.decode(), "stderr": r.stderr.hex()}
    (work / "data" / "sub").mkdir(parents=True)
    (work / "data" / "a.txt").write_text("alpha\n")
    (work / "data" / "sub" / "b.bin").write_bytes(bytes(range(256)) * 10)
    up = ct.push(work / "data", "/root/apitest/data")
    down = ct.pull("/root/apitest/data", work / "back")
    seen["push"] = {"files": up.files, "bytes": up.bytes, "verified": up.verified}
    seen["pull"] = {"files": down.files, "bytes": down.bytes, "same": (work / "back" / "sub" / "b.bin").read_bytes()
                    == (work / "data" / "sub" / "b.bin").read_bytes()}
    ct.exec(["rm", "-f", "/root/apitest/hold"], check=True)
    run = ct.train(detach=True, force=True)
    seen["run"] = {"id": run.id}
    followed = []
    for line in run.follow():
        followed.append(line)
    seen["follow"] = followed
    seen["wait"] = run.wait(timeout=120)
    seen["state"] = run.state
    seen["metrics"] = [m.value for m in run.metrics()]
    ct.exec(["touch", "/root/apitest/hold"], check=True)
    long = ct.train(detach=True, force=True)  # a second one, that waits: to stop
    first = next(iter(long.follow()))
    stopped = long.stop(grace=2)
    seen["stop"] = {"first": first, "run": stopped.run, "was_alive": stopped.was_alive, "state": long.state}
    findings = ct.doctor()
    seen["doctor"] = [[f.code, f.severity, bool(f.message)] for f in findings]
    group = fleet.containers("all").exec(["true"])
    seen["group"] = {"ok": sorted(group.succeeded), "failed": {str(k): type(e).__name__ for k, e in group.failed.items()}}
    for which, call in (("unknown", lambda: fleet.container(12345)),
                        ("stopped", lambda: fleet.container(999).exec(["true"]))):
        try:
            call()
            seen[which] = None
        except remote.RemoteError as exc:
            seen[which] = type(exc).__name__
try:
    remote.open(work / "nope.yaml")
except remote.ConfigError as exc:
    seen["bad_hosts"] = type(exc).__name__
seen["progress_lines"] = len(lines_seen)
print(json.dumps(seen))
