"""A run's compile health, read from the `compile.jsonl` the compile watch writes (remote/sh/compilewatch.py).

Pure functions over untrusted text (every line was written inside the container): each field is checked
for its type and bounded, every string shown goes through remote.naming.printable. What a run's compile
events mean:

  compile         the first compile of a function
  recompile       a further compile of it; `reason` is torch's (the guard that failed)
  graph-break     the function's graph was split; `reason` is torch's break reason, `where` the line that broke
                  (the function's `def` line is `line`); dynamo's internal restarts (`<class '...RestartAnalysis'>`,
                  written as graph breaks by watches before issue 39) are no graph break and are left out
  eager-fallback  the function runs its Python code from now on; `why`: recompile-limit, suppressed-error

"After the first steady step" is after the time the run's second throughput value was reported (its first
value includes the first compile): <run>/metrics.jsonl holds each value's time (remote/sh/watch.py).
docs/guide/compile-health.md has each event, each finding and what to do about it.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from ..naming import json_loads, printable
from ..results import CompileEvent, CompileHealth, Finding

KINDS = ("compile", "recompile", "graph-break", "eager-fallback")
WHY = ("recompile-limit", "suppressed-error", "nested-fx-trace")
FILE = "compile.jsonl"
TEXT_MAX = 600


def _str(v, limit: int = TEXT_MAX) -> str | None:
    return printable(str(v)[:limit]) if isinstance(v, str) and v else None


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


# A count or a number of seconds past this is no real run's: bounded, so that sums stay finite.
AMOUNT_MAX = 1e15


def number(v) -> float | None:
    """A JSON number as a finite float; None for anything else (a string, a bool, an integer too large for
    a float, Infinity or NaN: what a container writes is untrusted, and `status --json` must stay JSON)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _amount(v) -> float | None:
    f = number(v)
    return None if f is None else min(max(f, 0.0), AMOUNT_MAX)


def internal_restart(reason: str | None) -> bool:
    """Dynamo restarting its analysis for a reason of its own (`<class 'torch._dynamo.exc.
    TensorifyScalarRestartAnalysis'>`): an older watch wrote it as a graph break; it is none."""
    text = (reason or "").strip()
    return (text.startswith("<class '") and text.endswith("'>")) or text in (
        "autograd.grad consumed grad_fns of returned tensors", "source-less requires_grad_() intermediate leaked as output")


def parse_line(line: str) -> CompileEvent | None:
    """One line of compile.jsonl -> an event; None for a torn, foreign or `totals` line."""
    try:
        d = json_loads(line)
    except ValueError:
        return None
    t = number(d.get("t")) if isinstance(d, dict) else None
    if not isinstance(d, dict) or d.get("kind") not in KINDS or t is None:
        return None
    cache: dict = d["cache"] if isinstance(d.get("cache"), dict) else {}
    return CompileEvent(
        t=t, kind=d["kind"], fn=_str(d.get("fn"), 200), file=_str(d.get("file"), 400),
        line=_int(d.get("line")), n=max(1, _int(d.get("n")) or 1),
        why=d.get("why") if d.get("why") in WHY else None, reason=_str(d.get("reason")),
        where=_str(d.get("where"), 400), seconds=_amount(d.get("seconds")) or 0.0, rank=_int(d.get("rank")),
        pid=_int(d.get("pid")), thread=_str(d.get("thread"), 100), compile_id=_str(d.get("compile_id"), 40),
        cache={k: v for k, v in cache.items() if isinstance(k, str) and _int(v) is not None})


def totals_of(line: str) -> tuple[int, dict[str, float]] | None:
    """(pid, its totals) from any line that carries them: every event line and the last `totals` line."""
    try:
        d = json_loads(line)
    except ValueError:
        return None
    if not isinstance(d, dict) or _int(d.get("pid")) is None or not isinstance(d.get("totals"), dict):
        return None
    tot = {k: a for k, v in d["totals"].items() if k in (*KINDS, "seconds") and (a := _amount(v)) is not None}
    return d["pid"], tot


def steady_at(metrics_text: str) -> float | None:
    """The time of the first steady step: the second throughput value in metrics.jsonl (the first includes the
    first compile); None before the run reported two."""
    return _steady(metrics_text.splitlines())


def _steady(lines: Iterable[str]) -> float | None:
    seen = 0
    for line in lines:
        try:
            d = json_loads(line)
        except ValueError:
            continue
        t = number(d.get("t")) if isinstance(d, dict) else None
        if t is not None:
            seen += 1
            if seen == 2:
                return t
    return None


def describe(ev: CompileEvent) -> str:
    """One line, as `train` prints it: `recompile #3 of f (train.py:12): guard failed: k == 2.0`."""
    what = {"recompile": f"recompile #{ev.n} of", "graph-break": "graph break in",
            "eager-fallback": "running eagerly:", "compile": "compile of"}.get(ev.kind, ev.kind)
    why = f" ({ev.why})" if ev.kind == "eager-fallback" and ev.why else ""
    text = f"{what} {ev.function}{why}"
    if ev.kind == "graph-break" and ev.where:  # the line that broke, beside the function's def line above
        text += f" at {ev.where}"
    if ev.reason:
        text += f": {ev.reason}"
    if ev.where and ev.kind != "graph-break":
        text += f" at {ev.where}"
    return printable(text)


def health_line(h: CompileHealth) -> str:
    """`compile: 3 compiles, 7 recompiles, 1 graph break, 1 eager fallback; 2.1 s compiling after the first
    steady step`."""
    def n(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 's'}"

    parts = [n(h.compiles, "compile"), n(h.recompiles, "recompile"), n(h.graph_breaks, "graph break"),
             n(h.eager_fallbacks, "eager fallback")]
    after = (f"{h.steady_seconds:.1f} s compiling after the first steady step" if h.steady_at is not None
             else "no steady step recorded (metrics.jsonl has no second throughput value)")
    return "compile: " + ", ".join(parts) + f"; {after}"


def summarize(lines: Iterable[str], steady: float | None = None, limit: int = 2000) -> CompileHealth:
    """compile.jsonl's lines (any number: only the last `limit` events are kept) -> the run's health. Counts
    come from each process's latest totals (the file is bounded: a process writes totals, not every event)."""
    events: list[CompileEvent] = []
    totals: dict[int, dict[str, float]] = {}
    internal: Counter = Counter()  # per process: restarts an older watch counted as graph breaks
    seen_lines: set[int] = set()
    for line in lines:
        if hash(line) in seen_lines:  # the probe sends a process's latest line again with the totals
            continue
        seen_lines.add(hash(line))
        ev = parse_line(line)
        if ev is not None and ev.kind == "graph-break" and internal_restart(ev.reason):
            internal[ev.pid] += 1
            ev = None
        if ev is not None:
            events.append(ev)
            if len(events) > 2 * limit:
                del events[:limit]
        tot = totals_of(line)
        if tot is not None:
            totals[tot[0]] = tot[1]
    events = events[-limit:]
    summed: Counter = Counter()
    for pid, per_process in totals.items():
        summed.update({**per_process, "graph-break": max(0.0, per_process.get("graph-break", 0.0) - internal[pid])})
    for kind in KINDS:  # a line without totals still counts
        seen = sum(1 for e in events if e.kind == kind and e.pid not in totals)
        summed[kind] += seen
    after = [e for e in events if steady is not None and e.t > steady]
    return CompileHealth(
        compiles=int(summed["compile"]), recompiles=int(summed["recompile"]), graph_breaks=int(summed["graph-break"]),
        eager_fallbacks=int(summed["eager-fallback"]),
        seconds=float(summed["seconds"]) + sum(e.seconds for e in events if e.pid not in totals),
        steady_at=steady, steady_seconds=sum(e.seconds for e in after),
        steady_counts=dict(Counter(e.kind for e in after)), events=tuple(events), processes=len(totals))


def read_run(folder: str | os.PathLike[str]) -> CompileHealth:
    """A pulled run folder's compile health (compile.jsonl and metrics.jsonl in it, either there or not), the
    counts from each process's totals as status and doctor have them. Each file is read line by line, never
    whole: metrics.jsonl grows with the run, and only its first two values are needed."""
    def lines(name: str) -> Iterator[str]:
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                for line in f:
                    yield line.rstrip("\n")
        except OSError:
            return

    return summarize(lines(FILE), _steady(lines("metrics.jsonl")))


class Notices:
    """What `train` and `logs -f` print: one line the first time each kind of event happens after the first
    steady step, and each function that starts running eagerly (whenever it happens)."""

    def __init__(self) -> None:
        self.kinds: set[str] = set()
        self.eager: set[tuple] = set()

    def take(self, ev: CompileEvent, steady: bool) -> str | None:
        if ev.kind == "eager-fallback":
            key = (ev.fn, ev.file, ev.line)
            if key in self.eager:
                return None
            self.eager.add(key)
            return describe(ev)
        if not steady or ev.kind in self.kinds:
            return None
        self.kinds.add(ev.kind)
        return describe(ev) + ("  (after the first steady step)" if ev.kind == "compile" else "")


# What to do, per finding (docs/guide/compile-health.md says more).
HINTS = {
    "recompiling": "a guard fails each step: make the value a tensor or mark it dynamic "
                   "(torch._dynamo.mark_dynamic, or torch.compile(dynamic=True) for shapes); the guard's source line "
                   "is named above; TORCH_LOGS=recompiles shows every reason",
    "graph-breaks": "each break splits the graph and costs fusion: remove the call at that line (a print, .item(), "
                    "an unsupported call) or move it out of the compiled function; torch.compile(fullgraph=True) "
                    "turns each break into an error that names it",
    "eager-fallback": "the function runs uncompiled (slow): for recompile-limit fix the recompiles first (or raise "
                      "torch._dynamo.config.recompile_limit); for suppressed-error unset "
                      "torch._dynamo.config.suppress_errors to see the error, and keep error_on_nested_fx_trace on",
    "compile-in-steady-state": "something compiled after the first steady step (a new shape at evaluation, a new "
                               "batch size, a new code path): run that shape in the first steps or in `remote warmup`, "
                               "or pad shapes to a few sizes",
}


def guard_advice(guard: str) -> str:
    """What to do about one failed guard, from what it checks."""
    g = guard or ""
    if any(word in g for word in ("size", "stride", "shape", "dim")):
        return ("shapes vary between calls: mark the varying dimension dynamic (torch._dynamo.mark_dynamic), or pad "
                "shapes to a few sizes")
    if "==" in g or " is " in g:
        return ("a Python value the compiled code reads changes between calls, and dynamo guards on its value: keep "
                "it constant inside the compiled function (rescale outside it), or pass it as a tensor")
    return "make what that guard checks the same on every call; TORCH_LOGS=recompiles shows every reason"


def limit_hint(events: Iterable[CompileEvent]) -> str | None:
    """The recompile limit's cause from the watch's record: the function that hit it, its last failed guard and
    the source line torch names, with what to do about that guard; None where the record has nothing (then the
    log's generic hint stands)."""
    evs = list(events)
    hit = [e for e in evs if e.kind == "eager-fallback" and e.why == "recompile-limit"]
    recompiles = [e for e in evs if e.kind == "recompile" and e.reason]
    ev = hit[-1] if hit else recompiles[-1] if recompiles else None
    if ev is None:
        return None
    guard = ev.reason or ""
    for prefix in ("recompile limit reached; last guard failed: ", "guard failed: "):
        if guard.startswith(prefix):
            guard = guard[len(prefix):]
    where = ev.where or next((e.where for e in reversed(recompiles) if e.fn == ev.fn and e.where), None)
    said = "hit the recompile limit and runs eagerly" if hit else f"recompiled {sum(e.fn == ev.fn for e in recompiles)} time(s)"
    return printable(f"{ev.function} {said}; the guard that failed: {guard or '?'}"
                     + (f" at {where}" if where else "") + f": {guard_advice(guard)}")


def _top(events: list[CompileEvent], n: int = 3) -> str:
    seen = Counter((e.function, e.reason or "?") for e in events)
    return "; ".join(f"{fn}: {reason} ({count}x)" for (fn, reason), count in seen.most_common(n))


FIX = "see docs/guide/compile-health.md"


def _warning(code: str, what: str, why: str) -> Finding:
    return Finding(code, "warning", what, None, why, FIX)


def findings(h: CompileHealth, run: str | None = None) -> list[Finding]:
    """The doctor's compile findings for a run: recompiling, graph-breaks, eager-fallback,
    compile-in-steady-state (each a warning, its why the advice)."""
    out = []
    of = f"run {run}" if run else "the run"
    after = h.after_steady()
    steady_known = h.steady_at is not None
    recompiles = [e for e in (after if steady_known else h.events) if e.kind == "recompile"]
    if recompiles:
        first = recompiles[0]
        when = "after the first steady step" if steady_known else "(no steady step known)"
        out.append(_warning(
            "recompiling",
            f"{of} recompiled {len(recompiles)} time(s) {when}: {_top(recompiles)}"
            + (f"; guard at {first.where}" if first.where else ""),
            guard_advice((first.reason or "").removeprefix("guard failed: ")) + "; " + HINTS["recompiling"]))
    breaks = [e for e in h.events if e.kind == "graph-break"]
    if breaks:
        at = sorted({f"{e.function} at {e.where}" for e in breaks if e.where})[:3]
        out.append(_warning("graph-breaks", f"{of} has {h.graph_breaks or len(breaks)} graph break(s): {_top(breaks)}"
                            + (f"; broke at {', '.join(at)}" if at else ""), HINTS["graph-breaks"]))
    eager = [e for e in h.events if e.kind == "eager-fallback"]
    if eager:
        names = "; ".join(sorted({f"{e.function} ({e.why or 'unknown'}): {e.reason or '?'}" for e in eager})[:5])
        cause = limit_hint(h.events) if any(e.why == "recompile-limit" for e in eager) else None
        out.append(_warning("eager-fallback", f"{of}: {len(eager)} function(s) run eagerly: {names}",
                            (f"{cause}; " if cause else "") + HINTS["eager-fallback"]))
    if steady_known and any(e.kind in ("compile", "recompile") for e in after):
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(h.steady_counts.items()))
        out.append(_warning("compile-in-steady-state", f"{of} spent {h.steady_seconds:.1f} s compiling after its "
                            f"first steady step ({kinds})", HINTS["compile-in-steady-state"]))
    return out


def from_probe(part: Mapping | None) -> CompileHealth:
    """The facts probe's `compile` part (remote/facts/probe.py's compile_part: the lines that matter and each
    process's latest totals line, as the container wrote them) -> the run's health."""
    if not isinstance(part, Mapping):
        return CompileHealth()
    lines = [x for x in part.get("lines") or [] if isinstance(x, str)] if isinstance(part.get("lines"), list) else []
    tots = [x for x in part.get("totals") or [] if isinstance(x, str)] if isinstance(part.get("totals"), list) else []
    return summarize([*lines, *tots], number(part.get("steady_at")))


class Warns(Protocol):
    """What compile notices are reported through: a Target (remote.target), whose warn emits a typed Note."""

    def warn(self, text: str) -> None: ...


class CompileNotices:
    """The compile watch's lines as `train` and `logs` receive them (remote.ops.logs.follow's on_compile):
    a warning (t.warn: a Note of level warning) the first time each kind of event happens after the first
    steady step, and each function that starts running eagerly. Events come before the steady step's time
    is known: those wait for it."""

    MAX_WAITING = 200
    MAX_KEPT = 2000  # lines kept for the run's summary (each process's latest totals line is kept apart)

    def __init__(self, t: Warns) -> None:
        self.warn = t.warn
        self.notices = Notices()
        self.steady: float | None = None
        self.waiting: list[CompileEvent] = []
        self.kept: list[str] = []
        self.totals: dict[int, str] = {}  # pid -> its latest line with totals

    def health(self) -> CompileHealth:
        """The run's compile health from what was received, as status and doctor count it."""
        return summarize([*self.kept, *self.totals.values()], self.steady)

    def hint(self, name: str, hint: str) -> str:
        """A crash signature's hint, from the watch's record where it knows the cause (the recompile limit: the
        guard that failed and its line), the log's generic text only where it has nothing."""
        if name == "recompile limit hit":
            return limit_hint(self.health().events) or hint
        return hint

    def summary(self) -> tuple[str | None, list[str]]:
        """train's last words about compiling: the counts (None where nothing was recorded) and each finding's
        text (a warning each)."""
        h = self.health()
        if not h:
            return None, []
        return health_line(h), [f"{f.code}: {f.what}; {f.why}" for f in findings(h)]

    def line(self, text: str) -> None:
        tot = totals_of(text) if '"totals"' in text else None
        if tot is not None:
            self.totals[tot[0]] = text
        if '"kind"' in text and '"kind": "totals"' not in text:
            self.kept.append(text)
            if len(self.kept) > 2 * self.MAX_KEPT:
                del self.kept[:self.MAX_KEPT]
        if text.startswith('{"steady"'):
            try:
                got = json_loads(text).get("steady")
                t = got.get("t") if isinstance(got, dict) else None
            except (ValueError, AttributeError):
                t = None
            t = number(t)
            if t is not None and self.steady is None:
                self.steady = t
                waiting, self.waiting = self.waiting, []
                for early in waiting:
                    self._take(early)
            return
        ev = parse_line(text)
        if ev is None:
            return
        if self.steady is None and ev.kind != "eager-fallback":
            if len(self.waiting) < self.MAX_WAITING:
                self.waiting.append(ev)
            return
        self._take(ev)

    def _take(self, ev) -> None:
        note = self.notices.take(ev, self.steady is not None and ev.t > self.steady)
        if note:
            self.warn(note)
