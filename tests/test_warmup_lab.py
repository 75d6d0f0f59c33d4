"""Lab tier: `warmup` one device at a time into the persistent cache, and what training gets from it."""

import io
import json
import tarfile

import pytest
from conftest import load_config

from remote import config, warmup as wm
from remote.deploy import deploy
from remote.errors import WarmupError
from remote.jobs import stop, train
from remote.session import Session

pytestmark = pytest.mark.lab
quiet = dict(echo=lambda s: None)
CACHE = "/root/.cache/torch-compile"


def cache_files(ct):
    return set(ct.run(["bash", "-c", f"cd {CACHE} && find . -type f | sort"]).out.split())


@pytest.fixture(scope="module")
def warmed(deployed, lab_session):
    first = wm.warmup(lab_session, 200, **quiet)
    second = wm.warmup(lab_session, 200, **quiet)
    return first, second


def test_warmups_run_one_at_a_time(warmed):
    first, _ = warmed
    assert [r.device for r in first] == ["0", "1"]
    assert first[0].end <= first[1].start


def test_cold_then_warm(warmed):
    first, second = warmed
    assert first[0].misses > 0  # a fresh container compiles
    assert all(r.misses == 0 and r.hits > 0 for r in second), [r.report for r in second]
    assert first[0].report["settings"]["cache_dir"].startswith(CACHE + "/torch-2.13.0+cpu-")


def test_parallel_warmups_are_separate_processes_and_all_succeed(warmed, lab_session):
    results = wm.warmup(lab_session, 200, parallel=True, **quiet)
    assert sorted(r.device for r in results) == ["0", "1"] and all(r.report["sealed"] for r in results)


def test_training_threads_after_the_guard_compile_nothing_new(warmed, lab_session):
    lines = []
    final = train(lab_session, 200, echo=lines.append)
    assert final["exit"] == 0, "\n".join(lines)
    guard = json.loads(next(l for l in lines if "REMOTE_GUARD" in l).split("REMOTE_GUARD ", 1)[1])
    assert guard["sealed"] and guard["fxgraph_miss"] == 0 and guard["autograd_miss"] == 0, guard
    assert guard["fxgraph_hit"] > 0
    assert any("Ktok/s" in l for l in lines)


def test_the_cache_survives_deploy_train_stop_and_a_venv_rebuild(warmed, lab_session, lab_hosts, ct):
    before = cache_files(ct)
    assert any("inductor" in f for f in before)
    train(lab_session, 200, follow=False, **quiet)
    stop(ct, lab_session.config.container(200), grace=2)
    rebuilt = load_config(lab_hosts, **{"numpy==2.2.6]": "numpy==2.2.6, mpmath==1.3.0]"})
    with Session(config.load(str(rebuilt))) as s:
        assert any("venv" in c for c in deploy(s, 200, **quiet).changed)
    deploy(lab_session, 200, **quiet)
    assert before <= cache_files(ct)


def test_export_import_and_a_mismatched_bundle_is_refused(warmed, lab_session, tmp_path):
    bundle = tmp_path / "cache.tgz"
    assert wm.export_cache(lab_session, 200, str(bundle), **quiet) == 4  # 2 devices x (artifacts + sidecar)
    loaded = wm.import_cache(lab_session, 200, str(bundle), **quiet)
    assert len(loaded) == 2 and all(x["cache_dir"].startswith(CACHE) for x in loaded)
    tampered = tmp_path / "other.tgz"
    with tarfile.open(bundle) as src, tarfile.open(tampered, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            if m.name.endswith(".json"):
                data = json.dumps({**json.loads(data), "torch": "2.11.0+cu128", "gpu": "NVIDIA H200"}).encode()
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
    with pytest.raises(WarmupError, match=r"refusing to import a compile cache made for another setup: "
                                          r"gpu NVIDIA H200 \(bundle\) != None \(here\), torch 2.11.0\+cu128"):
        wm.import_cache(lab_session, 200, str(tampered), **quiet)
