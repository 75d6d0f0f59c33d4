"""Lab tier: detached jobs that outlive SSH and the controller, resumable logs, stop, status."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support import load_config, target

from remote import config
from remote.errors import BusyError, JobError
from remote.ops.jobs import Preflight, final_status, launch, show_log, state, stop
from remote.transport.session import Session
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
PRE = Preflight(commit="0" * 40, venv={"verify": {"torch": "2.13.0+cpu"}, "lock_sha256": "x"}, gpus=None, notes=[])


def numbered(n, delay):
    return f"python -c 'import time\nfor i in range({n}): print(i, flush=True); time.sleep({delay})'"


@pytest.fixture
def spec(lab_session, deployed, request):
    """Container 200's spec with a run folder of this test's own."""
    base = lab_session.config.container(200)
    return dataclasses.replace(base, train=dataclasses.replace(base.train, run_dir=f"/root/runs-{request.node.name}"))


def wait_for(predicate, timeout=60.0):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


@pytest.mark.fault("SSH dropped mid-follow", promise="following resumes at the byte it reached: every line once")
def test_logs_resume_after_the_server_side_of_ssh_is_killed(lab_session, lab, spec):
    run_id, _ = launch(target(lab_session, spec), PRE, command=numbered(2500, 0.002))
    lines = []
    follower = threading.Thread(target=lambda: show_log(target(lab_session, spec, lines), run_id, follow=True),
                                daemon=True)
    follower.start()
    sshd = int((lab.dir / "sshd.pid").read_text())
    for _ in range(3):  # three forced disconnects while the job prints
        wait_for(lambda: len(lines) > 200 * (_ + 1))
        subprocess.run(["pkill", "-KILL", "-P", str(sshd)])
    follower.join(timeout=120)
    assert not follower.is_alive()
    numbers = [int(l) for l in lines if l.isdigit()]
    assert numbers == list(range(2500))  # nothing lost, nothing repeated
    assert sum("connection lost" in l for l in lines) >= 1
    assert lines[-1].startswith(f"-- run {run_id}: exited with status 0")


@pytest.mark.fault("Controller SIGKILLed during train", promise="the job runs on and its record is complete")
def test_the_job_survives_the_controller_being_killed(lab_hosts, deployed, lab_session, request):
    """The job lives until the test says so (it waits for a file), so how long the reconnect takes under load
    does not matter; `deployed`: train's preflight needs the deployed venv, whatever ran before."""
    release = f"/root/release-{request.node.name}-{os.getpid()}"
    job = (f"for i in $(seq 0 59); do echo $i; done; while [ ! -e {release} ]; do sleep 0.1; done; echo released")
    hosts = load_config(lab_hosts, **{"  command: python -m drafter.warmup --device {device}\n  devices: [0, 1]\n": "",
                                      "python -m drafter.train --target-gpus 0 --drafter-gpus 0,1 --steps 200 "
                                      "--log-interval 0.5": job})
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(hosts), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", "from remote.cli import program; program.run()", "train",
                             "--container", "200", "--force"], env=env, stdout=subprocess.PIPE, text=True)
    started, seen = None, []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("==> run "):
            started = line.split()[2]
        if started and line.strip() == "5":
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert started, "".join(seen)
    with Session(config.load(str(hosts))) as s:
        ct, t = s.container(200), target_of(s, 200)
        assert state(t, started).alive  # the controller is gone, the job is not
        ct.run(["touch", release])
        try:
            wait_for(lambda: not state(t, started).alive, 120)  # a hang guard, not a speed goal
            final = state(t, started)
        finally:
            ct.run(["rm", "-f", release])
    assert final.exit == 0 and final.tail.split() == [str(i) for i in range(60)] + ["released"]
    assert final.manifest.command == job and final.manifest.commit != PRE.commit


@pytest.mark.fault("Second train while one runs", promise="refused unless --force, naming the run")
def test_a_second_train_is_refused_unless_forced(lab_session, spec):
    t = target(lab_session, spec)
    first, _ = launch(t, PRE, command="sleep 300")
    try:
        with pytest.raises(BusyError, match=f"busy: run {first} .* is still running.*force=True") as busy:
            launch(t, PRE, command="sleep 300")
        assert busy.value.exit_code == 3  # busy, as a deploy refused by a live job is
        second, _ = launch(t, PRE, command="sleep 300", force=True)
        assert stop(t, second, grace=2).run == second  # raises JobError where anything is left
    finally:
        assert stop(t, first, grace=2).run == first  # raises JobError where anything is left


def test_low_throughput_is_warned_and_crash_texts_get_hints(lab_session, spec):
    cmd = ("echo 'step 1 | 21.4 Ktok/s'; echo 'step 2 | 4.3 Ktok/s'; "
           "echo 'RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function'; "
           "exit 1")
    run_id, _ = launch(target(lab_session, spec), PRE, command=cmd)
    lines = []
    final = show_log(target(lab_session, spec, lines), run_id, follow=True)
    assert final.exit == 1
    i = lines.index("step 2 | 4.3 Ktok/s")
    assert lines[i + 1].startswith("!! throughput 4.3 Ktok/s is below 17.2 Ktok/s (baseline 21.5 - 20%)")
    assert any(l.startswith("!! compile race: threads compiled at once") for l in lines)
    assert f"-- run {run_id}: exited with status 1" in "\n".join(lines)


@pytest.mark.fault("Job ignores SIGTERM or leaves its process group",
                   promise="stop escalates to SIGKILL and proves nothing of the run is left")
def test_stop_leaves_no_process_even_ones_that_ignore_term_or_leave_the_group(lab_session, ct, spec):
    t = target(lab_session, spec)
    run_id, _ = launch(t, PRE, command="trap '' TERM; sleep 1000 & setsid sleep 1001 & wait")
    wait_for(lambda: ct.run(["pgrep", "-f", "sleep 1001"], check=False).ok, 30)
    result = stop(t, run_id, grace=2)
    assert result.signal == "KILL" and result.exit_code == 137  # (stop raises JobError where anything is left)
    assert ct.run(["pgrep", "-f", "sleep 100[01]"], check=False).exit_code == 1
    again = stop(t, run_id, grace=2)
    assert again.was_alive is False


def test_status_json_parses_and_shows_the_running_job(lab_hosts, lab_session, deployed):
    t = target_of(lab_session, 200)
    # Two readings: the first step's (it compiles) is not the run's speed, the second is (issue 33).
    run_id, _ = launch(t, PRE, command="echo '0.4 Ktok/s'; echo '3.0 Ktok/s'; sleep 60", force=True)
    try:
        wait_for(lambda: "3.0 Ktok/s" in state(t, run_id).tail, 30)
        env = {**os.environ, "REMOTE_HOSTS_FILE": str(lab_hosts), "PYTHONPATH": str(ROOT)}
        r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", "status", "--json"],
                           env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        data = json.loads(r.stdout)
        entry = next(c for c in data["containers"] if c["container"] == 200)
        assert entry["run"]["id"] == run_id and entry["run"]["alive"] and entry["run"]["throughput"] == 3.0
        assert entry["run"]["low"] is True
        assert next(c for c in data["containers"] if c["container"] == 999)["error"]
    finally:
        stop(t, run_id, grace=2)


def test_preflight_and_status_read_a_container_in_one_round_trip(lab_session, deployed):
    """Both read the facts probe once per container: deploy records, checkout, venv against its lock,
    warmups, GPUs and torch for preflight; the run's state and the venv's lock for status."""
    from support import CountingTransport

    from remote.ops.jobs import _container_job, preflight

    counting = CountingTransport(lab_session.transport(lab_session.config.hosts["lab"]))
    spec = lab_session.config.container(200)
    with Session(lab_session.config, transport_factory=lambda h: counting) as s:
        try:
            said = "\n".join(preflight(target_of(s, 200)).notes)
        except JobError as exc:  # not warmed up in this session: still one read
            said = str(exc)
        assert len(counting.calls) == 1, counting.calls
        # Every check ran on that one read: the checkout and venv passed, the warmups were looked at.
        assert "checkout clean at" in said or said.startswith("no warmup for this commit"), said
        counting.calls.clear()
        entry = _container_job(s, spec, "running")
        assert len(counting.calls) == 1, counting.calls
    assert entry.error is None, entry
    lock = lab_session.container(200).run(["sha256sum", "/root/venv/remote-lock.txt"]).out.split()[0]
    assert entry.venv_lock == lock


def test_logs_without_follow_prints_what_is_there_and_returns_while_the_job_runs(lab_session, spec):
    t = target(lab_session, spec)
    run_id, _ = launch(t, PRE, command="echo first; sleep 300")
    try:
        wait_for(lambda: "first" in state(t, run_id).tail, 30)
        lines, done = [], []
        thread = threading.Thread(target=lambda: done.append(show_log(target(lab_session, spec, lines), run_id)),
                                  daemon=True)
        thread.start()
        thread.join(timeout=60)
        assert done, "logs without --follow did not return while the job runs"
        assert lines[0] == "first" and done[0].alive and "still running" in lines[-1]
    finally:
        stop(t, run_id, grace=2)


@pytest.mark.fault("Reused pid in a pid file", promise="never signalled: processes are found by the run's marker")
def test_stop_never_signals_a_process_that_is_not_the_runs(lab_session, ct, spec):
    t = target(lab_session, spec)
    run_id, _ = launch(t, PRE, command="sleep 300")
    stranger = int(ct.run(["bash", "-c", "setsid sleep 1234 </dev/null >/dev/null 2>&1 & echo $!"]).out)
    try:
        run = f"{spec.train.run_dir}/{run_id}"
        ct.run(["bash", "-c", f"echo {stranger} > {run}/pid"])  # a reused pid, as after a container restart
        result = stop(t, run_id, grace=2)
        assert result.run == run_id and ct.run(["kill", "-0", str(stranger)], check=False).ok
        assert ct.run(["pgrep", "-f", "^sleep 300$"], check=False).exit_code == 1  # found by its marker instead
        second, _ = launch(t, PRE, command="sleep 301")
        ct.run(["rm", f"{spec.train.run_dir}/{second}/pid"])  # no pid file: never `kill -- -0` (our own group)
        assert stop(t, second, grace=2).run == second  # raises JobError where anything is left
        assert ct.run(["kill", "-0", str(stranger)], check=False).ok
    finally:
        ct.run(["kill", str(stranger)], check=False)


@pytest.mark.fault("Job killed outside remote", promise="reported LOST, never as exited")
def test_a_job_that_vanished_is_reported_lost_not_exited(lab_session, ct, spec):
    t = target(lab_session, spec)
    run_id, pid = launch(t, PRE, command="sleep 300")
    ct.run(["bash", "-c", f"kill -KILL -- -{pid}"])  # the whole job, wrapper included: no exit record
    wait_for(lambda: not state(t, run_id).alive, 30)
    st = state(t, run_id)
    assert st.lost and st.exit is None
    lines = []
    final = show_log(target(lab_session, spec, lines), run_id)
    assert final_status(final) == 1 and "LOST" in lines[-1]


@pytest.mark.fault("Container init that does not reap (zombie leader)", promise="the run ends and following returns")
def test_a_job_ends_cleanly_where_the_containers_init_does_not_reap(lab, deployed):
    lab.start_container(203, reap=False)
    hosts = lab.dir / "hosts-203.yaml"
    hosts.write_text(lab.hosts_yaml((203,)) + "code: {path: /root}\n")
    with Session(config.load(str(hosts)), agent=True) as s:
        spec, ct = s.config.container(203), s.container(203)
        run_id, pid = launch(target(s, spec), PRE, command="echo done")
        wait_for(lambda: ct.run(["ps", "-o", "stat=", "-p", str(pid)], check=False).out.strip().startswith("Z"), 30)
        lines, done = [], []
        t = threading.Thread(target=lambda: done.append(show_log(target(s, spec, lines), run_id, follow=True)),
                             daemon=True)
        t.start()
        t.join(timeout=60)
        assert done, "following a finished job whose leader is a zombie did not return"
        assert done[0].exit == 0 and lines[0] == "done"


@pytest.mark.fault("`ps` in the container during a run",
                   promise="the wrapper and the watch show as short commands from verified files, not whole scripts")
def test_ps_shows_the_wrapper_and_the_watch_as_short_commands_from_verified_files(lab_session, ct, spec):
    from remote.ops.jobs import installed
    from remote import shell

    job, job_sha, _ = installed("job.sh", shell.load("job"))
    watch, watch_sha, _ = installed("watch.py", shell.load_python("watch"))
    ct.run(["rm", "-f", job, watch])  # put there by the launch itself
    spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, run_dir="/root/runs-ps"))
    t = target(lab_session, spec)
    run_id, pid = launch(t, PRE, command="sleep 300")
    try:
        wait_for(lambda: watch in ct.run(["ps", "-eo", "args"]).out, 30)
        lines = [line for line in ct.run(["ps", "-eww", "-o", "args"]).out.splitlines()
                 if run_id in line or job in line or watch in line or "sleep 300" in line]
        run = f"{spec.train.run_dir}/{run_id}"
        assert f"bash {job} {run} {spec.code.path} 0  {watch}" in lines, lines
        assert any(line.endswith(f"-I -S {watch} {run} {run_id} {run}/watch-settings.json") for line in lines), lines
        assert len(lines) >= 3 and all(len(line) <= 300 for line in lines), lines  # wrapper, watch, the job
        assert ct.run(["sha256sum", job, watch]).out.split()[::2] == [job_sha, watch_sha]
    finally:
        stop(t, run_id, grace=2)


@pytest.mark.fault("A changed wrapper file in the container",
                   promise="launch rewrites it from remote's own and checks it by sha256 before it runs")
def test_a_tampered_wrapper_file_is_replaced_and_verified_before_it_runs(lab_session, ct, spec):
    t = target(lab_session, spec)
    from remote.ops.jobs import installed
    from remote import shell

    job, job_sha, _ = installed("job.sh", shell.load("job"))
    ct.script('mkdir -p "$(dirname "$1")" && echo "echo owned > /root/owned" > "$1"', job)
    run_id, _ = launch(t, PRE, command="echo ran")
    wait_for(lambda: not state(t, run_id).alive, 60)
    assert state(t, run_id).tail.split() == ["ran"]
    assert ct.run(["sha256sum", job]).out.split()[0] == job_sha
    assert not ct.run(["test", "-e", "/root/owned"], check=False).ok


@pytest.mark.fault("deploy --force moves the checkout under a run that restarts",
                   promise="each attempt's commit is recorded in the manifest and a changed one named in the log")
def test_a_restart_after_the_checkout_moved_records_the_commit_it_runs(lab_session, ct, spec):
    work = "/root/ck-attempts"
    commits = ct.script(f"rm -rf {work} && git init -q {work} && cd {work} && "
                        "for n in 1 2; do echo $n > f; git add f; "
                        "git -c user.name=t -c user.email=t@t commit -qm $n; git rev-parse HEAD; done && "
                        "git checkout -q HEAD~1").out.split()
    moved = dataclasses.replace(spec, code=dataclasses.replace(spec.code, path=work),
                                train=dataclasses.replace(spec.train, restarts=1, restart_on=()))
    cmd = (f"if [ $REMOTE_RESTART = 0 ]; then touch {work}.started; "
           f"while [ ! -e {work}.go ]; do sleep 0.1; done; exit 1; fi; git rev-parse HEAD")
    t = target(lab_session, moved)
    run_id, _ = launch(t, dataclasses.replace(PRE, commit=commits[0]), command=cmd)
    try:
        wait_for(lambda: ct.run(["test", "-e", f"{work}.started"], check=False).ok, 30)
        ct.script(f"git -C {work} checkout -q -f {commits[1]} && touch {work}.go")  # what deploy --force does
        wait_for(lambda: not state(t, run_id).alive, 60)
        final = state(t, run_id)
    finally:
        ct.run(["rm", "-rf", work, f"{work}.started", f"{work}.go"])
    assert final.exit == 0
    assert final.manifest.commit == commits[0]
    assert [a.commit for a in final.attempts] == commits
    assert f"-- attempt 2 runs commit {commits[1]}, not {commits[0]}" in final.tail
    assert final.tail.split()[-1] == commits[1]  # what the attempt ran is what its record says


@pytest.mark.fault("A deploy from another controller between train's preflight and launch",
                   promise="refused: preflight and launch hold one lease, so the manifest names the commit checked out")
def test_train_holds_the_lease_from_preflight_to_launch(lab_hosts, deployed, monkeypatch):
    from remote.errors import BusyError
    from remote.ops import jobs, oplock

    hosts = load_config(lab_hosts, **{"  command: python -m drafter.warmup --device {device}\n  devices: [0, 1]\n": "",
                                      "python -m drafter.train --target-gpus 0 --drafter-gpus 0,1 --steps 200 "
                                      "--log-interval 0.5": "sleep 300",
                                      "  run_dir: /root/runs": "  run_dir: /root/runs-lease"})
    tried = []
    real_check = jobs.check

    def check_then_another_controller(raw, spec, *args, **kwargs):  # between what preflight read and the launch
        pre = real_check(raw, spec, *args, **kwargs)
        try:
            with oplock.hold(session.container(200), "deploy", holder="another controller"):
                tried.append("got the lease")
        except BusyError as exc:
            tried.append(str(exc))
        return pre

    monkeypatch.setattr(jobs, "check", check_then_another_controller)
    with Session(config.load(str(hosts)), agent=True) as session:
        spec, ct = session.config.container(200), session.container(200)
        final = jobs.train(target_of(session, 200), force=True, follow=False)
        run = state(target_of(session, 200))
        try:
            assert final is None and len(tried) == 1 and "busy: `train` held by" in tried[0], tried
            head = ct.run(["git", "-C", spec.code.path, "rev-parse", "HEAD"]).out.strip()
            assert run["manifest"]["commit"] == head
        finally:
            stop(target_of(session, 200), run.run, grace=2)
