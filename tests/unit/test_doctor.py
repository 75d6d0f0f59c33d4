"""Facts and doctor as data: a probe's raw output in, typed facts and findings out (no container).

The raw samples are shaped as remote/facts/probe.py prints them; each test changes one thing, as the
story's team did by hand. tests/data/facts-h200-*.json are the probe's output on an H200 machine
(bench/gpu_facts.sh: torch 2.11.0+cu130, driver 580.159.04, a CUDA process of no run holding GPU 0).
"""

import json
import subprocess
import sys

import pytest

from remote import config, facts as fx
from remote.cli import format as fmt
from remote.doctor import Finding, findings, healthy, known_good_label
from remote.results import Diagnosis
from remote.facts.probe import ALL_PARTS
from remote.facts.runs import RunState, manifest_of
from remote.runs.knowngood import make_record, meets_baseline, watch_log

HOSTS = """
hosts: {h: {address: 10.0.0.1}}
containers: {200: {host: h}}
venv:
  index_url: https://download.pytorch.org/whl/cu128
  packages: [torch==2.11.0+cu128, numpy==2.2.6]
warmup: {command: 'python -m drafter.warmup --device {device}', devices: [5, 6]}
train: {command: 'python -m drafter.train --drafter-gpus 5,6', baseline: 21.5}
"""
COMMIT = "a" * 40
LOCK = "numpy==2.2.6 \\\n    --hash=sha256:x\ntorch==2.11.0+cu128 \\\n    --hash=sha256:y\ntriton==3.5.0\n"
CACHE = "torch-2.11.0+cu128-cuda-12.8-triton-3.5.0"


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "hosts.yaml"
    path.write_text(HOSTS)
    return config.load(str(path)).container(200)


def dists(**over):
    base = {"numpy": "2.2.6", "torch": "2.11.0+cu128", "triton": "3.5.0"}
    base.update(over)
    return {n: {"version": v, "installer": "uv", "url": None} for n, v in base.items() if v}


def child(obj=None, rc=0, out=None):
    return {"rc": rc, "out": out if out is not None else json.dumps(obj), "err": ""}


def healthy_raw(spec):
    """What the probe prints for a deployed, warmed, healthy 2-GPU container (its known-good included)."""
    from remote.ops import warmup as wm

    venv_record = {"spec_hash": "s" * 16, "lock_sha256": "l" * 64, "lock": LOCK,
                   "verify": {"torch": "2.11.0+cu128", "cuda_build": "12.8", "triton": "3.5.0"}}
    code_record = {"commit": COMMIT}
    state = {"code": code_record, "venv": venv_record}
    warmups = "".join(json.dumps({"device": d, **wm.warmup_key(spec, state, d)}) + "\n" for d in ("5", "6"))
    return {
        "time": 1000.0, "time_end": 1000.4,
        "venv": {"path": "/root/venv", "exists": True, "real": "/root/venv.versions/x", "record": venv_record},
        "code": {"path": "/root/dflash", "exists": True, "git": True, "has_git": True, "record": code_record,
                 "head": COMMIT, "status": "", "untracked": []},
        "cache": {"dir": "/root/.cache/torch-compile", "exists": True, "warmups": warmups,
                  "folders": {CACHE: {"files": 120, "bytes": 5 << 20}}},
        "tmp_artifacts": {},
        "jobs": {"run_dir": "/root/runs", "current": "20261130-1012-ab12", "manifest": None,
                 "runs": {"20261130-1012-ab12": {"exists": True, "pid": 40, "exit": "0", "leader_alive": False,
                                                 "marked": []}}},
        "known_good": {"run": "20261130-1012-ab12", "commit": COMMIT, "lock_sha256": "l" * 64,
                       "packages": {"numpy": "2.2.6", "torch": "2.11.0+cu128", "triton": "3.5.0"},
                       "torch": "2.11.0+cu128", "cuda_build": "12.8", "driver": "570.86", "gpu_names": ["H200"] * 2,
                       "cache": {"fingerprint": CACHE}, "throughput": {"value": 21.5, "unit": "Ktok/s"}},
        "disk": [{"path": p, "free": 400 << 30, "total": 1 << 40} for p in ("/root/venv", "/root/.cache", "/root/runs")],
        "venv_run": child({"dists": dists(), "python": "3.11.2"}),
        "torch": child({"torch": "2.11.0+cu128", "cuda_build": "12.8", "cuda_available": True, "device_count": 2,
                        "device_names": ["H200", "H200"]}),
        "gpus": child(out="0, H200, 570.86, 1, 143771\n1, H200, 570.86, 1, 143771\n"),
        "apps": child(out=""), "smi": child(out="| NVIDIA-SMI 570.86   Driver Version: 570.86   CUDA Version: 12.8 |"),
    }


def codes(found):
    return sorted(f.code for f in found)


def test_a_healthy_container_has_no_findings(spec):
    facts = fx.parse(healthy_raw(spec), spec, (1000.0, 1000.5))
    assert facts.venv.added == {} and facts.venv.changed == {} and facts.cache.present
    assert facts.gpus.names == ("H200", "H200") and facts.gpus.cuda_driver == "12.8"
    assert facts.clock_skew_s == 0.0 and facts.checkout.head == COMMIT
    found = findings(facts, spec)
    assert found == [] and healthy(found)


def test_the_story_polluted_venv_deleted_cache_and_hacked_checkout(spec):
    raw = healthy_raw(spec)
    info = json.loads(raw["venv_run"]["out"])
    info["dists"] = dists(torch="2.11.0+cu130")
    info["dists"]["sglang"] = {"version": "0.5.1", "installer": "pip", "url": None}
    info["dists"]["flashinfer-python"] = {"version": "0.3.0", "installer": "pip",
                                          "url": "file:///root/src/flashinfer"}
    raw["venv_run"] = child(info)
    raw["torch"] = child({**json.loads(raw["torch"]["out"]), "torch": "2.11.0+cu130", "cuda_build": "13.0"})
    raw["cache"]["folders"] = {CACHE: {"files": 2, "bytes": 10, "tmp": {"files": 2, "bytes": 10}}}  # only TMPDIR
    raw["code"].update(status=" M drafter/model.py\n", untracked=["notes.txt", "drafter/__pycache__/"])
    found = findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec)
    by = {f.code: f for f in found}
    # The cu130 torch also names another cache folder than the known-good's.
    assert codes(found) == ["cache-missing", "cache-versions-changed", "checkout-edited", "checkout-untracked",
                            "driver-too-old", "package-added", "package-added", "package-changed", "torch-cuda-build"]
    torch = by["package-changed"]
    assert torch.what.startswith("torch 2.11.0+cu128 → 2.11.0+cu130") and "from another index" in torch.what
    assert torch.since == "changed since known-good run 20261130-1012-ab12, 21.5 Ktok/s: it had 2.11.0+cu128"
    assert torch.fix == "remote deploy"
    added = [f for f in found if f.code == "package-added"]
    assert "flashinfer-python 0.3.0" in added[0].what and "a local build/file file:///root/src/flashinfer" in added[0].what
    assert "sglang 0.5.1" in added[1].what and added[1].since.startswith("not in known-good run")
    assert by["driver-too-old"].what == "torch is built for CUDA 13.0 but driver 570.86 supports CUDA up to 12.8"
    assert by["cache-missing"].fix == "remote warmup" and by["checkout-untracked"].severity == "info"
    assert by["checkout-untracked"].what == "untracked file(s) in /root/dflash: notes.txt"  # no bytecode
    assert not healthy(found)
    rendered = fmt.finding_line(by["package-changed"])
    assert rendered.startswith("[error] torch 2.11.0+cu128 → 2.11.0+cu130") and "— remote deploy" in rendered


def test_a_new_commit_asks_for_a_warmup_and_is_noted_against_the_known_good(spec):
    raw = healthy_raw(spec)
    raw["code"].update(record={"commit": "b" * 40}, head="b" * 40)
    found = findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec)
    assert codes(found) == ["cache-cold", "commit-changed"]
    assert "device 5: commit changed since its last warmup; device 6: commit" in found[0].what
    assert found[0].fix == "remote warmup"


def test_gpus_jobs_disk_and_clock(spec):
    raw = healthy_raw(spec)
    raw["torch"] = child({**json.loads(raw["torch"]["out"]), "device_count": 1})
    raw["apps"] = child(out="777, python, 1200\n41, python, 900\n")
    raw["jobs"]["runs"]["20261130-1012-ab12"]["marked"] = [41]  # a process of a finished run
    raw["disk"][1]["free"] = 1 << 30
    raw["time"], raw["time_end"] = 1030.0, 1030.5
    raw["tmp_artifacts"] = {"/tmp/torchinductor_root": {"files": 62, "bytes": 1 << 20}}
    found = findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec)
    by = {f.code: f for f in found}
    assert codes(found) == ["clock-skew", "disk-low", "gpu-foreign-processes", "gpus-unseen", "orphan-processes",
                            "tmp-compile-artifacts"]
    assert by["orphan-processes"].fix == "remote stop -c 200 --run 20261130-1012-ab12"
    assert "777 python" in by["gpu-foreign-processes"].what and "41 " not in by["gpu-foreign-processes"].what
    assert by["clock-skew"].what.startswith("the container's clock is +30.0s")
    assert fx.clock_skew(1000.2, 1000.0, 1000.5) == 0.0 and fx.clock_skew(990.0, 1000.0, 1000.5) == -10.0


def test_no_venv_no_checkout_no_known_good(spec):
    raw = healthy_raw(spec)
    raw["venv"] = {"path": "/root/venv", "exists": False, "real": None, "record": None}
    raw["venv_run"] = raw["torch"] = None
    raw["code"] = {"path": "/root/dflash", "exists": False, "git": False, "record": None, "head": None,
                   "status": None, "untracked": []}
    raw["known_good"] = None
    found = findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec)
    assert codes(found) == ["checkout-missing", "no-known-good", "venv-missing"]


def test_json_shape(spec):
    facts = fx.parse(healthy_raw(spec), spec, (1000.0, 1000.5))
    report = Diagnosis(200, "h", (Finding("x", "info", "w", None, "y", None),), None, facts)
    out = json.loads(fmt.doctor_json([report, Diagnosis(201, "h", (), "unreachable")]))
    assert out["schema"] == 1 and out["healthy"] is False
    first = out["containers"][0]
    assert set(first) == {"container", "host", "healthy", "error", "known_good", "findings", "facts"}
    assert set(first["findings"][0]) == {"code", "severity", "what", "since", "why", "fix"}
    assert first["facts"]["venv"]["packages"]["torch"] == "2.11.0+cu128"
    assert first["facts"]["cache"]["present"] is True and first["facts"]["cache"]["warmups"] == 2


def test_known_good_record_and_the_baseline(spec):
    facts = fx.parse(healthy_raw(spec), spec, (1000.0, 1000.5))
    watch = watch_log(spec, "step 0 | 2.0 Ktok/s\nstep 1 | 20.0 Ktok/s\nstep 2 | 22.0 Ktok/s\nstep 3 | 23.0 Ktok/s\n")
    assert meets_baseline(watch)  # rolling 21.67 >= 21.5 (step 0 compiled: not in it)
    assert not meets_baseline(watch_log(spec, "step 1 | 4.3 Ktok/s\n"))
    manifest = {"commit": COMMIT, "venv_lock_sha256": "l" * 64, "torch": "2.11.0+cu128", "cuda_build": "12.8",
                "triton": "3.5.0", "driver": "570.86", "gpus": [{"name": "H200"}, {"name": "H200"}]}
    rec = make_record(facts, spec, RunState("r1", manifest=manifest_of(manifest)), watch, "auto")
    assert rec["cache"]["fingerprint"] == CACHE and rec["cache"]["files"] == 120
    assert rec["packages"]["torch"] == "2.11.0+cu128" and rec["gpu_names"] == ["H200", "H200"]
    assert known_good_label(rec) == "known-good run r1, 21.67 Ktok/s"
    other = make_record(facts, spec, RunState("r2", manifest=manifest_of({**manifest, "venv_lock_sha256": "z"})),
                        watch, "x")
    assert other["packages"] is None  # the venv changed since that run: its packages are unknown


def run_probe(spec, tmp_path, parts=fx.DOCTOR):
    """The probe itself, run locally with this python against the spec's paths (moved under tmp_path)."""
    argv = fx.probe_argv(spec, parts)
    arg = json.loads(argv[-1])
    arg["torch_cache"] = str(tmp_path / "run" / "facts-torch.json")
    r = subprocess.run([sys.executable, "-c", fx.PROBE_SOURCE, json.dumps(arg)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def local_spec(spec, tmp_path):
    """The spec with every container path under tmp_path, for running the probe here."""
    from dataclasses import replace

    return replace(spec, venv=replace(spec.venv, path=f"{tmp_path}/venv"), code=replace(spec.code, path=f"{tmp_path}/co"),
                   warmup=replace(spec.warmup, cache_dir=f"{tmp_path}/cache"),
                   train=replace(spec.train, run_dir=f"{tmp_path}/runs"))


def test_the_probe_runs_with_a_plain_python_and_reads_nothing_it_cannot(local_spec, tmp_path):
    """The probe itself, locally, on an empty layout: every fact absent, no crash, valid JSON."""
    raw = run_probe(local_spec, tmp_path, ALL_PARTS)
    assert raw["venv"]["exists"] is False and "venv_run" not in raw and raw["code"]["git"] is False
    assert raw["torch"] is None and raw["run"]["rc"] == 0 and "run=" in raw["run"]["out"]
    assert [d["on"] for d in raw["disk"]] == [str(tmp_path)] * 3
    facts = fx.parse(raw, local_spec, (raw["time"], raw["time_end"]))
    assert facts.venv.error.startswith("no venv at") and facts.torch.error and not facts.checkout.exists


def test_the_probe_reads_only_the_parts_asked_for(local_spec, tmp_path):
    raw = run_probe(local_spec, tmp_path, ("venv", "code"))
    assert set(raw) - {"time", "time_end", "parts"} == {"venv", "code"}
    assert "dists" not in raw["venv"]  # the venv's interpreter was not run


FAKE_TORCH = """__version__ = "2.13.0+fake"
class version:
    cuda = None
class cuda:
    @staticmethod
    def is_available():
        return False
"""


def test_torch_health_is_kept_while_the_venv_is_unchanged(local_spec, tmp_path):
    """`import torch` is most of a probe's time: a healthy answer is kept per venv folder, installed
    distributions, torch's files and driver, and asked again when any of them changes; a failed one is
    never kept."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(FAKE_TORCH)
    parts = ("venv", "dists", "torch")
    first = run_probe(local_spec, tmp_path, parts)
    assert first["torch"]["cached"] is False and json.loads(first["torch"]["out"])["torch"] == "2.13.0+fake"
    again = run_probe(local_spec, tmp_path, parts)
    assert again["torch"]["cached"] is True and again["torch"]["out"] == first["torch"]["out"]
    assert fx.torch_of(again).cached and not fx.torch_of(first).cached
    # A package installed by hand (what `pip install` leaves: a new metadata folder) asks torch again.
    (site / "sglang-0.5.1.dist-info").mkdir()
    (site / "sglang-0.5.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.1\n")
    after = run_probe(local_spec, tmp_path, parts)
    assert after["torch"]["cached"] is False
    assert "sglang" in fx.parse(after, local_spec, (after["time"], after["time_end"])).venv.packages
    # torch's own files broken by hand: asked again, and the failure is not kept.
    (site / "torch" / "__init__.py").write_text("raise ImportError('patched by hand')\n")
    broken = [run_probe(local_spec, tmp_path, parts) for _ in range(2)]
    assert [b["torch"]["cached"] for b in broken] == [False, False]
    assert fx.torch_of(broken[1]).error == "ImportError: patched by hand"
    # Fixed again: asked again (no stale healthy answer from before), and `fresh` never uses a kept one.
    (site / "torch" / "__init__.py").write_text(FAKE_TORCH)
    assert run_probe(local_spec, tmp_path, parts)["torch"]["cached"] is False
    assert run_probe(local_spec, tmp_path, parts)["torch"]["cached"] is True
    arg = json.loads(fx.probe_argv(local_spec, parts, fresh=True)[-1])
    assert arg["fresh"] is True


def test_a_kept_torch_answer_holds_only_while_torch_saw_every_gpu():
    from remote.facts.probe import torch_healthy

    two = {"rc": 0, "out": "0, H200, 580, 1, 2, GPU-a\n1, H200, 580, 1, 2, GPU-b\n"}
    seen = {"rc": 0, "out": json.dumps({"torch": "2.11.0+cu130", "device_count": 2})}
    assert torch_healthy(seen, two)
    assert not torch_healthy(seen, {"rc": 0, "out": "0, H200, 580, 1, 2, GPU-a\n"})  # a GPU is gone
    assert not torch_healthy({"rc": 0, "out": json.dumps({"torch_error": "RuntimeError: CUDA error"})}, two)
    assert not torch_healthy({"rc": 0, "out": json.dumps({"torch": "x", "device_count": 0})}, two)


def test_a_hung_nvidia_smi_is_an_error_not_a_cpu_machine(spec):
    raw = healthy_raw(spec)
    raw["gpus"] = {"rc": None, "out": "", "err": "timed out", "seconds": 60.0}
    g = fx.gpus_of(raw)
    assert g.smi and g.error == "nvidia-smi did not answer within 10 s (a hung GPU driver?)"
    raw["gpus"] = {"missing": "[Errno 2] No such file or directory: 'nvidia-smi'"}
    assert not fx.gpus_of(raw).smi and fx.gpus_of(raw).error is None


def test_cuda_visible_devices_is_checked_against_what_nvidia_smi_lists(spec):
    from dataclasses import replace

    facts = fx.parse(healthy_raw(spec), spec, (1000.0, 1000.5))
    t, g = facts.torch, facts.gpus
    assert fx.gpu_problem(t, g, {"CUDA_VISIBLE_DEVICES": "0"}) is None  # a subset: torch saw both without it
    assert "names a device nvidia-smi does not list (it lists 0, 1)" in fx.gpu_problem(
        t, g, {"CUDA_VISIBLE_DEVICES": "1,2"})[0]
    with_uuids = replace(g, gpus=tuple({**x, "uuid": f"GPU-{i}"} for i, x in enumerate(g.gpus)))
    assert fx.gpu_problem(t, with_uuids, {"CUDA_VISIBLE_DEVICES": "GPU-1"}) is None
    assert fx.gpu_problem(t, with_uuids, {"CUDA_VISIBLE_DEVICES": "GPU-typo"}) is not None
    assert fx.gpu_problem(replace(t, device_count=1), g, {})[0] == "nvidia-smi lists 2 GPU(s) but torch sees 1"


def test_git_failing_in_the_checkout_is_named(spec):
    raw = healthy_raw(spec)
    raw["code"]["git_error"] = "fatal: detected dubious ownership in repository at '/root/dflash'"
    (f,) = findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec)
    assert f.code == "checkout-git" and "dubious ownership" in f.what and "safe.directory" in f.fix


def test_what_the_probe_printed_on_an_h200_machine(spec):
    from pathlib import Path

    data = Path(__file__).parent.parent / "data"
    cold = json.loads((data / "facts-h200-cold.json").read_text())
    kept = json.loads((data / "facts-h200-kept.json").read_text())
    for raw in (cold, kept):
        facts = fx.parse(raw, spec, (raw["time"], raw["time_end"]))
        assert facts.torch.version == "2.11.0+cu130" and facts.torch.cuda_build == "13.0"
        assert facts.torch.cuda_available and facts.torch.device_names == ("NVIDIA H200",)
        assert facts.torch.triton == "3.6.0" and facts.gpus.cuda_driver == "13.0"
        assert facts.gpus.names == ("NVIDIA H200",) and facts.gpus.driver == "580.159.04"
        assert facts.gpus.gpus[0]["uuid"].startswith("GPU-") and facts.gpus.gpus[0]["memory_total_mib"] == 143771
        assert fx.gpu_problem(facts.torch, facts.gpus, {"CUDA_VISIBLE_DEVICES": facts.gpus.gpus[0]["uuid"]}) is None
        found = {f.code: f for f in findings(facts, spec)}
        assert "driver-too-old" not in found and "gpus-unseen" not in found and "torch-import" not in found
        assert found["gpu-foreign-processes"].what.endswith("python3 (630 MiB)")
    # The first probe imported torch (3.9 s with CUDA's start-up); the second kept its answer.
    assert not fx.torch_of(cold).cached and fx.torch_of(kept).cached and cold["torch"]["seconds"] > 1
    assert kept["time_end"] - kept["time"] < cold["time_end"] - cold["time"] - 1


def test_sparkline_and_the_report_page(spec):
    from remote.runs.report import render, series, sparkline

    assert sparkline([]) == "" and sparkline([1, 1]) == "▁▁"
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert len(sparkline(list(range(100)), width=10)) == 10
    log = "".join(f"step {i} | {v} Ktok/s\n" for i, v in enumerate([18.0, 21.0, 22.5, 4.3])) + \
        "Detected that you are using FX to symbolically trace a dynamo-optimized function\nstep 9 | 2"
    values, watch = series(spec, log, last_line=False)
    assert values == [18.0, 21.0, 22.5, 4.3] and watch.unit == "Ktok/s"
    kg = {"run": "good-1", "commit": COMMIT, "throughput": {"value": 21.5, "unit": "Ktok/s"}}
    page = render(spec, RunState("r<2>", exit=1, manifest=manifest_of({"commit": COMMIT})),
                  log, kg, "step 1 | 21.4 Ktok/s\nstep 2 | 21.6 Ktok/s\n",
                  [{"device": "5", "seconds": 40.2, "new_files": 12, "hits": 0, "misses": 9, "commit": COMMIT}])
    assert page.count("<polyline") == 2 and "baseline 21.5" in page and "known-good run good-1" in page
    assert "compile race" in page and "r&lt;2&gt;" in page and "<td>40.2</td>" in page
    # Self-contained: no script, nothing fetched (the only URL is the SVG namespace).
    assert "<script" not in page and page.count("http") == 1 and "http://www.w3.org/2000/svg" in page


def test_the_reports_legend_lies_below_the_plotted_lines_and_inside_the_picture():
    import xml.etree.ElementTree as ET

    from remote.runs.report import _svg

    ns = {"s": "http://www.w3.org/2000/svg"}
    runs = [("run a", [21.0, 22.5, 22.4, 4.3], "#1565c0"), ("known-good run b", [21.5, 21.6, 21.4], "#2e7d32"),
            ("run c", [30.0, 0.0], "#000")]
    svg = ET.fromstring(_svg(runs, 21.5, "Ktok/s"))
    height = float(svg.get("height"))
    plotted = [float(p.split(",")[1]) for line in svg.iterfind("s:polyline", ns) for p in line.get("points").split()]
    frame = svg.find("s:rect", ns)  # the plot's area: every line is inside it
    bottom = float(frame.get("y")) + float(frame.get("height"))
    assert max(plotted) <= bottom
    label = max(float(t.get("y")) for t in svg.iterfind("s:text", ns) if "progress through the run" in (t.text or ""))
    legend = svg.findall("s:g[@class='legend']", ns)
    assert [g.find("s:text", ns).text for g in legend] == ["run a", "known-good run b", "run c"]
    tops = []
    for g in legend:
        mark, text = g.find("s:rect", ns), g.find("s:text", ns)
        top = min(float(mark.get("y")), float(text.get("y")) - 12)  # a 12 px font reaches 12 px above its baseline
        assert top > label > bottom and float(text.get("y")) <= height, (top, label, bottom, height)
        tops.append(top)
    assert all(b - a >= 12 for a, b in zip(tops, tops[1:]))  # one row each, not on top of each other


def test_a_run_ended_by_remote_stop_is_stopped_in_runs_and_the_report(spec):
    from remote.ops import jobs
    from remote.runs import listing
    from remote.runs.report import render

    text = "run=r1\npath=/root/runs/r1\nalive=0\nexit={}\nstopped={}\n--manifest--\n{{}}\n--tail--\nstep 1 | 21 Ktok/s\n"
    st = jobs.parse_state(text.format(143, 1))
    assert st.stopped and jobs.describe_end(st) == "stopped by `remote stop` (exit status 143)"
    assert listing.describe(st, spec).state == "stopped"
    assert "stopped by `remote stop` (exit status 143)" in render(spec, st, "step 1 | 21 Ktok/s\n", None, None, [])
    plain = jobs.parse_state(text.format(143, 0))  # no stop mark: the job's own 143
    assert not plain.stopped and listing.describe(plain, spec).state == "exited"
    assert jobs.describe_end(plain) == "exited with status 143"


def test_a_deleted_cache_is_gone_since_the_known_good(spec):
    raw = healthy_raw(spec)
    raw["cache"]["folders"] = {}
    (f,) = findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec)
    assert f.code == "cache-missing" and f.since == "gone since known-good run 20261130-1012-ab12, 21.5 Ktok/s, " \
                                                    "which ran with it"


def test_a_known_good_without_packages_says_nothing_about_them(spec):
    raw = healthy_raw(spec)
    raw["known_good"]["packages"] = None
    info = json.loads(raw["venv_run"]["out"])
    info["dists"]["sglang"] = {"version": "0.5.1", "installer": "pip", "url": None}
    raw["venv_run"] = child(info)
    (f,) = findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec)
    assert f.code == "package-added" and f.since is None


@pytest.mark.fault("doctor over many containers of one host", "one SSH connection per host, made before the "
                   "threads: none opened twice and left unclosed")
def test_doctor_makes_one_transport_per_host(tmp_path):
    import time as _time

    from remote.doctor import diagnose
    from remote.transport import Result
    from remote.transport.session import Session

    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  a: {address: 10.0.0.1}\ncontainers:\n" + "".join(f"  {i}: {{host: a}}\n" for i in range(200, 206)))
    made = []

    class Failing:
        name = "a"

        def run(self, argv, **kw):
            return Result(tuple(argv), 1, b"", b"probe failed", 0.0)

        def describe(self, argv):
            return "a"

        def close(self):
            pass

    def factory(host):
        _time.sleep(0.2)  # a connection takes a while: room for a second thread to make its own
        made.append(host.name)
        return Failing()

    reports = diagnose(Session(config.load(str(path)), transport_factory=factory, agent=False), list(range(200, 206)))
    assert made == ["a"] and len(reports) == 6 and all(r.error for r in reports)


@pytest.mark.fault("Shortened GPU UUID in CUDA_VISIBLE_DEVICES", "accepted where it names exactly one GPU, as "
                   "CUDA accepts it; an ambiguous or unknown one is refused")
def test_a_shortened_gpu_uuid_is_accepted_where_cuda_accepts_it(spec):
    from dataclasses import replace

    facts = fx.parse(healthy_raw(spec), spec, (1000.0, 1000.5))
    uuids = ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "GPU-89a1c0de-0000-4106-c12f-20bd9faed9f6")
    g = replace(facts.gpus, gpus=tuple({**x, "uuid": u} for x, u in zip(facts.gpus.gpus, uuids)))
    assert fx.gpu_problem(facts.torch, g, {"CUDA_VISIBLE_DEVICES": "GPU-8932f937"}) is None
    assert fx.gpu_problem(facts.torch, g, {"CUDA_VISIBLE_DEVICES": "GPU-89"}) is not None  # names both
    assert fx.gpu_problem(facts.torch, g, {"CUDA_VISIBLE_DEVICES": "GPU-7777"}) is not None


@pytest.mark.fault("known-good of a run with a huge log", "only the log's end (1 MiB) is read for the rolling "
                   "metric, from its first whole line; never the whole log into memory")
def test_known_good_reads_only_the_end_of_a_log():
    from remote.lab.testing import Expect, FakeTransport, inner_argv
    from remote.runs.knowngood import log_tail
    from remote.transport.pct import Container

    seen = []
    tail = b"ep 9 | 1.0 Ktok/s\nstep 10 | 21.0 Ktok/s\n"  # exactly `limit` bytes: it began inside a line
    t = FakeTransport([Expect(lambda argv: seen.append(inner_argv(argv)) or True, stdout=tail)])
    assert log_tail(Container(t, 200), "/root/runs/r1/log", limit=len(tail)) == "step 10 | 21.0 Ktok/s\n"
    assert seen[0] == ("tail", "-c", str(len(tail)), "--", "/root/runs/r1/log")


@pytest.mark.fault("A second run started with train --force beside a live one",
                   promise="deploy refuses, train is busy, stop stops both, status and doctor show both")
def test_every_live_run_counts_not_only_the_latest(spec):
    raw = healthy_raw(spec)
    raw["jobs"]["runs"].update({  # the latest (current) ended; a forced one and one without its pid file run
        "a": {"exists": True, "pid": 50, "exit": None, "leader_alive": True, "marked": [50, 51]},
        "b": {"exists": True, "pid": None, "exit": None, "leader_alive": False, "marked": [60]}})
    got = fx.parse(raw, spec, (1000.0, 1000.5))
    assert got.jobs.live == ("a", "b") and not got.jobs.orphans and not got.jobs.alive
    found = {f.code: f for f in findings(got, spec)}
    assert "orphan-processes" not in found and "a, b" in found["runs-concurrent"].what


@pytest.mark.fault("report of a run with a huge log", "the log is streamed to a local file and read in chunks: only "
                   "its metric values are kept, the page is the same as from the whole text")
def test_the_report_reads_a_log_in_chunks_as_it_would_the_whole_text(spec):
    from remote.ops import logs

    log = "".join(f"step {i} | {20 + i % 3}.5 Ktok/s\n" for i in range(500)) + "CUDA out of memory\nstep 500 | 9.0 Ktok/s"
    data = log.encode()
    chunks = (data[i:i + 37] for i in range(0, len(data), 37))  # lines cut anywhere
    whole, w1 = logs.series(spec, log)
    parts, w2 = logs.series(spec, chunks)
    assert parts == whole and len(whole) == 501 and whole[-1] == 9.0
    assert [f[0] for f in w2.found] == [f[0] for f in w1.found] == ["CUDA out of memory"]


def test_a_warmed_cache_whose_run_still_compiled_is_cache_missed_naming_the_passport_field(spec):
    from remote.ops import warmup as wm

    raw = healthy_raw(spec)
    fp = fx.parse(raw, spec, (1000.0, 1000.5))
    state = {"code": fp.checkout.record, "venv": fp.venv.record}
    passport = {**wm.expected_passport(spec, state), "copied_from": 201}
    raw["cache"]["folders"][CACHE]["passport"] = json.dumps(passport)
    raw["jobs"]["cache_stats"] = {"fxgraph_hit": 3, "fxgraph_miss": 0, "autograd_hit": 3, "autograd_miss": 0,
                                  "processes": 1}
    assert "cache-missed" not in codes(findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec))  # all hits: fine
    assert "cache-passport" in codes(findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec))
    raw["jobs"]["cache_stats"]["fxgraph_miss"] = 2
    missed = [f for f in findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec) if f.code == "cache-missed"]
    assert missed and "2 FX-graph" in missed[0].what and "no passport field differs" in missed[0].why
    assert "TORCH_LOGS=+torch._inductor.codecache" in missed[0].fix
    # the cache was made for another GPU: that is what the finding says
    raw["cache"]["folders"][CACHE]["passport"] = json.dumps({**passport, "gpu": "NVIDIA H100"})
    missed = [f for f in findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec) if f.code == "cache-missed"]
    assert "GPU name NVIDIA H100 (cache) != None (here)" in missed[0].why
    # no warmup for what runs now: that is cache-cold, not a miss of a warmed cache
    raw["cache"]["warmups"] = ""
    assert "cache-missed" not in codes(findings(fx.parse(raw, spec, (1000.0, 1000.5)), spec))


def test_a_container_that_moved_to_another_node_of_its_cluster_is_named(spec):
    import dataclasses

    raw = healthy_raw(spec)
    raw["known_good"]["node"] = "pve1"
    here = dataclasses.replace(spec, cluster="c1", host=dataclasses.replace(spec.host, cluster="c1", node="pve1"))
    assert findings(fx.parse(raw, here, (1000.0, 1000.5)), here) == []
    moved = dataclasses.replace(here, host=dataclasses.replace(here.host, name="gpu-b", node="pve2"))
    (f,) = findings(fx.parse(raw, moved, (1000.0, 1000.5)), moved)
    assert f.code == "node-changed" and f.what == "container 200 is on node pve2, not pve1"
    assert f.fix == "remote doctor --gpu -c 200" and f.since.startswith("changed since known-good run")


def test_doctor_warns_of_a_checkout_the_hosts_file_no_longer_pins(spec):
    """A new commit in code.repo since the deploy: the container is not what the hosts file says (issue 40)."""
    from remote.ops.code import Pin

    facts = fx.parse(healthy_raw(spec), spec, (1000.0, 1000.4))
    assert healthy(findings(facts, spec, Pin("/src/t", "HEAD", COMMIT)))
    found = findings(facts, spec, Pin("/src/t", "HEAD", "b" * 40))
    stale = [f for f in found if f.code == "checkout-stale"]
    assert not healthy(found) and stale and stale[0].severity == "warning" and stale[0].fix == "remote deploy"
    assert stale[0].what == f"the checkout is at {COMMIT[:12]}, but the hosts file pins {'b' * 12} (code.ref HEAD of /src/t)"
