"""Lab tier: `deploy` with real uv, the real CPU torch wheel and real git in a real container."""

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import CountingTransport, load_config

from remote.cli.format import deploy_text
from remote.events import Output
from remote import config
from remote.ops.deploy import deploy
from remote.errors import BusyError, DeployError
from remote.transport.session import Session
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_deploy_installs_the_pinned_torch_and_the_exact_commit(deployed, ct, demo_repo):
    assert ct.run(["python", "-c", "import torch; print(torch.__version__)"]).out.strip() == "2.13.0+cpu"
    assert ct.run(["readlink", "/root/venv"]).out.startswith("/root/venv.versions/")
    assert ct.run(["git", "-C", "/root/dflash", "rev-parse", "HEAD"]).out.strip() == git(demo_repo, "rev-parse", "HEAD")
    assert ct.run(["git", "-C", "/root/dflash", "status", "--porcelain", "--untracked-files=no"]).out == ""
    lock = ct.run(["bash", "-c", "cat /root/venv/remote-lock.txt"]).out
    assert "torch==2.13.0+cpu" in lock and "--hash=sha256:" in lock
    assert ct.run(["python", "-c", "import remote_guard"]).ok  # the compile guard ships with the venv


def test_console_scripts_and_activate_name_the_final_path(deployed, ct):
    real = ct.run(["readlink", "-f", "/root/venv"]).out.strip()
    assert real.startswith("/root/venv.versions/")
    # One write(2) per rank: both ranks share the pipe, and a short write is never interleaved.
    ct.run(["tee", "/root/rank.py"], stdin=b'import os\nos.write(1, f"rank {os.environ[\'RANK\']}\\n".encode())\n')
    # torchrun is a console script: its shebang must name a python that exists. (--local-addr: the lab
    # containers' host names do not resolve, and the rendezvous store would wait for them forever.)
    out = ct.run(["/root/venv/bin/torchrun", "--standalone", "--local-addr", "127.0.0.1", "--nproc-per-node", "2",
                  "/root/rank.py"], timeout=300).out
    assert sorted(line for line in out.splitlines() if line.startswith("rank ")) == ["rank 0", "rank 1"], out
    shebang = ct.run(["head", "-n", "1", "/root/venv/bin/torchrun"]).out.strip()
    assert shebang == f"#!{real}/bin/python"
    activate = ct.run(["cat", "/root/venv/bin/activate"]).out
    assert real in activate and ".partial" not in activate and ".building" not in activate
    assert ct.run(["/root/venv/bin/numpy-config", "--version"]).out.strip() == "2.2.6"  # a pip-installed CLI


def test_second_deploy_is_a_noop_in_one_round_trip(deployed, lab_session):
    counting = CountingTransport(lab_session.transport(lab_session.config.hosts["lab"]))
    s = Session(lab_session.config, transport_factory=lambda h: counting)  # a pct exec per command, counted
    summary = deploy(target_of(s, 200))
    assert summary.noop and summary.changed == (), deploy_text(summary)
    assert len(counting.calls) == 1  # the probe, nothing else


@pytest.mark.fault("Edits made in the container's checkout",
                   promise="saved as a patch before the checkout moves; untracked files survive")
def test_edits_in_the_container_are_saved_then_reset_and_untracked_files_survive(deployed, ct, lab_session):
    ct.run(["bash", "-c", "echo '# HACK: skip the mask' >> /root/dflash/drafter/model.py; "
                          "echo weights > /root/dflash/ckpt.pt; mkdir -p /root/dflash/out && echo x > /root/dflash/out/log"])
    summary = deploy(target_of(lab_session, 200))
    patch = [s for s in summary.saved if s.endswith(".patch")]
    assert len(patch) == 1 and "+# HACK: skip the mask" in ct.run(["cat", patch[0]]).out
    assert ct.run(["git", "-C", "/root/dflash", "status", "--porcelain", "--untracked-files=no"]).out == ""
    assert "HACK" not in ct.run(["cat", "/root/dflash/drafter/model.py"]).out
    assert ct.run(["cat", "/root/dflash/ckpt.pt"]).out == "weights\n"
    assert ct.run(["cat", "/root/dflash/out/log"]).out == "x\n"


def test_untracked_file_replaced_by_a_new_commit_is_saved(deployed, ct, lab_session, demo_repo):
    ct.run(["bash", "-c", "echo 'container version' > /root/dflash/notes.txt"])
    (demo_repo / "notes.txt").write_text("committed version\n")
    git(demo_repo, "add", "notes.txt")
    git(demo_repo, "commit", "-qm", "add notes")
    try:
        summary = deploy(target_of(lab_session, 200))
        tar = [s for s in summary.saved if s.endswith(".tar")]
        assert len(tar) == 1
        assert ct.run(["tar", "-xOf", tar[0], "notes.txt"]).out == "container version\n"
        assert ct.run(["cat", "/root/dflash/notes.txt"]).out == "committed version\n"
    finally:
        git(demo_repo, "rm", "-q", "notes.txt")
        git(demo_repo, "commit", "-qm", "drop notes")


@pytest.mark.fault("Uncommitted local changes", promise="refused unless --allow-dirty")
def test_dirty_local_tree_is_refused_unless_allowed(deployed, lab_session, demo_repo, ct):
    model = demo_repo / "drafter" / "model.py"
    original = model.read_text()
    model.write_text(original + "\n# local experiment\n")
    try:
        with pytest.raises(DeployError, match=r"uncommitted changes.*allow_dirty=True[\s\S]*drafter/model.py"):
            deploy(target_of(lab_session, 200))
        deploy(target_of(lab_session, 200), allow_dirty=True)
        assert "# local experiment" in ct.run(["cat", "/root/dflash/drafter/model.py"]).out
        assert '"dirty": true' in ct.run(["cat", "/root/dflash/.git/remote-deploy.json"]).out
    finally:
        model.write_text(original)
    deploy(target_of(lab_session, 200))
    assert '"dirty": false' in ct.run(["cat", "/root/dflash/.git/remote-deploy.json"]).out


@pytest.mark.fault("Hand-installed package in the venv", promise="reported by --check and removed by a rebuild")
def test_hand_installed_package_is_reported_and_removed_by_a_rebuild(deployed, lab_session, ct):
    # What `pip install sglang` leaves behind, as far as any package listing can tell.
    site = ct.run(["python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).out.strip()
    ct.run(["bash", "-c", f"mkdir -p {site}/sglang-0.5.0.dist-info && printf 'Metadata-Version: 2.1\\nName: sglang\\n"
                          f"Version: 0.5.0\\n' > {site}/sglang-0.5.0.dist-info/METADATA"])
    check = deploy(target_of(lab_session, 200), check=True)
    assert "extra package not in the spec: sglang==0.5.0" in check.drift
    assert any("venv would be rebuilt: the venv was changed by hand" in c for c in check.changed)
    before = ct.run(["readlink", "/root/venv"]).out
    lock = ct.run(["sha256sum", "/root/venv/remote-lock.txt"]).out.split()[0]
    summary = deploy(target_of(lab_session, 200))
    assert ct.run(["readlink", "/root/venv"]).out != before
    # The same spec resolves to the same lock, byte for byte: the warmups keyed on it still hold.
    assert ct.run(["sha256sum", "/root/venv/remote-lock.txt"]).out.split()[0] == lock
    assert "sglang" not in ct.run(["python", "-c", "import importlib.metadata as m; print([d.metadata['Name'] for d in "
                                                   "m.distributions()])"]).out
    assert any("previous venv" in k for k in summary.kept)
    rolled = deploy(target_of(lab_session, 200), rollback=True)
    assert ct.run(["readlink", "/root/venv"]).out == before and "rolled back" in rolled.changed[0]
    deploy(target_of(lab_session, 200))  # the rolled-back venv is polluted: deploy rebuilds or reuses the clean build
    assert deploy(target_of(lab_session, 200)).noop


@pytest.mark.fault("Hand-made venv at the venv path", promise="moved aside, never deleted; the swap is atomic")
def test_a_handmade_venv_is_exchanged_atomically_and_kept(lab_session):
    ct = lab_session.container(201)
    ct.run(["bash", "-c", "rm -rf /root/venv /root/venv.versions; mkdir -p /root/venv/bin && "
                          "ln -s /usr/bin/python3 /root/venv/bin/python && echo mine > /root/venv/marker"])
    summary = deploy(target_of(lab_session, 201))
    kept = [k for k in summary.kept if "hand-made venv" in k]
    assert kept, deploy_text(summary)
    handmade = kept[0].split("moved aside to ")[1].split(" ")[0]
    assert ct.run(["cat", f"{handmade}/marker"]).out == "mine\n"
    assert ct.run(["python", "-c", "import torch; print(torch.__version__)"]).out.strip() == "2.13.0+cpu"


@pytest.mark.fault("Controller SIGKILLed at 5 points of deploy",
                   promise="after each: a working venv, a clean checkout, the lease taken over after it expires, the next deploy completes")
def test_deploy_killed_mid_install_leaves_the_old_venv_working(deployed, lab_session, lab_hosts, ct):
    before = ct.run(["readlink", "/root/venv"]).out
    changed = load_config(lab_hosts, **{"packages: [torch==2.13.0+cpu, numpy==2.2.6]":
                                        "packages: [torch==2.13.0+cpu, numpy==2.2.6, mpmath==1.3.0]"})
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(changed), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", "from remote.cli import program; program.run()", "deploy",
                             "--container", "200"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 120
        while ".building" not in ct.run(["ls", "/root/venv.versions"]).out:
            assert time.monotonic() < end and proc.poll() is None, proc.stdout.read().decode()
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert ct.run(["readlink", "/root/venv"]).out == before
    assert ct.run(["python", "-c", "import torch"]).ok
    with Session(config.load(str(changed))) as s:
        # The killed controller's lease is refused until it expires (it can renew it no more), then taken over.
        end = time.monotonic() + 600
        while True:
            try:
                summary = deploy(target_of(s, 200))
                break
            except BusyError as exc:
                assert f"pid {proc.pid}" in str(exc) and time.monotonic() < end, str(exc)
                time.sleep(1)
    assert any(f"took over the expired operation lease of {os.uname().nodename} pid {proc.pid}" in c
               for c in summary.changed), deploy_text(summary)
    assert any("interrupted deploy" in c for c in summary.changed), deploy_text(summary)
    assert ".building" not in ct.run(["ls", "/root/venv.versions"]).out
    assert ct.run(["python", "-c", "import mpmath, torch"]).ok
    deploy(target_of(lab_session, 200))  # back to the session's spec (a swap to the kept build or a rebuild)


@pytest.mark.fault("--dry deploy", promise="prints the commands it would run and reads as what would change "
                   "(`would make N change(s)`, `would:`), never as done; nothing changes")
def test_dry_run_prints_the_commands_and_changes_nothing(deployed, lab_hosts, ct):
    before = ct.run(["readlink", "/root/venv"]).out
    changed = load_config(lab_hosts, **{"numpy==2.2.6]": "numpy==2.2.6, sympy==1.14.0]"})  # built by no other test
    got: list = []
    with Session(config.load(str(changed)), dry=True, events=got.append) as s:
        summary = deploy(target_of(s, 200))
    printed = [e.line for e in got if isinstance(e, Output)]  # the commands (deploy's steps are StepStarted)
    assert any("venv" in c for c in summary.changed)
    shown = deploy_text(summary)
    assert shown.startswith("deploy 200 (dry run, nothing changed): would make ") and "\n  would:   venv" in shown
    assert "changed:" not in shown, shown
    assert printed and all(p.startswith("ssh -p ") for p in printed)
    assert any("bash -c <venv-build.sh, " in p for p in printed), printed  # its uv pip sync, elided (issue 40)
    assert ct.run(["readlink", "/root/venv"]).out == before
    assert ".building" not in ct.run(["ls", "/root/venv.versions"]).out


@pytest.mark.fault("Unsatisfiable venv spec",
                   promise="the build fails; the current venv and checkout are untouched, the failed build removed")
def test_a_failed_venv_build_leaves_the_old_code_and_the_old_venv(deployed, lab_session, lab_hosts, ct, demo_repo):
    before_venv = ct.run(["readlink", "/root/venv"]).out
    before_head = ct.run(["git", "-C", "/root/dflash", "rev-parse", "HEAD"]).out.strip()
    (demo_repo / "NEW.txt").write_text("a new commit\n")
    git(demo_repo, "add", "NEW.txt")
    git(demo_repo, "commit", "-qm", "a commit that must not land with a failed venv")
    try:
        broken = load_config(lab_hosts, **{"numpy==2.2.6]": "numpy==2.2.6, numpy==0.0.1]"})  # unsatisfiable
        with Session(config.load(str(broken)), agent=True) as s:
            with pytest.raises(DeployError, match="the venv build failed"):
                deploy(target_of(s, 200))
        assert ct.run(["git", "-C", "/root/dflash", "rev-parse", "HEAD"]).out.strip() == before_head
        assert ct.run(["readlink", "/root/venv"]).out == before_venv
        assert ".building" not in ct.run(["ls", "/root/venv.versions"]).out  # the failed build was removed
    finally:
        git(demo_repo, "reset", "-q", "--hard", "HEAD~1")
    assert deploy(target_of(lab_session, 200)).noop


def _fake_run(ct, python: str) -> int:
    """A training job as jobs.state sees it: a run folder, `current`, and a live leader carrying the run's
    marker (REMOTE_RUN_ID), using `python`."""
    r = ct.script("""
export REMOTE_RUN_ID=t-job
mkdir -p /root/runs/t-job
ln -sfn t-job /root/runs/current
rm -f /root/runs/t-job/exit
: > /root/runs/t-job/log
setsid -f "$1" -c '
import numpy, os, time
open("/root/runs/t-job/pid.tmp", "w").write(str(os.getpid()))
os.rename("/root/runs/t-job/pid.tmp", "/root/runs/t-job/pid")
time.sleep(3600)' </dev/null >/dev/null 2>&1
for _ in $(seq 200); do [ -s /root/runs/t-job/pid ] && break; sleep 0.05; done
cat /root/runs/t-job/pid
""", python)
    return int(r.out.strip())


@pytest.mark.fault("Deploy during a run", promise="refused unless --force; the venv the run uses is never pruned")
def test_deploy_refuses_while_a_job_runs_and_never_prunes_the_venv_it_uses(deployed, lab_session, lab_hosts, ct):
    original = ct.run(["readlink", "/root/venv"]).out.strip()
    pid = _fake_run(ct, "/root/venv/bin/python")  # maps numpy's libraries from the current build
    try:
        spec_b = load_config(lab_hosts, **{"numpy==2.2.6]": "numpy==2.2.6, six==1.17.0]"})
        spec_c = load_config(lab_hosts, **{"numpy==2.2.6]": "numpy==2.2.6, six==1.16.0]"})
        with Session(config.load(str(spec_b)), agent=True) as s:
            with pytest.raises(BusyError) as exc:
                deploy(target_of(s, 200))
            assert f"run t-job (pid {pid}) is still running" in str(exc.value)
            assert "container(200).stop()" in str(exc.value) and "force=True" in str(exc.value) and exc.value.exit_code == 3
            assert ct.run(["readlink", "/root/venv"]).out.strip() == original
            forced = deploy(target_of(s, 200), force=True)
            assert any("t-job" in k and "left running" in k for k in forced.kept), forced
        with Session(config.load(str(spec_c)), agent=True) as s:
            # The original build is now older than the previous one: pruned, but for the job that uses it.
            summary = deploy(target_of(s, 200), force=True)
        assert any(f"venv {original}: a live process still uses it" in k for k in summary.kept), deploy_text(summary)
        assert ct.run(["test", "-e", f"{original}/remote-venv.json"]).ok
        assert ct.run(["kill", "-0", str(pid)]).ok
    finally:
        ct.run(["kill", "-KILL", str(pid)], check=False)
        ct.run(["rm", "-rf", "/root/runs/t-job", "/root/runs/current"])
    deploy(target_of(lab_session, 200))  # back to the session's spec
    assert deploy(target_of(lab_session, 200)).noop


@pytest.mark.fault("Deploy from a shallow clone", "a `git clone --depth 1` repository deploys: the container's "
                   "checkout is shallow at the same commits, then at exactly the commit, later commits shipped thin")
def test_deploy_from_a_shallow_clone(deployed, lab_hosts, demo_repo, tmp_path):
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{demo_repo}", str(clone))
    path = load_config(lab_hosts, **{f"repo: {demo_repo}": f"repo: {clone}", "path: /root/dflash": "path: /root/shallow"})
    with Session(config.load(str(path)), agent=True) as s:
        summary = deploy(target_of(s, 200))
        ct = s.container(200)
        head = git(clone, "rev-parse", "HEAD")
        assert ct.run(["git", "-C", "/root/shallow", "rev-parse", "HEAD"]).out.strip() == head, deploy_text(summary)
        assert ct.run(["git", "-C", "/root/shallow", "rev-parse", "--is-shallow-repository"]).out.strip() == "true"
        (clone / "NEW.md").write_text("next\n")
        git(clone, "add", "NEW.md")
        git(clone, "commit", "-qm", "next")
        deploy(target_of(s, 200))  # shipped thin against the shallow checkout's commit
        assert ct.run(["git", "-C", "/root/shallow", "rev-parse", "HEAD"]).out.strip() == git(clone, "rev-parse", "HEAD")
        assert ct.run(["cat", "/root/shallow/NEW.md"]).out == "next\n"
        ct.run(["rm", "-rf", "/root/shallow"])


@pytest.mark.fault("A kept build changed since it was built", "deploy swaps an older build of the same spec back "
                   "in only after checking it against its lock and verify; a changed one is rebuilt instead")
def test_a_kept_build_is_checked_before_it_is_swapped_back_in(deployed, lab_session, lab_hosts, ct):
    first = ct.run(["readlink", "/root/venv"]).out.strip()
    other = load_config(lab_hosts, **{"packages: [torch==2.13.0+cpu, numpy==2.2.6]":
                                      "packages: [torch==2.13.0+cpu, numpy==2.2.6, mpmath==1.3.0]"})
    with Session(config.load(str(other))) as s:
        deploy(target_of(s, 200))  # another spec: a new build; the first is kept as the previous one
    assert ct.run(["readlink", "/root/venv"]).out.strip() != first
    site = ct.run([f"{first}/bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).out.strip()
    ct.run(["bash", "-c", f"mkdir -p {site}/intruder-1.0.dist-info && printf 'Metadata-Version: 2.1\\nName: intruder\\n"
                          f"Version: 1.0\\n' > {site}/intruder-1.0.dist-info/METADATA"])
    lines = []
    deploy(target_of(dataclasses.replace(lab_session, events=lambda e: lines.append(e.line)), 200))  # back to the first spec: its kept build is polluted
    now = ct.run(["readlink", "/root/venv"]).out.strip()
    assert now != first, "\n".join(lines)
    assert any("is not as it was built (extra package not in the spec: intruder==1.0)" in line for line in lines), lines
    assert "intruder" not in ct.run(["/root/venv/bin/python", "-c", "import importlib.metadata as m; "
                                     "print([d.metadata['Name'] for d in m.distributions()])"]).out
