"""Lab tier: the story, replayed through the tasks as a user runs them (container 204, its own hosts file).

A good run becomes the container's known-good and doctor finds it healthy. Then, by hand: two extra
packages installed and a pinned one changed in the venv, the compile cache deleted, a file of the checkout
edited and an untracked file left. doctor names every one against the known-good run and exits 1;
`remote deploy && remote warmup` and doctor exits 0, the edit is in a saved patch, the untracked file
is still there.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import LAB_SECTIONS

pytestmark = pytest.mark.lab
ROOT = Path(__file__).resolve().parent.parent.parent
CT = 204
UV = "/root/.local/share/remote/uv-0.13.9/uv"

# The demo drafter's sections, with a throughput line every 0.2 s and a baseline every run meets.
HOSTS = LAB_SECTIONS.replace("--log-interval 0.5", "--log-interval 0.2").replace("baseline: 21.5", "baseline: 0.001")


@pytest.fixture(scope="module")
def story(lab, tmp_path_factory):
    """Container 204, a hosts file for the demo drafter, and the wheels that pollute the venv (downloaded
    on the controller, pip's cache serves them again)."""
    lab.start_container(CT)
    d = tmp_path_factory.mktemp("story")
    hosts = d / "hosts.yaml"
    hosts.write_text(lab.hosts_yaml((CT,)) + HOSTS.format(repo=lab.demo_repo()))
    wheels = d / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.11", "--platform", "manylinux2014_x86_64", "-d", str(wheels),
                    "numpy==2.2.5", "six==1.17.0", "idna==3.10"], check=True, capture_output=True)
    story = {"hosts": hosts, "wheels": wheels}
    # The lab's containers see this machine's root as their lower layer, /tmp included: hide whatever
    # compiled there outside the lab (whiteouts in this container's upper layer; the host keeps its files).
    in_ct(story, "rm -rf /tmp/torchinductor_* /root/.triton")
    return story


def task(story, *args, check=True):
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(story["hosts"]), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", *args], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def in_ct(story, script):
    return task(story, "exec", "-c", str(CT), script).stdout


def doctor(story):
    r = task(story, "doctor", "-c", str(CT), "--json", check=False)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    report = json.loads(r.stdout)
    (ct,) = report["containers"]
    return r.returncode, ct, {f["code"]: f for f in ct["findings"]}, r


def test_a_good_run_is_recorded_as_known_good_and_doctor_is_healthy(story):
    task(story, "deploy", "-c", str(CT))
    task(story, "warmup", "-c", str(CT))
    out = task(story, "train", "-c", str(CT)).stdout
    run_id = next(line.split()[2] for line in out.splitlines() if line.startswith("==> run "))
    assert f"-- run {run_id} recorded as known-good" in out, out
    code, ct, found, r = doctor(story)
    assert code == 0, r.stdout
    assert ct["healthy"] and ct["known_good"]["run"] == run_id
    assert ct["known_good"]["packages"]["numpy"] == "2.2.6" and ct["known_good"]["torch"] == "2.13.0+cpu"
    assert {f["severity"] for f in ct["findings"]} <= {"info"}
    story["run"] = run_id
    # The text form names the container and says it is healthy.
    assert f"container {CT} on lab: healthy" in task(story, "doctor", "-c", str(CT)).stdout


def test_doctor_names_every_change_of_the_story_and_exits_1(story):
    assert "run" in story, "needs the good run of the test before"
    task(story, "push", "-c", str(CT), "--src", str(story["wheels"]), "--dest", "/root/wheels", "--quiet")
    # By hand, as the story's team did: two packages added, a pinned one changed, the cache deleted,
    # a hack in the model code, a stray file.
    in_ct(story, f"{UV} pip install -q --no-deps --python /root/venv/bin/python /root/wheels/*.whl")
    in_ct(story, "rm -rf /root/.cache/torch-compile/torch-2.13.0+cpu-*")
    in_ct(story, "echo '# HACK: skip the mask' >> /root/dflash/drafter/model.py; echo scratch > /root/dflash/notes.txt")
    code, ct, found, r = doctor(story)
    assert code == 1 and not ct["healthy"], r.stdout
    added = sorted(f["what"].split()[0] for f in ct["findings"] if f["code"] == "package-added")
    assert added == ["idna", "six"], ct["findings"]
    numpy = found["package-changed"]
    assert numpy["what"].startswith("numpy 2.2.6 → 2.2.5"), numpy
    assert numpy["since"].startswith(f"changed since known-good run {story['run']}") and numpy["fix"] == "remote deploy"
    assert "a local build/file file:///root/wheels/" in found["package-added"]["what"]
    assert found["cache-missing"]["fix"] == "remote warmup"
    assert "drafter/model.py" in found["checkout-edited"]["what"]
    assert found["checkout-edited"]["fix"].startswith("remote deploy")
    assert "notes.txt" in found["checkout-untracked"]["what"] and found["checkout-untracked"]["severity"] == "info"
    text = task(story, "doctor", "-c", str(CT), check=False)
    assert text.returncode == 1 and "numpy 2.2.6 → 2.2.5" in text.stdout and "— remote deploy" in text.stdout
    # train's preflight reads the same facts and refuses, naming every problem at once.
    refused = task(story, "train", "-c", str(CT), check=False)
    assert refused.returncode != 0 and "3 problems, nothing was started" in refused.stderr, refused.stderr
    assert "drafter/model.py" in refused.stderr
    assert "version differs: numpy locked 2.2.6, installed 2.2.5" in refused.stderr
    assert "extra package not in the spec: six==1.17.0" in refused.stderr
    assert "compile cache" in refused.stderr and "gone or empty" in refused.stderr


def test_deploy_and_warmup_bring_doctor_back_to_healthy(story):
    out = task(story, "deploy", "-c", str(CT)).stdout
    patch = next(line.split()[-1] for line in out.splitlines() if line.strip().startswith("saved:")
                 and line.strip().endswith(".patch"))
    task(story, "warmup", "-c", str(CT))
    code, ct, found, r = doctor(story)
    assert code == 0, r.stdout
    assert set(found) <= {"checkout-untracked", "cache-passport"}, found  # both info: what the cache serves (issue 27)
    assert {f["severity"] for f in found.values()} <= {"info"}, found
    assert "+# HACK: skip the mask" in in_ct(story, f"cat {patch}")
    assert in_ct(story, "cat /root/dflash/notes.txt") == "scratch\n"
    assert "HACK" not in in_ct(story, "cat /root/dflash/drafter/model.py")


def test_bad_input_exits_2(story):
    r = task(story, "doctor", "-c", "999", check=False)
    assert r.returncode == 2 and "container 999 is not in this file" in r.stderr


@pytest.mark.fault("report without --dest", "the page goes to the current folder, where a user looks "
                   "(./report-<container>-<run>.html), and the command says where in one line")
def test_status_sparkline_and_the_report_of_a_run_against_the_known_good(story, tmp_path):
    assert "run" in story, "needs the good run of the first test"
    out = task(story, "train", "-c", str(CT)).stdout  # a second good run: the new known-good
    second = next(line.split()[2] for line in out.splitlines() if line.startswith("==> run "))
    line = next(l for l in task(story, "status").stdout.splitlines() if l.strip().startswith(f"{CT}:"))
    assert f"last run {second} exited 0" in line and any(ch in line for ch in "▁▂▃▄▅▆▇█"), line
    page = tmp_path / "report.html"
    task(story, "report", "-c", str(CT), "--run", story["run"], "--dest", str(page))
    text = page.read_text()
    assert f"Run {story['run']}" in text and f"known-good run {second}" in text
    # two runs over their samples, and this run's throughput over time (metrics.jsonl, no GPU here)
    assert text.count("<polyline") == 3 and "<script" not in text and "&quot;commit&quot;:" in text
    assert "throughput (Ktok/s)" in text and "GPU utilisation %" not in text
    assert "<td>0</td>" in text or "<td>1</td>" in text  # the warmups of this commit and venv, per device
    story["report"] = page
    # Without --dest: the current folder, where a user looks, said in one line.
    env = {**os.environ, "REMOTE_HOSTS_FILE": str(story["hosts"]), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", "from remote.cli import main; main()", "report", "-c", str(CT), "--run",
                        story["run"]], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    default = tmp_path / f"report-{CT}-{story['run']}.html"
    assert r.returncode == 0 and r.stdout.strip() == f"wrote {default}" and default.read_text().count("<polyline") == 3, r


def test_known_good_by_hand_and_only_for_a_run_that_ended_well(story):
    assert "report" in story, "needs the runs of the tests before"
    out = task(story, "known-good", "-c", str(CT), "--run", story["run"]).stdout
    assert out.startswith(f"recorded known-good run {story['run']}, ") and "Ktok/s" in out, out
    code, ct, _, r = doctor(story)
    assert code == 0 and ct["known_good"]["run"] == story["run"] and ct["known_good"]["how"].startswith("by hand")
    history = in_ct(story, "wc -l < /root/runs/known-good.jsonl").split()[-1]
    assert int(history) == 3  # two automatic, one by hand
    bad = task(story, "known-good", "-c", str(CT), "--run", "no-such-run", check=False)
    assert bad.returncode == 2 and "has no run 'no-such-run'" in bad.stderr, bad.stderr
