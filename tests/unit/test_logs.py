"""Reading logs: the speed a run reports (built-in forms and configured metrics, either direction)."""

import pytest
import yaml

from remote import config
from remote.facts.runs import RunState
from remote.ops import logs


@pytest.mark.parametrize("line, value, unit", [
    ("step 10 | loss 2.1 | 21.50 Ktok/s", 21.5, "Ktok/s"),
    ("throughput: 4.3 ktokens/s", 4.3, "Ktok/s"),
    ("12000 tok/s", 12000.0, "tok/s"),  # the log's own unit: the baseline is written in it
    ("1.5 Mtok/s", 1.5, "Mtok/s"),
    ("tokens_per_second=2500", 2500.0, "tok/s"),
    ("epoch 1: 812.5 samples/s", 812.5, "samples/s"),
    ("100%|##########| 1000/1000 [00:05<00:00, 190.52it/s]", 190.52, "it/s"),
    (" 30%|###       | 3/10 [00:05<00:10,  2.50s/it]", 0.4, "it/s"),  # tqdm's s/it, shown as it/s
    ("loss 2.1", None, None),
])
def test_builtin_metrics(line, value, unit):
    w = logs.Watch()
    w.line(line)
    assert w.last == pytest.approx(value) if value is not None else w.last is None
    assert w.unit == unit


def test_configured_metric_string_and_mapping(tmp_path):
    from remote.config import MetricSpec

    assert logs.parse_metric("tput=7.5", logs.compile_metric(MetricSpec(r"tput=([\d.]+)"))) == 7.5
    c = config.parse(yaml.safe_load("""
hosts: {h: {address: x}}
containers: {200: {host: h}}
train: {metric: {pattern: 'time ([\\d.]+)ms', unit: ms/iter, higher_is_better: false}, baseline: 50, tolerance: 0.5}
"""), "hosts.yaml")
    m = c.containers[200].train.metric
    assert (m.unit, m.higher_is_better) == ("ms/iter", False)


def test_a_lower_is_better_metric_is_slow_only_when_it_rises():
    from remote.config import MetricSpec

    w = logs.Watch(metrics=logs.compile_metric(MetricSpec(r"time ([\d.]+)ms", "ms/iter", False)), baseline=50,
                   tolerance=0.5)
    assert w.line("iter 10: loss 4.33, time 3.81ms") == []  # 13x faster than the baseline: never "slow"
    assert not w.low and "(ok, lower is better)" in w.summary() and "ms/iter" in w.summary()
    notes = w.line("iter 20: loss 4.31, time 80.0ms")
    assert len(notes) == 1 and "80 ms/iter is above 75 ms/iter (baseline 50 + 50%, lower is better)" in notes[0].text
    assert notes[0].warning and "recovered" in w.line("iter 30: loss 4.30, time 40.0ms")[0].text


def test_one_run_keeps_the_unit_it_started_with():
    w = logs.Watch(baseline=20)
    w.line("21.0 Ktok/s")
    w.line("22.0 Ktok/s")
    w.line("eval: 300 samples/s")  # another form later in the run does not mix into the rolling value
    assert w.unit == "Ktok/s" and list(w.values) == [22.0]


def test_the_rolling_figure_starts_at_the_first_steady_step():
    """nanoGPT through remote: iteration 0's compile (4451 ms) made the rolling figure 4451 ms/iter while every
    later iteration took 14 ms; the first value is the compile's, not the run's speed (issue 33)."""
    from remote.config import MetricSpec

    w = logs.Watch(metrics=logs.compile_metric(MetricSpec(r"time ([\d.]+)ms", "ms/iter", False)), baseline=15)
    assert w.line("iter 0: loss 10.9, time 4451.00ms") == []  # not "slow": its step compiled
    assert w.rolling == 4451.0  # the only value so far
    for i in range(1, 6):
        assert w.line(f"iter {i}: loss 4.3, time 13.95ms") == []
    assert w.rolling == pytest.approx(13.95) and w.first == 4451.0 and not w.low
    assert "rolling 13.95 ms/iter" in w.summary() and "(ok, lower is better)" in w.summary()


def test_low_throughput_is_flagged_at_the_first_low_reading():
    w = logs.Watch(baseline=21.5, tolerance=0.2)
    assert w.line("step 0 | 1.1 Ktok/s") == []  # the first step compiled: not a reading of the run's speed
    assert w.line("step 1 | 21.3 Ktok/s") == []
    notes = w.line("step 2 | 4.3 Ktok/s")
    assert len(notes) == 1 and "throughput 4.3 Ktok/s is below 17.2 Ktok/s (baseline 21.5 - 20%)" in notes[0].text
    assert w.line("step 3 | 4.2 Ktok/s") == []  # once per drop, not every line
    assert "recovered" in w.line("step 4 | 21.0 Ktok/s")[0].text
    assert w.rolling == pytest.approx((21.3 + 4.3 + 4.2 + 21.0) / 4)
    assert "(SLOW)" in w.summary()  # the rolling value, 12.7, is below the threshold
    for _ in range(5):
        w.line("21.4 Ktok/s")
    assert "(ok)" in w.summary() and "100% of its speed" in w.summary()


@pytest.mark.fault("Rolling metric of 0", "the run summary (train, logs, report) says 0% of the baseline's speed "
                   "(or that a lower-is-better 0 has no ratio), never a TypeError")
def test_a_rolling_metric_of_zero_is_summarised():
    w = logs.Watch(baseline=21.5)
    w.line("step 1 | 0 Ktok/s")
    assert w.rolling == 0 and w.speed_ratio == 0
    assert w.summary() == "throughput last 0 Ktok/s, rolling 0 Ktok/s vs baseline 21.5 Ktok/s: 0% of its speed (SLOW)"
    w = logs.Watch(metrics=logs.compile_metric(config.MetricSpec(pattern=r"step_time=([\d.]+)", unit="s/step",
                                                                 higher_is_better=False)), baseline=0.5)
    w.line("step_time=0")
    assert w.summary() == ("throughput last 0 s/step, rolling 0 s/step vs baseline 0.5 s/step: no ratio to it "
                           "(ok, lower is better)")


@pytest.mark.fault("A log in tok/s", "the metric keeps the unit the log prints, the one train.baseline is written "
                   "in: 12000 tok/s against a baseline of 12000 is ok, not 12 Ktok/s against 12000")
def test_a_tok_per_second_log_is_compared_in_its_own_unit():
    w = logs.Watch(baseline=12000, tolerance=0.2)
    for line in ("step 1 | 11800 tok/s", "step 2 | 12100 tok/s", "step 3 | 11900 tok/s"):
        assert w.line(line) == []
    assert w.unit == "tok/s" and not w.low
    assert w.summary().endswith("vs baseline 12000 tok/s: 100% of its speed (ok)")


class _Redraws:
    """A container whose log is one progress bar redrawn (`\\r`, never `\\n`) `n` times, in chunks as
    following streams them: follow.sh's output, made by a generator (nothing held whole)."""

    where = "fake"

    def __init__(self, n: int, tail: bytes = b""):
        self.n, self.tail = n, tail

    def script(self, *args, on_output, **kwargs):
        def chunks():
            for i in range(0, self.n, 50):
                yield b"".join(f"\r{k % 101:3d}%|{'#' * (k % 40):<40}| {k}/{self.n} [12.5it/s]".encode()
                               for k in range(i, min(i + 50, self.n)))
            yield self.tail

        for chunk in chunks():
            on_output("stdout", chunk)
        return type("R", (), {"exit_code": 0, "err": ""})()


@pytest.mark.fault("A log that only redraws a progress bar (\\r without \\n)",
                   promise="following keeps one bounded pending line (the latest redraw): memory stays flat")
def test_following_a_log_of_redraws_keeps_one_bounded_pending_line():
    splitter, seen, lines = logs.LineSplitter(), [], []

    def on_bytes(chunk):
        lines.extend(splitter.feed(chunk))
        seen.append(len(splitter.pending))

    n = 200_000  # about 14 MB of redraws
    offset = logs.follow(_Redraws(n, tail=b"\rdone\n"), "/r", "r", on_bytes=on_bytes, follow_=False)
    assert offset > 10_000_000 and len(seen) > n // 50
    assert max(seen) <= 80  # one redraw, not the whole line of them
    assert lines == ["done"] and splitter.pending == b""
    splitter = logs.LineSplitter()
    logs.follow(_Redraws(n), "/r", "r", on_bytes=lambda c: splitter.feed(c), follow_=False)
    assert splitter.flush() == [f"100%|{'#' * 39:<40}| {n - 1}/{n} [12.5it/s]".replace("100%", f"{(n - 1) % 101:3d}%")]


def test_a_line_without_any_break_is_capped_at_its_tail():
    splitter = logs.LineSplitter(limit=1000)
    for _ in range(100):
        assert splitter.feed(b"x" * 999 + b"y") == []
        assert len(splitter.pending) <= 1000
    assert splitter.feed(b"\nnext") == ["x" * 999 + "y"] and splitter.pending == b"next"


class SilentLog:
    """A container whose job writes one line, then runs on silently: each slice of the follow script ends
    (124) with nothing more."""

    def __init__(self):
        self.calls = 0
        self.transport = type("T", (), {"close": lambda self: None})()

    def script(self, *args, on_output=None, **kwargs):
        import time

        from remote.results import Result

        self.calls += 1
        if self.calls == 1 and on_output is not None:
            on_output("stdout", b"first\n")
        time.sleep(0.01)
        return Result(("bash",), 124, b"", b"", 0.01)


@pytest.mark.fault("A follower whose reader has gone (Run.follow)", "its thread ends before the next slice: it "
                   "does not poll a silent job's log for as long as the job runs")
def test_a_follow_whose_reader_stopped_ends_its_thread(monkeypatch):
    import threading
    import time

    from remote import api
    from remote.results import RunStatus

    ct = SilentLog()
    monkeypatch.setattr(api.Container, "_ct", lambda self, venv_on_path=True: ct)
    container = api.Container.__new__(api.Container)
    container._made = type("T", (), {"resumed": staticmethod(lambda offset, reason: None)})()  # its Target
    run = api.Run(container, "20261202-000000-aaaa")
    run._state = RunStatus("20261202-000000-aaaa", "/root/runs/x", alive=True)
    follower = run.follow()
    assert next(follower) == "first"
    pump = next(t for t in threading.enumerate() if t.name == "remote-follow-20261202-000000-aaaa")
    time.sleep(0.1)
    assert ct.calls > 1 and pump.is_alive()  # it follows on while the reader reads
    follower.close()  # what `break` in the reader's loop does
    pump.join(timeout=5)
    assert not pump.is_alive(), "the follow thread kept polling after its reader stopped"
    calls = ct.calls
    time.sleep(0.1)
    assert ct.calls == calls


class ChunkedLog:
    """A container whose job wrote `log` and has ended: the follow script sends it from the offset asked, in
    chunks that cut lines anywhere, and exits 0 (the job is over)."""

    def __init__(self, log: bytes):
        self.log, self.asked = log, []
        self.transport = type("T", (), {"close": lambda self: None})()

    def script(self, *args, on_output=None, **kwargs):
        from remote.results import Result

        offset = int(args[2])  # follow.sh's arguments: log, offset, run, run id, slice
        self.asked.append(offset)
        rest = self.log[offset:]
        for i in range(0, len(rest), 3):
            on_output("stdout", rest[i:i + 3])
        return Result(("bash",), 0, b"", b"", 0.01)


def test_follow_gives_the_offset_to_resume_from(monkeypatch):
    from remote import api
    from remote.results import RunStatus

    ct = ChunkedLog("first line\nsécond\nthird\n".encode())
    monkeypatch.setattr(api.Container, "_ct", lambda self, venv_on_path=True: ct)
    container = api.Container.__new__(api.Container)
    container._made = type("T", (), {"resumed": staticmethod(lambda offset, reason: None)})()  # its Target
    run = api.Run(container, "20261202-000000-aaaa")
    run._state = RunStatus("20261202-000000-aaaa", "/root/runs/x", alive=True)
    seen = []
    for line in run.follow():
        seen.append((line, run.offset))
        if line == "sécond":
            break
    assert seen == [("first line", 11), ("sécond", 19)]  # é is two bytes
    run._state = RunStatus("20261202-000000-aaaa", "/root/runs/x", alive=True)
    assert list(run.follow(offset=run.offset)) == ["third"] and ct.asked[-1] == 19 and run.offset == 25
    with pytest.raises(ValueError, match="offset"):
        next(run.follow(offset=-1))


def test_a_logs_notices_are_typed_and_a_jobs_own_lines_are_output_whatever_they_begin_with(monkeypatch):
    """`logs` reports the job's lines as Output, even one that looks like a step or a warning, and the watch's
    notices typed at their source: a throughput drop and a crash signature (with its hint) as warnings, the
    recovery as output, the run's end as a note; each line as `remote logs` has always shown it."""
    from support import Reported

    from remote.events import Note, Output
    from remote.ops import jobs
    from remote.target import Target

    job = [b"==> not a step of ours\n", b"!! nor a warning\n", b"step 1 | 21.0 Ktok/s\n", b"step 2 | 4.0 Ktok/s\n",
           b"step 3 | 21.0 Ktok/s\n",
           b"RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function\n"]

    def follow(ct, path, run, *, on_bytes, **kw):
        for chunk in job:
            on_bytes(chunk)
        return 0

    fleet = config.parse({"hosts": {"h": {"address": "a"}}, "containers": {200: {"host": "h"}},
                          "train": {"baseline": 21.0}}, "h.yaml")
    monkeypatch.setattr(jobs, "state", lambda t, run_id=None: RunState("r1", "/runs/r1", exit=1))
    monkeypatch.setattr(logs, "follow", follow)
    session = Reported()
    jobs.show_log(Target(session, fleet.containers[200]), "r1")
    got = [(type(e).__name__, getattr(e, "level", None), e.line) for e in session.events]
    assert got[:8] == [
        ("Output", None, "==> not a step of ours"), ("Output", None, "!! nor a warning"),
        ("Output", None, "step 1 | 21.0 Ktok/s"), ("Output", None, "step 2 | 4.0 Ktok/s"),
        ("Note", "warning", "!! throughput 4 Ktok/s is below 16.8 Ktok/s (baseline 21 - 20%): rolling 4 Ktok/s"),
        ("Output", None, "step 3 | 21.0 Ktok/s"),
        ("Output", None, "throughput recovered: 21 Ktok/s (baseline 21)"),
        ("Output", None, "RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized "
                         "function")], got
    assert got[8][:2] == ("Note", "warning") and got[8][2].startswith("!! compile race: threads compiled at once")
    assert got[9][:2] == ("Note", "info") and got[9][2].startswith("-- run r1: exited with status 1; throughput last")
    assert all(e.container == 200 for e in session.events)
    assert isinstance(session.events[0], Output) and isinstance(session.events[4], Note)
