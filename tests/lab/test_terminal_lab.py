"""Lab tier: a hostile container's text never reaches the user's terminal raw (remote.naming.printable).

The container's `current` link and run id (a live process carries it as REMOTE_RUN_ID), its venv's torch
version string and a tree's member names and link targets hold OSC 52 (which writes the user's clipboard),
CSI cursor movement (which hides or forges a line) and a C1 CSI. What `remote status`, `stop`, `logs`, `runs`,
`pull` and `deploy` print, captured from the real command line, holds no raw ESC, BEL or C1 character; the
values are there, as visible escapes.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import lab_ids, load_config

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
CT = lab_ids(__file__)[0]
RUN_DIR = "/root/runs-hostile"
TREE = "/root/hostile-tree"
# In the container's shell (printf), so no raw byte travels in an argv: OSC 52, cursor up + erase line, and
# U+009B (C1 CSI, as UTF-8) in the run id; a raw 0x9b byte (not UTF-8) as well in the tree's names.
EVIL = r"r-\033]52;c;SGVsbG8=\007\033[1A\033[2K\302\23331m-x"
EVIL_BYTES = r"f-\033]52;c;SGVsbG8=\007\033[1A\033[2K\233-\302\233"
TORCH = "2.13.0+cpu\x1b]52;c;SGVsbG8=\x07\x1b[1A\x1b[2K\x9b31m verified by sha256"


@pytest.fixture(scope="module")
def hosts(lab_hosts) -> Path:
    return load_config(lab_hosts, **{"  run_dir: /root/runs": f"  run_dir: {RUN_DIR}"})


def remote(*args, hosts) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REMOTE_HOSTS_FILE": str(hosts)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *args], env=env,
                       capture_output=True, timeout=600)
    assert b"Traceback" not in r.stderr, r.stderr
    return r


def raw_controls(data: bytes) -> list[str]:
    """ESC, BEL, any other C0 control but \\t and \\n, DEL, C1 (as a character or a raw byte)."""
    text = data.decode("utf-8", "surrogateescape")
    return [hex(ord(c)) for c in text if (c < " " and c not in "\t\n") or "\x7f" <= c <= "\x9f"
            or 0xDC80 <= ord(c) <= 0xDCFF]


@pytest.mark.fault("Hostile container: terminal escapes in run ids, names, versions",
                   promise="shown as visible escapes (\\x1b, \\x07, \\x9b): no raw control byte reaches the terminal")
def test_a_hostile_containers_escapes_never_reach_the_terminal(lab_session, deployed, hosts, tmp_path):
    ct = lab_session.container(CT)
    record = ct.script('printf "%s" "$(readlink -f /root/venv)/remote-venv.json"').out
    ct.script(f'id=$(printf "{EVIL}"); mkdir -p {RUN_DIR}/"$id"; cd {RUN_DIR}/"$id"; echo hello > log; '
              'printf \'{"command": "sleep 300", "started_epoch": %s, "outputs": []}\\n\' "$(date +%s)" > manifest.json; '
              f'ln -sfn "$id" {RUN_DIR}/current; '
              'REMOTE_RUN_ID=$id setsid -f sleep 300 < /dev/null > /dev/null 2>&1; '
              'for _ in $(seq 50); do p=$(pgrep -n -x sleep) && break; sleep 0.1; done; echo "$p" > pid; '
              f'n=$(printf "{EVIL_BYTES}"); mkdir -p {TREE}; echo data > {TREE}/"$n"; ln -sfn /etc/"$n" {TREE}/"l$n"; '
              f'cp "$1" "$1.bak"', record)
    ct.run(["/root/venv/bin/python", "-c", "import json, sys; p = sys.argv[1]; d = json.load(open(p)); "
            "d['verify']['torch'] = sys.argv[2]; json.dump(d, open(p, 'w'))", record, TORCH])
    try:
        outs = {"deploy": remote("deploy", "-c", str(CT), hosts=hosts),
                "status": remote("status", "-c", str(CT), hosts=hosts),
                "runs": remote("runs", "-c", str(CT), hosts=hosts),
                "logs": remote("logs", "-c", str(CT), hosts=hosts),
                "pull": remote("pull", "-c", str(CT), "--src", TREE, "--dest", str(tmp_path / "got"), hosts=hosts),
                "pull --run": remote("pull", "-c", str(CT), "--run", "latest", "--dest", str(tmp_path / "r"), hosts=hosts),
                "stop": remote("stop", "-c", str(CT), "--grace", "2", hosts=hosts)}
    finally:
        ct.script(f'mv -f "$1.bak" "$1"; rm -rf {RUN_DIR} {TREE}', record)
    raw = {task: raw_controls(r.stdout + r.stderr) for task, r in outs.items()}
    assert not any(raw.values()), ({t: c for t, c in raw.items() if c}, outs)
    shown = "r-\\x1b]52;c;SGVsbG8=\\x07\\x1b[1A\\x1b[2K\\x9b31m-x"  # the run id, as visible escapes
    assert outs["deploy"].returncode == 0 and "torch 2.13.0+cpu\\x1b]52;c;SGVsbG8=\\x07" in outs["deploy"].stdout.decode()
    assert f"job {shown} running" in outs["status"].stdout.decode()
    assert shown in outs["runs"].stdout.decode() and shown in outs["logs"].stdout.decode()
    assert b"hello" in outs["logs"].stdout  # the job's own output: as it is
    pulled = outs["pull"].stdout.decode()
    assert "refused (not written)" in pulled and "lf-\\x1b]52;c;SGVsbG8=\\x07\\x1b[1A\\x1b[2K\\x9b-\\x9b" in pulled
    assert outs["pull --run"].returncode == 1 and "refused" in outs["pull --run"].stderr.decode()
    assert outs["stop"].returncode == 0 and f"run {shown} stopped with SIG" in outs["stop"].stdout.decode()
