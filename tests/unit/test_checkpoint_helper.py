"""remote_checkpoint (remote/sh/checkpoint.py), the optional helper a job may import: its signal and request-file
logic, its settings and latest(), without torch (the local tier runs the documented example with torch)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import pickle
import signal
import sys
import zipfile
from pathlib import Path

import pytest

SH = Path(__file__).resolve().parents[2] / "remote" / "sh"


def load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, SH / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def helper(monkeypatch):
    """A fresh module each test (its state is per process), remote_ckpt beside it as deploy installs it, and
    SIGUSR1's handler put back afterwards."""
    monkeypatch.setitem(sys.modules, "remote_ckpt", load("remote_ckpt", "ckpt.py"))
    before = signal.getsignal(signal.SIGUSR1)
    mod = load("remote_checkpoint", "checkpoint.py")
    mod.LOOK_EVERY = 0.0
    yield mod
    signal.signal(signal.SIGUSR1, before)


def run_folder(tmp_path: Path, monkeypatch, **conf) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    settings = {"path": str(tmp_path / "out" / "ckpt.pt"), "complete": None, "keep": None, "signal": None,
                "grace": 30, **conf}
    (run / "checkpoint.json").write_text(json.dumps(settings) + "\n")
    monkeypatch.setenv("REMOTE_RUN_DIR", str(run))
    return run


def torch_like(path: Path, step: int, truncate: bool = False) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"iter_num": step}, protocol=2))
        z.writestr("archive/data/0", b"x" * 5000)
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data[: len(data) // 2] if truncate else data)


@pytest.mark.fault("stop --save asks a job that uses remote_checkpoint (its signal)",
                   promise="stop_requested() turns True once the configured signal arrives, and stays True; "
                           "the handler only sets a flag, and a handler the job had is still called")
def test_signal_sets_the_flag_and_chains(helper, tmp_path, monkeypatch):
    run_folder(tmp_path, monkeypatch, signal="USR1")
    seen = []
    signal.signal(signal.SIGUSR1, lambda *a: seen.append(a[0]))
    assert helper.stop_requested() is False
    assert helper.install() is True  # installed by the first use: stop --save now signals this process
    os.kill(os.getpid(), signal.SIGUSR1)
    assert helper.stop_requested() is True
    assert helper.stop_requested() is True
    assert seen == [signal.SIGUSR1]


@pytest.mark.fault("stop --save asks a job that uses remote_checkpoint (no signal configured)",
                   promise="stop_requested() turns True once <run>/save-requested is there")
def test_request_file(helper, tmp_path, monkeypatch):
    run = run_folder(tmp_path, monkeypatch)
    assert helper.stop_requested() is False
    assert helper.install() is False  # signal: none: nothing to catch
    (run / "save-requested").write_text("1\n")
    assert helper.stop_requested() is True


def test_request_file_is_looked_for_at_most_every_half_second(helper, tmp_path, monkeypatch):
    run = run_folder(tmp_path, monkeypatch)
    helper.LOOK_EVERY = 3600.0
    assert helper.stop_requested() is False
    def again():
        raise AssertionError("the settings are read once per process, not every step")
    monkeypatch.setattr(helper, "settings", again)
    assert helper.stop_requested() is False
    (run / "save-requested").write_text("1\n")
    assert helper.stop_requested() is False  # cheap every step: no stat until LOOK_EVERY has passed
    helper._state["looked"] -= 7200
    assert helper.stop_requested() is True


@pytest.mark.fault("Code that imports remote_checkpoint runs outside remote",
                   promise="no stop asked, no checkpoint folder, no latest; save() without a path says to pass one")
def test_outside_a_run(helper, monkeypatch):
    monkeypatch.delenv("REMOTE_RUN_DIR", raising=False)
    assert helper.stop_requested() is False
    assert helper.checkpoint_dir() is None and helper.latest() is None
    with pytest.raises(ValueError, match="pass path="):
        helper.save({"x": 1})


def test_bad_settings_are_no_settings(helper, tmp_path, monkeypatch):
    run = run_folder(tmp_path, monkeypatch)
    (run / "checkpoint.json").write_text("{not json")
    assert helper.settings() == {} and helper.checkpoint_dir() is None and helper.stop_requested() is False


def test_checkpoint_dir_of_a_file_and_of_a_glob(helper, tmp_path, monkeypatch):
    run_folder(tmp_path, monkeypatch)
    assert helper.checkpoint_dir() == str(tmp_path / "out") and (tmp_path / "out").is_dir()
    (tmp_path / "run" / "checkpoint.json").write_text(json.dumps({"path": str(tmp_path / "g" / "step-*" / "m.pt")}))
    assert helper.checkpoint_dir() == str(tmp_path / "g")
    with pytest.raises(ValueError, match="is a glob"):
        helper.save({"x": 1})


@pytest.mark.fault("latest() of remote_checkpoint with a truncated newest checkpoint",
                   promise="the newest COMPLETE one, by ckpt.py's own rules (never the truncated one)")
def test_latest_skips_a_truncated_newest(helper, tmp_path, monkeypatch):
    run_folder(tmp_path, monkeypatch, path=str(tmp_path / "out" / "ckpt-*.pt"))
    assert helper.latest() is None
    torch_like(tmp_path / "out" / "ckpt-10.pt", 10)
    torch_like(tmp_path / "out" / "ckpt-20.pt", 20, truncate=True)
    os.utime(tmp_path / "out" / "ckpt-10.pt", (1, 1))
    (tmp_path / "out" / "ckpt-30.pt.remote-tmp-1-2").write_bytes(b"PK\x03\x04")  # save()'s temp name: never one
    assert helper.latest() == str(tmp_path / "out" / "ckpt-10.pt")
