"""A run's checkpoints, in the container: standard-library Python run by the system python3 -I -S (nothing of the
user's venv), as a file launch puts beside the job (job.sh's restarts, the watch's keep) or as `python3 -c TEXT`
from the controller (list, restore, fresh, wait).

A checkpoint is COMPLETE only where this decides so, never assumed: a torch.save file is a zip whose end record
(and the central directory it points at) is there; a safetensors file is as long as its header says; a folder
has its marker (DCP `.metadata`, HF `trainer_state.json`, or the configured `complete` glob); any other file is
complete once it holds still (same size and mtime on two looks, and not modified in the last SETTLE seconds).
Nothing of a checkpoint is ever executed or unpickled: its step is read by walking the pickle's opcodes.

argv: COMMAND SETTINGS [ARGS]; SETTINGS is JSON: path (absolute; a file, a folder or a glob), complete (a glob
or null), keep (the keep folder or null), signal (a name or null), grace (seconds). Commands, each printing JSON:
  list                  every candidate, newest first, and the kept copy
  restore               before a resume: an incomplete newest match moved aside (`<name>.incomplete-<time>`),
                        the kept copy put back where the job reads it; the latest complete one (exit 3: none)
  pick STEP             a multi-node resume at the run's common STEP: every match newer than the one at STEP
                        moved aside (`<name>.old-<time>`), the kept copy put back where only it is at STEP;
                        the checkpoint at STEP (exit 3: none)
  fresh                 every match and the kept copy moved aside (`<name>.old-<time>`): a new run starts over
  resume RUN            job.sh's restart: restore, then RUN/command-next (RUN/command-resume with {checkpoint}
                        the latest's path, quoted once); prints the log's words (exit 3: none complete)
  wait RUN ID           `stop --save`: ask the job to save (its signal, to the processes that catch it, re-sent
                        every RESEND s; and RUN/save-requested) and wait for a new complete checkpoint, at most
                        `grace` seconds; for a job that uses remote_checkpoint (RUN/save-aware), the one its
                        save() made on this request (RUN/saved-on-request)
Nothing is ever deleted: a checkpoint moved aside is renamed beside itself.
"""

import glob
import json
import os
import pickletools
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import zipfile

SETTLE = 2.0  # a file of unknown format modified this recently may still be being written
RESEND = 3.0  # stop --save sends the signal again this often until a checkpoint appears
POLL = 0.2
STEP_KEYS = ("iter_num", "global_step", "step", "epoch", "iteration", "iter")
NAME_STEP = re.compile(r"(?:step|checkpoint|ckpt|iter|iteration|epoch|global_step)[-_=]?(\d+)", re.I)
ASIDE = re.compile(r"\.(incomplete|old)-\d{8}-\d{6}|\.remote-tmp")
MARKERS = (".metadata", "trainer_state.json")
PICKLE_LIMIT = 64 << 20  # data.pkl holds no tensor data (those are separate entries): this is generous
SHELLS = ("bash", "sh", "dash", "zsh")


# -- completeness -------------------------------------------------------------------------------------------
def zip_end(path, size):
    """(complete, why) for a file that starts as a zip: its end-of-central-directory record is there and what
    it points at lies inside the file."""
    with open(path, "rb") as f:
        n = min(size, 65536 + 22)
        f.seek(size - n)
        tail = f.read(n)
    i = tail.rfind(b"PK\x05\x06")
    while i >= 0:
        if len(tail) - i >= 22:
            cd_size, cd_offset, comment = struct.unpack("<IIH", tail[i + 12:i + 22])
            if i + 22 + comment == len(tail):
                end = size - len(tail) + i
                if cd_offset == 0xFFFFFFFF or cd_size == 0xFFFFFFFF or cd_offset + cd_size <= end:
                    return True, ""
                return False, "its zip end record points past the file (truncated)"
        i = tail.rfind(b"PK\x05\x06", 0, i)
    return False, "a zip (torch.save) without its end record: truncated or still being written"


def safetensors_end(path, size):
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return False, "shorter than a safetensors header"
        (n,) = struct.unpack("<Q", head)
        if n > min(size, 100 << 20):
            return False, "its safetensors header is longer than the file"
        try:
            meta = json.loads(f.read(n))
            ends = [v["data_offsets"][1] for k, v in meta.items() if k != "__metadata__"]
        except (ValueError, KeyError, TypeError, IndexError):
            return False, "its safetensors header does not parse"
    want = 8 + n + max(ends, default=0)
    return (True, "") if size >= want else (False, f"{size} bytes of the {want} its header names")


def file_state(path, st, settle):
    """(kind, complete, why) of a regular file whose stat is st."""
    with open(path, "rb") as f:
        magic = f.read(8)
    if magic[:4] == b"PK\x03\x04" or path.endswith((".pt", ".pth", ".ckpt", ".tar")) and len(magic) < 4:
        if len(magic) < 4:  # torch.save truncated the file and has not written the zip's first header yet
            return "torch", False, "empty: truncated or not yet written"
        return ("torch",) + zip_end(path, st.st_size)
    if path.endswith(".safetensors"):
        return ("safetensors",) + safetensors_end(path, st.st_size)
    if settle and time.time() - st.st_mtime < SETTLE:
        return "file", False, f"modified less than {SETTLE:g} s ago: may still be being written"
    return "file", True, ""


def folder_state(path, marker):
    """(kind, complete, why, mtime) of a folder checkpoint: its marker decides; its mtime is the marker's."""
    globs = [marker] if marker else list(MARKERS)
    for g in globs:
        hits = [h for h in glob.glob(os.path.join(glob.escape(path), g)) if os.path.exists(h)]
        if hits:
            kind = "dcp" if g == ".metadata" else "hf" if g == "trainer_state.json" else "folder"
            return kind, True, "", max(os.stat(h).st_mtime for h in hits)
    return "folder", False, f"no {' or '.join(globs)} in it (the marker a complete one has)", None


def look(path, marker=None, settle=True):
    """One candidate: path, kind, complete, why (when not), size, mtime, step, step_from."""
    out = {"path": path, "kind": "missing", "complete": False, "why": "missing", "size": 0, "mtime": None,
           "step": None, "step_from": None}
    try:
        st = os.stat(path)
        if os.path.isdir(path):
            kind, complete, why, mtime = folder_state(path, marker)
            size = 0
        else:
            kind, complete, why = file_state(path, st, settle)
            mtime, size = st.st_mtime, st.st_size
            again = os.stat(path)
            if (again.st_size, again.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
                complete, why = False, "it changed while it was read: still being written"
    except OSError as exc:
        out["why"] = f"unreadable: {exc.strerror or exc}"
        return out
    out.update(kind=kind, complete=complete, why=why, size=size, mtime=mtime if mtime is not None else st.st_mtime)
    step, source = step_of(path, kind) if complete else (None, None)
    if step is None and (m := NAME_STEP.search(os.path.basename(path.rstrip("/")))):
        step, source = int(m.group(1)), "name"
    out.update(step=step, step_from=source)
    return out


# -- the step, read without executing anything ------------------------------------------------------------
INT_OPS = ("BININT", "BININT1", "BININT2", "LONG1", "INT", "LONG", "LONG4")
STR_OPS = ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING")
MEMO_OPS = ("MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT")


def pickle_step(data):
    """(key, value) of the first step-like key followed by an int in a pickle's opcodes, best key first: the
    pickle is walked (pickletools.genops), never loaded."""
    found: dict = {}
    pending = None
    try:
        for n, (op, arg, _) in enumerate(pickletools.genops(data)):
            if n > 2_000_000:
                break
            if op.name in MEMO_OPS:
                continue
            if pending is not None and op.name in INT_OPS and isinstance(arg, int) and not isinstance(arg, bool):
                found.setdefault(pending, arg)
            pending = arg if op.name in STR_OPS and arg in STEP_KEYS else None
    except Exception:  # noqa: BLE001 -- a hostile or truncated pickle: what was found before it stands
        pass
    for key in STEP_KEYS:
        if key in found and 0 <= found[key] < 1 << 62:
            return key, found[key]
    return None


def step_of(path, kind):
    """(step, where it was read) where the checkpoint tells it without running anything, else (None, None)."""
    try:
        if kind == "torch":
            with zipfile.ZipFile(path) as z:
                names = [i for i in z.infolist() if i.filename.endswith("data.pkl") and i.file_size <= PICKLE_LIMIT]
                if names:
                    with z.open(names[0]) as f:
                        hit = pickle_step(f.read(PICKLE_LIMIT))
                    if hit:
                        return hit[1], f"data.pkl {hit[0]}"
        elif kind == "hf":
            with open(os.path.join(path, "trainer_state.json"), "rb") as f:
                value = json.loads(f.read(16 << 20)).get("global_step")
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value, "trainer_state.json global_step"
    except Exception:  # noqa: BLE001 -- a checkpoint that does not say its step is still a checkpoint
        pass
    return None, None


# -- the candidates and the kept copy ------------------------------------------------------------------------
def is_glob(path):
    return any(c in path for c in "*?[")


def matches(conf):
    pattern = conf["path"].rstrip("/") or "/"
    paths = glob.glob(pattern) if is_glob(pattern) else [pattern] if os.path.lexists(pattern) else []
    return [p for p in paths if not ASIDE.search(os.path.basename(p))]


def candidates(conf, settle=True):
    """Every match, newest first (mtime; a missing one last)."""
    out = [look(p, conf.get("complete"), settle) for p in matches(conf)]
    return sorted(out, key=lambda c: -(c["mtime"] or 0))


def kept_path(conf):
    """Where the keep copy of a single-path checkpoint lives (None for a glob: a saver that writes a new name
    each time never overwrites its last complete one, so nothing needs keeping)."""
    if not conf.get("keep") or is_glob(conf["path"]):
        return None
    return os.path.join(conf["keep"], os.path.basename(conf["path"].rstrip("/")) or "checkpoint")


def kept(conf):
    path = kept_path(conf)
    if not path or not os.path.lexists(path):
        return None
    out = look(path, conf.get("complete"), settle=False)
    try:
        with open(path + ".json") as f:
            meta = json.load(f)
        out["source"], out["mtime"] = meta.get("source"), meta.get("mtime", out["mtime"])
    except (OSError, ValueError, AttributeError):
        pass
    return out


def copy(src, dst, check=None):
    """src to dst atomically (a temp name beside dst, then a rename), as a reflink where the filesystem can;
    with `check`, only where check(temp copy) holds (False: nothing was replaced)."""
    # Its own temp name: the watch's keep and stop --save's may copy at once.
    tmp = f"{dst}.remote-tmp-{os.getpid()}-{threading.get_ident()}"
    if os.path.isdir(tmp) and not os.path.islink(tmp):
        shutil.rmtree(tmp)
    elif os.path.lexists(tmp):
        os.unlink(tmp)
    try:
        subprocess.run(["cp", "-a", "--reflink=auto", "--", src, tmp], check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except (OSError, subprocess.CalledProcessError):
        if os.path.isdir(src):
            shutil.copytree(src, tmp, symlinks=True)
        else:
            shutil.copy2(src, tmp)
    if check is not None and not check(tmp):
        if os.path.isdir(tmp) and not os.path.islink(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.unlink(tmp)
        return False
    if os.path.isdir(dst) and not os.path.islink(dst):
        old = aside(dst, "old")  # a folder cannot be replaced by a rename: the previous copy goes aside first
        os.replace(tmp, dst)
        shutil.rmtree(old, ignore_errors=True)  # our own earlier copy, never the job's checkpoint
    else:
        os.replace(tmp, dst)
    return True


def keep_once(conf, last=None):
    """Copy the checkpoint into the keep folder when it is complete and newer than the kept copy; returns what
    is kept now (its path, mtime and size) or last."""
    dst = kept_path(conf)
    if not dst:
        return last
    c = look(conf["path"].rstrip("/"), conf.get("complete"))
    if not c["complete"]:
        return last
    sig = (c["mtime"], c["size"])
    if last and last.get("sig") == list(sig):
        return last
    if last is None:
        k = kept(conf)
        if k and k.get("source") == c["path"] and k.get("mtime") == c["mtime"]:
            return {"sig": list(sig)}
    os.makedirs(conf["keep"], exist_ok=True)

    def whole(tmp):
        # Overwritten during the copy (the copy may be torn), or a copy that is not complete itself: the kept
        # one stays as it was, and the next look tries again.
        again = look(c["path"], conf.get("complete"))
        return (again["mtime"], again["size"]) == sig and look(tmp, conf.get("complete"), settle=False)["complete"]

    if not copy(c["path"], dst, whole):
        return last
    meta = {"source": c["path"], "mtime": c["mtime"], "size": c["size"], "step": c["step"], "kept_at": time.time()}
    tmp = dst + ".json.tmp"
    with open(tmp, "w") as f:
        json.dump(meta, f)
    os.replace(tmp, dst + ".json")
    return {"sig": list(sig)}


def stamp():
    return time.strftime("%Y%m%d-%H%M%S")


def aside(path, why):
    """Rename path beside itself (`<name>.<why>-<time>`, a counter where that exists): never deleted."""
    base = f"{path.rstrip('/')}.{why}-{stamp()}"
    dst, n = base, 1
    while os.path.lexists(dst):
        n += 1
        dst = f"{base}.{n}"
    os.rename(path.rstrip("/"), dst)
    return dst


# -- the commands ------------------------------------------------------------------------------------------
def cmd_list(conf):
    return {"candidates": candidates(conf), "kept": kept(conf)}


def cmd_restore(conf):
    """Before a resume (the job is not running): the incomplete newest moved aside, the kept copy put back
    where the job reads it; the latest complete checkpoint, or none (exit 3) with why."""
    cands = candidates(conf, settle=False)
    k = kept(conf)
    complete = [c for c in cands if c["complete"]]
    usable_kept = k is not None and k["complete"]
    newer = [c for c in cands if not c["complete"] and (not complete or (c["mtime"] or 0) > (complete[0]["mtime"] or 0))]
    moved, restored = [], None
    if not complete and not usable_kept:
        return {"latest": None, "moved": [], "restored": None, "incomplete": newer}, 3
    single = kept_path(conf) is not None
    if single and usable_kept and (not complete or (k["mtime"] or 0) > (complete[0]["mtime"] or 0) + 0.5):
        target = conf["path"].rstrip("/")
        other = elsewhere(conf, k)
        if other:
            return {"latest": None, "moved": [], "restored": None, "incomplete": newer, "kept_elsewhere": other}, 3
        if os.path.lexists(target):
            moved.append({"path": target, "to": aside(target, "incomplete")})
        copy(kept_path(conf), target)
        restored = {"from": kept_path(conf), "to": target}
    else:
        for c in newer:
            moved.append({"path": c["path"], "to": aside(c["path"], "incomplete")})
    latest = [c for c in candidates(conf, settle=False) if c["complete"]]
    return {"latest": latest[0] if latest else None, "moved": moved, "restored": restored, "incomplete": newer}, \
        0 if latest else 3


def elsewhere(conf, k):
    """Where the kept copy `k` was taken from another path than the one configured now (train.checkpoint.path
    changed since): {kept, source, path}, else None. Put back at the new path it could hand the job another
    run's state, so restore and pick move nothing and the caller names both paths."""
    source, target = k.get("source"), conf["path"].rstrip("/")
    if isinstance(source, str) and source != target:
        return {"kept": kept_path(conf), "source": source, "path": target}
    return None


def cmd_pick(conf, step):
    """A multi-node resume at the run's common step: what is newer than the node's checkpoint at `step` moved
    aside (never deleted), the kept copy put back where only it holds that step."""
    cands = candidates(conf, settle=False)
    at = next((c for c in cands if c["complete"] and c["step"] == step), None)
    moved, restored = [], None
    if at is None:
        k = kept(conf)
        if not (k and k["complete"] and k["step"] == step and kept_path(conf)):
            return {"latest": None, "moved": [], "restored": None}, 3
        other = elsewhere(conf, k)
        if other:
            return {"latest": None, "moved": [], "restored": None, "kept_elsewhere": other}, 3
        target = conf["path"].rstrip("/")
        if os.path.lexists(target):
            moved.append({"path": target, "to": aside(target, "old")})
        copy(kept_path(conf), target)
        restored = {"from": kept_path(conf), "to": target}
        at = look(target, conf.get("complete"), settle=False)
    else:
        for c in cands:
            if c["path"] != at["path"] and (c["mtime"] or 0) > (at["mtime"] or 0):
                moved.append({"path": c["path"], "to": aside(c["path"], "old")})
    return {"latest": at, "moved": moved, "restored": restored}, 0


def cmd_fresh(conf):
    moved = [{"path": p, "to": aside(p, "old")} for p in matches(conf)]
    kp = kept_path(conf)
    if kp and os.path.lexists(kp):
        moved.append({"path": kp, "to": aside(kp, "old")})
        if os.path.exists(kp + ".json"):
            os.replace(kp + ".json", moved[-1]["to"] + ".json")
    return {"moved": moved}, 0


def cmd_resume(conf, run):
    """job.sh's restart: restore, then RUN/command-next is RUN/command-resume with {checkpoint} the latest's path
    (quoted once) and the line the log gets is printed (exit 3: no complete checkpoint, the plain command)."""
    import shlex

    out, rc = cmd_restore(conf)
    with open(os.path.join(run, "resume.json.tmp"), "w") as f:
        json.dump(out, f)
    os.replace(os.path.join(run, "resume.json.tmp"), os.path.join(run, "resume.json"))
    latest = out["latest"]
    if rc or not latest:
        elsewhere = out.get("kept_elsewhere")
        return "no complete checkpoint" + (f" ({out['incomplete'][0]['path']} is not: {out['incomplete'][0]['why']})"
                                           if out["incomplete"] else "") + (
            f"; the kept copy {elsewhere['kept']} came from {elsewhere['source']}, not {elsewhere['path']}: "
            "not put back" if elsewhere else ""), 3
    with open(os.path.join(run, "command-resume")) as f:
        command = f.read().replace("{checkpoint}", shlex.quote(latest["path"]))
    with open(os.path.join(run, "command-next.tmp"), "w") as f:
        f.write(command)
    os.replace(os.path.join(run, "command-next.tmp"), os.path.join(run, "command-next"))
    step = f"step {latest['step']}" if latest["step"] is not None else "step unknown"
    return f"{latest['path']} ({step})" + "".join(f"; {m['path']} moved aside to {m['to']}" for m in out["moved"]), 0


def marked(run_id, exclude):
    """Every live, non-zombie process carrying REMOTE_RUN_ID=run_id (lib.sh's rule): (pid, comm)."""
    want = ("REMOTE_RUN_ID=" + run_id).encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in exclude:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            if stat.rpartition(b")")[2].split()[0] == b"Z":
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                if want in f.read().split(b"\0"):
                    out.append((int(name), stat.partition(b"(")[2].rpartition(b")")[0].decode(errors="replace")))
        except (OSError, IndexError):
            continue
    return out


def catches(pid, sig):
    """Whether process pid has a handler for sig (/proc/PID/status SigCgt, a hex mask: bit sig - 1)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (int(sig) - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def read_pid(path):
    try:
        with open(path) as f:
            text = f.read().strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


def cmd_wait(conf, run, run_id):
    """Ask for a save and wait for a new complete checkpoint (bounded by grace)."""
    t0 = time.time()
    before = next((c for c in candidates(conf) if c["complete"]), None)
    seen = {(c["path"], c["mtime"], c["size"]) for c in candidates(conf) if c["complete"]}
    try:
        with open(os.path.join(run, "save-requested"), "w") as f:
            f.write(f"{t0}\n")
    except OSError:
        pass
    # A job that asks remote_checkpoint.stop_requested() has said so (RUN/save-aware): its answer is the save it
    # makes on the request (RUN/saved-on-request names it), not a periodic save that lands first.
    aware = os.path.exists(os.path.join(run, "save-aware"))
    # Not the wrapper, nor the watch, nor a shell (`bash -c` would die of USR1): the job's own processes.
    exclude = {os.getpid(), os.getppid()} | {p for p in (read_pid(os.path.join(run, "pid")),
                                                         read_pid(os.path.join(run, "watch.pid"))) if p}
    sig = getattr(signal, "SIG" + conf["signal"]) if conf.get("signal") else None
    sent, last_sent, why, saved = 0, 0.0, "grace", None
    while True:
        procs = marked(run_id, exclude)
        if not procs:
            why = "ended"
        if sig is not None and procs and time.monotonic() - last_sent >= RESEND:
            # Only to a process that catches it: one still importing or compiling, its handler not installed
            # yet, would die of it (the default action) unsaved. It gets it once its handler is there (the
            # next poll), so a signal asked for during the compile is not lost.
            hit = [pid for pid, comm in procs if comm not in SHELLS and catches(pid, sig)]
            for pid in hit:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            if hit:
                sent, last_sent = sent + 1, time.monotonic()
        done = on_request(run, t0) if aware else None  # read first: save() writes it after its file is in place
        new = [c for c in candidates(conf) if c["complete"] and (c["path"], c["mtime"], c["size"]) not in seen]
        if aware:
            new = [c for c in new if c["path"] == done]
        if new:
            saved, why = new[0], "saved"
            try:  # kept at once: the stop that follows may land while an in-place saver writes over it again
                keep_once(conf)
            except OSError:
                pass
            break
        if not procs or time.time() - t0 >= float(conf.get("grace") or 0):
            break
        time.sleep(POLL)
    if saved is None and aware:  # no save on the request within grace: a periodic one that landed is still new
        saved = next((c for c in candidates(conf) if c["complete"] and (c["path"], c["mtime"], c["size"]) not in seen),
                     None)
        if saved:
            try:
                keep_once(conf)
            except OSError:
                pass
    k = kept(conf)
    latest = saved or next((c for c in candidates(conf) if c["complete"]), None) or \
        (dict(k, kept=True) if k and k["complete"] else None)
    return {"saved": saved, "latest": latest, "before": before, "why": why, "signals": sent,
            "on_request": bool(aware and saved and why == "saved"), "waited": round(time.time() - t0, 2),
            "now": time.time()}, 0


def on_request(run, t0):
    """The path remote_checkpoint.save() wrote on this request (RUN/saved-on-request), else None."""
    try:
        with open(os.path.join(run, "saved-on-request")) as f:
            done = json.loads(f.read())
    except (OSError, ValueError):
        return None
    if not isinstance(done, dict) or done.get("request") != f"{t0}" or not isinstance(done.get("path"), str):
        return None  # an earlier request's (a run stopped before), or not the helper's
    return done["path"]


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    command, conf = argv[1], json.loads(argv[2])
    if command == "list":
        out, rc = cmd_list(conf), 0
    elif command == "restore":
        out, rc = cmd_restore(conf)
    elif command == "fresh":
        out, rc = cmd_fresh(conf)
    elif command == "pick" and len(argv) == 4 and argv[3].isdigit():
        out, rc = cmd_pick(conf, int(argv[3]))
    elif command == "resume" and len(argv) == 4:
        text, rc = cmd_resume(conf, argv[3])
        print(text)
        return rc
    elif command == "wait" and len(argv) == 5:
        out, rc = cmd_wait(conf, argv[3], argv[4])
    else:
        print(f"unknown command {command!r}", file=sys.stderr)
        return 2
    print(json.dumps(out))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
