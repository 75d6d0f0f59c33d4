"""The watch beside a training job, in the container: started by the job's wrapper (remote/sh/job.sh) with
the system python3 -I -S (standard library only, nothing of the user's venv), it lives as long as the run.

Every second it looks at the run's log (one stat; new bytes read once) and:
  - appends every metric value a new line reports to <run>/metrics.jsonl ({"t", "value", "unit"}), so a run
    leaves its numbers whether or not anyone follows it;
  - with a stall limit: when the log gains no line (with a configured metric: no new metric value) for that
    long, the run is STALLED: every process of the run is dumped to <run>/stacks-<n>.txt (py-spy dump for
    Python processes; the kernel's view of each thread where py-spy is missing or cannot attach), the log
    gets a marked line, <run>/watch.json says so (status, logs), and on_stall decides: warn leaves it
    running, stop and restart end the attempt (the wrapper then stops or starts the next attempt);
  - with nvidia-smi in the container: one `nvidia-smi --query-gpu ... -l N` for the whole run, its rows
    written to <run>/gpu.csv with the time they were read; nothing at all on a CPU container;
  - copies the wrapper's attempt records (<run>/attempts) into manifest.json's "attempts";
  - with a checkpoint configured (settings' "checkpoint": remote/sh/ckpt.py's settings and "tool", its file):
    in a thread of its own, copies each newly complete checkpoint into the keep folder (ckpt.keep_once), so a
    job that overwrites its one checkpoint in place and is killed mid-save still has its last complete one.
It ends on TERM (the wrapper's, at the end of the run, or stop's) after a last read, or when the wrapper is
gone. argv: run folder, run id, settings (a JSON file, or JSON itself: stall, on_stall, py_spy, metrics, metric_stall, gpu_every,
grace).
"""

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time

# marked(run_id, exclude) -> [(pid, comm)]: every live process of the run, by lib.sh's rule. One copy, in ckpt.py
# (stop --save signals the same processes): remote.shell.load_python("watch"), the text launch installs, puts its
# definition in place of this line; the file as it is here does not run by itself.
from ckpt import marked  # type: ignore[import-not-found]  # remote.shell inlines it

GPU_FIELDS = "index,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"
GPU_HEADER = "t,index,util_pct,mem_used_mib,mem_total_mib,power_w,temp_c"
TICK = 1.0
KEEP_EVERY = 1.0  # how often the checkpoint is looked at for a new complete one to keep


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def append(path, text):
    with open(path, "a") as f:
        f.write(text)


def read(path, limit=4096):
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace").replace("\0", " ").strip()
    except OSError as exc:
        return f"(unreadable: {exc.strerror})"


def kernel_view(pid):
    """What the kernel says about each thread of pid: name, state, where it waits (wchan) and, where
    readable, its kernel stack."""
    lines = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return ["  (the process is gone)"]
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        stat = read(f"{base}/stat", 1024).rpartition(")")[2].split()
        lines.append(f"  thread {tid} ({read(base + '/comm', 64)}): state {stat[0] if stat else '?'}, "
                     f"waits in {read(base + '/wchan', 128) or '-'}")
        stack = read(f"{base}/stack")
        if stack and not stack.startswith("(unreadable"):
            lines += ["    " + s for s in stack.splitlines()[:16]]
    return lines


def looks_python(pid):
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        exe = ""
    return "python" in exe or "python" in read(f"/proc/{pid}/cmdline", 256).split(" ")[0]


def dump_stacks(path, pids, py_spy, stalled_s):
    """Every process's stacks into `path`: py-spy for Python processes, the kernel's view where py-spy is
    missing or could not attach (said so in the file)."""
    have_spy = bool(py_spy) and os.access(py_spy, os.X_OK)
    out = [f"# stacks of run processes after {stalled_s:.0f} s without progress, {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"]
    if not have_spy:
        out.append(f"# py-spy is not available ({py_spy or 'not pushed: train.stall unset'}): "
                   "the kernel's view of each thread only")
    spies: dict = {}  # pid -> Popen or OSError; every py-spy at once: a run of 8 ranks takes as long as its slowest, not their sum
    for pid in pids:
        if have_spy and looks_python(pid):
            try:
                spies[pid] = subprocess.Popen([py_spy, "dump", "--pid", str(pid)], stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
            except OSError as exc:
                spies[pid] = exc
    for pid in pids:
        out.append("")
        out.append(f"== pid {pid}: {read(f'/proc/{pid}/cmdline', 300)}")
        spy = spies.get(pid)
        if isinstance(spy, subprocess.Popen):
            try:
                stdout, stderr = spy.communicate(timeout=30)
                if spy.returncode == 0 and stdout.strip():
                    out.append(stdout.rstrip())
                    continue
                why = (stderr.strip() or stdout.strip() or f"exit {spy.returncode}").splitlines()[-1]
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.communicate()
                why = "no answer within 30 s"
            out.append(f"  py-spy could not attach: {why[:300]}; the kernel's view instead:")
        elif spy is not None:
            out.append(f"  py-spy could not start: {spy}; the kernel's view instead:")
        elif not looks_python(pid):
            out.append("  not a Python process; the kernel's view:")
        out += kernel_view(pid)
    write_atomic(path, "\n".join(out) + "\n")


class Watch:
    def __init__(self, run, run_id, conf):
        self.run, self.id, self.conf = run, run_id, conf
        self.log = os.path.join(run, "log")
        self.stall = float(conf.get("stall") or 0)
        self.metrics = [(re.compile(m["pattern"], int(m.get("flags") or 0)), m.get("unit"), float(m.get("scale", 1)),
                         bool(m.get("invert"))) for m in conf.get("metrics") or []]
        self.metric = None  # the first that matches fixes the run's metric (as logs.Watch does)
        self.pos = 0  # bytes of the log read so far
        self.pending = b""
        self.size = 0
        self.progress = time.monotonic()  # the last new line (or metric value)
        self.stalled = None
        self.stalls = 0
        self.gpu = None  # the nvidia-smi child
        self.gpu_buf = b""
        self.gpu_last = {}
        self.gpu_peak = None  # the most GPU memory in use at once (MiB, every GPU summed) while the run ran
        self.attempts_seen = None
        self.attempts = 0
        self.running = True  # an attempt runs (not a backoff between two)
        self.stopping = False
        self.wrapper = os.getppid()  # job.sh started this watch
        self.skip = {os.getpid(), self.wrapper}

    # -- the log ---------------------------------------------------------------------------------------
    def parse(self, line):
        for pattern, unit, scale, invert in ([self.metric] if self.metric else self.metrics):
            for m in pattern.finditer(line):
                try:
                    v = float(m.group(1))
                    v = (1 / v if invert else v) * scale
                except (ValueError, IndexError, ZeroDivisionError):
                    continue
                self.metric = (pattern, unit, scale, invert)
                return v, unit
        return None

    def read_log(self, own=False):
        """New lines: their metric values to metrics.jsonl; progress resets the stall clock (not with own,
        right after this watch wrote its own line)."""
        try:
            size = os.stat(self.log).st_size
        except OSError:
            return
        if size < self.pos:  # truncated by hand: start over
            self.pos, self.pending = 0, b""
        if size == self.pos:
            return
        with open(self.log, "rb") as f:
            f.seek(self.pos)
            chunk = f.read(size - self.pos)
        self.pos += len(chunk)
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        if len(self.pending) > 1 << 20:
            self.pending = self.pending[-4096:]
        now, rows, progressed = time.time(), [], not self.conf.get("metric_stall")
        for raw in lines:
            text = raw.decode("utf-8", "replace")
            if "\r" in text:
                text = ([p for p in text.split("\r") if p][-1:] or [""])[0]
            if text.startswith("-- attempt "):
                progressed = True
                continue
            if text.startswith("-- STALLED"):
                continue
            got = self.parse(text)
            if got:
                rows.append(json.dumps({"t": round(now, 3), "value": got[0], "unit": got[1]}) + "\n")
                progressed = True
        if rows:
            append(os.path.join(self.run, "metrics.jsonl"), "".join(rows))
        if progressed and not own:
            self.resumed()

    def resumed(self):
        self.progress = time.monotonic()
        if self.stalled and self.stalled.get("action") != "stop":
            self.stalled = None
            self.status()

    # -- stalls ----------------------------------------------------------------------------------------
    def check_stall(self):
        if not self.stall or self.stalled or not self.running:
            return
        quiet = time.monotonic() - self.progress
        if quiet < self.stall:
            return
        self.stalls += 1
        action = self.conf.get("on_stall") or "warn"
        stacks = os.path.join(self.run, f"stacks-{self.stalls}.txt")
        pids = [pid for pid, _ in marked(self.id, self.skip | ({self.gpu.pid} if self.gpu else set()))]
        dump_stacks(stacks, pids, self.conf.get("py_spy"), quiet)
        what = {"warn": "", "stop": "; stopping it (train.on_stall: stop)",
                "restart": "; ending this attempt (train.on_stall: restart)"}[action]
        now = time.time()
        self.stalled = {"since": round(now - quiet, 3), "at": round(now, 3), "seconds": round(quiet),
                        "stacks": stacks, "n": self.stalls, "action": action}
        append(self.log, f"-- STALLED: no output for {quiet:.0f} s; stacks in {stacks}{what}\n")
        self.read_log(own=True)
        append(os.path.join(self.run, "events.jsonl"), json.dumps({"event": "stall", **self.stalled}) + "\n")
        self.status()
        if action != "warn":
            # The wrapper reads this once the attempt ended: stop, or start the next attempt.
            write_atomic(os.path.join(self.run, "stall-end"), action + "\n")
            self.end_attempt()

    def end_attempt(self):
        """TERM every process of the run but the wrapper and this watch; KILL what is left after `grace`."""
        skip = self.skip | ({self.gpu.pid} if self.gpu else set())
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid, _ in marked(self.id, skip):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            end = time.monotonic() + float(self.conf.get("grace") or 10)
            while marked(self.id, skip) and time.monotonic() < end and sig == signal.SIGTERM:
                time.sleep(0.2)

    # -- GPUs ------------------------------------------------------------------------------------------
    def start_gpu(self):
        smi = shutil.which("nvidia-smi")
        if not smi:
            return
        try:
            self.gpu = subprocess.Popen([smi, f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits",
                                         "-l", str(int(self.conf.get("gpu_every") or 5))],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        except OSError:
            self.gpu = None

    def read_gpu(self):
        if not self.gpu:
            return
        fd = self.gpu.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:  # nvidia-smi ended: no more rows
                self.gpu.wait()
                self.gpu = None
                break
            self.gpu_buf += chunk
        *lines, self.gpu_buf = self.gpu_buf.split(b"\n")
        rows, now = [], round(time.time(), 3)
        for raw in lines:
            cells = [c.strip() for c in raw.decode("utf-8", "replace").split(",")]
            if len(cells) != 6 or not cells[0].isdigit():
                continue
            rows.append(",".join([str(now)] + cells) + "\n")
            self.gpu_last[cells[0]] = cells
        try:
            now_used = sum(float(r[2]) for r in self.gpu_last.values())
        except ValueError:
            now_used = None
        if now_used is not None and (self.gpu_peak is None or now_used > self.gpu_peak):
            self.gpu_peak = now_used
        if rows:  # the header with the first row: an nvidia-smi that reads no GPU leaves no file
            path = os.path.join(self.run, "gpu.csv")
            append(path, ("" if os.path.exists(path) else GPU_HEADER + "\n") + "".join(rows))
            self.status()

    def gpu_summary(self):
        def num(s):
            try:
                return float(s)
            except ValueError:
                return None

        rows = list(self.gpu_last.values())
        util = [u for u in (num(r[1]) for r in rows) if u is not None]
        used = [u for u in (num(r[2]) for r in rows) if u is not None]
        total = [u for u in (num(r[3]) for r in rows) if u is not None]
        if not rows:
            return None
        return {"t": round(time.time()), "gpus": len(rows), "util_pct": round(sum(util) / len(util)) if util else None,
                "mem_used_mib": sum(used) if used else None, "mem_total_mib": sum(total) if total else None,
                "mem_peak_mib": self.gpu_peak}

    # -- attempts (the wrapper's records) into the manifest ---------------------------------------------
    def merge_attempts(self):
        path = os.path.join(self.run, "attempts")
        try:
            st = os.stat(path)
        except OSError:
            return
        key = (st.st_size, st.st_mtime_ns)
        if key == self.attempts_seen:
            return
        self.attempts_seen = key
        attempts = parse_attempts(read(path, 1 << 16))
        if attempts:
            self.running = attempts[-1]["ended"] is None
            if len(attempts) != self.attempts:  # a new attempt: its own stall clock
                self.attempts = len(attempts)
                self.resumed()
        manifest = os.path.join(self.run, "manifest.json")
        try:
            with open(manifest) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and data.get("attempts") != attempts:
            data["attempts"] = attempts
            write_atomic(manifest, json.dumps(data, indent=1) + "\n")

    def status(self):
        write_atomic(os.path.join(self.run, "watch.json"),
                     json.dumps({"stalled": self.stalled, "stalls": self.stalls, "gpu": self.gpu_summary()}) + "\n")

    # -- the loop --------------------------------------------------------------------------------------
    def wrapper_alive(self):
        try:
            with open(f"/proc/{self.wrapper}/stat", "rb") as f:
                return f.read().rpartition(b")")[2].split()[0] != b"Z"
        except (OSError, IndexError):
            return False

    def start_keep(self):
        """The checkpoint keep, in a thread: a copy of many GB never delays the log, stall and GPU reads."""
        conf = self.conf.get("checkpoint")
        if not conf or not conf.get("keep") or not conf.get("tool"):
            return
        import importlib.util

        spec = importlib.util.spec_from_file_location("remote_ckpt", conf["tool"])
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {conf['tool']}")
        ckpt = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ckpt)

        def keep():
            last = None
            while not self.stopping:
                try:
                    last = ckpt.keep_once(conf, last)
                except Exception as exc:  # noqa: BLE001 -- logged; the next look tries again
                    print(f"checkpoint keep: {exc!r}", file=sys.stderr, flush=True)
                time.sleep(KEEP_EVERY)

        threading.Thread(target=keep, name="keep", daemon=True).start()

    def loop(self):
        try:
            self.start_keep()
        except Exception as exc:  # noqa: BLE001 -- the watch goes on without the keep
            print(f"checkpoint keep not started: {exc!r}", file=sys.stderr, flush=True)
        self.start_gpu()
        self.status()
        while not self.stopping and self.wrapper_alive():
            self.merge_attempts()
            self.read_log()
            self.check_stall()
            self.read_gpu()
            if self.gpu:
                select.select([self.gpu.stdout.fileno()], [], [], TICK)
                time.sleep(0.05)  # the rest of a row, written in pieces
            else:
                time.sleep(TICK)
        self.read_log()
        self.read_gpu()
        self.merge_attempts()
        if self.gpu:
            self.gpu.terminate()
            try:
                self.gpu.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.gpu.kill()


def parse_attempts(text):
    """The wrapper's records, `start K EPOCH`, `end K EPOCH STATUS` and `killed K oom` lines, one entry per attempt."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        try:
            if f[0] == "start" and len(f) in (3, 4):  # the 4th: the commit the checkout had (job.sh)
                out[int(f[1])] = {"attempt": int(f[1]), "started": float(f[2]), "ended": None, "exit": None,
                                  "commit": f[3] if len(f) == 4 and f[3] != "-" else None}
            elif f[0] == "end" and len(f) == 4 and int(f[1]) in out:
                out[int(f[1])].update(ended=float(f[2]), exit=int(f[3]))
            elif f[0] == "killed" and len(f) == 3 and int(f[1]) in out and f[2] == "oom":  # the kernel's OOM killer
                out[int(f[1])]["killed"] = "oom"
        except (IndexError, ValueError):
            continue
    return [out[k] for k in sorted(out)]


def main(argv):
    run, run_id, conf = argv[1], argv[2], argv[3]
    if not conf.lstrip().startswith("{"):  # the settings' file (job.sh passes $run/watch-settings.json)
        with open(conf) as f:
            conf = f.read()
    conf = json.loads(conf)
    watch = Watch(run, run_id, conf)

    def stop(*_):
        watch.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch.loop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
