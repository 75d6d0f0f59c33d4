"""remote_checkpoint: an optional helper for training code written for remote (issue 44 item 6).

Installed into the container's venv as `remote_checkpoint` by `deploy` (remote/sh/venv-build.sh, beside
remote_guard and remote_compilewatch), with remote/sh/ckpt.py beside it as `remote_ckpt`, whose rules decide
what a complete checkpoint is (`latest()` imports them: one definition, no copy). Code that never imports it
is untouched; imported outside a run (a laptop, a test) it answers "no stop asked, nothing configured".

It reads the run's settings from what a train run gives every job process: REMOTE_RUN_DIR (the run folder,
exported by launch.sh) and, in it, checkpoint.json (train.checkpoint as remote/sh/ckpt.py is told it).

    import remote_checkpoint
    for step in range(start, steps):
        train_step()
        if remote_checkpoint.stop_requested():        # every rank calls it, every step: one agreed answer
            remote_checkpoint.save({"model": model.state_dict(), "step": step})
            sys.exit(0)

Only the standard library at import; torch is used where the job already has it loaded.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

RUN_ENV = "REMOTE_RUN_DIR"
REQUEST = "save-requested"  # remote/sh/ckpt.py's `wait` (stop --save) leaves it in the run folder
# Left in the run folder for ckpt.py's `wait`: AWARE once the job asks stop_requested() (it will save on the
# request, so a periodic save that lands first is not the answer), DONE by save() once a stop was asked (the
# save made on the request: its path and the request it answers).
AWARE = "save-aware"
DONE = "saved-on-request"
SETTINGS = "checkpoint.json"  # launch.sh writes train.checkpoint's settings there
LOOK_EVERY = 0.5  # seconds between looks for the request file: a stat per step would be cheap, this is cheaper

_state: dict = {"asked": False, "agreed": False, "installed": False, "tried": False, "looked": 0.0}
_lock = threading.Lock()


def run_dir() -> str | None:
    """The run folder (None outside a run that remote started)."""
    return os.environ.get(RUN_ENV) or None


def settings() -> dict:
    """train.checkpoint as the run was started with it ({} without one, or outside a run)."""
    run = run_dir()
    if not run:
        return {}
    try:
        with open(os.path.join(run, SETTINGS)) as f:
            conf = json.load(f)
    except (OSError, ValueError):
        return {}
    return conf if isinstance(conf, dict) and isinstance(conf.get("path"), str) else {}


def _on_signal(previous):
    def handler(signum, frame):
        _state["asked"] = True  # only a flag: the all_reduce and the save happen in the loop, never in here
        if callable(previous):
            previous(signum, frame)
    return handler


def install() -> bool:
    """Catch train.checkpoint.signal (once; the main thread only, as Python requires): from then on
    `remote stop --save` sends it to this process (it signals only processes that catch it). Returns whether
    a handler is in place. stop_requested() calls it; call it earlier to be asked sooner."""
    with _lock:
        if _state["tried"]:  # once per process: stop_requested() stays a flag test and a rare stat
            return bool(_state["installed"])
        _state["tried"] = True
        _announce()
        name = settings().get("signal")
        if not name:
            return False
        sig = getattr(signal, "SIG" + str(name).upper().removeprefix("SIG"), None)
        if not isinstance(sig, signal.Signals):
            return False
        try:
            previous = signal.getsignal(sig)
            signal.signal(sig, _on_signal(previous))
        except (ValueError, OSError):  # not the main thread: the request file still works
            return False
        _state["installed"] = True
        return True


def _write(name: str, text: str) -> None:
    """A file of the run folder, whole or not at all (best effort: the job goes on without it)."""
    run = run_dir()
    if not run:
        return
    tmp = os.path.join(run, f".{name}.{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(run, name))
    except OSError:
        pass


def _announce() -> None:
    """Tell `stop --save` that this job answers its request (it then waits for the save made on it)."""
    if run_dir() and not os.path.exists(os.path.join(run_dir() or "", AWARE)):
        _write(AWARE, f"{os.getpid()}\n")


def _asked_here() -> bool:
    if _state["asked"]:
        return True
    run = run_dir()
    if run:
        import time

        now = time.monotonic()
        if now - _state["looked"] >= LOOK_EVERY or not _state["looked"]:
            _state["looked"] = now
            if os.path.exists(os.path.join(run, REQUEST)):
                _state["asked"] = True
    return bool(_state["asked"])


def _agree(flag: bool) -> bool:
    """MAX of flag over every rank where torch.distributed is initialised (never imports torch itself)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return flag
    torch = sys.modules["torch"]
    device = "cpu"
    if "nccl" in str(dist.get_backend()).lower():
        device = f"cuda:{torch.cuda.current_device()}"
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def stop_requested() -> bool:
    """True once `remote stop --save` asked this run to save (its signal, or the request file), agreed across
    ranks where torch.distributed is initialised: then every rank must call it at the same points (an
    all_reduce), and all of them get True at the same step. Stays True once True."""
    if _state["agreed"]:
        return True
    install()
    _state["agreed"] = _agree(_asked_here())
    return bool(_state["agreed"])


def checkpoint_dir() -> str | None:
    """The folder train.checkpoint.path names its checkpoints in (made if missing); None without one."""
    path = settings().get("path")
    if not path:
        return None
    parts = path.rstrip("/").split("/")
    fixed = []
    for part in parts[:-1]:
        if any(c in part for c in "*?["):
            break
        fixed.append(part)
    folder = "/".join(fixed) or "/"
    os.makedirs(folder, exist_ok=True)
    return folder


def latest() -> str | None:
    """The path of the latest COMPLETE checkpoint, decided by remote's own rules (remote_ckpt, the file
    remote/sh/ckpt.py that resume and `stop --save` use); None where there is none, or outside a run."""
    conf = settings()
    if not conf:
        return None
    import remote_ckpt  # type: ignore[import-not-found]  # installed beside this module by deploy

    found = [c for c in remote_ckpt.candidates(conf, settle=False) if c["complete"]]
    if found:
        return found[0]["path"]
    k = remote_ckpt.kept(conf)
    return k["path"] if k and k["complete"] else None


def save(obj, path: str | None = None) -> str:
    """torch.save obj atomically: to a temp name in the same folder (`.remote-tmp` in it: never taken for a
    checkpoint), fsync, rename over `path`, fsync the folder. `path` defaults to train.checkpoint.path where
    that names one file. Returns the path. Call it on one rank (or give each rank its own path)."""
    if path is None:
        conf = settings().get("path")
        if not conf:
            raise ValueError("remote_checkpoint.save: no path given and no train.checkpoint.path for this run "
                             "(outside a run, or the hosts file has no train.checkpoint): pass path=")
        if any(c in conf for c in "*?["):
            raise ValueError(f"remote_checkpoint.save: train.checkpoint.path {conf!r} is a glob: pass path= "
                             "(a name it matches, e.g. one with the step in it)")
        path = conf
    import torch  # type: ignore[import-not-found]  # in the container only: the controller has no torch

    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.remote-tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a crash
    finally:
        os.close(fd)
    if _state["agreed"] and run_dir():  # the save a stop asked for: `stop --save` reports this one
        try:
            with open(os.path.join(run_dir() or "", REQUEST)) as f:
                request = f.read().strip()
        except OSError:
            request = None
        _write(DONE, json.dumps({"path": os.path.abspath(path), "request": request}) + "\n")
    return path
