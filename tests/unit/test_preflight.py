"""Train's preflight as data: the facts probe's answer in, notes or every problem at once out."""

import json

import pytest
from test_doctor import COMMIT, HOSTS, child, healthy_raw

from remote import config
from remote.errors import JobError
from remote.ops.jobs import check, only_warmup_missing


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    return config.load(str(path)).container(200)


def ready(spec):
    """A deployed, warmed container as preflight reads it (parts facts.PREFLIGHT)."""
    raw = healthy_raw(spec)
    raw["venv"]["dists"] = {n: d["version"] for n, d in json.loads(raw["venv_run"]["out"])["dists"].items()}
    folder = next(iter(raw["cache"]["folders"]))
    raw["cache"]["filled"] = {folder: True}
    warmups = [dict(json.loads(line), new_files=40) for line in raw["cache"]["warmups"].splitlines()]
    raw["cache"]["warmups"] = "".join(json.dumps(w) + "\n" for w in warmups)
    return raw


def problems(raw, spec) -> list[str]:
    with pytest.raises(JobError) as exc:
        check(raw, spec)
    text = str(exc.value)
    return [line[4:] for line in text.splitlines()[1:]] if "problems, nothing was started" in text else [text]


def test_a_ready_container_passes_with_its_notes(spec):
    pre = check(ready(spec), spec)
    assert pre.commit == COMMIT and [g["name"] for g in pre.gpus] == ["H200", "H200"]
    assert f"checkout clean at {COMMIT[:12]}" in pre.notes and "warmup done for 5, 6" in pre.notes
    assert any(n.startswith("2 GPU(s): H200, driver 570.86; torch sees 2") for n in pre.notes)


def test_every_problem_of_the_story_is_named_at_once(spec):
    raw = ready(spec)
    raw["code"]["status"] = " M drafter/model.py\n"  # a hack in the model code
    raw["venv"]["dists"].update(torch="2.11.0+cu130", sglang="0.5.1")  # the polluted venv
    raw["cache"]["filled"] = {}  # the deleted cache, its warmups still recorded
    found = problems(raw, spec)
    assert len(found) == 3, found
    assert found[0].startswith("checkout /root/dflash has edits (drafter/model.py)")
    assert "version differs: torch locked 2.11.0+cu128, installed 2.11.0+cu130" in found[1]
    assert "extra package not in the spec: sglang==0.5.1" in found[1] and "`remote deploy` rebuilds it" in found[1]
    assert "is gone or empty although its warmups compiled into it" in found[2]


def test_a_warmup_that_compiled_nothing_does_not_ask_for_a_cache(spec):
    """A warmup command without torch.compile leaves the cache empty: that is not a deleted cache."""
    raw = ready(spec)
    raw["cache"]["filled"] = {}
    warmups = [dict(json.loads(line), new_files=0, cache_files=0) for line in raw["cache"]["warmups"].splitlines()]
    raw["cache"]["warmups"] = "".join(json.dumps(w) + "\n" for w in warmups)
    assert check(raw, spec).notes


def test_gpus_torch_and_git(spec):
    raw = ready(spec)
    raw["torch"] = child({**json.loads(raw["torch"]["out"]), "device_count": 1})
    # A 12.8 build on a driver that supports 12.8 suits it: no hint that it might not (issue 34).
    assert problems(raw, spec) == ["nvidia-smi lists 2 GPU(s) but torch sees 1: the venv's CUDA build (12.8) suits "
                                   "the driver (570.86, up to CUDA 12.8): check the container's GPU nodes against the "
                                   "host's (`remote doctor --gpu` compares each)"]
    raw["torch"] = child({**json.loads(raw["torch"]["out"]), "cuda_build": "13.0"})
    assert problems(raw, spec) == ["nvidia-smi lists 2 GPU(s) but torch sees 1: the venv's CUDA build (13.0) is newer "
                                   "than the driver (570.86) supports (up to CUDA 12.8): pin a torch build for this "
                                   "driver (venv.packages), then remote deploy"]
    raw = ready(spec)
    raw["torch"] = child({"torch_error": "ImportError: libcudnn.so.9: cannot open shared object file"})
    assert problems(raw, spec) == ["`import torch` fails in the venv (ImportError: libcudnn.so.9: cannot open "
                                   "shared object file): `remote deploy` rebuilds it"]
    raw = ready(spec)
    raw["gpus"] = {"rc": None, "out": "", "err": "timed out"}
    assert problems(raw, spec)[0].startswith("nvidia-smi did not answer within 10 s")
    raw = ready(spec)
    raw["code"].update(head=None, git_error="fatal: detected dubious ownership in repository at '/root/dflash'")
    assert problems(raw, spec) == ["git fails in the checkout /root/dflash: fatal: detected dubious ownership in "
                                   "repository at '/root/dflash'"]


def test_not_deployed_says_to_deploy(spec):
    raw = ready(spec)
    raw["venv"]["record"] = None
    with pytest.raises(Exception, match="no deployed venv at /root/venv: run `remote deploy` first"):
        check(raw, spec)


def test_a_venv_whose_interpreter_does_not_run(spec):
    raw = ready(spec)
    raw["venv"]["dists"] = None
    raw["venv_run"] = {"rc": 1, "out": "", "err": "error while loading shared libraries"}
    found = problems(raw, spec)
    assert any("the venv's interpreter does not run" in p for p in found), found


def test_train_warmup_warms_only_where_the_warmup_is_all_that_is_missing(spec):
    raw = ready(spec)
    raw["cache"]["warmups"] = ""
    with pytest.raises(JobError) as alone:
        check(raw, spec)
    assert only_warmup_missing(alone.value)
    raw["venv"]["dists"]["sglang"] = "0.5.1"  # and a polluted venv: no warmup into it
    with pytest.raises(JobError) as both:
        check(raw, spec)
    assert not only_warmup_missing(both.value) and "no warmup" in str(both.value)


def test_what_a_warmup_would_misrecord_is_named(spec):
    from remote.ops import warmup as wm

    raw = ready(spec)
    state = wm.deployed_in(raw, spec)
    assert wm.unlike_deployed(raw, spec, state) == []
    raw["code"]["status"] = " M drafter/model.py\n"
    raw["venv"]["dists"].update(sglang="0.5.1")
    found = wm.unlike_deployed(raw, spec, state)
    assert found[0] == "checkout /root/dflash has edits (drafter/model.py)"
    assert "extra package not in the spec: sglang==0.5.1" in found[1]
    raw["code"]["status"], raw["code"]["head"] = "", "f" * 40
    assert wm.unlike_deployed(raw, spec, state)[0].startswith("checkout /root/dflash is at ffffffffffff, not")


@pytest.mark.fault("Facts probe's interpreter", "the probe runs with the system python whatever the caller's "
                   "PATH (preflight, status, warmup and exec put the venv first): a broken venv cannot hide itself")
def test_the_probe_runs_with_the_system_python_not_the_venvs(spec, tmp_path):
    from remote import facts
    from remote.lab.testing import Expect, FakeTransport
    from remote.target import resolve
    from remote.transport.pct import DEFAULT_PATH
    from remote.transport.session import Session

    seen = []
    fake = FakeTransport([Expect(lambda argv: seen.append(argv) or True, stdout='{"parts": []}')] * 2)
    t = resolve(Session(config.load(str(tmp_path / "hosts.yaml")), transport_factory=lambda h: fake), 200)
    t.ct.run(["true"])  # what its jobs run with: the venv first on PATH
    assert f"PATH={spec.venv.path}/bin:{DEFAULT_PATH}" in seen.pop()
    facts.read_raw(t, facts.DEPLOYED)
    assert f"PATH={DEFAULT_PATH}" in seen[0] and spec.venv.python in seen[0]
    assert not any(a.startswith("PATH=") and spec.venv.path in a for a in seen[0])


@pytest.mark.fault("No code.repo (the code put there by hand)", "warmup and train take the checkout's HEAD as its "
                   "commit instead of asking for a deploy that would never ship code")
def test_without_code_repo_the_checkout_head_is_the_commit(spec, tmp_path):
    from remote.errors import DeployError
    from remote.ops import warmup as wm

    raw = ready(spec)
    raw["code"]["record"] = None  # deploy never synced it: there is no code.repo to ship
    assert not spec.code.repo
    state = wm.deployed_in(raw, spec)
    assert state["code"]["commit"] == raw["code"]["head"] == COMMIT
    assert check(raw, spec).commit == COMMIT
    raw["code"]["exists"] = False
    with pytest.raises(DeployError, match="no checkout at /root/dflash and code.repo is not set: set code.repo"):
        wm.deployed_in(raw, spec)
    path = tmp_path / "with-repo.yaml"
    path.write_text(HOSTS + "code: {repo: /src/dflash}\n")
    with pytest.raises(DeployError, match="run `remote deploy` first"):
        wm.deployed_in(raw, config.load(str(path)).container(200))


@pytest.mark.fault("Ctrl-C while train starts the job",
                   promise="the run id is printed before the job starts; an interrupted start names the run and "
                           "how to see, follow or stop it (exit 130)")
def test_a_ctrl_c_during_the_launch_names_the_run_it_may_have_started():
    """The launch command is where the job starts: its run id is said before it, and a KeyboardInterrupt there
    (Ctrl-C while the container starts the job) names that run and what to do, then goes on up (exit 130)."""
    from remote.lab.testing import Expect, FakeTransport
    from remote.ops.jobs import Preflight, launch
    from remote.target import resolve
    from remote.transport.session import Session

    class Held:
        def check(self):
            pass

    fleet = config.parse({"hosts": {"h": {"address": "a"}}, "containers": {200: {"host": "h"}},
                          "train": {"command": "sleep 300"}}, "h.yaml")
    fake = FakeTransport([Expect(lambda argv: "launch" in argv, raises=KeyboardInterrupt())])
    said: list[str] = []
    t = resolve(Session(fleet, events=lambda e: said.append(e.line), transport_factory=lambda h: fake), 200)
    pre = Preflight(commit="0" * 40, venv={"verify": {}}, gpus=None, notes=[])
    with pytest.raises(KeyboardInterrupt):
        launch(t, pre, run_id="20261202-010203-abcd", held=Held())
    assert said[0] == "==> run 20261202-010203-abcd starting in container 200"
    assert said[1].startswith("-- interrupted while run 20261202-010203-abcd was starting in container 200: it may "
                              "be running.") and "`remote stop -c 200 --run 20261202-010203-abcd` ends it" in said[1]


def _repo_with_commits(path, n):
    """A local repository with n commits: their hashes, oldest first."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              check=True, capture_output=True, text=True).stdout.strip()

    path.mkdir()
    git("init", "-q")
    made = []
    for i in range(n):
        (path / "train.py").write_text(f"print({i})\n")
        git("add", "train.py")
        git("commit", "-q", "-m", f"c{i}")
        made.append(git("rev-parse", "HEAD"))
    return made


@pytest.mark.fault("A new commit in code.repo since the deploy (ref: HEAD)",
                   promise="train's preflight compares the deployed checkout with what the hosts file pins now and "
                           "refuses, naming `remote deploy` or force; with force it trains the deployed commit "
                           "and says so")
def test_a_stale_checkout_is_refused_naming_deploy_or_force(tmp_path):
    from remote.ops import code as codemod

    new = _repo_with_commits(tmp_path / "trainer", 2)[-1]
    old = COMMIT  # what was deployed (and warmed) before the new commit
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS + "code: {repo: trainer, path: /root/dflash}\n")
    spec = config.load(str(path)).container(200)
    raw = ready(spec)
    raw["code"]["record"] = {"commit": old, "ref": "HEAD", "dirty": False, "base": old}
    pin = codemod.pin_of(spec.code.repo, spec.code.ref)
    assert isinstance(pin, codemod.Pin) and pin.commit == new
    assert problems_with(raw, spec, pin) == [
        f"the checkout is at {old[:12]}, but the hosts file pins {new[:12]} (code.ref HEAD of {spec.code.repo}): "
        "`remote deploy` ships it, or pass force=True to train the deployed commit"]
    pre = check(raw, spec, pin=pin, force=True)
    assert any(n.startswith(f"!! the checkout is at {old[:12]}") and n.endswith("(forced)") for n in pre.notes)
    assert f"checkout clean at {old[:12]}" in pre.notes
    # Deployed at the pinned commit: clean, and said so.
    pin = codemod.Pin(pin.repo, "HEAD", old)
    assert f"checkout clean at {old[:12]}, as the hosts file pins (code.ref HEAD)" in check(raw, spec, pin=pin).notes
    # A repository this machine cannot read: a note, never a refusal.
    assert any("not compared" in n for n in check(raw, spec, pin="code.repo: /x is not a git repository").notes)


def problems_with(raw, spec, pin) -> list[str]:
    with pytest.raises(JobError) as exc:
        check(raw, spec, pin=pin)
    text = str(exc.value)
    return [line[4:] for line in text.splitlines()[1:]] if "problems, nothing was started" in text else [text]


@pytest.mark.fault("A dry chain (`deploy warmup train --dry`)",
                   promise="each step plans from the earlier steps' planned state: the dry warmup and train name the "
                           "commit the dry deploy would check out; one line per remote command, scripts elided")
def test_a_dry_chain_plans_each_step_from_what_the_dry_steps_before_would_make(spec, tmp_path):
    """Issue 40 item 2 through the library: after a dry deploy recorded what it would check out (dryplan), a dry
    warmup and a dry train say that commit, not the one the checkout is at, and print one line a command."""
    import remote
    from remote.lab.testing import Expect, FakeTransport
    from remote.ops import dryplan
    from remote.transport.session import Session

    planned = "b" * 40
    raw = ready(spec)
    fake = FakeTransport([Expect(lambda argv: True, stdout=json.dumps(raw)) for _ in range(2)])
    lines = []
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    dryplan.forget()
    try:
        with remote.open(path, dry=True, progress=lines.append) as fleet:
            fleet._made = Session(fleet.config, dry=True, events=fleet._emit.event,
                                  transport_factory=lambda host: fake)
            dryplan.record(fleet.config.containers[200], code={"commit": planned, "ref": "HEAD", "dirty": False})
            ct = fleet.container(200)
            ct.warmup(devices=["5"])
            run = ct.train()
    finally:
        dryplan.forget()
    assert any(line.startswith("==> warmup of 1 device(s)") and f" at {planned[:12]}," in line for line in lines), lines
    assert f'"commit": "{planned}"' not in "".join(lines)  # the manifest is elided: <text, N lines>
    assert any("bash -c <warmup.sh, " in line for line in lines) and any("<launch.sh, " in line for line in lines)
    assert any(f"planned from the dry steps before: checkout at {planned[:12]}" in line for line in lines), lines
    assert all("\n" not in line for line in lines) and run.id and not fake.expected


def test_the_command_line_prints_a_dry_run_in_one_line_a_command_and_in_full_with_verbose(spec, tmp_path, monkeypatch,
                                                                                         capsys):
    """Issue 40 item 2 through the command line: `remote warmup --dry` prints the plan's `==>` line and one line per
    remote command, its scripts elided; `--verbose` adds each command in full."""
    from remote import cli
    from remote.lab.testing import Expect, FakeTransport
    from remote.ops import session as sessions
    from remote.transport.session import Session

    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    raw = json.dumps(ready(spec))

    real = sessions.open_session

    def fake_session(config, **kw):
        fake = FakeTransport([Expect(lambda argv: True, stdout=raw) for _ in range(5)])  # reads: the probe's answer
        return real(config, **{**kw, "transport": lambda host: fake})

    monkeypatch.setattr(sessions, "open_session", fake_session)
    outputs = {}
    for verbose in ([], ["--verbose"]):
        assert cli.run(["warmup", "-c", "200", "--devices", "5", "--dry", *verbose, "--hosts", str(path)]) == 0
        outputs[bool(verbose)] = capsys.readouterr().out
    short, full = outputs[False], outputs[True]
    assert short.splitlines()[0].startswith("==> warmup of 1 device(s) one at a time at ")
    assert "bash -c <oplock.sh, " in short and "bash -c <warmup.sh, " in short and "  full: " not in short
    assert len(short.splitlines()) <= 6, short
    assert "  full: " in full and "# The per-container operation lease" in full and len(full.splitlines()) > 60
    shown = full.splitlines()
    first = next(i for i, line in enumerate(shown) if line.startswith("  full: "))
    assert "bash -c <oplock.sh, " in shown[first - 1]  # each command in full under its line


def test_the_command_line_refuses_a_stale_checkout_naming_deploy_or_force_and_doctor_warns(tmp_path, monkeypatch,
                                                                                          capsys):
    """Issue 40 item 1 through the command line: `remote train` said `checkout clean` and doctor `healthy` while
    the hosts file pinned a newer commit; train refuses naming `remote deploy` or --force (exit 1, nothing
    started), doctor warns (exit 1)."""
    from remote import cli
    from remote.lab.testing import Expect, FakeTransport
    from remote.ops import session as sessions
    from remote.transport.session import Session

    new = _repo_with_commits(tmp_path / "trainer", 1)[-1]
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS + "code: {repo: trainer, path: /root/dflash}\n")
    spec = config.load(str(path)).container(200)
    raw = ready(spec)
    raw["code"]["record"] = {"commit": COMMIT, "ref": "HEAD", "dirty": False, "base": COMMIT}
    answers = []

    real = sessions.open_session

    def fake_session(config, **kw):
        # every command: the probe's answer (train's lease commands get it too and ignore it)
        fake = FakeTransport([Expect(lambda argv: answers.append(argv) or True, stdout=json.dumps(raw))
                              for _ in range(20)])
        return real(config, **{**kw, "transport": lambda host: fake})

    monkeypatch.setattr(sessions, "open_session", fake_session)
    assert cli.run(["train", "-c", "200", "--hosts", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"the checkout is at {COMMIT[:12]}, but the hosts file pins {new[:12]} (code.ref HEAD of " in err, err
    assert "`remote deploy` ships it, or pass --force to train the deployed commit" in err and "force=True" not in err
    assert cli.run(["doctor", "-c", "200", "--hosts", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"[warning] the checkout is at {COMMIT[:12]}, but the hosts file pins {new[:12]}" in out, out


def test_the_library_refuses_a_stale_checkout_in_its_own_words_and_doctor_finds_it(tmp_path):
    """Issue 40 item 1 through the library: Container.train() raises JobError naming `force=True` (no CLI flag),
    nothing is started; Container.doctor() has the checkout-stale warning."""
    import remote
    from remote.lab.testing import Expect, FakeTransport
    from remote.transport.session import Session

    new = _repo_with_commits(tmp_path / "trainer", 1)[-1]
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS + "code: {repo: trainer, path: /root/dflash}\n")
    spec = config.load(str(path)).container(200)
    raw = ready(spec)
    raw["code"]["record"] = {"commit": COMMIT, "ref": "HEAD", "dirty": False, "base": COMMIT}
    fake = FakeTransport([Expect(lambda argv: True, stdout=json.dumps(raw)) for _ in range(20)])
    with remote.open(path) as fleet:
        fleet._made = Session(fleet.config, transport_factory=lambda host: fake)
        ct = fleet.container(200)
        with pytest.raises(remote.JobError) as refused:
            ct.train()
        found = ct.doctor()
    message = str(refused.value)
    assert f"but the hosts file pins {new[:12]}" in message and "pass force=True to train the deployed commit" in message
    assert "--force" not in message
    assert not any("launch" in " ".join(argv) for argv, _ in fake.calls)  # nothing was started
    stale = [f for f in found if f.code == "checkout-stale"]
    assert stale and stale[0].severity == "warning" and new[:12] in stale[0].what


def stray(spec, peak=None, marked=()):
    raw = ready(spec)
    raw["gpus"] = child(out="0, H200, 570.86, 133200, 143771\n1, H200, 570.86, 1, 143771\n")
    raw["apps"] = child(out="4242, python, 133120\n")
    raw["apps_cmdline"] = {"4242": "python hog.py --hold 130g"}
    raw["jobs"] = {"runs": {"r1": {"marked": list(marked)}}}
    raw["known_good"] = {**raw["known_good"], "gpu_mem_peak_mib": peak}
    return raw


@pytest.mark.fault("A GPU process of no run holding 130 GiB (train's preflight)", promise="named (pid, MiB, "
                   "command) as a warning; the launch is refused where the GPU memory left is below what the last "
                   "good run used at its peak")
def test_a_stray_gpu_process_is_named_and_refused_where_too_little_memory_is_left(spec):
    pre = check(stray(spec, peak=100 * 1024), spec)  # 150.7 GiB free: enough
    [note] = [n for n in pre.notes if "no run" in n]
    assert note.startswith("!! GPU processes of no run hold 130.0 GiB: pid 4242 (133120 MiB): python hog.py --hold "
                           "130g: they take memory") and "remote exec -c 200 'kill PID'" in note
    assert [n for n in check(stray(spec), spec).notes if "no run" in n] == [note]  # no known figure: a warning
    [why] = problems(stray(spec, peak=200 * 1024), spec)
    assert why.startswith("the GPUs have 150.7 GiB free of 280.8 GiB, less than the last good run "
                          "20261130-1012-ab12 used (200.0 GiB at its peak): processes of no run hold 130.0 GiB: "
                          "pid 4242 (133120 MiB): python hog.py --hold 130g")
    # A run's own process (train --force beside it) is no stray, and its memory counts as the run's to give back.
    pre = check(stray(spec, peak=200 * 1024, marked=[4242]), spec)
    assert not [n for n in pre.notes if "no run" in n]


def test_a_known_good_run_records_the_gpu_memory_its_watch_saw_at_its_peak(spec):
    from remote.facts import parse
    from remote.facts import runs as runfacts
    from remote.facts.runs import RunState
    from remote.runs.knowngood import make_record
    from remote.ops.logs import Watch

    facts = parse(ready(spec), spec, (1000.0, 1000.5))
    record = make_record(facts, spec, RunState("r1", watch=runfacts.Watch(gpu={"mem_peak_mib": 180000.0})), Watch(), "x")
    assert record["gpu_mem_peak_mib"] == 180000.0
