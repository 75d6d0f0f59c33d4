"""Pure functions of deploy, logs and jobs, tested as data."""

import pytest

from remote.ops import code as codemod
from remote.ops import logs, venv
from remote.config import VenvSpec
from remote.errors import DeployError
from remote.facts import parse_gpus


SPEC = VenvSpec(packages=("torch==2.11.0+cu128", "torchvision==0.26.0+cu128"))
LOCK = "torch==2.11.0+cu128 \\\n    --hash=sha256:ab\nfilelock==3.0\ntorchvision==0.26.0+cu128\n"


def probe(**venv_over):
    v = {"exists": True, "is_link": True, "real": "/root/venv.versions/h-1",
         "record": {"spec_hash": "h", "lock": LOCK}, "versions": ["h-1"],
         "dists": {"torch": "2.11.0+cu128", "filelock": "3.0", "torchvision": "0.26.0+cu128"}}
    v.update(venv_over)
    return {"venv": v}


def test_plan_none_when_spec_and_lock_match():
    assert venv.plan(SPEC, "h", probe()).action == "none"


@pytest.mark.parametrize("over, action, reason", [
    ({"exists": False}, "build", "no venv"),
    ({"record": None}, "build", "not built by remote"),
    ({"dists": None}, "build", "does not run"),
    ({"dists": {"torch": "2.11.0+cu128", "filelock": "3.0", "torchvision": "0.26.0+cu128", "sglang": "0.5"}},
     "build", "changed by hand"),
])
def test_plan_rebuilds(over, action, reason):
    p = venv.plan(SPEC, "h", probe(**over))
    assert p.action == action and reason in p.reason


def test_plan_swaps_to_an_existing_build_of_the_wanted_spec():
    names = ["h-1", "other-20260101-000000", "other-20260102-000000", "other-20260102-000000.building"]
    # 20260102 has no remote-venv.json yet (a build in progress or interrupted): never reused.
    p = venv.plan(SPEC, "other", probe(versions=names, finished=["h-1", "other-20260101-000000"]))
    assert (p.action, p.reuse) == ("swap", "other-20260101-000000")
    assert venv.plan(SPEC, "new", probe()).action == "build"


def test_plan_never_reuses_an_unfinished_build():
    names = ["h-1", "other-20260102-000000", "other-20260102-000000.building"]
    p = venv.plan(SPEC, "other", probe(versions=names, finished=["h-1"]))
    assert (p.action, p.reuse) == ("build", None)


def test_drift_lists_extra_changed_missing():
    d = venv.drift({"torch": "2.11.0+cu128", "filelock": "3.0"},
                   {"torch": "2.11.0+cu130", "flashinfer_python": "0.2", "SGLang": "0.5"})
    assert d.lines() == ["extra package not in the spec: flashinfer-python==0.2",
                         "extra package not in the spec: sglang==0.5",
                         "version differs: torch locked 2.11.0+cu128, installed 2.11.0+cu130",
                         "missing: filelock==3.0"]
    assert not venv.drift({"a": "1"}, {"A": "1"})


def test_pins_must_come_back_exactly():
    assert venv.check_pins(SPEC, {"torch": "2.11.0+cu128", "torchvision": "0.26.0+cu128"}) == []
    assert venv.check_pins(SPEC, {"torch": "2.11.0", "torchvision": "0.26.0+cu128"}) == [
        "torch: pinned 2.11.0+cu128, installed 2.11.0"]
    assert "installed nothing" in venv.check_pins(SPEC, {"torch": "2.11.0+cu128"})[0]
    with pytest.raises(DeployError, match="import torch failed"):
        venv.check_verify(VenvSpec(packages=("torch==1",)), {"dists": {"torch": "1"}, "torch": None,
                                                             "torch_error": "libcudart.so.12 missing"})


def verify(torch, cuda):
    return {"dists": {"torch": torch, "torchvision": "0.26.0+cu128"}, "torch": torch, "cuda_build": cuda}


def test_check_verify_accepts_the_pinned_cuda_build():
    venv.check_verify(SPEC, verify("2.11.0+cu128", "12.8"))
    venv.check_verify(VenvSpec(packages=("torch==2.13.0+cpu",)), {**verify("2.13.0+cpu", None),
                                                                 "dists": {"torch": "2.13.0+cpu"}})
    venv.check_verify(VenvSpec(packages=("numpy==2",)), {"dists": {"numpy": "2"}})  # no torch: nothing to check


@pytest.mark.parametrize("spec, info, message", [
    # The pin's local version came back, but torch itself was built for CUDA 13.0.
    (SPEC, verify("2.11.0+cu128", "13.0"), "torch==2.11.0+cu128 wants CUDA 12.8, torch 2.11.0+cu128 reports CUDA 13.0"),
    (SPEC, verify("2.11.0+cu128", None), "wants CUDA 12.8, torch 2.11.0+cu128 reports CUDA none (a CPU build)"),
    # No local version in the pin: the PyTorch index says which CUDA build is wanted.
    (VenvSpec(packages=("torch==2.11.0",), index_url="https://download.pytorch.org/whl/cu128"),
     {"dists": {"torch": "2.11.0"}, "torch": "2.11.0", "cuda_build": "13.0"},
     "index_url https://download.pytorch.org/whl/cu128 wants CUDA 12.8"),
    (VenvSpec(packages=("torch==2.13.0+cpu",)), {"dists": {"torch": "2.13.0+cpu"}, "torch": "2.13.0+cpu",
                                                "cuda_build": "12.8"}, "wants a CPU build"),
])
def test_check_verify_refuses_another_cuda_build(spec, info, message):
    with pytest.raises(DeployError, match="did not verify") as exc:
        venv.check_verify(spec, info)
    assert message in str(exc.value)


def test_cuda_build_of_a_cu130_wheel_for_a_cu128_pin_fails():
    with pytest.raises(DeployError) as exc:
        venv.check_verify(SPEC, verify("2.11.0+cu130", "13.0"))
    assert "torch: pinned 2.11.0+cu128, installed 2.11.0+cu130" in str(exc.value)
    assert "wants CUDA 12.8" in str(exc.value)


def test_parse_pins_reads_locks_and_specs():
    assert venv.parse_pins(LOCK.splitlines()) == {"torch": "2.11.0+cu128", "filelock": "3.0",
                                                  "torchvision": "0.26.0+cu128"}
    assert venv.parse_pins(["Foo_Bar[extra]==1.0 ; python_version > '3'", "baz>=2", "# x==1"]) == {"foo-bar": "1.0"}


def test_spec_hash_changes_with_each_input():
    base = venv.spec_hash(SPEC, "3.11.2 /usr/bin/python3.11", None, b"g")
    assert base == venv.spec_hash(SPEC, "3.11.2 /usr/bin/python3.11", None, b"g")
    others = [venv.spec_hash(VenvSpec(packages=("torch==2.11.0+cu130",)), "3.11.2 /usr/bin/python3.11", None, b"g"),
              venv.spec_hash(SPEC, "3.12.1 /usr/bin/python3.12", None, b"g"),
              venv.spec_hash(SPEC, "3.11.2 /usr/bin/python3.11", "numpy==2\n", b"g"),
              venv.spec_hash(SPEC, "3.11.2 /usr/bin/python3.11", None, b"guard v2"),
              venv.spec_hash(VenvSpec(packages=SPEC.packages, uv_version="0.1.0"), "3.11.2 /usr/bin/python3.11", None,
                             b"g")]
    assert len({base, *others}) == 6


@pytest.mark.fault("A private index's token rotated (CodeArtifact: every 12 h)", "the venv's spec hash is the same: "
                   "URLs are hashed redacted (index_url, extra_index_urls, find_links, the requirements' own), so "
                   "deploy rebuilds nothing; another index or package still changes it")
def test_spec_hash_ignores_an_index_token_but_not_the_index():
    def spec(token: str, host: str = "d.codeartifact.aws") -> VenvSpec:
        return VenvSpec(packages=SPEC.packages, index_url=f"https://aws:{token}@{host}/pypi/simple/",
                        extra_index_urls=(f"https://u:{token}@x.example/simple",),
                        find_links=(f"https://u:{token}@x.example/wheels/",))

    reqs = "--extra-index-url https://aws:{}@d.codeartifact.aws/pypi/simple/\nnumpy==2\n"
    one = venv.spec_hash(spec("TOKEN-A"), "3.11.2 /usr/bin/python3.11", reqs.format("TOKEN-A"), b"g")
    assert one == venv.spec_hash(spec("TOKEN-B"), "3.11.2 /usr/bin/python3.11", reqs.format("TOKEN-B"), b"g")
    assert one != venv.spec_hash(spec("TOKEN-A", "other.aws"), "3.11.2 /usr/bin/python3.11", reqs.format("TOKEN-A"), b"g")
    # A spec without credentials hashes as before this change: no venv made earlier is rebuilt for it.
    plain = VenvSpec(packages=SPEC.packages, index_url="https://download.pytorch.org/whl/cu128")
    assert venv.spec_hash(plain, "3.11.2 /usr/bin/python3.11", None, b"g") == "838fb9a5512bf161"


def test_code_needs_sync():
    local = codemod.LocalCommit("/r", "c1", "HEAD", False, "c1")
    ok = {"exists": True, "git": True, "has_git": True, "head": "c1", "status": ""}
    assert codemod.needs_sync(local, ok) is None
    assert "local edits" in codemod.needs_sync(local, {**ok, "status": " M a.py\n"})
    assert "want c1" in codemod.needs_sync(local, {**ok, "head": "c0"})
    assert codemod.needs_sync(local, {**ok, "exists": False}) == "no checkout yet"
    with pytest.raises(DeployError, match="apt-get install git"):
        codemod.needs_sync(local, {**ok, "has_git": False})


@pytest.mark.parametrize("text, name", [
    ("RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function. This is",
     "compile race"),
    ("UserWarning: flex_attention called without torch.compile() - this will use an unfused", "flex_attention uncompiled"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "CUDA out of memory"),
    ("NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error", "NCCL error"),
    ("Dynamo attempted to recompile the code object too many times, exceeding the recompile_limit", "recompile limit hit"),
    ("RuntimeError: Detected recompile when torch.compile stance is 'fail_on_recompile'. filename", "recompile after warmup"),
])
def test_crash_signatures(text, name):
    w = logs.Watch()
    notes = w.line(text)
    assert w.found[0][0] == name and (notes[0].signature, notes[0].warning) == (name, True)
    assert w.line(text) == []  # each signature is reported once


def test_line_splitter_keeps_partial_lines_and_collapses_progress_bars():
    s = logs.LineSplitter()
    assert s.feed(b"a\nb") == ["a"]
    assert s.feed(b"c\r 10%\r 50%\r100%\nd") == ["100%"]
    assert s.feed(b"\n") == ["d"]
    assert s.flush() == []
    s.feed(b"tail")
    assert s.flush() == ["tail"]


def test_parse_gpus():
    assert parse_gpus("0, NVIDIA H200, 570.86.15, 1, 143771\n") == [
        {"index": 0, "name": "NVIDIA H200", "driver": "570.86.15", "memory_used_mib": 1, "memory_total_mib": 143771}]
    assert parse_gpus("0, NVIDIA H200 MIG 1g.18gb, 570.86.15, [N/A], [N/A]\n")[0]["memory_total_mib"] is None
    with pytest.raises(ValueError):
        parse_gpus("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver\n")


def test_torch_should_see_the_cuda_visible_devices_subset():
    from remote.facts import visible_count

    gpus = [{"index": i} for i in range(8)]
    assert visible_count(gpus, {}) == 8
    assert visible_count(gpus, {"CUDA_VISIBLE_DEVICES": "5,6,7"}) == 3
    assert visible_count(gpus, {"CUDA_VISIBLE_DEVICES": "0,9,1"}) == 1  # CUDA stops at the first invalid id
    assert visible_count(gpus, {"CUDA_VISIBLE_DEVICES": ""}) == 0


def test_run_state_parses_without_trusting_the_log():
    from remote.facts.runs import RunState, parse_state

    text = ("run=r1\npath=/root/runs/r1\npid=42\nalive=0\nexit=\nlog_size=10\nnow=100\nmarked=77 78 \n"
            "--manifest--\n{\"outputs\": []}\n--tail--\nrun=evil\n--manifest--\nnot json")
    st = parse_state(text)
    assert (st.run, st.alive, st.lost, st.orphans, st.exit) == ("r1", False, True, (77, 78), None)
    assert st.manifest.raw == {"outputs": []} and st.tail == "run=evil\n--manifest--\nnot json"
    done = parse_state(text.replace("exit=\n", "exit=3\n"))
    assert not done.lost and done.exit == 3
    assert parse_state("run=\n") == RunState(None)


def test_oplock_lease_text_live_or_expired_and_the_refusal():
    from remote.ops import oplock

    text = "now=100\ntoken=t1\nexpires=130\nholder=ctl pid 7\ncommand=deploy\nstarted=2026-11-30T16:00:00+0000\n"
    lease = oplock.parse(text)
    assert lease["holder"] == "ctl pid 7" and lease["expires"] == "130"
    assert oplock.live_foreign(lease) and not oplock.live_foreign(lease, token="t1")  # ours is never foreign
    assert not oplock.live_foreign({**lease, "now": "130"})  # expired: free to take over
    assert not oplock.live_foreign(None) and not oplock.live_foreign({"now": "1"})
    err = oplock.busy_error(200, lease)
    assert err.exit_code == 3 and err.holder is lease
    assert str(err) == ("container 200 is busy: `deploy` held by ctl pid 7 since 2026-11-30T16:00:00+0000. Wait for "
                        "it to finish and retry; if that controller is gone, its lease expires in 30s (it renews it "
                        "every few seconds)")


DIRECT_LOCK = (LOCK + "drafty @ https://files.example/wheels/drafty-0.4.1-py3-none-any.whl \\\n    --hash=sha256:cd\n"
               "    # via -r spec.in\nmylib @ git+https://github.com/o/mylib@0123abcd\n    # via -r spec.in\n"
               "tok @ file:///opt/wheels/tok-2.0.tar.gz\n")
DIRECT_DISTS = {"torch": "2.11.0+cu128", "filelock": "3.0", "torchvision": "0.26.0+cu128", "drafty": "0.4.1",
                "mylib": "0.3.dev0", "tok": "2.0"}


@pytest.mark.fault("Direct-URL or git requirement", "a `pkg @ https://…whl` or `git+…` requirement matches its "
                   "lock line: a deploy of an unchanged venv is a no-op and preflight accepts it")
def test_direct_url_and_git_requirements_match_their_lock():
    p = probe(record={"spec_hash": "h", "lock": DIRECT_LOCK}, dists=DIRECT_DISTS)
    assert venv.plan(SPEC, "h", p).action == "none"
    assert venv.parse_lock(DIRECT_LOCK.splitlines())["drafty"] == \
        "@ https://files.example/wheels/drafty-0.4.1-py3-none-any.whl"
    # A wheel URL names its version: another version installed is a change, not a match.
    changed = probe(record={"spec_hash": "h", "lock": DIRECT_LOCK}, dists={**DIRECT_DISTS, "drafty": "0.5"})
    found = venv.plan(SPEC, "h", changed)
    assert found.action == "build" and list(found.drift.changed) == ["drafty"]
    # Without its line in the lock, the same package is an extra one (pollution), as before.
    extra = venv.plan(SPEC, "h", probe(dists=DIRECT_DISTS))
    assert extra.action == "build" and set(extra.drift.extra) == {"drafty", "mylib", "tok"}


def test_the_read_side_and_preflight_accept_direct_references_too():
    from remote import naming
    from remote.facts import Venv, Package

    lock = naming.parse_lock(DIRECT_LOCK.splitlines())
    v = Venv("/root/venv", True, None, True, "h", "s", lock,
             {n: Package(n, ver, "uv") for n, ver in DIRECT_DISTS.items()}, True)
    assert v.changed == {} and v.added == {} and v.removed == {}
    assert naming.direct_version("https://x/torch-2.8.0%2Bcu128-cp311-cp311-linux_x86_64.whl") == "2.8.0+cu128"
    assert naming.direct_version("git+https://github.com/o/r@v1.0") is None


@pytest.mark.fault("Warmup output without a final newline", "the cache's before/after are still read: the gain "
                   "recorded is what the cache gained, never negative")
def test_a_warmup_whose_last_line_has_no_newline_still_reports_its_cache():
    from remote.ops import warmup as wm

    shown, sink = [], []
    on_output = wm._prefixed(shown.append, "0", sink)
    on_output("stdout", b"REMOTE_CACHE before 2 100\ncompiling\ndone, no newline")
    on_output("stdout", b"REMOTE_CACHE after 7 900\n")
    assert wm.parse_cache_lines(sink) == {"before": (2, 100), "after": (7, 900)}
    assert shown == ["  [0] compiling", "  [0] done, no newline"]


@pytest.mark.fault("A torch/ folder where the new venv is verified", "the verify imports the venv's own torch, "
                   "never a folder in the working directory")
def test_the_venv_verify_is_not_shadowed_by_a_folder_where_it_runs(tmp_path):
    import json
    import subprocess
    import sys

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("__version__ = 'shadow'\n")
    out = subprocess.run(venv.verify_argv(sys.executable), cwd=tmp_path, capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out)["torch"] != "shadow"


@pytest.mark.fault("--dry deploy", promise="prints the commands it would run and reads as what would change "
                   "(`would make N change(s)`, `would:`), never as done; nothing changes")
def test_a_dry_deploys_summary_says_would():
    from remote.cli.format import deploy_text
    from remote.results import DeployPlan

    def plan(changed=(), dry=False):
        return DeployPlan(200, not dry, tuple(changed), (), (), (), None, 0.5, dry)

    dry = deploy_text(plan(["venv /root/venv -> /root/venv.versions/abc"], dry=True))
    assert dry.splitlines()[0].startswith("deploy 200 (dry run, nothing changed): would make 1 change(s) (")
    assert "  would:   venv /root/venv -> /root/venv.versions/abc" in dry and "changed" not in dry.replace(
        "nothing changed", "")
    assert deploy_text(plan(dry=True)).startswith("deploy 200 (dry run, nothing changed): nothing would change")
    done = deploy_text(plan(["venv /root/venv -> x"]))
    assert done.startswith("deploy 200: 1 change(s) (") and "  changed: venv" in done  # a real deploy as before
