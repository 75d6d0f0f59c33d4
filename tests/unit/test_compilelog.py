"""Unit tier: reading a run's compile.jsonl (remote.ops.compilelog) and what train, status, doctor and the
report make of it. The lines are what the compile watch writes; every one is untrusted input."""

from __future__ import annotations

import dataclasses
import json

from remote import config
from remote.cli.format import event_text
from remote.events import Note, WarmupUnserved
from remote.facts.runs import RunState
from remote.ops import compilelog
from remote.ops.jobs import CompileNotices
from remote.runs import timeline
from remote.target import Target, resolve
from remote.transport.session import Session


class Warned(list):
    """The lines of what CompileNotices reported through a container's Target, each checked to be a typed
    warning (a Note of level warning) of that container."""

    def __init__(self) -> None:
        super().__init__()
        self.target = resolve(Session(config.parse({"hosts": {"pve1": {"address": "10.0.0.1"}},
                                                    "containers": {200: {"host": "pve1"}}}, "hosts.yaml"),
                                      events=self.got), 200)

    def got(self, event) -> None:
        assert isinstance(event, Note) and event.level == "warning" and event.container == 200, event
        self.append(event.line)


def ev(t, kind, fn="f", n=1, **kw):
    return json.dumps({"t": t, "kind": kind, "fn": fn, "file": "/root/dflash/train.py", "line": 12, "n": n,
                       "pid": kw.pop("pid", 100), "thread": "MainThread", "seconds": kw.pop("seconds", 0.5),
                       **kw})


def with_totals(lines: list[str]) -> list[str]:
    """Each line with its process's running totals, as the watch writes them."""
    tot: dict = {"compile": 0, "recompile": 0, "graph-break": 0, "eager-fallback": 0, "seconds": 0.0}
    out = []
    for line in lines:
        d = json.loads(line)
        tot[d["kind"]] += 1
        tot["seconds"] += d["seconds"]
        out.append(json.dumps({**d, "totals": dict(tot)}))
    return out


RUN = with_totals([
    ev(10, "compile", seconds=20.0),
    ev(12, "recompile", n=1, reason="guard failed: G['K'] == 0.0", where="train.py:14"),
    ev(31, "recompile", n=2, reason="guard failed: G['K'] == 1.0", where="train.py:14"),
    ev(32, "graph-break", fn="g", reason="Call to `torch._dynamo.graph_break()`", seconds=0.0),
    ev(40, "eager-fallback", why="recompile-limit", reason="recompile limit reached; last guard failed: G['K'] == 6.0"),
    ev(41, "compile", fn="evaluate", seconds=3.0)])
STEADY = 30.0  # the run's second throughput value


def test_a_run_is_summed_and_split_at_its_first_steady_step():
    h = compilelog.summarize(RUN, STEADY)
    assert (h.compiles, h.recompiles, h.graph_breaks, h.eager_fallbacks) == (2, 2, 1, 1)
    assert h.steady_counts == {"recompile": 1, "graph-break": 1, "eager-fallback": 1, "compile": 1}
    assert h.steady_seconds == 0.5 + 0.0 + 0.5 + 3.0
    assert compilelog.health_line(h) == ("compile: 2 compiles, 2 recompiles, 1 graph break, 1 eager fallback; 4.0 s compiling after "
                        "the first steady step")


def test_each_event_reads_as_one_line_with_torchs_reason():
    h = compilelog.summarize(RUN)
    assert compilelog.describe(h.events[2]) == "recompile #2 of f (train.py:12): guard failed: G['K'] == 1.0 at train.py:14"
    assert compilelog.describe(h.events[3]) == "graph break in g (train.py:12): Call to `torch._dynamo.graph_break()`"
    assert compilelog.describe(h.events[4]).startswith("running eagerly: f (train.py:12) (recompile-limit): recompile limit")


def test_untrusted_lines_are_checked_field_by_field():
    bad = ["not json", "[1, 2]", json.dumps({"t": "soon", "kind": "recompile"}), json.dumps({"t": 1, "kind": "rm -rf"}),
           json.dumps({"t": 1, "kind": "recompile", "fn": "f\x1b[2Jx", "line": "12", "n": True, "seconds": -5,
                       "why": "because", "reason": "r" * 5000})]
    h = compilelog.summarize(bad)
    assert len(h.events) == 1
    e = h.events[0]
    assert "\x1b" not in (e.fn or "") and e.line is None and e.n == 1 and e.seconds == 0.0 and e.why is None
    assert len(e.reason or "") <= compilelog.TEXT_MAX + 50


def test_the_totals_count_what_the_bounded_file_did_not_write():
    lines = [ev(1, "recompile", n=16, totals={"compile": 1, "recompile": 16, "seconds": 9.0}),
             json.dumps({"t": 99, "kind": "totals", "pid": 100, "totals": {"compile": 1, "recompile": 1000000,
                                                                           "seconds": 4000.0}}),
             ev(5, "compile", pid=200, totals={"compile": 1, "seconds": 2.0})]
    h = compilelog.summarize(lines)
    assert h.recompiles == 1000000 and h.compiles == 2 and h.seconds == 4002.0 and h.processes == 2


def test_the_first_steady_step_is_the_second_throughput_value():
    metrics = '{"t": 5, "value": 0.3}\nnot json\n{"t": 9.5, "value": 21.0}\n{"t": 10, "value": 21.1}\n'
    assert compilelog.steady_at(metrics) == 9.5
    assert compilelog.steady_at('{"t": 5, "value": 0.3}\n') is None


def test_doctor_names_each_finding_with_what_to_do():
    found = {f.code: f for f in compilelog.findings(compilelog.summarize(RUN, STEADY), "r1")}
    assert set(found) == {"recompiling", "graph-breaks", "eager-fallback", "compile-in-steady-state"}
    assert "recompiled 1 time(s) after the first steady step" in found["recompiling"].what
    assert "guard failed: G['K'] == 1.0" in found["recompiling"].what and "train.py:14" in found["recompiling"].what
    assert "mark it dynamic" in found["recompiling"].why
    assert "fullgraph=True" in found["graph-breaks"].why and "graph_break()" in found["graph-breaks"].what
    assert "recompile-limit" in found["eager-fallback"].what and "recompile_limit" in found["eager-fallback"].why
    assert "4.0 s compiling" in found["compile-in-steady-state"].what


def test_a_steady_run_has_no_findings():
    assert compilelog.findings(compilelog.summarize([ev(10, "compile", seconds=20.0)], STEADY)) == []
    assert compilelog.findings(compilelog.summarize([])) == []


def test_the_probes_part_is_read_like_the_file():
    part = {"run": "r1", "steady_at": STEADY, "lines": RUN[1:], "totals": [RUN[-1]]}
    h = compilelog.from_probe(part)
    assert (h.compiles, h.recompiles) == (2, 2) and h.steady_at == STEADY and h.seconds == 24.5
    assert compilelog.from_probe({"lines": "nope", "steady_at": "x"}) == compilelog.CompileHealth()
    assert compilelog.from_probe(None) == compilelog.CompileHealth()


def test_train_prints_one_line_per_kind_after_the_first_steady_step_and_each_eager_function():
    printed = Warned()
    n = CompileNotices(printed.target)
    for line in RUN[:2]:  # before the steady step's time is known: they wait, then are judged by their time
        n.line(line)
    assert printed == []
    n.line(json.dumps({"steady": {"t": STEADY, "value": 21.0}}))
    assert printed == []  # both happened before the first steady step
    for line in RUN[2:]:
        n.line(line)
    n.line(ev(50, "recompile", n=3, reason="guard failed: G['K'] == 2.0"))  # a kind already shown: silent
    n.line(ev(51, "eager-fallback", fn="h", why="suppressed-error", reason="BackendCompilerFailed: x"))
    assert printed == [
        "!! recompile #2 of f (train.py:12): guard failed: G['K'] == 1.0 at train.py:14",
        "!! graph break in g (train.py:12): Call to `torch._dynamo.graph_break()`",
        "!! running eagerly: f (train.py:12) (recompile-limit): recompile limit reached; last guard failed: "
        "G['K'] == 6.0",
        "!! compile of evaluate (train.py:12)  (after the first steady step)",
        "!! running eagerly: h (train.py:12) (suppressed-error): BackendCompilerFailed: x",
    ]


def test_an_eager_fallback_is_printed_at_once_even_before_the_steady_step():
    printed = Warned()
    n = CompileNotices(printed.target)
    n.line(RUN[4])
    assert len(printed) == 1 and printed[0].startswith("!! running eagerly: f")


def test_the_report_timeline_draws_each_event():
    tl = timeline.parse('{"t": 5, "value": 1.0}\n{"t": 30, "value": 21.0}\n', compiles="\n".join(RUN))
    svg = timeline.svg(tl)
    assert len(tl.compiles) == 6
    assert svg.count('class="compile recompile"') == 2 and svg.count('class="compile eager-fallback"') == 1
    assert "recompile #2 of f (train.py:12): guard failed: G[&#x27;K&#x27;] == 1.0" in svg


def test_status_shows_the_counts_per_run():
    from remote.cli import format as cli_format

    r = {"compile": cli_format.compile_dict(compilelog.summarize(RUN, STEADY))}
    assert cli_format._compile_text(r) == ("; compile: 2 compiles, 2 recompiles, 1 graph break, 1 eager fallback, "
                                           "4.0 s compiling after the first steady step")
    assert cli_format._compile_text({}) == ""


def test_a_huge_or_infinite_number_is_dropped_not_an_internal_error():
    huge = "9" * 400  # a JSON integer too large for a float: float() raises OverflowError
    line = '{"kind": "compile", "t": %s, "pid": 7, "seconds": Infinity, "totals": {"compile": %s, "seconds": 1e400}}'
    assert compilelog.parse_line(line % (huge, 1)) is None  # no usable time: not an event
    ev_ = compilelog.parse_line(line % (12, huge))
    assert ev_ is not None and ev_.t == 12.0 and ev_.seconds == 0.0
    assert compilelog.totals_of(line % (12, huge)) == (7, {})
    assert compilelog.totals_of(line % (12, 1e300)) == (7, {"compile": compilelog.AMOUNT_MAX})
    part = {"steady_at": float("inf"), "lines": [line % (12, 3), line % (huge, huge)], "totals": []}
    h = compilelog.from_probe(part)
    assert h.steady_at is None and h.seconds == 0.0
    json.dumps(dataclasses.asdict(h), allow_nan=False)  # `status --json` stays JSON
    printed = Warned()
    n = CompileNotices(printed.target)
    n.line('{"steady": {"t": %s}}' % huge)
    n.line('{"steady": {"t": Infinity}}')
    n.line(line % (huge, 1))
    assert n.steady is None and printed == []


# -- issue 39: compile health that misleads ------------------------------------------------------------------

import pytest  # noqa: E402

LIMIT_RUN = with_totals([
    ev(10, "compile", fn="forward", seconds=20.0),
    ev(12, "recompile", fn="forward", n=1, reason="guard failed: G['_TEMP'] == 1.0", where="model.py:182"),
    ev(13, "eager-fallback", fn="forward", why="recompile-limit",
       reason="recompile limit reached; last guard failed: G['_TEMP'] == 1.0", where="model.py:182")])


def following(printed: list[str]):
    """Container 200's Target on a stand-in session (logs.follow is patched): its events' lines to `printed`."""
    from support import Reported

    spec = config.parse({"hosts": {"h": {"address": "a"}}, "containers": {200: {"host": "h"}}}, "h.yaml").containers[200]
    return Target(Reported(lines=printed), spec)


@pytest.mark.fault("The recompile limit hit by a value the watch names", promise="train's hint names the function, "
                   "the guard that failed and its line from the watch's record; the generic text only where the "
                   "record has nothing")
def test_the_recompile_limits_hint_comes_from_the_watchs_record(monkeypatch):
    from remote.ops import jobs, logs

    generic = next(hint for _, name, hint in logs.SIGNATURES if name == "recompile limit hit")
    n = CompileNotices(Warned().target)
    assert n.hint("recompile limit hit", generic) == generic  # nothing recorded yet: the log's text
    for line in LIMIT_RUN:
        n.line(line)
    hint = n.hint("recompile limit hit", generic)
    assert "G['_TEMP'] == 1.0" in hint and "model.py:182" in hint and "forward" in hint
    assert "keep shapes static" not in hint and "rescale outside it" in hint

    printed: list[str] = []
    torch_says = "torch._dynamo hit config.recompile_limit (8)\n"

    def follow(ct, path, run, *, on_bytes, on_compile, **kw):
        for line in LIMIT_RUN:
            on_compile(line)
        on_bytes(b"step 1 | 20.0 Ktok/s\n" + torch_says.encode())
        return 0

    monkeypatch.setattr(jobs, "state", lambda t, run_id=None: RunState("r1", "/runs/r1"))
    monkeypatch.setattr(jobs, "describe_end", lambda st: "exited 0")
    monkeypatch.setattr(logs, "follow", follow)
    monkeypatch.setattr(jobs, "watch_for", lambda spec: logs.Watch())
    jobs.show_log(following(printed), "r1", follow=True)
    limit = [p for p in printed if "recompile limit hit" in p]
    assert len(limit) == 2 and all("G['_TEMP'] == 1.0" in p and "keep shapes static" not in p for p in limit)


@pytest.mark.fault("A run whose compile events all came before its first steady step", promise="train's last "
                   "lines summarise its compile health (counts, each finding with what to do)")
def test_trains_last_lines_summarise_the_runs_compile_health(monkeypatch):
    from remote.ops import jobs, logs

    printed: list[str] = []

    def follow(ct, path, run, *, on_bytes, on_compile, **kw):
        on_bytes(b"step 0 | 1.0 Ktok/s\n")
        for line in LIMIT_RUN:  # every event before the first steady step: no `!!` line while it runs
            on_compile(line)
        on_compile(json.dumps({"steady": {"t": 30.0, "value": 21.0}}))
        return 0

    monkeypatch.setattr(jobs, "state", lambda t, run_id=None: RunState("r1", "/runs/r1"))
    monkeypatch.setattr(jobs, "describe_end", lambda st: "exited 0")
    monkeypatch.setattr(logs, "follow", follow)
    monkeypatch.setattr(jobs, "watch_for", lambda spec: logs.Watch())
    jobs.show_log(following(printed), "r1", follow=True)
    end = printed[printed.index(next(p for p in printed if p.startswith("-- run r1"))) + 1:]
    assert end[0] == ("-- compile: 1 compile, 1 recompile, 0 graph breaks, 1 eager fallback; 0.0 s compiling after "
                      "the first steady step")
    assert any(p.startswith("!! eager-fallback:") and "G['_TEMP'] == 1.0" in p for p in end)  # a warning, typed
    quiet: list[str] = []
    monkeypatch.setattr(logs, "follow", lambda ct, path, run, *, on_bytes, on_compile, **kw: 0)
    jobs.show_log(following(quiet), "r1", follow=True)
    assert not any("compile" in p for p in quiet)  # nothing recorded: no word of it


OLD_WATCH = with_totals([  # what a watch before issue 39 wrote for dynamo's internal restart
    ev(10, "compile", seconds=2.0),
    ev(10, "graph-break", reason="<class 'torch._dynamo.exc.TensorifyScalarRestartAnalysis'>", seconds=0.0)])


@pytest.mark.fault("A compile.jsonl with dynamo's internal restarts as graph breaks (an older watch)",
                   promise="not counted or shown as graph breaks; doctor tells no one to remove a call")
def test_an_older_watchs_internal_restart_is_no_graph_break():
    h = compilelog.summarize(OLD_WATCH)
    assert h.graph_breaks == 0 and [e.kind for e in h.events] == ["compile"]
    assert compilelog.findings(h) == []
    h = compilelog.summarize([*OLD_WATCH, *with_totals([ev(11, "graph-break", pid=101, reason="x.item()")])])
    assert h.graph_breaks == 1


def test_a_graph_break_is_named_at_the_line_that_broke_and_the_def_line():
    brk = compilelog.parse_line(ev(5, "graph-break", fn="forward", reason="Unsupported Tensor.item() call",
                                   where="nanoGPT/model.py:53", line=52, file="/root/nanoGPT/model.py"))
    assert compilelog.describe(brk) == ("graph break in forward (model.py:52) at nanoGPT/model.py:53: "
                                        "Unsupported Tensor.item() call")
    found = compilelog.findings(compilelog.summarize([json.dumps({**json.loads(ev(5, "graph-break", fn="forward",
                                                      reason="x", where="nanoGPT/model.py:53"))})]))
    assert "broke at forward (train.py:12) at nanoGPT/model.py:53" in found[0].what


@pytest.mark.fault("A warmup that recompiles a function per value of a Python float", promise="warmup reports the "
                   "recompiles, graph breaks and eager fallbacks with guard and line, and says what it compiled "
                   "will not serve the run")
def test_warmup_reports_what_torch_did_and_whether_it_serves_the_run():
    from remote.ops import warmup as wm

    shown, sink = [], []
    on_output = wm._prefixed(shown.append, "0", sink)
    compile_lines = "".join(f"REMOTE_COMPILE {x}\n" for x in [
        *LIMIT_RUN, *with_totals([ev(14, "graph-break", fn="forward", pid=101, reason="Unsupported Tensor.item()",
                                     where="nanoGPT/model.py:53")])])
    on_output("stdout", b"REMOTE_CACHE before 0 0\nstep 1, no newline" + compile_lines.encode()
              + b"REMOTE_CACHE after 438 198180864\n")
    assert shown == ["  [0] step 1, no newline"]  # the watch's lines are read, not shown raw
    result = wm.DeviceResult("0", 0.0, 115.0, {}, *wm.parse_cache_lines(sink).values(), compile=wm.parse_compile(sink))
    lines = result.compile_lines()
    assert lines[0] == "compile: 1 compile, 1 recompile, 1 graph break, 1 eager fallback (21.5 s compiling)"
    text = "\n".join(lines)
    assert "recompile #1 of forward (train.py:12): guard failed: G['_TEMP'] == 1.0 at model.py:182" in text
    assert "graph break in forward (train.py:12) at nanoGPT/model.py:53: Unsupported Tensor.item()" in text
    assert not any("!! " in x for x in lines)  # the warning is an event of its own, worded by the command line
    why = tuple(wm.unserved(result.compile))
    event = WarmupUnserved(200, "device 0: what this warmup compiled will not serve the run: " + "; ".join(why), "0", why)
    assert event_text(event, None).startswith("  [0] !! what this warmup compiled will not serve the run: forward "
                                              "(train.py:12) runs eagerly (recompile-limit)")
    assert result.record()["compile"] == {"compile": 1, "recompile": 1, "graph-break": 1, "eager-fallback": 1}
    assert result.record()["serves_run"] is False
    steady = wm.DeviceResult("0", 0.0, 41.0, {}, compile=wm.parse_compile(
        [f"REMOTE_COMPILE {x}" for x in with_totals([ev(1, "compile")])]))
    assert steady.compile_lines() == [] and steady.record()["serves_run"] is True
