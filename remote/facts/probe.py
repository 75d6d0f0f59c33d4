"""The facts probe: runs inside the container with its system python (stdlib only), one round trip.

Its one argument is JSON: the paths (venv, versions, uv, checkout, cache_dir, run_dir, lease), the
`parts` to read and, for the `run` part, the state script and run id. It prints one JSON object of raw
observations, one key per part; remote.facts turns them into typed facts, deploy plans from them. The
slow parts (the venv's interpreter, nvidia-smi, git) run as concurrent children.

Read-only, with one exception: a healthy answer of `import torch` in the venv (torch imported and saw
every GPU nvidia-smi lists) is kept in /run/remote/facts-torch.json (tmpfs: gone at reboot), keyed on
the venv's folder, its site-packages folder, every installed distribution's metadata folder (name,
version, mtime), torch's own package files, the driver and the GPU device nodes. Importing torch is
most of a probe's time, and its answer does not change while none of those does. A failed or partial
answer is never kept: it is asked again each time. `fresh` in the argument ignores what is kept.
"""

import collections
import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time

TORCH_CACHE = "/run/remote/facts-torch.json"

# Run with the venv's own interpreter, from /: what is installed, and how.
DISTS_SCRIPT = r'''
import importlib.metadata as m, json, sys
dists = {}
for d in m.distributions():
    try:
        du = d.read_text("direct_url.json")
        url = json.loads(du).get("url") if du else None
    except (ValueError, AttributeError, RecursionError):
        url = None
    url = url if isinstance(url, str) else None
    dists[d.metadata["Name"]] = {"version": d.version, "installer": (d.read_text("INSTALLER") or "").strip(),
                                 "url": url}
print(json.dumps({"dists": dists, "python": sys.version.split()[0]}))
'''

# Run with the venv's own interpreter, from /: what torch sees.
TORCH_SCRIPT = r'''
import json
info = {}
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

GPU_QUERY = ["nvidia-smi", "--query-gpu=index,name,driver_version,memory.used,memory.total,uuid",
             "--format=csv,noheader,nounits"]
APPS_QUERY = ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"]
# Every child gets a deadline counted from the probe's start, never a timeout of its own added to the
# others': a hung GPU driver is a finding within seconds, and the whole probe ends well inside its
# caller's limit (300 s, remote.facts.read_raw).
SMI_S = 10  # nvidia-smi answers in well under a second when the driver is healthy
CHILD_S = 120  # git, the venv's package list, the run's state
TORCH_S = 150  # import torch (CUDA's initialisation included)
TORCH_AFTER_HUNG_SMI_S = 20  # import torch when nvidia-smi hung: CUDA's initialisation hangs on that driver too
ALL_PARTS = ("python", "venv", "dists", "torch", "uv", "lease", "code", "untracked", "cache", "warmups", "tmp",
             "jobs", "run", "gpus", "disk", "known_good", "gpu", "compile")
GPU_S = 30  # the GPU passthrough probe (remote/sh/gpu_container.py): cuInit answers in well under a second


def start(argv, cwd="/"):
    try:
        return time.time(), subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                             env={**os.environ, "HOME": os.environ.get("HOME", "/root")})
    except OSError as exc:
        return exc


def finish(child, deadline):
    """{"rc", "out", "err", "seconds"} of a started child by `deadline` (time.time()), or {"missing": reason}
    when it could not start. A child still running then is killed; one that does not even die (a process
    stuck in a hung driver) is left behind rather than waited for."""
    if isinstance(child, Exception):
        return {"missing": str(child)}
    started, p = child
    try:
        out, err = p.communicate(timeout=max(0.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        p.kill()
        try:
            out, err = p.communicate(timeout=2)
        except subprocess.TimeoutExpired:
            out = ""
        return {"rc": None, "out": out, "err": "timed out", "seconds": round(time.time() - started, 3)}
    return {"rc": p.returncode, "out": out, "err": err[-2000:], "seconds": round(time.time() - started, 3)}


# Nesting past this is no file of remote's: a hostile or broken one. Half the controller's bound (remote.naming
# .JSON_DEPTH), so that a file kept whole in this probe's answer never makes the answer itself too deep to read.
JSON_DEPTH = 50


def loads(text):
    """json.loads for the container's files: a ValueError for a document nested past JSON_DEPTH (1001 `[` would
    raise RecursionError here, or parse and raise it where this probe's answer is written and read)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep") from None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > JSON_DEPTH:
                raise ValueError("nested too deep")
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return value


def load(path):
    try:
        with open(path) as f:
            return loads(f.read())
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


def torch_key(real):
    """What torch's answer depends on: the venv folder, its site-packages folder (an entry added or
    removed), each installed distribution (a reinstall or a version change makes a new metadata
    folder), torch's own package files, the driver and the GPU device nodes."""
    h = hashlib.sha256(real.encode())
    for site in sorted(glob.glob(os.path.join(real, "lib", "python*", "site-packages"))):
        paths = [site] + sorted(glob.glob(os.path.join(site, "*.dist-info"))) + \
            [os.path.join(site, "torch", n) for n in ("__init__.py", "version.py", "lib")] + \
            sorted(glob.glob(os.path.join(site, "torch", "_C*.so")))
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                h.update(f"{path} missing\n".encode())
                continue
            h.update(f"{path} {st.st_mtime_ns} {st.st_size}\n".encode())
    h.update((read("/proc/driver/nvidia/version") or "no driver").encode())
    h.update(" ".join(sorted(glob.glob("/dev/nvidia*"))).encode())
    return h.hexdigest()


def save_torch(path, key, result):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"key": key, "result": result, "time": time.time()}, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only /run: the next probe imports torch again


def gpu_count(gpus):
    if not gpus or gpus.get("rc") != 0:
        return 0
    return sum(1 for line in gpus["out"].splitlines() if line.split(",")[0].strip().isdigit())


def torch_healthy(result, gpus):
    """torch imported and saw as many GPUs as nvidia-smi lists now: only such an answer is kept, and a
    kept one is used only while that still holds."""
    try:
        info = loads(result["out"]) if result.get("rc") == 0 else {}
    except (KeyError, TypeError, ValueError):
        return False
    return bool(info.get("torch")) and "torch_error" not in info and info.get("device_count", 0) == gpu_count(gpus)


def venv_part(venv, versions):
    real = os.path.realpath(venv) if os.path.lexists(venv) else None
    v = {"path": venv, "exists": os.path.lexists(venv), "is_link": os.path.islink(venv), "real": real,
         "record": load(os.path.join(real, "remote-venv.json")) if real else None}
    v["versions"] = sorted(os.listdir(versions)) if os.path.isdir(versions) else []
    # Finished: a folder with its record (older deploys renamed *.partial folders that already held one).
    v["finished"] = [n for n in v["versions"] if ".partial" not in n and not n.startswith("handmade-")
                     and os.path.isfile(os.path.join(versions, n, "remote-venv.json"))]
    current = os.path.basename(real) if real and os.path.dirname(real) == versions else None
    v["unfinished"] = [n for n in v["versions"] if n not in v["finished"] and n != current and n != "history"
                       and not n.startswith("handmade-")]
    return v


def cache_folders(cache_dir):
    folders = {}
    if os.path.isdir(cache_dir):
        for name in sorted(os.listdir(cache_dir)):
            if os.path.isdir(os.path.join(cache_dir, name)):
                folders[name] = tree_size(os.path.join(cache_dir, name))
                # The tools make <folder>/tmp (the jobs' TMPDIR) before anything compiles: not a cache.
                tmp = os.path.join(cache_dir, name, "tmp")
                folders[name]["tmp"] = tree_size(tmp) if os.path.isdir(tmp) else {"files": 0, "bytes": 0}
                folders[name]["passport"] = read(os.path.join(cache_dir, name, "passport.json"), 64 << 10)
    return folders


def filled(folder):
    """Whether anything compiled lies in a per-version cache folder (its tmp/, the jobs' TMPDIR, aside):
    stops at the first file, so it is cheap however big the cache is."""
    for root, dirs, names in os.walk(folder):
        if root == folder and "tmp" in dirs:
            dirs.remove("tmp")
        if names:
            return True
    return False


def jobs_part(run_dir):
    """Every run with a live process, and the latest: leader, exit record, marked processes."""
    current = None
    try:
        current = os.readlink(os.path.join(run_dir, "current"))
    except OSError:
        pass
    runs = {}
    marked: dict[str, list[int]] = {}
    for e in glob.glob("/proc/[0-9]*"):
        pid = int(e[6:])
        if pid == os.getpid():
            continue
        m = marker(pid)
        if m:
            marked.setdefault(m, []).append(pid)
    for rid in sorted(set(marked) | ({os.path.basename(current)} if current else set())):
        d = os.path.join(run_dir, rid)
        leader = (read(os.path.join(d, "pid")) or "").strip()
        runs[rid] = {"exists": os.path.isdir(d), "pid": int(leader) if leader.isdigit() else None,
                     "exit": (read(os.path.join(d, "exit")) or "").strip() or None,
                     "leader_alive": leader.isdigit() and marker(int(leader)) == rid, "marked": sorted(marked.get(rid, []))}
    return {"run_dir": run_dir, "current": os.path.basename(current) if current else None, "runs": runs,
            "manifest": load(os.path.join(run_dir, os.path.basename(current), "manifest.json")) if current else None,
            "cache_stats": cache_stats(os.path.join(run_dir, os.path.basename(current), "cache-stats"))
            if current else None}


def cache_stats(folder):
    """The compile-cache counters each process of a run left at its exit (remote_guard.stats_at_exit),
    summed; None when none left any."""
    total: dict[str, int] = {}
    n = 0
    for path in sorted(glob.glob(os.path.join(folder, "*.json")))[:1000]:
        got = load(path)
        if not isinstance(got, dict):
            continue
        n += 1
        for k, v in got.items():
            if isinstance(v, int) and not isinstance(v, bool):
                total[k] = total.get(k, 0) + v
    return {**total, "processes": n} if n else None


COMPILE_READ = 8 << 20  # bytes of a run's compile.jsonl read (the watch bounds what it writes)
COMPILE_KEEP = 400  # lines returned: the latest that are not a plain first compile, and every totals line


def compile_part(run_dir, run_id):
    """A run's compile watch (remote_compilewatch): the lines that matter (recompiles, graph breaks, eager
    fallbacks, anything after the first steady step), each process's latest totals, and the first steady
    step's time (the second value in metrics.jsonl). Lines are returned as text: the controller parses them."""
    if not run_id:
        try:
            run_id = os.path.basename(os.readlink(os.path.join(run_dir, "current")))
        except OSError:
            return None
    run = os.path.join(run_dir, os.path.basename(run_id))
    steady = None
    seen = 0
    try:
        with open(os.path.join(run, "metrics.jsonl"), errors="replace") as f:
            for line in f:
                try:
                    t = loads(line).get("t")
                except (ValueError, AttributeError):
                    continue
                if isinstance(t, (int, float)):
                    seen += 1
                    if seen == 2:
                        steady = t
                        break
    except OSError:
        pass
    keep: collections.deque = collections.deque(maxlen=COMPILE_KEEP)
    totals = {}
    size = 0
    try:
        with open(os.path.join(run, "compile.jsonl"), "rb") as f:
            data = f.read(COMPILE_READ)
        size = len(data)
    except OSError:
        data = b""
    for raw in data.decode("utf-8", "replace").splitlines():
        try:
            d = loads(raw)
        except ValueError:
            continue
        if not isinstance(d, dict) or len(raw) > 4096:
            continue
        if d.get("totals") is not None:
            totals[str(d.get("pid"))] = raw
        t = d.get("t")
        if d.get("kind") != "compile" or (steady is not None and isinstance(t, (int, float)) and t > steady):
            keep.append(raw)
    return {"run": os.path.basename(run_id), "steady_at": steady, "lines": list(keep),
            "totals": list(totals.values())[:256], "bytes": size}


def main():
    arg = json.loads(sys.argv[1])
    parts = set(arg.get("parts") or ALL_PARTS)
    venv, checkout, cache_dir, run_dir = arg["venv"], arg["checkout"], arg["cache_dir"], arg["run_dir"]
    py = os.path.join(venv, "bin", "python")
    real = os.path.realpath(venv) if os.path.lexists(venv) else None
    has_git = "code" in parts and shutil.which("git") is not None
    is_repo = os.path.isdir(os.path.join(checkout, ".git"))
    out: dict = {"time": time.time(), "parts": sorted(parts)}
    t0 = out["time"]
    # The slow children first, all at once.
    kids = {}
    if "dists" in parts and os.path.exists(py):
        kids["venv_run"] = start([py, "-c", DISTS_SCRIPT])
    if parts & {"gpus", "torch"}:
        kids["gpus"] = start(GPU_QUERY)
    if "gpus" in parts:
        kids["apps"], kids["smi"] = start(APPS_QUERY), start(["nvidia-smi"])
    if "code" in parts and is_repo and has_git:
        kids["head"] = start(["git", "-C", checkout, "rev-parse", "--verify", "-q", "HEAD"])
        # Untracked files only for who asks (doctor): a tree of checkpoints in the checkout is slow to list.
        kids["status"] = start(["git", "-C", checkout, "status", "--porcelain",
                                "--untracked-files=" + ("normal" if "untracked" in parts else "no")])
    if "run" in parts:
        kids["run"] = start(["bash", "-c", arg["state_script"], "state", run_dir, arg.get("run_id") or ""])
    key = kept = None
    if "torch" in parts and os.path.exists(py):
        key = torch_key(real)
        kept = None if arg.get("fresh") else load(arg.get("torch_cache", TORCH_CACHE))
        kept = kept["result"] if isinstance(kept, dict) and kept.get("key") == key else None
        if kept is None:
            kids["torch"] = start([py, "-c", TORCH_SCRIPT])

    if "gpu" in parts and arg.get("gpu_source"):  # the passthrough probe (remote.facts.gpu), its own child
        kids["gpu"] = start([sys.executable, "-I", "-S", "-c", arg["gpu_source"], json.dumps({"venv": venv})])
    if "python" in parts:
        out["python"] = {"version": platform.python_version(), "executable": os.path.realpath(sys.executable),
                         "machine": platform.machine()}
    if "venv" in parts:
        out["venv"] = venv_part(venv, arg["versions"])
    if "uv" in parts:
        out["uv"] = os.access(arg["uv"], os.X_OK)
    if "lease" in parts:
        text = read(arg["lease"])
        out["lease"] = None if text is None else text + f"now={int(time.time())}\n"
    if "code" in parts:
        out["code"] = {"path": checkout, "exists": os.path.isdir(checkout), "git": is_repo, "has_git": has_git,
                       "head": None, "status": None, "untracked": [],
                       "record": load(os.path.join(checkout, ".git", "remote-deploy.json")) if is_repo else None}
    if parts & {"cache", "warmups"}:
        out["cache"] = {"dir": cache_dir, "exists": os.path.isdir(cache_dir),
                        "folders": cache_folders(cache_dir) if "cache" in parts else None,
                        "warmups": read(os.path.join(cache_dir, "warmups.jsonl"), 256 << 10),
                        "filled": {n: filled(os.path.join(cache_dir, n)) for n in sorted(os.listdir(cache_dir))
                                   if os.path.isdir(os.path.join(cache_dir, n))} if os.path.isdir(cache_dir) else {}}
    if "tmp" in parts:
        # Compile artifacts in torch's and triton's defaults: a process that compiled outside the tools.
        tmp = sorted(glob.glob("/tmp/torchinductor_*")) + [p for p in ("/root/.triton/cache",) if os.path.isdir(p)]
        out["tmp_artifacts"] = {p: tree_size(p, 20000) for p in tmp}
    if "jobs" in parts:
        out["jobs"] = jobs_part(run_dir)
    if "compile" in parts:
        out["compile"] = compile_part(run_dir, arg.get("run_id") or "")
    if "known_good" in parts:
        out["known_good"] = load(os.path.join(run_dir, "known-good.json"))
    if "disk" in parts:
        out["disk"] = [free(p) for p in (venv, cache_dir, run_dir)]

    done = {name: finish(child, t0 + (SMI_S if name in ("gpus", "apps", "smi") else GPU_S if name == "gpu" else CHILD_S))
            for name, child in kids.items() if name != "torch"}
    smi_hung = any(done.get(n, {}).get("rc", 0) is None for n in ("gpus", "apps", "smi"))
    torch_by = t0 + (TORCH_AFTER_HUNG_SMI_S if smi_hung else TORCH_S)
    if "torch" in parts:
        if kept is not None and torch_healthy(kept, done.get("gpus")):
            out["torch"] = {**kept, "cached": True}
        elif os.path.exists(py):
            result = finish(kids["torch"] if "torch" in kids else start([py, "-c", TORCH_SCRIPT]), torch_by)
            if torch_healthy(result, done.get("gpus")):
                save_torch(arg.get("torch_cache", TORCH_CACHE), key, result)
            out["torch"] = {**result, "cached": False}
        else:
            out["torch"] = None
    for name in ("venv_run", "gpus", "apps", "smi", "run", "gpu"):
        if name in done:
            out[name] = done[name]
    if "venv" in out and "dists" in parts:
        try:  # what deploy compares with the lock: name -> version
            info = loads(done["venv_run"]["out"]) if done.get("venv_run", {}).get("rc") == 0 else None
        except ValueError:
            info = None
        out["venv"]["dists"] = {n: d["version"] for n, d in info["dists"].items()} if info else None
    if "code" in out and "head" in done:
        out["code"]["head"] = done["head"]["out"].strip() if done["head"].get("rc") == 0 else None
        # An empty repository has no HEAD (rc 1, nothing said); any other failure is git's to explain.
        errors = [c.get("err", "").strip() or c.get("missing", "") for c in (done["head"], done["status"])
                  if c.get("rc") != 0 and (c.get("err", "").strip() or c.get("missing"))]
        out["code"]["git_error"] = errors[0][-500:] if errors else None
        lines = done["status"].get("out", "").splitlines() if done["status"].get("rc") == 0 else []
        out["code"]["status"] = "".join(line + "\n" for line in lines if not line.startswith("??"))
        out["code"]["untracked"] = [line[3:] for line in lines if line.startswith("??")]
    out["time_end"] = time.time()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
