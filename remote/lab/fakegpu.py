"""A simulated NVIDIA driver for the CPU lab: `Lab(fake_gpu=2)`, so that create, gpu fix and doctor --gpu run
without a GPU.

The seam (docs/guide/lab.md says it in five lines): every host-side GPU script (remote/sh/gpu-host.sh and the
ones after it) reads and writes each host path under `${REMOTE_GPU_SYSROOT:-}` (empty on a real host) and puts
`${REMOTE_GPU_SYSROOT}/usr/sbin:${REMOTE_GPU_SYSROOT}/usr/bin` first on its PATH when it is set (the driver's
tools: nvidia-smi, nvidia-modprobe, modinfo). The lab sets REMOTE_GPU_SYSROOT=<lab>/gpu for what its host runs
(sshd's SetEnv; the namespace lab's caller sets it itself, its host being `local: true`), and the pct double
reads every devN path under it (its GPU_SYSROOT). In the sysroot, as on a host:

    proc/driver/nvidia/version, sys/module/nvidia/version   the loaded module's version (absent: not loaded)
    proc/modules, proc/devices                             nvidia, nvidia_uvm, nvidia_modeset; majors 195, 511, 508
    dev/nvidia0..N-1, nvidiactl, nvidia-modeset,           real nodes (mknod, real majors: 195:N, 195:255, 195:254,
      nvidia-uvm, nvidia-uvm-tools, nvidia-caps/nvidia-cap1,2   511:0, 511:1, 508:1, 508:2): opening one fails
                                                           (ENXIO, no driver here), stat and bind work
    usr/lib/x86_64-linux-gnu/libcuda.so.V (.so.1, .so),    the user space on disk (version V); libcuda is a real
      libnvidia-ml.so.V (.so.1), libnvidia-ptxjitcompiler.so.V   library where a C compiler is (cuInit below)
    usr/bin/nvidia-smi, usr/bin/nvidia-modprobe, usr/sbin/modinfo   the driver's tools, answering from the state
    usr/bin/lspci                                          the GPUs (H200s, 10de:2335), `Kernel driver in use: nvidia`
    var/lib/fake-nvidia/state.json                         {"gpus", "loaded", "disk", ...}: what the tools read

The fake libcuda's cuInit(0) (and nvidia-smi) answer as the real ones would from what the calling process
sees: no driver loaded: 100 (nvidia-smi: "couldn't communicate with the NVIDIA driver", exit 9); the library's
version not the loaded module's: 803 (nvidia-smi: "Driver/library version mismatch", exit 18); no
/dev/nvidiactl (a character device of major 195): 100; no /dev/nvidia-uvm of the uvm major (absent, or another
node bound over it): 999; no /dev/nvidiaN: 100; else 0. Inside a container (`container`
in the environment, as pct exec and LXC set it) nvidia-smi lists the /dev/nvidiaN the container has; on the host
those of the sysroot, numbered from 0 in the order of their minors (as NVML numbers the GPUs a process can
use; the bus id and uuid stay the GPU's own). Both read the loaded version at the sysroot's host path, which a lab container sees
through its overlay root (the lab's folder must be on the root filesystem, as /var/lib/remote-lab is).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

NVIDIA_MAJOR, UVM_MAJOR, CAPS_MAJOR = 195, 511, 508
LIBDIR = "usr/lib/x86_64-linux-gnu"
LIBS = {"libcuda.so": ("libcuda.so.1", "libcuda.so"), "libnvidia-ml.so": ("libnvidia-ml.so.1",),
        "libnvidia-ptxjitcompiler.so": ("libnvidia-ptxjitcompiler.so.1",)}
STATE = "var/lib/fake-nvidia/state.json"

_LIBCUDA_C = r"""
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
static int loaded(void) {  /* 1: the loaded module is this library's version, 0: another, -1: none */
    char buf[512] = {0};
    FILE *f = fopen(PROC_VERSION, "r");
    if (!f) return -1;
    fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return strstr(buf, "  " VERSION "  ") != NULL;
}
static int gpus(void) {
    glob_t g;
    int n = 0;
    if (glob("/dev/nvidia[0-9]*", 0, NULL, &g) == 0) { n = (int)g.gl_pathc; globfree(&g); }
    return n;
}
int cuDriverGetVersion(int *v) { *v = CUDA_INT; return 0; }
int cuInit(unsigned int flags) {
    struct stat st;
    int l = loaded();
    (void)flags;
    if (l < 0) return 100;
    if (l == 0) return 803;
    if (stat("/dev/nvidiactl", &st) != 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != 195) return 100;
    if (stat("/dev/nvidia-uvm", &st) != 0 || !S_ISCHR(st.st_mode) || major(st.st_rdev) != UVM_MAJOR) return 999;
    return gpus() ? 0 : 100;
}
int cuDeviceGetCount(int *n) { *n = gpus(); return 0; }
"""

_SMI = r'''
import glob, json, os, re, sys, time
ROOT = {root!r}
state = json.load(open(os.path.join(ROOT, {state!r})))
inside = bool(os.environ.get("container"))
dev = "/dev" if inside else ROOT + "/dev"
# Inside, where the loader looks (as the real one dlopen()s libnvidia-ml.so.1): ld.so.conf.d's folders first.
confs = [ln.strip() for f in sorted(glob.glob("/etc/ld.so.conf.d/*.conf")) for ln in open(f) if ln.strip().startswith("/")]
libdirs = ([*confs, "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"] if inside else [ROOT + "/{libdir}"])
ml = next((os.path.join(d, "libnvidia-ml.so.1") for d in libdirs if os.path.exists(os.path.join(d, "libnvidia-ml.so.1"))), None)
if not ml:
    sys.stdout.write("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA "
                     "Display Driver is properly installed and present in your system.\nPlease also try adding directory "
                     "that contains libnvidia-ml.so to your system PATH.\n")
    sys.exit(12)
lib = os.path.basename(os.path.realpath(ml))[len("libnvidia-ml.so."):]
try:
    proc = open(ROOT + "/proc/driver/nvidia/version").read()
except OSError:
    sys.stdout.write("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
                     "latest NVIDIA driver is installed and running.\n\n")
    sys.exit(9)
loaded = re.search(r"Kernel Module\s+(\S+)", proc).group(1)
if loaded != lib:
    sys.stdout.write(f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {{lib}}\n")
    sys.exit(18)
if not os.path.exists(dev + "/nvidiactl"):
    sys.stdout.write("Failed to initialize NVML: Unknown Error\n")
    sys.exit(255)
ids = sorted(int(p[len(dev) + 7:]) for p in glob.glob(dev + "/nvidia[0-9]*") if p[len(dev) + 7:].isdigit())
if not ids:
    sys.stdout.write("No devices were found\n")
    sys.exit(6)
mem = state["memory_mib"]
def field(i, name, units):  # i: the node's minor (the GPU's bus id, uuid); its index: its place among those seen
    v = {{"index": str(ids.index(i)), "name": state["name"], "pci.bus_id": f"00000000:{{0x18 + i * 0x10:02X}}:00.0",
         "uuid": f"GPU-fa4e{{i:04x}}-0000-4000-8000-00000000{{i:04x}}", "driver_version": loaded,
         "persistence_mode": "Enabled", "mig.mode.current": "Disabled", "memory.total": f"{{mem}}",
         "memory.used": "0", "memory.free": f"{{mem}}", "utilization.gpu": "0", "temperature.gpu": "32",
         "compute_cap": "9.0", "count": str(len(ids))}}.get(name, "[N/A]")
    unit = {{"memory.total": " MiB", "memory.used": " MiB", "memory.free": " MiB", "utilization.gpu": " %"}}.get(name, "")
    return v + (unit if units else "")
args = sys.argv[1:]
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
if query:
    fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "csv").split(",")
    names = [n.strip() for n in query.split(",")]
    if "noheader" not in fmt:
        print(", ".join(n + {{"memory.total": " [MiB]", "memory.used": " [MiB]", "memory.free": " [MiB]",
                              "utilization.gpu": " [%]"}}.get(n, "") for n in names))
    for i in ids:
        print(", ".join(field(i, n, "nounits" not in fmt) for n in names))
    sys.exit(0)
if "-L" in args or "--list-gpus" in args:
    for i in ids:
        print(f"GPU {{ids.index(i)}}: {{state['name']}} (UUID: {{field(i, 'uuid', False)}})")
    sys.exit(0)
bar = "+-----------------------------------------+------------------------+----------------------+"
print(time.strftime("%a %b %e %H:%M:%S %Y"))
print("+" + "-" * 89 + "+")
print(f"| NVIDIA-SMI {{lib:<22}} Driver Version: {{loaded:<14}} CUDA Version: {{state['cuda']:<9}}|")
print(bar.replace("+", "|", 1)[:-1] + "+")
print("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
print("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
print("|                                         |                        |               MIG M. |")
print("|=========================================+========================+======================|")
for i in ids:
    print(f"| {{ids.index(i):>3}}  {{state['name']:<26}}  On  | {{field(i, 'pci.bus_id', False):>19}} Off |{{'0':>21}} |")
    print(f"| N/A   32C    P0             76W /  700W | {{'0MiB / ' + str(mem) + 'MiB':>22}} |      0%      Default |")
    print(f"|                                         |                        |{{'Disabled':>21}} |")
    print(bar)
print()
print("+" + "-" * 89 + "+")
print("| Processes:" + " " * 79 + "|")
print("|  No running processes found" + " " * 62 + "|")
print("+" + "-" * 89 + "+")
'''

_MODPROBE = r'''
import json, os, sys
ROOT = {root!r}
state = json.load(open(os.path.join(ROOT, {state!r})))
args = sys.argv[1:]
if not state.get("loaded"):
    sys.exit(1)  # the module cannot be loaded: no node is made
made = []
if "-u" in args:
    made += [("nvidia-uvm", {uvm}, 0), ("nvidia-uvm-tools", {uvm}, 1)]
for i, a in enumerate(args):
    if a == "-c" and i + 1 < len(args) and "-u" not in args:
        made += [(f"nvidia{{args[i + 1]}}", {nv}, int(args[i + 1])), ("nvidiactl", {nv}, 255)]
for name, major, minor in made:
    path = os.path.join(ROOT, "dev", name)
    if not os.path.exists(path):
        os.mknod(path, 0o020666, os.makedev(major, minor))
        os.chmod(path, 0o666)
'''

_MODINFO = r'''
import json, os, sys
ROOT = {root!r}
args = sys.argv[1:]
if args and args[-1] == "nvidia":
    state = json.load(open(os.path.join(ROOT, {state!r})))
    if not state.get("disk"):
        sys.stderr.write("modinfo: ERROR: Module nvidia not found.\n")
        sys.exit(1)
    if "-F" in args and args[args.index("-F") + 1] == "version":
        print(state["disk"])
    else:
        print(f"filename:       /lib/modules/{{os.uname().release}}/updates/dkms/nvidia.ko\nversion:        {{state['disk']}}")
    sys.exit(0)
for real in ("/usr/sbin/modinfo", "/sbin/modinfo"):
    if os.path.exists(real) and os.path.realpath(real) != os.path.realpath(sys.argv[0]):
        os.execv(real, [real, *args])
sys.exit(1)
'''

_LSPCI = r'''
import json, os, sys
ROOT = {root!r}
state = json.load(open(os.path.join(ROOT, {state!r})))
args = sys.argv[1:]
for i in range(state["gpus"]):
    print(f"{{0x18 + i * 0x10:02x}}:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H200 SXM 141GB] [10de:2335] (rev a1)")
    if "-k" in args or any(a.startswith("-") and "k" in a[1:] for a in args):
        print("\tSubsystem: NVIDIA Corporation Device [10de:18be]")
        if state.get("loaded"):
            print("\tKernel driver in use: nvidia")
        print("\tKernel modules: nvidiafb, nouveau, nvidia_drm, nvidia")
'''


@dataclass
class FakeGpu:
    """The simulated driver in folder `root` (the sysroot): install, upgrade, reboot, and planted faults."""

    root: Path
    python: str = "/usr/bin/python3"

    @property
    def state_file(self) -> Path:
        return self.root / STATE

    def state(self) -> dict:
        return json.loads(self.state_file.read_text())

    def install(self, gpus: int, version: str, name: str = "NVIDIA H200", memory_mib: int = 143771,
                cuda: str = "12.8") -> None:
        """A host with `gpus` GPUs and driver `version`, loaded, its nodes made (idempotent: an installed
        driver is left as it is, faults and all)."""
        if self.state_file.exists():
            self._tools()  # this checkout's tools, the state as it is
            return
        self._save({"gpus": gpus, "loaded": version, "disk": version, "name": name, "memory_mib": memory_mib,
                    "cuda": cuda})
        self._user_space(version)
        self._tools()
        self._render()
        for i in range(gpus):
            self._node(f"nvidia{i}", NVIDIA_MAJOR, i)
        self._node("nvidiactl", NVIDIA_MAJOR, 255)
        self._node("nvidia-modeset", NVIDIA_MAJOR, 254)
        self.make_uvm()
        for cap in (1, 2):
            self._node(f"nvidia-caps/nvidia-cap{cap}", CAPS_MAJOR, cap, 0o400)

    def upgrade(self, version: str) -> None:
        """A driver upgrade: the new module and user space on disk, the old module still loaded (a reboot is
        pending, and until it nvidia-smi on the host says "Driver/library version mismatch")."""
        state = self.state()
        self._user_space(version, old=state["disk"])
        state["disk"] = version
        self._save(state)

    def reboot(self) -> None:
        """The host restarted: the module on disk is the one loaded, and the uvm nodes are gone until something
        asks the driver for them (`nvidia-modprobe -u -c 0`)."""
        state = self.state()
        state["loaded"] = state["disk"]
        self._save(state)
        self._render()
        self.remove_node("nvidia-uvm")
        self.remove_node("nvidia-uvm-tools")

    def unload(self) -> None:
        """No NVIDIA module loaded (a host without the driver running)."""
        state = self.state()
        state["loaded"] = None
        self._save(state)
        self._render()

    def remove_node(self, name: str) -> None:
        """A planted fault: a node gone from the host's /dev (e.g. "nvidia-uvm")."""
        (self.root / "dev" / name).unlink(missing_ok=True)

    def make_uvm(self) -> None:
        self._node("nvidia-uvm", UVM_MAJOR, 0)
        self._node("nvidia-uvm-tools", UVM_MAJOR, 1)

    def env(self) -> dict[str, str]:
        return {"REMOTE_GPU_SYSROOT": str(self.root)}

    # -- the files ---------------------------------------------------------------------------------------
    def _save(self, state: dict) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_name(".state.tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.state_file)

    def _write(self, rel: str, text: str | None) -> None:
        path = self.root / rel
        if text is None:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def _render(self) -> None:
        """The loaded module's files (proc/, sys/) from the state."""
        loaded = self.state()["loaded"]
        self._write("proc/driver/nvidia/version", loaded and (
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {loaded}  Tue Jun 10 12:00:00 UTC 2025\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1)\n"))
        self._write("sys/module/nvidia/version", loaded and loaded + "\n")
        self._write("proc/modules", loaded and (
            "nvidia_uvm 1994752 0 - Live 0x0000000000000000 (POE)\n"
            "nvidia_modeset 1638400 0 - Live 0x0000000000000000 (POE)\n"
            "nvidia 104857600 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\n"))
        self._write("proc/devices", "Character devices:\n  1 mem\n" + (
            f"{NVIDIA_MAJOR} nvidia\n{NVIDIA_MAJOR} nvidia-modeset\n{CAPS_MAJOR} nvidia-caps\n{UVM_MAJOR} nvidia-uvm\n"
            if loaded else "") + "\nBlock devices:\n  7 loop\n")

    def _node(self, rel: str, major: int, minor: int, mode: int = 0o666) -> None:
        path = self.root / "dev" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            path.unlink()
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(major, minor))
        path.chmod(mode)

    def _user_space(self, version: str, old: str | None = None) -> None:
        lib = self.root / LIBDIR
        lib.mkdir(parents=True, exist_ok=True)
        if old and old != version:
            for base in LIBS:
                (lib / f"{base}.{old}").unlink(missing_ok=True)
        compiled = self._compile_libcuda(version)
        for base, links in LIBS.items():
            target = lib / f"{base}.{version}"
            if compiled:
                shutil.copyfile(compiled, target)
            else:
                target.write_text(f"fake {base} {version} (no C compiler: not loadable)\n")
            for link in links:
                (lib / link).unlink(missing_ok=True)
                (lib / link).symlink_to(target.name)

    def _compile_libcuda(self, version: str) -> Path | None:
        """libcuda.so.VERSION built from _LIBCUDA_C, where a C compiler is (else None: the files are text)."""
        cc = shutil.which("cc") or shutil.which("gcc")
        if not cc:
            return None
        build = self.root / "var" / "lib" / "fake-nvidia" / "build"
        build.mkdir(parents=True, exist_ok=True)
        out = build / f"libcuda.so.{version}"
        if not out.exists():
            src = build / "libcuda.c"
            src.write_text(_LIBCUDA_C)
            major, minor = self.state().get("cuda", "12.8").split(".")[:2]
            r = subprocess.run([cc, "-shared", "-fPIC", "-O2", f'-DVERSION="{version}"',
                                f'-DPROC_VERSION="{self.root}/proc/driver/nvidia/version"',
                                f"-DCUDA_INT={int(major) * 1000 + int(minor) * 10}", f"-DUVM_MAJOR={UVM_MAJOR}",
                                "-o", str(out), str(src)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                return None
        return out

    def _tools(self) -> None:
        for rel, source in (("usr/bin/nvidia-smi", _SMI), ("usr/bin/nvidia-modprobe", _MODPROBE),
                            ("usr/sbin/modinfo", _MODINFO), ("usr/bin/lspci", _LSPCI)):
            text = source.format(root=str(self.root), state=STATE, libdir=LIBDIR, uvm=UVM_MAJOR, nv=NVIDIA_MAJOR)
            self._write(rel, f"#!{self.python}\n" + text.lstrip("\n"))
            (self.root / rel).chmod(0o755)
