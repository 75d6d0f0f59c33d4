"""Lab tier: compile health through the tasks, with the real CPU torch in a real container (issue 33).

A training script (tests/data/compile_health/train.py) with one compile problem planted per run: a Python
float that changes each step (recompiles, then the recompile limit makes the function eager), an explicit
torch._dynamo.graph_break() in a function first called after the first steady step, a compile error
swallowed by suppress_errors, and a steady run. Each run is checked where a user sees it: train's output,
`status --json`, `doctor --json`, the compile.jsonl `pull --run` brings back, and the report's timeline.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab
from support import ROOT  # noqa: E402
CT = 205
SCRIPT = ROOT / "tests" / "data" / "compile_health" / "train.py"

HOSTS = """
venv:
  packages: [torch==2.13.0+cpu, numpy==2.2.6]
  find_links: [{wheels}]
code:
  repo: {repo}
  path: /root/plant
train:
  command: python train.py {plant} 12
  baseline: 0.5
  tolerance: 0.9
"""


@pytest.fixture(scope="module")
def plant(lab, tmp_path_factory):
    lab.start_container(CT)
    d = tmp_path_factory.mktemp("plant")
    repo = lab._example_repo("plant", {"train.py": SCRIPT})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def task(plant_kind: str, *args: str, check: bool = True, extra: str = "") -> str:
        hosts = d / "hosts.yaml"
        hosts.write_text(lab.hosts_yaml((CT,)) + HOSTS.format(wheels=lab.wheels, repo=repo, plant=plant_kind) + extra)
        r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *args],
                           env={**env, "REMOTE_HOSTS_FILE": str(hosts)}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=900)
        if check:
            assert r.returncode == 0, r.stdout
        return r.stdout

    task("steady", "deploy", "-c", str(CT))
    return {"task": task, "dir": d}


def look(plant, kind: str) -> dict:
    """Train one planted run, then everything a user would look at."""
    task, d = plant["task"], plant["dir"]
    out = task(kind, "train", "-c", str(CT))
    status = json.loads(task(kind, "status", "--json"))
    run = next(c for c in status["containers"] if c["container"] == CT)["run"]
    doctor = json.loads(task(kind, "doctor", "-c", str(CT), "--json", check=False))
    findings = {f["code"]: f for c in doctor["containers"] for f in c["findings"]}
    pulled = d / kind
    task(kind, "pull", "-c", str(CT), "--run", "latest", "--dest", str(pulled))
    [folder] = [p for p in pulled.iterdir() if p.is_dir()]
    lines = [json.loads(x) for x in (folder / "compile.jsonl").read_text().splitlines()]
    report = d / f"{kind}.html"
    task(kind, "report", "-c", str(CT), "--out", str(report))
    return {"out": out, "run": run, "findings": findings, "lines": lines, "report": report.read_text()}


def compile_notes(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("!! ") and "throughput" not in line]


def test_a_changing_python_float_recompiles_then_runs_eagerly(plant):
    got = look(plant, "recompile")
    notes = compile_notes(got["out"])
    assert any(n.startswith("!! recompile #") and "of loss_fn (train.py:" in n and "guard failed: G['SCALE'] == 1."
               in n for n in notes), got["out"]
    assert any(n.startswith("!! running eagerly: loss_fn (train.py:") and "(recompile-limit)" in n for n in notes)
    assert len([n for n in notes if n.startswith("!! recompile #")]) == 1  # once per kind, not every step
    c = got["run"]["compile"]
    assert c["recompiles"] == 7 and c["eager_fallbacks"] == 1 and c["compiles"] == 1, c
    assert c["steady_seconds"] > 0 and c["steady_at"] is not None
    assert {"recompiling", "eager-fallback", "compile-in-steady-state"} <= set(got["findings"]), got["findings"]
    assert "G['SCALE']" in got["findings"]["recompiling"]["what"]
    assert [x["kind"] for x in got["lines"]].count("recompile") == 7
    assert 'class="compile recompile"' in got["report"] and 'class="compile eager-fallback"' in got["report"]
    # train's last lines: the run's compile health, and the recompile limit's hint from the watch's record
    end = got["out"].splitlines()
    assert any(x.startswith("-- compile: 1 compile, 7 recompiles, 0 graph breaks, 1 eager fallback") for x in end)
    limit = [x for x in end if "recompile limit hit" in x]
    assert all("G['SCALE']" in x and "keep shapes static" not in x for x in limit), limit


def test_a_graph_break_after_the_first_steady_step_is_named_with_its_reason(plant):
    got = look(plant, "graph-break")
    notes = compile_notes(got["out"])
    assert any(n.startswith("!! graph break in evaluate (train.py:30) at plant/train.py:32: ")
               and "torch._dynamo.graph_break()" in n for n in notes), got["out"]
    assert got["run"]["compile"]["graph_breaks"] == 1
    assert "graph-breaks" in got["findings"] and "fullgraph=True" in got["findings"]["graph-breaks"]["why"]
    assert any(x["kind"] == "graph-break" and x["fn"] == "evaluate" for x in got["lines"])
    assert 'class="compile graph-break"' in got["report"]


def test_a_suppressed_compile_error_is_an_eager_fallback(plant):
    got = look(plant, "suppressed")
    notes = compile_notes(got["out"])
    assert any(n.startswith("!! running eagerly: <lambda> (train.py:") and "(suppressed-error)" in n
               and "BackendCompilerFailed" in n for n in notes), got["out"]
    assert got["run"]["compile"]["eager_fallbacks"] == 1
    assert "suppressed-error" in got["findings"]["eager-fallback"]["what"]


def test_a_steady_run_stays_silent(plant):
    got = look(plant, "steady")
    assert compile_notes(got["out"]) == [], got["out"]
    c = got["run"]["compile"]
    assert (c["recompiles"], c["graph_breaks"], c["eager_fallbacks"], c["steady_seconds"]) == (0, 0, 0, 0.0), c
    assert c["compiles"] == 1
    assert not {"recompiling", "graph-breaks", "eager-fallback", "compile-in-steady-state"} & set(got["findings"])
    assert {x["kind"] for x in got["lines"]} == {"compile"}


@pytest.mark.fault("A warmup that recompiles a function per value of a Python float (lab)",
                   promise="warmup names the recompiles and the eager fallback with the guard and its line, and says "
                   "what it compiled will not serve the run")
def test_warmup_says_when_what_it_compiled_will_not_serve_the_run(plant):
    task = plant["task"]
    out = task("recompile", "warmup", "-c", str(CT), extra="warmup:\n  command: python train.py recompile 10\n")
    lines = [" ".join(x.split()) for x in out.splitlines()]
    assert any(x.startswith("[all] compile: 1 compile, 7 recompiles, 0 graph breaks, 1 eager fallback") for x in lines), out
    assert any(x.startswith("[all] recompile #1 of loss_fn (train.py:26): guard failed: G['SCALE'] == 1.0 at "
                            "plant/train.py:27") for x in lines), out
    assert any(x.startswith("[all] !! what this warmup compiled will not serve the run: loss_fn (train.py:26) runs "
                            "eagerly (recompile-limit)") for x in lines), out
    steady = task("steady", "warmup", "-c", str(CT), extra="warmup:\n  command: python train.py steady 3\n")
    assert "will not serve" not in steady and "recompile #" not in steady, steady
