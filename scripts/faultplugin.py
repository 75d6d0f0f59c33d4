"""A pytest plugin for scripts/fault-table: records each test's `fault` markers and its outcome.

    @pytest.mark.fault("SSH dropped mid-push", promise="no file at the destination; the retry resumes")

`--fault-json FILE` writes {nodeid: {"rows": [[row, promise], ...], "outcome": ..., "seconds": ...}} for
every collected test that carries the marker (outcome "not run" when it was deselected or only collected).
"""

from __future__ import annotations

import json
import time

import pytest


def pytest_addoption(parser):
    parser.addoption("--fault-json", default=None, help="write the fault-marked tests and their outcomes here")


def pytest_configure(config):
    config.addinivalue_line("markers", "fault(row, promise): a row of docs/evidence/reliability.md that this test checks")
    config._fault = {}


def _rows(item) -> list[list[str]]:
    rows = []
    for mark in item.iter_markers("fault"):
        if not mark.args:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.fault needs the row name")
        rows.append([mark.args[0], mark.kwargs.get("promise", mark.args[1] if len(mark.args) > 1 else "")])
    return list(reversed(rows))  # in the order they are written


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    for item in items:
        rows = _rows(item)
        if rows:
            config._fault[item.nodeid] = {"rows": rows, "outcome": "not run", "seconds": 0.0}
            item.user_properties.append(("fault_rows", rows))  # to the controller, under xdist


def pytest_runtest_logreport(report):
    found = getattr(_CONFIG, "_fault", None) if _CONFIG else None
    if found is None:
        return
    entry = found.get(report.nodeid)
    if entry is None:  # under xdist the controller collects nothing: the worker's report carries the rows
        rows = dict(report.user_properties).get("fault_rows")
        if not rows:
            return
        entry = found[report.nodeid] = {"rows": [list(r) for r in rows], "outcome": "not run", "seconds": 0.0}
    entry["seconds"] += report.duration
    if report.when == "call" or report.outcome != "passed":
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        if entry["outcome"] in ("not run", "passed"):  # a failed teardown still fails the test
            entry["outcome"] = outcome
        entry["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


_CONFIG = None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    global _CONFIG
    _CONFIG = session.config


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("fault_json")
    if path and not hasattr(session.config, "workerinput"):  # an xdist worker: the controller writes it
        with open(path, "w") as f:
            json.dump(session.config._fault, f, indent=1, sort_keys=True)
