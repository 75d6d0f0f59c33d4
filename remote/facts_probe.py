"""The facts probe: runs inside the container with its system python (stdlib only), one round trip.

Reads, never writes. Its one argument is JSON: {"venv", "checkout", "cache_dir", "run_dir"}; it prints
one JSON object of raw observations that remote.facts.parse turns into typed facts. The slow parts
(the venv's interpreter importing torch, nvidia-smi, git) run as concurrent children.
"""

import glob
import json
import os
import subprocess
import sys
import time

# Runs with the venv's own interpreter, from /: what is installed (and how), and what torch sees.
VENV_SCRIPT = r'''
import importlib.metadata as m, json, sys
dists = {}
for d in m.distributions():
    try:
        du = d.read_text("direct_url.json")
        url = json.loads(du).get("url") if du else None
    except ValueError:
        url = None
    dists[d.metadata["Name"]] = {"version": d.version, "installer": (d.read_text("INSTALLER") or "").strip(),
                                 "url": url}
info = {"dists": dists, "python": sys.version.split()[0]}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda_build"] = torch.version.cuda
    info["cuda_available"] = bool(torch.cuda.is_available())
    n = torch.cuda.device_count() if info["cuda_available"] else 0
    info["device_count"] = n
    info["device_names"] = [torch.cuda.get_device_name(i) for i in range(n)]
except Exception as exc:  # any failure to import is the finding
    info["torch_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(info))
'''

GPU_QUERY = ["nvidia-smi", "--query-gpu=index,name,driver_version,memory.used,memory.total",
             "--format=csv,noheader,nounits"]
APPS_QUERY = ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"]


def start(argv, cwd="/"):
    try:
        return time.time(), subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "HOME": os.environ.get("HOME", "/root")})
    except OSError as exc:
        return exc


def finish(child, timeout=120):
    """{"rc", "out", "err", "seconds"} of a started child, or {"missing": reason} when it could not start."""
    if isinstance(child, Exception):
        return {"missing": str(child)}
    started, p = child
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return {"rc": None, "out": out, "err": "timed out", "seconds": round(time.time() - started, 3)}
    return {"rc": p.returncode, "out": out, "err": err[-2000:], "seconds": round(time.time() - started, 3)}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def tree_size(path, cap=200000):
    """(files, bytes) under path; stops counting after `cap` files (then "capped")."""
    files = total = 0
    for root, _dirs, names in os.walk(path):
        for n in names:
            try:
                total += os.lstat(os.path.join(root, n)).st_size
            except OSError:
                continue
            files += 1
            if files >= cap:
                return {"files": files, "bytes": total, "capped": True}
    return {"files": files, "bytes": total}


def marker(pid):
    """The REMOTE_RUN_ID a live, non-zombie process carries, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
        with open(f"/proc/{pid}/environ", "rb") as f:
            for var in f.read().split(b"\0"):
                if var.startswith(b"REMOTE_RUN_ID="):
                    return var[len(b"REMOTE_RUN_ID="):].decode()
    except (OSError, IndexError):
        pass
    return None


def free(path):
    """Free bytes where `path` lives (its nearest existing ancestor)."""
    p = path
    while p and not os.path.exists(p):
        p = os.path.dirname(p.rstrip("/")) or "/"
    try:
        s = os.statvfs(p or "/")
        return {"path": path, "on": p, "free": s.f_bavail * s.f_frsize, "total": s.f_blocks * s.f_frsize}
    except OSError as exc:
        return {"path": path, "error": str(exc)}


def main():
    arg = json.loads(sys.argv[1])
    venv, checkout, cache_dir, run_dir = arg["venv"], arg["checkout"], arg["cache_dir"], arg["run_dir"]
    py = os.path.join(venv, "bin", "python")
    has_git = os.path.exists(os.path.join(checkout, ".git"))
    # The slow children first, all at once.
    kids = {"venv_run": start([py, "-c", VENV_SCRIPT]) if os.path.exists(py) else None,
            "gpus": start(GPU_QUERY), "apps": start(APPS_QUERY), "smi": start(["nvidia-smi"]),
            "head": start(["git", "-C", checkout, "rev-parse", "--verify", "-q", "HEAD"]) if has_git else None,
            "status": start(["git", "-C", checkout, "status", "--porcelain", "--untracked-files=normal"])
            if has_git else None}
    out = {"time": time.time(), "python": sys.version.split()[0]}
    real = os.path.realpath(venv) if os.path.lexists(venv) else None
    out["venv"] = {"path": venv, "exists": os.path.lexists(venv), "real": real,
                   "record": load(os.path.join(real, "remote-venv.json")) if real else None}
    out["checkout"] = {"path": checkout, "exists": os.path.isdir(checkout), "git": has_git,
                       "record": load(os.path.join(checkout, ".git", "remote-deploy.json")) if has_git else None}
    folders = {}
    if os.path.isdir(cache_dir):
        for name in sorted(os.listdir(cache_dir)):
            if os.path.isdir(os.path.join(cache_dir, name)):
                folders[name] = tree_size(os.path.join(cache_dir, name))
                # The tools make <folder>/tmp (the jobs' TMPDIR) before anything compiles: not a cache.
                tmp = os.path.join(cache_dir, name, "tmp")
                folders[name]["tmp"] = tree_size(tmp) if os.path.isdir(tmp) else {"files": 0, "bytes": 0}
    out["cache"] = {"dir": cache_dir, "exists": os.path.isdir(cache_dir), "folders": folders,
                    "warmups": read(os.path.join(cache_dir, "warmups.jsonl"), 256 << 10)}
    # Compile artifacts in torch's and triton's defaults: a process that compiled outside the tools.
    tmp = sorted(glob.glob("/tmp/torchinductor_*")) + [p for p in ("/root/.triton/cache",) if os.path.isdir(p)]
    out["tmp_artifacts"] = {p: tree_size(p, 20000) for p in tmp}
    current = None
    try:
        current = os.readlink(os.path.join(run_dir, "current"))
    except OSError:
        pass
    runs = {}
    marked = {}
    for e in glob.glob("/proc/[0-9]*"):
        pid = int(e[6:])
        if pid == os.getpid():
            continue
        m = marker(pid)
        if m:
            marked.setdefault(m, []).append(pid)
    for rid in sorted(set(marked) | ({os.path.basename(current)} if current else set())):
        d = os.path.join(run_dir, rid)
        pid = (read(os.path.join(d, "pid")) or "").strip()
        runs[rid] = {"exists": os.path.isdir(d), "pid": int(pid) if pid.isdigit() else None,
                     "exit": (read(os.path.join(d, "exit")) or "").strip() or None,
                     "leader_alive": pid.isdigit() and marker(int(pid)) == rid, "marked": sorted(marked.get(rid, []))}
    out["jobs"] = {"run_dir": run_dir, "current": os.path.basename(current) if current else None, "runs": runs,
                   "manifest": load(os.path.join(run_dir, os.path.basename(current), "manifest.json"))
                   if current else None}
    out["known_good"] = load(os.path.join(run_dir, "known-good.json"))
    out["disk"] = [free(p) for p in (venv, cache_dir, run_dir)]
    for name, p in kids.items():
        out[name] = finish(p) if p is not None else None
    out["time_end"] = time.time()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
