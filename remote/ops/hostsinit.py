"""`remote init`: a hosts file written from what a Proxmox host has (`pct list`, each container's
hostname from `pct config`), commented and ready to fill in. Names and hostnames come from the host, so
they are cleaned before they reach the file, and the text is loaded back through the config loader
before it is written (a file init writes always loads)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .. import config as cfg
from .. import executor
from ..errors import ANOTHER_OUT, FORCE, OUT_FILE, CommandError, ConfigError, RemoteError, worded
from ..naming import json_loads
from ..transport import for_host
from ..transport.pct import classify, parse_list, pct_argv


def host_name(address: str) -> str:
    """The host's name in the file: the first label of a host name, `pve` for an IP address."""
    try:
        ipaddress.ip_address(address.strip("[]").split("%")[0])
        return "pve"
    except ValueError:
        pass
    name = re.sub(r"[^A-Za-z0-9_-]", "-", address.split(".")[0]).strip("-")
    return name or "pve"


def read_host(host: cfg.Host) -> list[tuple[int, str, str, list[str]]]:
    """(id, status, hostname, GPU lines) of every container on the host: one `pct list`, then `pct config`
    each (its NVIDIA `devN:`, cgroup and mount lines, remote.facts.gpu)."""
    from ..facts.gpu import parse_pct_config

    transport = for_host(host)
    try:
        listed = _pct(transport, host, "list")
        found = parse_list(listed)

        def config(ctid: int) -> tuple[str, list[str]]:
            try:
                text = _pct(transport, host, "config", str(ctid))
            except RemoteError:
                return "", []
            m = re.search(r"(?m)^hostname:\s*(\S+)", text)
            return (m.group(1) if m else ""), parse_pct_config(ctid, text).lines()

        configs = executor.bounded(list(found), config, 8)  # over the one connection: 8 at a time
    finally:
        transport.close()
    return [(ctid, state, name, gpu) for (ctid, state), (name, gpu) in zip(found.items(), configs, strict=True)]


def unsafe_paths(host: cfg.Host, paths: list[str]) -> dict[str, str]:
    """Of the programs a sudo rule would name, those a user other than root could replace on `host` (asked
    of the host itself, as the login user: remote/sh/rootchain.sh), each with why (remote.sudo.unsafe)."""
    from ..sudo import chain_argv, unsafe

    transport = for_host(host)
    try:
        answer = transport.run(chain_argv(paths), deadline=60 + host.connect_timeout)
    finally:
        transport.close()
    return unsafe(answer.out if answer.exit_code == 0 else "", paths)


def _pct(transport, host: cfg.Host, *args: str) -> str:
    argv = pct_argv(host.pct, *args)
    result = transport.run(argv, deadline=60 + host.connect_timeout)
    error = classify(result.err, result.exit_code, int(args[1]) if len(args) > 1 else 0, host)
    if error:
        raise error
    if result.exit_code:
        raise CommandError(" ".join(argv), result.exit_code, result.err, host.name)
    return result.out


@dataclass(frozen=True)
class NodeInfo:
    name: str
    ip: str
    online: bool


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    local: str  # the node remote init asked
    nodes: tuple[NodeInfo, ...]
    node_of: dict[int, str]  # every container of the cluster -> its node
    states: dict[int, str]


def cluster_local(cluster: ClusterInfo | None) -> str | None:
    return cluster.local if cluster is not None else None


def read_cluster(host: cfg.Host) -> ClusterInfo | None:
    """The cluster `host` is a node of (pvesh's /cluster/status and guest list), or None for a host of its own.
    Everything in the answer is checked: names as the hosts file takes them, addresses that parse."""
    from .. import sudo
    from ..cluster import GUESTS, parse_guests

    if host.sudo:  # the sudo rule allows the guest list only: such a host's init lists this node alone
        return None
    pvesh = sudo.program_path("pvesh", host.pct_path or host.pct, exact=False)
    transport = for_host(host)
    try:
        status = transport.run([pvesh, "get", "/cluster/status", "--output-format", "json"], deadline=60)
        if status.exit_code != 0:
            return None
        rows = json_loads(status.out)
        top = next((r for r in rows if isinstance(r, dict) and r.get("type") == "cluster"), None)
        if top is None or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", str(top.get("name", ""))):
            return None
        nodes, local = [], None
        for r in rows:
            if not isinstance(r, dict) or r.get("type") != "node":
                continue
            name, ip = str(r.get("name", "")), str(r.get("ip", ""))
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                continue
            if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
                nodes.append(NodeInfo(name, ip, bool(r.get("online"))))
                local = name if r.get("local") else local
        if local is None or len(nodes) < 2:
            return None
        listed = transport.run([pvesh, *GUESTS], deadline=60)
        guests = parse_guests(listed.out, f"{host.address}: pvesh") if listed.exit_code == 0 else {}
    except (RemoteError, ValueError):
        return None
    finally:
        transport.close()
    names = {n.name for n in nodes}
    return ClusterInfo(str(top["name"]), local, tuple(nodes),
                       {c: g.node for c, g in guests.items() if g.node in names}, {c: g.status for c, g in guests.items()})


def _comment(text: str) -> str:
    """A line from the host, safe inside a YAML comment: printable ASCII only, no line break."""
    return re.sub(r"[^\x20-\x7e]", "?", text)[:200]


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "?", text)[:63]


def render(host: cfg.Host, given: dict, containers: list[tuple[int, str, str, list[str]]],
           cluster: ClusterInfo | None = None) -> str:
    """The hosts file's text. `given`: the host keys the user passed (only those are written). With `cluster`,
    every node of it as a host (`cluster:`) and every container of it with the node that holds it."""
    q = json.dumps  # a JSON string is a YAML double-quoted scalar: any text, quoted once
    who = (f"{host.user}@" if host.user else "") + host.address + (f":{host.port}" if host.port else "")
    ids = [c[0] for c in containers]
    lines = [
        f"# Hosts file for `remote`, written by `remote init` from {who} on {time.strftime('%Y-%m-%d')}.",
        f"# It lists the {len(ids)} container(s) `pct list` showed there; nothing happens to a container",
        "# until a task names it (-c ID). Next:",
        "#   1. fill in the sections marked TO FILL below: venv (what to install), code (your git repository) and",
        "#      train (how to train); `remote deploy` refuses a venv section left empty (it would empty the venv);",
        "#   2. `remote config -c ID` shows what a container resolves to, `remote deploy -c ID` makes it so.",
        "# Every key: docs/reference/hosts-file.md in remote's repository.",
        "hosts:",
        f"  {q(host.name)}:",  # names quoted too: a host, node or cluster named 2024 stays a name, not a number
        f"    address: {q(host.address)}",
    ]
    for key in ("port", "user", "key_file", "known_hosts", "pct", "sudo"):
        if given.get(key) is not None:
            value = given[key]
            lines.append(f"    {key}: {q(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else value}")
    lines += ["    # connect_timeout: 10   # seconds"]
    if cluster is not None:  # every node of the cluster: the one asked as given, the others at their cluster address
        lines[-1:-1] = [f"    cluster: {q(cluster.name)}"] + ([f"    node: {q(cluster.local)}"] if cluster.local != host.name else [])
        for node in cluster.nodes:
            if node.name == cluster.local:
                continue
            lines += [f"  {q(node.name)}:", f"    address: {q(node.ip)}", f"    cluster: {q(cluster.name)}"]
            lines += [f"    {key}: {q(given[key]) if isinstance(given[key], str) else str(given[key]).lower()}"
                      for key in ("port", "user", "key_file", "known_hosts", "pct", "sudo") if given.get(key) is not None]
            if not node.online:
                lines.append("    # offline when remote init read the cluster")
    lines += ["", "containers:" if containers else
              "containers: {}   # none yet: `remote create CTID --host HOST --template VOLID [--gpu all]` adds them"]
    for ctid, state, name, *gpu in containers:
        where = cluster.node_of.get(ctid, cluster.local) if cluster is not None else host.name
        entry = host.name if where == cluster_local(cluster) else where
        lines += [f"  {ctid}:" + (f"  # {_clean(name)}, {_clean(state)}" if name else f"  # {_clean(state)}"),
                  f"    host: {q(entry)}" + ("   # its node now: remote finds it on whichever node holds it"
                                          if cluster is not None else "")]
        if gpu and gpu[0]:  # its GPU passthrough as pct config shows it (`remote doctor --gpu` checks it)
            lines += ["    # GPU (pct config):"] + [f"    #   {_comment(line)}" for line in gpu[0]]
    if len(ids) > 1:
        lines += [f"# default_container: {ids[0]}   # the container tasks use without -c (or $REMOTE_CONTAINER)"]
    lines += [
        "",
        "venv:   # TO FILL: packages (what to install); deploy refuses an empty venv",
        "  path: /root/venv",
        "  # On a GPU host, e.g.: index_url: https://download.pytorch.org/whl/cu128",
        "  packages: []   # e.g. [torch==2.11.0+cu128, numpy]",
        "  # requirements: requirements.txt   # in your repository",
        "",
        "code:   # TO FILL: repo (your git repository, or its URL)",
        "  # repo: /path/to/your/repository   # a local git repository (relative: to this file), or a URL",
        "  path: /root/code                  # its checkout in the container",
        "",
        "warmup:",
        "  # command: python -m yourpkg.warmup --device {device}   # compiles into the persistent cache",
        "  # devices: [0]",
        "",
        "train:   # TO FILL: command (how to train)",
        "  # command: torchrun --nproc-per-node 8 -m yourpkg.train",
        "  run_dir: /root/runs",
    ]
    return "\n".join(lines) + "\n"


def check_target(out: str, force: bool) -> None:
    """Refuse to overwrite a file unless forced: before anything connects."""
    path = Path(out)
    if path.is_dir():
        raise worded(ConfigError(out, "", f"is a folder: {OUT_FILE} a file name"), OUT_FILE)
    if path.exists() and not force:
        raise worded(ConfigError(out, "", f"exists already: it is never overwritten ({FORCE} replaces it, "
                                          f"{ANOTHER_OUT})"), FORCE, ANOTHER_OUT)
    if not path.resolve().parent.is_dir():
        raise ConfigError(out, "", f"its folder {path.parent} does not exist")


def write(out: str, text: str, force: bool) -> None:
    """The file, whole or not at all; loaded back first, so what init writes always loads."""
    import yaml

    cfg.parse(yaml.safe_load(text), out)
    path = Path(out)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)  # inside the try: a failed write (a full disk) leaves no temporary behind
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)  # fails if it appeared meanwhile: never overwritten unasked
    except FileExistsError:
        raise worded(ConfigError(out, "", f"exists already (made while init ran): {FORCE} replaces it"), FORCE) from None
    finally:
        tmp.unlink(missing_ok=True)


def add_container(file: str, ctid: int, host: str, comment: str) -> bool:
    """Add `containers.CTID: {host: HOST}` to a hosts file as text, every other line and comment kept (after
    the last line of its `containers:` block, in that block's indentation; the block made where there is
    none; after the comment lines that follow the block's last entry, such as init's `# GPU` lines, which are
    that entry's). False when the file has the entry already. What it writes is loaded back first with remote's
    own loader (keys given twice refused), as init's file."""
    from ..config.yamlfile import _read_yaml

    path = Path(file)
    text = path.read_text()
    data = _read_yaml(file, text) or {}
    containers = data.get("containers") if isinstance(data, dict) else None
    if isinstance(containers, dict) and (ctid in containers or str(ctid) in containers):
        return False
    entry = f"{ctid}: {{host: {json.dumps(host)}}}  # {_comment(comment)}"
    lines = text.splitlines()
    key = r"""(['"]?)containers\1\s*:"""  # `containers:`, `'containers':`, `"containers":`
    top = next((i for i, line in enumerate(lines) if re.match(key, line)), None)
    if top is None:
        lines += ["", "containers:", f"  {entry}"]
    elif re.fullmatch(key + r"\s*(\{\s*\}|null|~)?\s*(#.*)?", lines[top]):
        end, indent = top + 1, None
        for i in range(top + 1, len(lines)):
            line = lines[i]
            if line.strip() and not line.startswith((" ", "\t", "#")):
                break
            if line.strip() and not line.lstrip().startswith("#"):
                indent = indent or line[: len(line) - len(line.lstrip())]
                end = i + 1
        # Indented comment lines right after the last entry are its own (init's `# GPU (pct config):` lines).
        while end < len(lines) and lines[end].startswith((" ", "\t")) and lines[end].lstrip().startswith("#"):
            end += 1
        if "{" in lines[top] or re.search(r":\s*(null|~)", lines[top]):
            lines[top] = "containers:"
        lines.insert(end, f"{indent or '  '}{entry}")
    else:  # a flow mapping on the line itself (`containers: {200: {host: pve}}`): a block after it is not valid
        raise ConfigError(file, "containers", f"written inline: remote create cannot add {ctid} to it; add "
                          f"`{entry}` by hand")
    new = "\n".join(lines) + "\n"
    cfg.parse(_read_yaml(file, new), file)
    _replace(path, new)
    return True


def remove_container(file: str, ctid: int, write: bool = True) -> tuple[str, ...]:
    """Remove container `ctid` from a hosts file as text: its entry under `containers:` with the comments above
    it and inside it, its id in `groups:` lists, a `default_container:` naming it; every other line kept. The
    lines removed (none: the file does not list it). A file this cannot edit safely (an inline `containers:`
    mapping, a group left empty) is a ConfigError naming what to edit by hand, the file unchanged. write=False:
    only what it would remove (destroy asks before it destroys anything)."""
    from ..config.yamlfile import _read_yaml

    path = Path(file)
    lines = path.read_text().splitlines()
    entry = re.compile(rf"""(\s+)['"]?{ctid}['"]?\s*:""")
    top = next((i for i, line in enumerate(lines) if re.match(r"containers\s*:", line)), None)
    block_end = next((i for i in range(top + 1, len(lines)) if lines[i].strip() and not lines[i][0].isspace()
                      and not lines[i].startswith("#")), len(lines)) if top is not None else 0
    at = next((i for i in range(top + 1, block_end) if entry.match(lines[i])), None) if top is not None else None
    if at is None:
        data = _read_yaml(file, "\n".join(lines)) or {}
        listed = data.get("containers") if isinstance(data, dict) else None
        if isinstance(listed, dict) and (ctid in listed or str(ctid) in listed):
            raise ConfigError(file, f"containers.{ctid}", "written inline: remove its entry by hand")
        return ()
    assert top is not None
    indent = len(lines[at]) - len(lines[at].lstrip())
    start, end = at, at + 1
    while start - 1 > top and lines[start - 1].strip().startswith("#"):
        start -= 1  # its comments above it
    while end < block_end and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1  # its keys and the comments inside it
    while end > at + 1 and not lines[end - 1].strip():
        end -= 1  # blank lines after it stay
    removed = lines[start:end]
    kept = lines[:start] + lines[end:]
    out = []
    # Ids are taken out of `groups:` lists only: elsewhere a list of numbers is something else (train.restart_on
    # holds exit statuses, which ids 100-255 look like).
    g_top = next((i for i, line in enumerate(kept) if re.match(r"groups\s*:", line)), len(kept))
    g_end = next((i for i in range(g_top + 1, len(kept)) if kept[i].strip() and not kept[i][0].isspace()
                  and not kept[i].startswith("#")), len(kept))
    for i, line in enumerate(kept):
        if re.match(rf"""default_container\s*:\s*['"]?{ctid}['"]?\s*(#.*)?$""", line):
            removed.append(line)
            continue
        if not g_top < i < g_end:
            out.append(line)
            continue
        group = re.match(r"(\s+[A-Za-z_][\w.-]*\s*:\s*\[)([^\]]*)(\].*)$", line)
        if group and str(ctid) in [x.strip() for x in group.group(2).split(",")]:
            ids = [x.strip() for x in group.group(2).split(",") if x.strip() and x.strip() != str(ctid)]
            if not ids:
                raise ConfigError(file, "groups", f"{line.strip()!r} would be left empty: remove that group by hand")
            removed.append(line)
            line = group.group(1) + ", ".join(ids) + group.group(3)
        elif re.fullmatch(rf"\s+-\s*{ctid}\s*(#.*)?", line):
            removed.append(line)
            continue
        out.append(line)
    new = "\n".join(out) + "\n"
    try:
        cfg.parse(_read_yaml(file, new), file)
    except ConfigError as exc:
        raise ConfigError(file, f"containers.{ctid}", f"removing its entry would leave the file invalid ({exc}): "
                          "remove it by hand") from None
    if write:
        _replace(path, new)
    return tuple(removed)


def _replace(path: Path, new: str) -> None:
    """The file's text replaced at once (a rename), its mode kept; a linked file's target rewritten."""
    path = path.resolve()  # a linked hosts file (a dotfiles checkout) stays linked: its target is rewritten
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # made with the file's own mode before a byte is written: a 0600 file (an index token in it) stays 0600
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, path.stat().st_mode & 0o7777)
        with os.fdopen(fd, "w") as f:
            f.write(new)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
