"""A `pct` test double that behaves like Proxmox's (as read from pve-container 6.1.10's source), over plain LXC.

Installed by the lab as <lab>/bin/pct with LXC_PATH, LOCK_DIR and NODE filled in; it imports
nothing from `remote` and runs on the system Python. Option parsing, messages and exit codes
follow pve-container 6.1.10: Getopt permute mode until a bare `--`, boolean options that take
an optional value, no shell for exec (it becomes lxc-attach), PATH reset before anything runs,
push/pull under the config lock and exit 0 when the copy itself fails.
"""

import fcntl
import os
import re
import shutil
import subprocess
import sys
import time

LXC_PATH = "/var/lib/remote-lab/lxc"
LOCK_DIR = "/var/lib/remote-lab/lock"
NODE = "lab"

COMMANDS = ["config", "exec", "list", "pull", "push", "shutdown", "start", "status", "stop"]
USAGE = "USAGE: pct <COMMAND> [ARGS] [OPTIONS]\n"
BOOLEAN = {"exec": {"keep-env"}, "start": {"debug"}, "stop": {"skiplock", "overrule-shutdown"}, "list": set(),
           "status": {"verbose"}, "config": {"current"}, "shutdown": {"forceStop"}, "push": set(), "pull": set()}
VALUED = {"push": {"perms", "user", "group"}, "pull": {"perms", "user", "group"}, "shutdown": {"timeout"},
          "stop": set(), "config": {"snapshot"}}


def die(message, code=255):
    sys.stderr.write(message)
    sys.exit(code)


def param_error(param, message):
    die(f"400 Parameter verification failed.\n{param}: {message}\n" + USAGE)


def parse(cmd, args):
    """Getopt permute mode: options anywhere until a bare `--`; returns (options, positionals)."""
    opts, positional, i = {}, [], 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional += args[i + 1:]
            break
        if arg.startswith("-") and len(arg) > 1:
            name, eq, value = arg.lstrip("-").partition("=")
            if name in BOOLEAN.get(cmd, ()):
                if not eq and i + 1 < len(args) and not args[i + 1].startswith("-"):
                    value, i = args[i + 1], i + 1
                elif not eq:
                    value = "1"
                if value not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
                    param_error(name, f"type check ('boolean') failed - got '{value}'")
                opts[name] = value in ("1", "true", "yes", "on")
            elif name in VALUED.get(cmd, ()):
                if not eq:
                    if i + 1 >= len(args):
                        die(f"Option {name} requires an argument\n400 unable to parse option\n" + USAGE)
                    value, i = args[i + 1], i + 1
                opts[name] = value
            else:
                die(f"Unknown option: {name}\n400 unable to parse option\n" + USAGE)
        else:
            positional.append(arg)
        i += 1
    return opts, positional


def vmid_of(positional):
    if not positional:
        param_error("vmid", "property is missing and it is not optional")
    raw = positional[0]
    if not re.fullmatch(r"-?\d+", raw):
        param_error("vmid", f"type check ('integer') failed - got '{raw}'")
    if not re.fullmatch(r"[1-9][0-9]{2,8}", raw):
        param_error("vmid", "invalid format - value does not look like a valid VM ID")
    return raw


def conf_exists(vmid):
    return os.path.exists(os.path.join(LXC_PATH, vmid, "config"))


def require_conf(vmid):
    if not conf_exists(vmid):
        die(f"Configuration file 'nodes/{NODE}/lxc/{vmid}.conf' does not exist\n")


def state(vmid):
    out = subprocess.run(["lxc-info", "-P", LXC_PATH, "-n", vmid, "-sH"], capture_output=True, text=True).stdout
    return "running" if out.strip() == "RUNNING" else "stopped"


def init_pid(vmid):
    out = subprocess.run(["lxc-info", "-P", LXC_PATH, "-n", vmid, "-pH"], capture_output=True, text=True).stdout
    return out.strip()


def lock(vmid):
    """The container's config lock, 10 s timeout for others, as push/pull hold it."""
    os.makedirs(LOCK_DIR, exist_ok=True)
    path = os.path.join(LOCK_DIR, f"pve-config-{vmid}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline, told = time.monotonic() + 10, False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if not told:
                sys.stderr.write("trying to acquire lock...")
                sys.stderr.flush()
                told = True
            if time.monotonic() > deadline:
                die(f"\ncan't lock file '{path}' - got timeout\n")
            time.sleep(0.1)


def cmd_exec(opts, positional):
    vmid = vmid_of(positional)
    require_conf(vmid)
    if state(vmid) != "running":
        die(f"container '{vmid}' not running!\n")
    argv = positional[1:]
    if not argv:
        die("missing command at /usr/share/perl5/PVE/CLI/pct.pm line 213.\n")
    keep = opts.get("keep-env", True)
    for var in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        os.environ.pop(var, None)
    lxc = ["lxc-attach", "-P", LXC_PATH, "-n", vmid, "--keep-env" if keep else "--clear-env", "--", *argv]
    os.execvp(lxc[0], lxc)


def cmd_status(opts, positional):
    vmid = vmid_of(positional)
    require_conf(vmid)
    print(f"status: {state(vmid)}")


def cmd_list(opts, positional):
    ids = sorted((d for d in os.listdir(LXC_PATH) if conf_exists(d)), key=int) if os.path.isdir(LXC_PATH) else []
    if ids:
        print("%-10s %-10s %-12s %-20s" % ("VMID", "Status", "Lock", "Name"))
        for vmid in ids:
            print("%-10s %-10s %-12s %-20s" % (vmid, state(vmid), "", f"lab{vmid}"))


def cmd_start(opts, positional):
    vmid = vmid_of(positional)
    require_conf(vmid)
    if state(vmid) == "running":
        die(f"CT {vmid} already running\n")
    r = subprocess.run(["lxc-start", "-P", LXC_PATH, "-n", vmid], capture_output=True, text=True)
    if r.returncode != 0:
        die(f"startup for container '{vmid}' failed\n{r.stderr}")


def cmd_stop(opts, positional):
    vmid = vmid_of(positional)
    require_conf(vmid)
    if state(vmid) != "running":
        die(f"CT {vmid} not running\n")
    subprocess.run(["lxc-stop", "-P", LXC_PATH, "-n", vmid, "-k"], capture_output=True)


def cmd_config(opts, positional):
    vmid = vmid_of(positional)
    require_conf(vmid)
    lines = [f"hostname: lab{vmid}", "arch: amd64", "ostype: debian"]
    raw = [line.strip() for line in open(os.path.join(LXC_PATH, vmid, "config")) if line.startswith("lxc.")]
    print("\n".join(sorted(lines) + raw))


def cmd_push(opts, positional):
    if len(positional) < 3:
        param_error("destination" if len(positional) == 2 else "file", "property is missing and it is not optional")
    vmid, src, dest = vmid_of(positional), positional[1], positional[2]
    if not conf_exists(vmid) or state(vmid) != "running":
        die("can only push files to a running CT\n")
    lock(vmid)
    root = f"/proc/{init_pid(vmid)}/root"
    # From here on, pct has no exit handler: a failed copy is printed and the status stays 0.
    try:
        with open(src, "rb") as fin:
            data = fin.read()
    except OSError:
        sys.stderr.write(f"failed to open {src} for reading\n")
        sys.exit(0)
    try:
        with open(root + dest, "wb") as fout:
            fout.write(data)
        os.chmod(root + dest, int(opts.get("perms", "644"), 8))
    except OSError as exc:
        sys.stderr.write(f"failed to create file: {dest}: {exc.strerror}\n")
        sys.exit(0)


def cmd_pull(opts, positional):
    if len(positional) < 3:
        param_error("destination" if len(positional) == 2 else "path", "property is missing and it is not optional")
    vmid, src, dest = vmid_of(positional), positional[1], positional[2]
    if not conf_exists(vmid) or state(vmid) != "running":
        die("can only pull files from a running VM at /usr/share/perl5/PVE/API2/LXC.pm line 2145.\n")
    lock(vmid)
    root = f"/proc/{init_pid(vmid)}/root"
    try:
        shutil.copyfile(root + src, dest)
    except OSError as exc:
        sys.stderr.write(f"failed to open {src}: {exc.strerror}\n")
        sys.exit(0)


def main(argv):
    os.environ["PATH"] = "/sbin:/bin:/usr/sbin:/usr/bin"
    if os.geteuid() != 0:
        die("please run as root\n")
    if not argv:
        die("ERROR: no command specified\n" + USAGE)
    matches = [c for c in COMMANDS if c.startswith(argv[0])]
    if argv[0] in COMMANDS:
        matches = [argv[0]]
    if len(matches) != 1:
        die(f"ERROR: unknown command 'pct {argv[0]}'\n" + USAGE)
    cmd = matches[0]
    opts, positional = parse(cmd, argv[1:])
    handler = {"shutdown": cmd_stop}.get(cmd) or globals()[f"cmd_{cmd}"]
    handler(opts, positional)


if __name__ == "__main__":
    main(sys.argv[1:])
