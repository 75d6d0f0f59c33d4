"""Lab tier: Ctrl-C during a deploy's `git checkout -f` (the step in flight is ended in the container, and
git leaves `.git/index.lock`); the next deploy removes the stale lock under the lease, names it, and succeeds."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import LAB_CONTAINERS, load_config, wait_until

from remote.cli.format import deploy_text
from remote import config
from remote.ops.deploy import deploy
from remote.transport.session import Session
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
CT = LAB_CONTAINERS[0]
CHECKOUT = "/root/dflash-interrupted"
# A git that, at deploy's checkout, takes the index lock as git does and then takes its time (a big tree),
# so that Ctrl-C lands while the lock is held; every other git command is the real one.
SLOW_GIT = f"""#!/bin/bash
if [[ " $* " == *" checkout -q -f --detach "* ]] && [ -e /root/slow-git ]; then
  exec 8> .git/index.lock
  touch /root/git-in-checkout
  exec sleep 313.5
fi
exec /usr/bin/git "$@"
"""


@pytest.mark.fault("Ctrl-C during deploy's git checkout (index.lock left)",
                   promise="the next deploy removes the stale lock under the lease, names it, and completes")
def test_the_deploy_after_an_interrupted_checkout_succeeds(lab_hosts, lab_session, deployed):
    hosts = load_config(lab_hosts, **{"  path: /root/dflash": f"  path: {CHECKOUT}"})
    ct = lab_session.container(CT)
    ct.run(["tee", "/usr/local/bin/git"], stdin=SLOW_GIT.encode())
    ct.run(["chmod", "755", "/usr/local/bin/git"])
    ct.run(["touch", "/root/slow-git"])
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT)}
    main = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); from remote.cli import main; main()"
    try:
        proc = subprocess.Popen([sys.executable, "-c", main, "deploy", "-c", str(CT)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert wait_until(lambda: ct.run(["test", "-e", "/root/git-in-checkout"], check=False).ok, 120)
        finally:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, out + err
        # The step was ended in the container, and left git's lock behind.
        assert wait_until(lambda: "sleep 313.5" not in ct.run(["ps", "-eo", "args"]).out, 30)
        assert ct.run(["test", "-e", f"{CHECKOUT}/.git/index.lock"], check=False).ok
    finally:
        ct.run(["rm", "-f", "/usr/local/bin/git", "/root/slow-git", "/root/git-in-checkout"])
    with Session(config.load(str(hosts)), agent=True) as s:
        summary = deploy(target_of(s, CT))
    try:
        assert any(c.startswith(f"removed stale lock: {CHECKOUT}/.git/index.lock") for c in summary.changed), \
            deploy_text(summary)
        assert not ct.run(["test", "-e", f"{CHECKOUT}/.git/index.lock"], check=False).ok
        head = ct.run(["git", "-C", CHECKOUT, "rev-parse", "HEAD"]).out.strip()
        assert ct.run(["git", "-C", CHECKOUT, "status", "--porcelain"]).out == "" and len(head) == 40
    finally:
        ct.run(["rm", "-rf", CHECKOUT, f"{CHECKOUT}.patches"])


def test_a_lock_a_live_git_holds_is_never_removed(lab_session, deployed, lab_hosts):
    """A git run by hand in the container, still writing: its lock is no leftover."""
    hosts = load_config(lab_hosts, **{"  path: /root/dflash": f"  path: {CHECKOUT}-live"})
    ct = lab_session.container(CT)
    with Session(config.load(str(hosts)), agent=True) as s:
        deploy(target_of(s, CT))
        # An edit there (deploy saves it, then checks out again), and a git by hand holding the index lock.
        ct.script(f'cd {CHECKOUT}-live && f=$(git ls-files | head -n 1) && echo edit >> "$f" && '
                  "setsid -f bash -c 'echo $$ > /root/live-git.pid; exec 8> .git/index.lock; exec sleep 313.75' "
                  "</dev/null >/dev/null 2>&1")
        try:
            assert wait_until(lambda: "sleep 313.75" in ct.run(["ps", "-eo", "args"]).out, 30)
            with pytest.raises(Exception, match="index.lock"):
                deploy(target_of(s, CT))
            assert ct.run(["test", "-e", f"{CHECKOUT}-live/.git/index.lock"], check=False).ok
        finally:
            ct.script('kill "$(cat /root/live-git.pid)" || true; rm -f /root/live-git.pid')
            ct.run(["rm", "-rf", f"{CHECKOUT}-live", f"{CHECKOUT}-live.patches"])


# launch.sh's start of the job: the job starts as it always does, then launch takes its time (as on a loaded
# container, waiting for the wrapper's pid file), so that Ctrl-C lands after the run started, before launch returns.
SLOW_SETSID = """#!/bin/bash
if [ "$1" = -f ] && [ "$2" = bash ] && [ -e /root/slow-setsid ]; then
  /usr/bin/setsid "$@"
  touch /root/setsid-done
  exec sleep 317.5
fi
exec /usr/bin/setsid "$@"
"""


@pytest.mark.fault("Ctrl-C while train starts the job",
                   promise="the run id is printed before the job starts; an interrupted start names the run and "
                           "how to see, follow or stop it (exit 130)")
def test_ctrl_c_while_the_job_starts_names_the_run_it_left_running(lab_hosts, lab_session, deployed):
    from remote.ops.jobs import state
    from remote.ops.jobs import stop as stop_run

    hosts = load_config(lab_hosts, **{"  command: python -m drafter.warmup --device {device}\n  devices: [0, 1]\n": "",
                                      "python -m drafter.train --target-gpus 0 --drafter-gpus 0,1 --steps 200 "
                                      "--log-interval 0.5": "sleep 300"})
    ct = lab_session.container(CT)
    ct.run(["tee", "/usr/local/bin/setsid"], stdin=SLOW_SETSID.encode())
    ct.run(["chmod", "755", "/usr/local/bin/setsid"])
    ct.run(["touch", "/root/slow-setsid"])
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    main = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); from remote.cli import main; main()"
    run_id = None
    try:
        proc = subprocess.Popen([sys.executable, "-c", main, "train", "-c", str(CT), "--force"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert wait_until(lambda: ct.run(["test", "-e", "/root/setsid-done"], check=False).ok, 180)
        finally:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, out + err
        starting = [line for line in out.splitlines() if line.startswith("==> run ")]
        assert starting and starting[0].endswith(f"starting in container {CT}"), out + err
        run_id = starting[0].split()[2]
        assert f"-- interrupted while run {run_id} was starting in container {CT}: it may be running." in out
        assert f"`remote stop -c {CT} --run {run_id}` ends it" in out, out
        assert state(target_of(lab_session, CT), run_id).alive, out + err  # the job started, and runs on
    finally:
        ct.run(["rm", "-f", "/usr/local/bin/setsid", "/root/slow-setsid", "/root/setsid-done"])
        if run_id:
            stop_run(target_of(lab_session, CT), run_id)
