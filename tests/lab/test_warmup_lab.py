"""Lab tier: `warmup` one device at a time into the persistent cache, and what training gets from it."""

import dataclasses
import io
import json
import os
import tarfile
import tempfile

import pytest
from support import lab_ids, load_config

from remote import config
from remote.ops import warmup as wm
from remote.ops.deploy import deploy
from remote.errors import WarmupError
from remote.ops.jobs import stop, train
from remote.transport.session import Session
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
CACHE = "/root/.cache/torch-compile"
CT = lab_ids(__file__)[0]  # this module's lab's first container (support.lab_ids)


def cache_files(ct):
    return set(ct.run(["bash", "-c", f"cd {CACHE} && find . -type f | sort"]).out.split())


@pytest.fixture(scope="module")
def warmed(deployed, lab_session):
    # Earlier tests' jobs compiled into this venv's cache folder too (every job gets it): set it aside,
    # as a test may, so that the first warmup starts cold.
    aside = f'for d in {CACHE}/torch-*; do [ -e "$d" ] && mv "$d" "$d.aside-$$"; done; true'
    lab_session.container(CT).run(["bash", "-c", aside])
    first = wm.warmup(target_of(lab_session, CT))
    second = wm.warmup(target_of(lab_session, CT))
    return first, second


def test_warmups_run_one_at_a_time(warmed):
    first, _ = warmed
    assert [r.device for r in first] == ["0", "1"]
    assert first[0].end <= first[1].start


def test_cold_then_warm(warmed):
    first, second = warmed
    assert first[0].misses > 0 and first[0].new_files > 0  # a cold cache compiles, and the cache grows
    assert all(r.misses == 0 and r.hits > 0 and r.warm for r in second), [r.report for r in second]
    assert first[0].report["settings"]["cache_dir"].startswith(CACHE + "/torch-2.13.0+cpu-")


def test_parallel_warmups_are_separate_processes_and_all_succeed(warmed, lab_session):
    results = wm.warmup(target_of(lab_session, CT), parallel=True)
    assert sorted(r.device for r in results) == ["0", "1"] and all(r.report["sealed"] for r in results)


def test_training_threads_after_the_guard_compile_nothing_new(warmed, lab_session):
    lines = []
    final = train(target_of(dataclasses.replace(lab_session, events=lambda e: lines.append(e.line)), CT))  # its lines
    assert final is not None and final.exit == 0, "\n".join(lines)
    guard = json.loads(next(l for l in lines if "REMOTE_GUARD" in l).split("REMOTE_GUARD ", 1)[1])
    assert guard["sealed"] and guard["fxgraph_miss"] == 0 and guard["autograd_miss"] == 0, guard
    assert guard["fxgraph_hit"] > 0
    assert any("Ktok/s" in l for l in lines)


def test_the_cache_survives_deploy_train_stop_and_a_venv_rebuild(warmed, lab_session, lab_hosts, ct):
    before = cache_files(ct)
    assert any("inductor" in f for f in before)
    train(target_of(lab_session, CT), follow=False)
    stop(target_of(lab_session, CT), grace=2)
    rebuilt = load_config(lab_hosts, **{"numpy==2.2.6]": "numpy==2.2.6, mpmath==1.3.0]"})
    with Session(config.load(str(rebuilt))) as s:
        assert any("venv" in c for c in deploy(target_of(s, CT)).changed)
    deploy(target_of(lab_session, CT))
    assert before <= cache_files(ct)


def test_export_import_and_a_mismatched_bundle_is_refused(warmed, lab_session, tmp_path, ct):
    bundle = tmp_path / "cache.tgz"
    count = wm.export_cache(target_of(lab_session, CT), str(bundle))
    assert count == len([f for f in cache_files(ct) if f.startswith("./torch-2.13.0+cpu-")
                         and ".aside-" not in f])  # the per-version folder
    ct.run(["bash", "-c", f"mv {CACHE}/warmups.jsonl {CACHE}/warmups.jsonl.bak"])  # as on a fresh container
    try:
        got = wm.import_cache(target_of(lab_session, CT), str(bundle))
        assert got.files == count and got.cache_dir.startswith(CACHE + "/torch-2.13.0+cpu-")
        assert sorted(got.warmups) == ["0", "1"]  # same commit, venv, command and env: train needs no new warmup
        state = wm.deployed(target_of(lab_session, CT))
        assert wm.missing_warmups(target_of(lab_session, CT), state) == []
    finally:
        ct.run(["bash", "-c", f"cat {CACHE}/warmups.jsonl.bak >> {CACHE}/warmups.jsonl; rm {CACHE}/warmups.jsonl.bak"])
    tampered = tmp_path / "other.tgz"
    with tarfile.open(bundle) as src, tarfile.open(tampered, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name == wm.BUNDLE_SIDECAR:
                side = json.loads(data)
                side["versions"].update(torch="2.11.0+cu128", gpu_name="NVIDIA H200")
                data = json.dumps(side).encode()
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    with pytest.raises(WarmupError, match=r"refusing to import a compile cache made for another setup: "
                                          r"gpu_name NVIDIA H200 \(bundle\) != None \(here\), torch 2.11.0\+cu128"):
        wm.import_cache(target_of(lab_session, CT), str(tampered))


@pytest.mark.fault("Hostile compile-cache bundle (warmup --import)",
                   promise="read through the pull's tar policy (tarfile's data filter): nothing outside, no link out, "
                           "device or setuid bit; each refused member named, the rest imported")
def test_a_hostile_bundle_is_imported_without_what_a_pull_would_refuse(warmed, lab_session, tmp_path, ct):
    bundle, hostile = tmp_path / "w" / "cache.tgz", tmp_path / "w" / "hostile.tgz"
    bundle.parent.mkdir()
    count = wm.export_cache(target_of(lab_session, CT), str(bundle))
    with tarfile.open(bundle) as src, tarfile.open(hostile, "w:gz") as dst:
        for m in src.getmembers():
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
        for name, kind, link, mode in (("../escape", tarfile.REGTYPE, "", 0o644), ("/abs", tarfile.REGTYPE, "", 0o644),
                                       ("evil", tarfile.SYMTYPE, "/etc", 0o777), ("evil/owned", tarfile.REGTYPE, "", 0o644),
                                       ("dev", tarfile.CHRTYPE, "", 0o666), ("suid-x", tarfile.REGTYPE, "", 0o4755)):
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode, info.size = kind, link, mode, 2 if kind == tarfile.REGTYPE else 0
            dst.addfile(info, io.BytesIO(b"x\n") if kind == tarfile.REGTYPE else None)
    try:
        got = wm.import_cache(target_of(lab_session, CT), str(hostile))  # refused whole before, on Debian's python3
        refused = dict(r.split(": ", 1) for r in got.refused)
        assert set(refused) == {"../escape", "/abs", "evil", "evil/owned", "dev", "suid-x"}, got.refused
        assert refused["suid-x"] == "setuid/setgid bit dropped" and refused["evil/owned"] == "below the refused evil"
        assert got.files == count + 1  # suid-x, without its bit
        folder = got.cache_dir
        assert ct.run(["stat", "-c", "%a", f"{folder}/suid-x"]).out.strip() == "755"
        assert ct.run(["bash", "-c", f"ls -A {folder} | grep -c -x -e evil -e dev -e abs -e escape"],
                      check=False).out.strip() == "0"
        assert not os.path.lexists(os.path.join(tempfile.gettempdir(), "escape"))  # beside the extraction folder
    finally:
        ct.run(["bash", "-c", f"rm -f {CACHE}/torch-*/suid-x"])


def test_a_changed_command_or_env_asks_for_a_new_warmup(warmed, lab_session, lab_hosts):
    state = wm.deployed(target_of(lab_session, CT))
    assert wm.missing_warmups(target_of(lab_session, CT), state) == []
    env = load_config(lab_hosts, **{"  run_dir: /root/runs\n": "  run_dir: /root/runs\n  env: {OMP_NUM_THREADS: '1'}\n"})
    cmd = load_config(lab_hosts, **{"--device {device}": "--device={device}"})
    for path, what in ((env, "env"), (cmd, "command")):
        other = config.load(str(path)).container(CT)
        assert wm.missing_warmups(dataclasses.replace(target_of(lab_session, CT), spec=other), state) == [f"device {d}: {what} changed since its last warmup"
                                                        for d in ("0", "1")]


def test_a_brace_in_the_warmup_command_is_left_to_bash():
    spec = config.parse({"hosts": {"h": {"address": "x"}}, "containers": {300: {"host": "h"}},
                         "warmup": {"command": "python w.py --device {device} --out ${HOME}/x", "devices": [3]}}, "f")
    assert wm.command_for(spec.containers[300], "3") == "python w.py --device 3 --out ${HOME}/x"


@pytest.mark.fault("Warmup of an edited checkout or a polluted venv", "refused, naming what differs from the "
                   "deployed commit and lock: nothing is recorded as the deployed commit's warmup")
def test_a_warmup_of_an_edited_checkout_or_a_polluted_venv_is_refused(deployed, lab_session, ct):
    before = ct.run(["bash", "-c", f"cat {CACHE}/warmups.jsonl 2>/dev/null; true"]).out
    ct.run(["bash", "-c", "echo '# hacked' >> /root/dflash/drafter/__init__.py"])
    try:
        with pytest.raises(WarmupError, match=r"checkout /root/dflash has edits \(drafter/__init__.py\).*"
                                              r"`remote deploy` restores it"):
            wm.warmup(target_of(lab_session, CT))
    finally:
        ct.run(["git", "-C", "/root/dflash", "checkout", "--", "drafter/__init__.py"])
    site = ct.run(["/root/venv/bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).out.strip()
    info = f"{site}/intruder-1.0.dist-info"
    ct.run(["bash", "-c", f'mkdir -p {info} && printf "Metadata-Version: 2.1\\nName: intruder\\nVersion: 1.0\\n" '
                          f'> {info}/METADATA && printf "pip\\n" > {info}/INSTALLER'])
    try:
        with pytest.raises(WarmupError, match=r"extra package not in the spec: intruder==1.0"):
            wm.warmup(target_of(lab_session, CT))
    finally:
        ct.run(["rm", "-rf", info])
    assert ct.run(["bash", "-c", f"cat {CACHE}/warmups.jsonl 2>/dev/null; true"]).out == before
