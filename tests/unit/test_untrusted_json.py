"""JSON a container (or a host) wrote is untrusted: a document nested deeper than any of remote's (1001 `[`, which
raises RecursionError out of json.loads) is skipped as bad JSON by every parser and by the in-container facts
probe, and a number no float holds (a huge integer, Infinity) is no metric value."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from remote import facts, naming
from remote.facts import runs as runfacts
from remote.ops import compilelog, logs, passport
from remote.runs import timeline

DEEP = "[" * 100_000 + "]" * 100_000  # past any recursion limit
DEEPISH = "[" * 900 + "]" * 900  # parses under the default limit: raises later, where it is written again
PROBE = Path(facts.__file__).with_name("probe.py")


@pytest.mark.parametrize("text", [DEEP, DEEPISH, '{"a": ' * 500 + "1" + "}" * 500])
def test_json_nested_past_remotes_bound_is_bad_json(text):
    with pytest.raises(ValueError, match="nested more than"):
        naming.json_loads(text)
    assert naming.json_loads('{"a": [[{"b": 1}]]}') == {"a": [[{"b": 1}]]}


@pytest.mark.fault("Deeply nested JSON in a container's files",
                   promise="a line or file nested past remote's bound is skipped as bad JSON: no RecursionError "
                   "from a parser, and the facts probe answers (status and doctor read that container)")
@pytest.mark.parametrize("deep", [DEEP, DEEPISH])
def test_every_parser_of_container_json_skips_a_deeply_nested_document(deep):
    good = '{"t": 1.0, "value": 2.0}'
    assert [m.value for m in logs.parse_metrics(f"{deep}\n{good}\n")] == [2.0]
    assert compilelog.parse_line(deep) is None and compilelog.totals_of(deep) is None
    assert compilelog.steady_at(f"{deep}\n{good}\n{good}\n") == 1.0
    assert facts.parse_warmups(f"{deep}\n") == () and facts._json_object(deep) is None
    assert passport.parse(deep) is None and runfacts.read_watch(deep) == runfacts.Watch()
    tl = timeline.parse(metrics=f"{deep}\n{good}\n", events=f"{deep}\n", compiles=f"{deep}\n")
    assert tl.compiles == [] and len(tl.metrics) == 1


def test_the_facts_probe_answers_when_the_containers_files_are_nested_deep(tmp_path):
    runs = tmp_path / "runs"
    run = runs / "20261201-100000-aaaa"
    (run / "cache-stats").mkdir(parents=True)
    (runs / "current").symlink_to(run)
    for name in ("manifest.json", "cache-stats/1.json"):
        (run / name).write_text(DEEP)
    (runs / "known-good.json").write_text(DEEPISH)
    (run / "metrics.jsonl").write_text(f"{DEEP}\n")
    (run / "compile.jsonl").write_text(f"{DEEP}\n")
    arg = {"venv": str(tmp_path / "venv"), "versions": str(tmp_path / "versions"), "checkout": str(tmp_path / "code"),
           "cache_dir": str(tmp_path / "cache"), "run_dir": str(runs), "parts": ["jobs", "compile", "known_good"]}
    r = subprocess.run([sys.executable, str(PROBE), json.dumps(arg)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    out = naming.json_loads(r.stdout)  # the controller reads the answer with the same bound
    assert out["jobs"]["manifest"] is None and out["jobs"]["cache_stats"] is None and out["known_good"] is None
    assert out["compile"]["lines"] == [] and out["compile"]["steady_at"] is None


@pytest.mark.fault("A metrics line with a number no float holds",
                   promise="a huge integer, Infinity or NaN is no value (skipped by status, report and the watch): "
                   "never an OverflowError, never infinity on a chart")
def test_metrics_with_a_huge_integer_or_infinity_have_no_value():
    text = '{"t": 1, "value": 1' + "0" * 400 + '}\n{"t": 2, "value": Infinity}\n{"t": 3, "value": NaN}\n' \
           '{"t": 4, "value": 0.5, "unit": "tok/s"}\n'
    got = logs.parse_metrics(text)
    assert [m.value for m in got] == [None, None, None, 0.5] and [m.t for m in got] == [1.0, 2.0, 3.0, 4.0]
