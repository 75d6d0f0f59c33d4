"""Local tier: `report` reads what the run's watch left (metrics.jsonl, gpu.csv, events.jsonl) as it reads
the log: pulled in one streamed command each (pull_file.sh), read in bounded chunks, never one command
whose output holds the file whole. A fake transport counts the bytes of every read."""

import hashlib
import json

import pytest

from remote import shell
from remote.facts.runs import Attempt, RunState
from remote.lab.testing import Expect, FakeStream, FakeTransport, inner_argv
from remote.runs import report, timeline
from remote.transport.pct import Container

RUN = "/root/runs/20260101-000000-abcd"
CHUNK = 1 << 20


class CountingStream(FakeStream):
    def __init__(self, *args):
        super().__init__(*args)
        self.reads: list[int] = []

    def read(self, n: int) -> bytes:
        chunk = super().read(n)
        self.reads.append(len(chunk))
        return chunk


class CountingTransport(FakeTransport):
    def __init__(self, expected):
        super().__init__(expected)
        self.streams: dict[str, CountingStream] = {}

    def open_stream(self, argv) -> CountingStream:
        result = self.run(argv)
        stream = CountingStream(result.stdout, result.stderr, result.exit_code)
        self.streams[inner_argv(argv)[-2]] = stream
        return stream


def pulled(name: str, data: bytes | None) -> Expect:
    """pull_file.sh of RUN/name from byte 0: the file's header, bytes and sha256, or exit 3 (not there)."""
    script = "set -euo pipefail\n" + shell.load("pull_file")

    def match(argv):
        return inner_argv(argv)[:2] == ("bash", "-c") and inner_argv(argv)[2:] == (script, "remote", f"{RUN}/{name}", "0")

    if data is None:
        return Expect(match, 3, b"", f"not a regular file: {RUN}/{name}\n")
    return Expect(match, 0, b"%d 644\n" % len(data) + data, hashlib.sha256(data).hexdigest() + "\n")


@pytest.mark.fault("report of a run with a huge metrics.jsonl", "streamed to a local file and read in chunks like "
                   "the log: no command's output holds it whole, every read bounded")
def test_a_large_metrics_file_is_streamed_and_read_in_bounded_chunks(tmp_path):
    rows = [json.dumps({"t": 1000.0 + i, "value": 20.0 + i % 7, "unit": "Ktok/s"}) for i in range(220_000)]
    metrics = ("\n".join(rows) + "\n").encode()
    assert len(metrics) > 8 * CHUNK
    gpu = b"t,index,util,mem_used,mem_total,power,temp\n1000.0,0,93,1024,81920,300,60\n1001.0,0,95,2048,81920,300,61\n"
    t = CountingTransport([pulled("metrics.jsonl", metrics), pulled("gpu.csv", gpu), pulled("events.jsonl", None),
                           pulled("compile.jsonl", None)])
    tl = report.read_timeline(Container(t, 200), RUN, [{"attempt": 1, "started": 1000.0}], tmp_path)
    t.assert_done()
    assert not any(inner_argv(argv)[0] == "cat" for argv, _ in t.calls)  # no command reads it whole
    reads = t.streams[f"{RUN}/metrics.jsonl"].reads
    assert sum(reads) == len(metrics) + len(b"%d 644\n" % len(metrics))
    assert max(reads) <= CHUNK and len([r for r in reads if r]) >= 9  # the 8+ MiB came in bounded reads
    assert len(tl.metrics) == len(rows) and tl.metrics[-1] == (1000.0 + len(rows) - 1, 20.0 + (len(rows) - 1) % 7)
    assert tl.unit == "Ktok/s" and [g[0] for g in tl.gpu] == [1000.0, 1001.0] and tl.stalls == []


def test_the_timeline_from_chunks_is_the_timeline_from_the_text():
    metrics = "".join(json.dumps({"t": i, "value": i * 1.5}) + "\n" for i in range(300)) + '{"t": 300, "value": 1}'
    events = '{"event": "stall", "at": 12, "seconds": 60}\nnot json\n'
    data = metrics.encode()
    chunks = (data[i:i + 37] for i in range(0, len(data), 37))  # lines cut anywhere
    whole = timeline.parse(metrics, "", events)
    parts = timeline.parse(chunks, iter(()), [events.encode()])
    assert parts.metrics == whole.metrics and len(whole.metrics) == 301 and parts.stalls == whole.stalls == [(12.0, 60.0)]


def test_a_line_longer_than_any_record_is_skipped_never_held():
    long = b"x" * (timeline.MAX_LINE + 10)
    data = b'{"t": 1, "value": 2}\n' + long + b'\n{"t": 2, "value": 3}\n' + long
    chunks = [data[i:i + 4096] for i in range(0, len(data), 4096)]
    assert list(timeline.lines(chunks)) == ['{"t": 1, "value": 2}', '{"t": 2, "value": 3}']


@pytest.mark.fault("report of a run with more compile events than the timeline draws", "the compile section counts "
                   "the whole compile.jsonl by each process's totals, as status and doctor do; the timeline keeps "
                   "its latest events for drawing only")
def test_the_report_counts_compiles_from_the_whole_file_as_status_does(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from remote import config
    from remote.ops import compilelog

    spec = config.parse({"hosts": {"h": {"address": "x"}}, "containers": {200: {"host": "h"}}},
                        "hosts.yaml").containers[200]
    events = [json.dumps({"t": 1000.0 + i, "kind": "recompile", "fn": f"f{pid}", "n": i + 2, "reason": "k == 2",
                          "seconds": 0.01, "pid": pid, "totals": {"compile": 1, "recompile": i + 1, "seconds": i}})
              for pid in (7, 8) for i in range(600)]
    compile_text = "\n".join(events) + "\n"
    metrics = "".join(json.dumps({"t": 900.0 + i, "value": 20.0, "unit": "Ktok/s"}) + "\n" for i in range(3))
    want = compilelog.health_line(compilelog.summarize(events, compilelog.steady_at(metrics)))
    assert "2 compiles, 1200 recompiles" in want  # each process's totals: 600 + 600, not the 400 drawn
    run = "20260101-000000-abcd"
    monkeypatch.setattr(report.jobs, "state", lambda t, run_id: RunState(run, RUN, attempts=(Attempt(1, 900.0),)))
    t = CountingTransport([
        Expect(lambda argv: inner_argv(argv)[0] == "cat", 1, b"", b""),  # no known-good run
        Expect(lambda argv: inner_argv(argv)[0] == "cat", 1, b"", b""),  # no warmup records
        pulled("metrics.jsonl", metrics.encode()), pulled("gpu.csv", None), pulled("events.jsonl", None),
        pulled("compile.jsonl", compile_text.encode()),
        Expect(lambda argv: inner_argv(argv)[-2:] == (f"{RUN}/log", "0") and "f $size" in inner_argv(argv)[2], 0, b"f 15 -\n", b""),  # the log: a file
        pulled("log", b"step 20 Ktok/s\n")])
    page = report.write(SimpleNamespace(spec=spec, ct=Container(t, 200)), None, str(tmp_path / "r.html")).read_text()
    t.assert_done()
    assert f"{want} (the ticks" in page
    assert len(timeline.parse("", "", "", None, compile_text).compiles) == timeline.MAX_COMPILES  # drawn: the latest


def test_a_metrics_row_with_an_integer_too_large_for_a_float_is_skipped_not_a_crash():
    rows = ['{"t": 1' + "0" * 400 + ', "value": 5}', '{"t": 2, "value": 1e999}', '{"t": 3, "value": 7.5, "unit": "tok/s"}']
    tl = timeline.parse(metrics="\n".join(rows) + "\n")
    assert tl.metrics == [(3.0, 7.5)] and tl.unit == "tok/s"


def test_a_report_goes_to_the_current_folder_by_default(tmp_path, monkeypatch):
    """Issue 40 item 9: where a user looks (it went under ~/.local/share/remote/reports)."""
    from remote.runs.report import default_path

    monkeypatch.chdir(tmp_path)
    assert default_path(200, "20261202-070000-ab12") == tmp_path / "report-200-20261202-070000-ab12.html"
