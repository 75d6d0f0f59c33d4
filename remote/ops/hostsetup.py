"""`remote host setup H`: install, idempotently, the boot unit that keeps a GPU host's containers startable.

remote/sh/remote-gpu.service runs /usr/local/lib/remote/gpu-boot.sh before pve-guests.service: the uvm nodes
and each GPU's node made (remote/sh/gpu-uvm.sh, `nvidia-modprobe -c N`), then the driver's user-space folder refilled with
the loaded module's files (remote/sh/nvidia-userspace.sh, installed beside it), so that after a driver upgrade
and a reboot every container that mounts the folder matches the new module before it starts. One round trip
(remote/sh/host-setup.sh): each file written only where it differs; `dry` says what it would write. Root on
the host (the files are root's); a host with `sudo: true` is refused.
"""

from __future__ import annotations

from .. import shell
from ..errors import HostSetupError, RootRequired
from ..results import HostSetup
from ..target import HostTarget

UNIT = "/etc/systemd/system/remote-gpu.service"
LIB = "/usr/local/lib/remote"
FILES = ((UNIT, "remote-gpu.service"), (f"{LIB}/gpu-boot.sh", "gpu-boot.sh"), (f"{LIB}/gpu-uvm.sh", "gpu-uvm.sh"),
         (f"{LIB}/nvidia-userspace.sh", "nvidia-userspace.sh"))


def _text(name: str) -> str:
    from importlib import resources

    return resources.files("remote").joinpath("sh").joinpath(name).read_text()


def setup_argv(dry: bool) -> list[str]:
    argv = ["bash", "-c", shell.load("host-setup"), "host-setup", "1" if dry else "0"]
    for path, name in FILES:
        argv += [path, _text(name)]
    return argv


def parse(out: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(written or would be, unchanged, enabled or would be) from host-setup.sh's lines."""
    wrote, same, enabled = [], [], []
    for line in out.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("wrote", "would") and rest.startswith("write "):
            wrote.append(rest[6:])
        elif word == "wrote":
            wrote.append(rest)
        elif word == "unchanged":
            same.append(rest)
        elif word == "enabled" or (word == "would" and rest.startswith("enable ")):
            enabled.append(rest.removeprefix("enable "))
    return tuple(wrote), tuple(same), tuple(enabled)


def host_setup(t: HostTarget, *, dry: bool = False) -> HostSetup:
    if t.host.sudo:
        raise RootRequired(f"host {t.host.name}: host setup writes a systemd unit and scripts as root; the host's "
                             "login uses `sudo: true`, whose rule stays narrow: run it with a root login for this "
                             "host (docs/guide/safety.md#which-command-needs-which-login)")
    dry = dry or t.dry
    t.step(f"host {t.host.name}: {'check' if dry else 'install'} the boot unit remote-gpu.service "
           "(before pve-guests.service: uvm nodes, the driver's user space)")
    # dry: the script only reads (its check mode), so it runs in a dry run too; else it writes
    r = t.session.host_run(t.host, setup_argv(dry), deadline=60 + t.host.connect_timeout, mutates=not dry)
    if r.exit_code != 0:
        raise HostSetupError(f"host {t.host.name}: host setup failed (exit {r.exit_code}): {r.err.strip()[-300:]}")
    wrote, same, enabled = parse(r.out)
    for path in wrote:
        t.note(("would write " if dry else "wrote ") + path)
    return HostSetup(t.host.name, dry, wrote, same, enabled)
