"""The GPU container probe (remote.facts.gpu): run in the container with its system python3 -I -S, stdlib only.

One argument, JSON: {"venv": path}. Prints one JSON object: the /dev/nvidia* nodes (major:minor, owner,
mode, whether they open, what is mounted on them), /proc/devices (which driver has which major), the
driver libraries the loader finds (libcuda.so.1, libnvidia-ml.so.1: the versioned file name each resolves to), the kernel module's version as /proc shows it here, nvidia-smi's
driver version (or its error text), cuDriverGetVersion and cuInit(0) through ctypes (no torch: it works
when the venv is broken), and the CUDA build of the venv's torch read from its torch/version.py (never
imported). Read-only: it opens device nodes and closes them, loads libcuda, writes nothing.
"""

import ctypes
import glob
import json
import os
import re
import subprocess
import sys

LIBS = ("libcuda.so.1", "libnvidia-ml.so.1")
VERSIONED = re.compile(r"^lib[\w-]+\.so\.(\d+\.\d+(?:\.\d+)?)$")


def mount_points():
    """Mount point -> the mounted filesystem's root (`/null` for a bind of a devtmpfs's null), from mountinfo."""
    out = {}
    text = read("/proc/self/mountinfo", 1 << 20) or ""
    for line in text.splitlines():
        f = line.split(" ")
        if len(f) > 4:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f[4])
            out[point] = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f[3])
    return out


def nodes():
    out = []
    mounts = mount_points()
    for path in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*")):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if os.path.isdir(path):
            out.append({"path": path, "dir": True})
            continue
        node = {"path": path, "char": (st.st_mode & 0o170000) == 0o020000, "major": os.major(st.st_rdev),
                "minor": os.minor(st.st_rdev), "uid": st.st_uid, "gid": st.st_gid, "mode": st.st_mode & 0o7777}
        try:
            os.close(os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0)))
            node["open"] = None
        except OSError as exc:
            node["open"] = exc.errno  # EPERM: the cgroup denies it; EACCES: its mode and owner; ENXIO: no driver
        if path in mounts:  # something is mounted on it: a config's mount entry, or a bind over the node
            node["mount"] = mounts[path]
        out.append(node)
    return out


def ldconfig_paths():
    """soname -> paths, in the order of ld.so's cache (the order the loader tries them)."""
    found: dict = {}  # soname -> [path, ...]
    for prog in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            text = subprocess.run([prog, "-p"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in text.splitlines():
            m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
            # On a 64-bit machine only 64-bit entries (`libc6,x86-64`, `libc6,AArch64`), not `(libc6)`.
            if m and ("64" in m.group(2) or ctypes.sizeof(ctypes.c_void_p) == 4):
                found.setdefault(m.group(1), []).append(m.group(3))
        break
    return found


def versioned(path):
    """The first versioned name along a library's symlink chain (libcuda.so.1 -> libcuda.so.580.95.05)."""
    seen = 0
    while path and seen < 10:
        m = VERSIONED.match(os.path.basename(path))
        if m and m.group(1).count(".") >= 1 and not re.fullmatch(r"\d+", m.group(1)):
            return os.path.basename(path), m.group(1)
        if not os.path.islink(path):
            break
        target = os.readlink(path)
        path = os.path.join(os.path.dirname(path), target)
        seen += 1
    real = os.path.realpath(path) if path else ""
    m = VERSIONED.match(os.path.basename(real))
    return (os.path.basename(real), m.group(1)) if m else (os.path.basename(real) or None, None)


def libraries():
    cache = ldconfig_paths()
    ld_path = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    out: dict = {}  # soname -> its paths, or None
    for soname in LIBS:
        candidates = [os.path.join(d, soname) for d in ld_path] + cache.get(soname, [])
        path = next((p for p in candidates if os.path.exists(p)), None)
        if path is None:
            out[soname] = None
            continue
        name, version = versioned(path)
        out[soname] = {"path": path, "file": name, "version": version, "all": candidates[:8]}
    return out


def cuda(lib):
    if not lib:
        return {"loaded": False, "error": "libcuda.so.1 not found by the loader"}
    try:
        cu = ctypes.CDLL(lib["path"])
    except OSError as exc:
        return {"loaded": False, "error": str(exc)[-300:]}
    info: dict = {"loaded": True}
    v = ctypes.c_int(0)
    info["driver_version_rc"] = cu.cuDriverGetVersion(ctypes.byref(v))
    info["driver_version"] = v.value
    info["init"] = cu.cuInit(0)
    if info["init"] == 0:
        n = ctypes.c_int(0)
        cu.cuDeviceGetCount(ctypes.byref(n))
        info["devices"] = n.value
    return info


def smi():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=10, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    except FileNotFoundError:
        return {"missing": True}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"rc": None, "out": "", "err": str(exc)[-300:]}
    return {"rc": r.returncode, "out": r.stdout[-2000:], "err": r.stderr[-2000:]}


def apps():
    """Each process nvidia-smi lists as using a GPU: pid, name, MiB, the run it belongs to (its REMOTE_RUN_ID)
    and its command line, where this container's /proc has the pid (nvidia-smi may name the host's)."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10,
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    except (OSError, subprocess.SubprocessError):
        return None
    if r.returncode != 0:
        return None
    out = []
    for line in r.stdout.splitlines()[:64]:
        parts = [x.strip() for x in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        app = {"pid": int(parts[0]), "name": parts[1][:200], "used_mib": int(float(parts[2]))
               if parts[2].replace(".", "", 1).isdigit() else None, "run": None, "command": None}
        try:
            with open(f"/proc/{parts[0]}/environ", "rb") as f:
                for var in f.read(1 << 20).split(b"\0"):
                    if var.startswith(b"REMOTE_RUN_ID="):
                        app["run"] = var[len(b"REMOTE_RUN_ID="):].decode("utf-8", "replace")[:128]
            with open(f"/proc/{parts[0]}/cmdline", "rb") as f:
                app["command"] = f.read(1200).replace(b"\0", b" ").decode("utf-8", "replace").strip()[:300]
        except OSError:
            pass
        out.append(app)
    return out


def read(path, size=4096):
    try:
        with open(path, errors="replace") as f:
            return f.read(size)
    except OSError:
        return None


def torch_build(venv):
    for path in sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "torch", "version.py"))):
        text = read(path) or ""
        m = re.search(r"^cuda(?:\s*:\s*[\w\[\], ]+)?\s*=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", text, re.M)
        v = re.search(r"^__version__(?:\s*:\s*\w+)?\s*=\s*'([^']*)'", text, re.M)
        return {"path": path, "cuda": (m.group(1) or m.group(2)) if m else None, "version": v.group(1) if v else None}
    return None


def main():
    arg = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    libs = libraries()
    out = {"nodes": nodes(), "libs": libs, "proc_version": read("/proc/driver/nvidia/version"), "smi": smi(),
           "apps": apps(),
           "devices": read("/proc/devices", 1 << 16),
           "torch": torch_build(arg.get("venv") or "/root/venv")}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    # cuInit last, and its answer on a line of its own: a driver that crashes the process here still
    # leaves everything above.
    sys.stdout.write(json.dumps({"cuda": cuda(libs.get("libcuda.so.1"))}) + "\n")


if __name__ == "__main__":
    main()
