"""stop(save=True) refuses before it stops anything: a refusal changes nothing (remote.ops.jobs.stop)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from remote import config
from remote.errors import ConfigError
from remote.ops import jobs

HOSTS = "hosts:\n  pve1: {address: 10.0.0.1}\ncontainers:\n  200: {host: pve1}\ntrain:\n  command: python train.py\n"


@pytest.mark.fault("stop --save without train.checkpoint", promise="refused naming train.checkpoint before anything "
                   "is stopped: a second live run beside the latest (train --force) is not killed unsaved first")
def test_stop_save_without_a_checkpoint_stops_no_run_before_it_refuses(monkeypatch):
    spec = config.parse(yaml.safe_load(HOSTS), "hosts.yaml").containers[200]
    t = SimpleNamespace(spec=spec, session=SimpleNamespace(config=SimpleNamespace(file="hosts.yaml")))
    live = (SimpleNamespace(run="r1"), SimpleNamespace(run="r2"))
    monkeypatch.setattr(jobs, "state", lambda t, run_id=None: SimpleNamespace(run=run_id or "r2", live=live))
    stopped: list[str] = []
    monkeypatch.setattr(jobs, "_stop_one", lambda t, st, grace, save=False: stopped.append(st.run))
    with pytest.raises(ConfigError, match="train.checkpoint"):
        jobs.stop(t, None, save=True)  # type: ignore[arg-type]
    assert stopped == []
