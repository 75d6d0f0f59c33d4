"""Unit tier: the cache passport's comparison and the grouping of containers by it (pure functions)."""

import json

import pytest

from remote import config
from remote.facts.deployed import Deployed, venv_record_of, verify_of
from remote.ops import passport as pp
from remote.ops import warmup as wm

VERIFY = {"torch": "2.11.0+cu130", "torch_git": "abc123", "cuda_build": "13.0", "triton": "3.6.0",
          "gpu_name": "NVIDIA H200"}


def make(verify=VERIFY, devices=("0", "1"), env=None, commit="c0ffee", lock="l0ck", command="python w.py"):
    return pp.expected(verify, commit=commit, venv_lock=lock, command=command, devices=devices,
                       env=env if env is not None else {"TORCHINDUCTOR_FX_GRAPH_CACHE": "1"})


def test_the_same_inputs_make_the_same_passport_and_no_difference():
    assert make() == make()
    assert pp.differences(make(), make()) == []


def test_each_differing_field_is_named_in_order():
    other = make(verify={**VERIFY, "torch": "2.12.0", "gpu_name": "NVIDIA H100"}, commit="beef")
    assert pp.differences(other, make()) == ["torch", "gpu", "commit"]
    text = pp.describe(other, make(), theirs="200", ours="201")
    assert "torch version 2.12.0 (200) != 2.11.0+cu130 (201)" in text
    assert "GPU name NVIDIA H100 (200) != NVIDIA H200 (201)" in text


def test_devices_are_a_subset_rule():
    assert pp.differences(make(devices=("0", "1", "2")), make(devices=("0", "1"))) == []
    assert pp.differences(make(devices=("0",)), make(devices=("0", "1"))) == ["devices"]
    assert "devices warmed 0 (cache) lack 1 (here)" in pp.describe(make(devices=("0",)), make())


def test_the_inductor_environment_counts_and_names_the_variable_not_its_value():
    secret = "s3cr3t-value"
    a = make(env={"TORCHINDUCTOR_MAX_AUTOTUNE": "1", "WANDB_API_KEY": secret})
    b = make(env={"TORCHINDUCTOR_MAX_AUTOTUNE": "0", "WANDB_API_KEY": "other"})
    assert pp.differences(a, b) == ["env"]
    assert "TORCHINDUCTOR_MAX_AUTOTUNE" in pp.describe(a, b)
    assert secret not in json.dumps(a) and "WANDB_API_KEY" not in json.dumps(a)  # not inductor-relevant, not kept
    # where the cache lives is not what it holds
    assert pp.differences(make(env={"TORCHINDUCTOR_CACHE_DIR": "/a"}), make(env={"TORCHINDUCTOR_CACHE_DIR": "/b"})) == []


def test_no_passport_differs_in_every_field():
    assert pp.differences(None, make()) == list(pp.FIELDS)
    assert "no passport" in pp.describe(None, make())


def test_groups_by_passport_and_why_a_container_is_alone():
    p = {200: make(), 201: make(), 202: make(verify={**VERIFY, "torch": "2.12.0"}), 203: make(devices=("0",))}
    assert pp.groups(p) == [[200, 201], [202], [203]]
    assert pp.why_alone(202, p) == "unlike 200: torch version 2.11.0+cu130 (200) != 2.12.0 (202)"
    assert pp.why_alone(203, p) == "unlike 200: devices to warm 0 (203) != 0,1 (200)"
    assert pp.why_alone(201, {200: make(devices=("0",)), 201: make()}) == \
        "unlike 200: devices warmed 0 (200) lack 1 (201)"
    assert pp.why_alone(200, {200: make()}) == "no other container selected"


def test_merged_keeps_the_devices_of_an_earlier_warmup_of_the_same_passport():
    assert pp.merged(make(devices=("0",)), make(devices=("1",)))["devices"] == ["0", "1"]
    assert pp.merged(make(devices=("0",), commit="old"), make(devices=("1",)))["devices"] == ["1"]
    assert pp.merged(None, make())["devices"] == ["0", "1"]


def test_parse_refuses_what_is_not_a_passport():
    assert pp.parse(json.dumps(make())) == make()
    assert pp.parse("{torn") is None and pp.parse("[]") is None and pp.parse('{"format": 99}') is None


def test_the_passport_a_container_would_write_follows_its_hosts_file():
    def spec(**warmup):
        return config.parse({"hosts": {"h": {"address": "x"}}, "containers": {200: {"host": "h"}},
                             "warmup": {"command": "python w.py --device {device}", "devices": [0, 1], **warmup},
                             "train": {"env": {"TORCHINDUCTOR_COORDINATE_DESCENT_TUNING": "1"}}}, "f").containers[200]

    state = Deployed.of({"commit": "c0ffee"}, {"lock_sha256": "l0ck", "verify": VERIFY})
    base = wm.expected_passport(spec(), state)
    assert base["devices"] == ["0", "1"] and base["gpu"] == "NVIDIA H200" and base["commit"] == "c0ffee"
    assert "TORCHINDUCTOR_COORDINATE_DESCENT_TUNING" in base["env_keys"]
    assert pp.differences(base, wm.expected_passport(spec(devices=[0, 1, 2]), state)) == ["devices"]
    assert pp.differences(base, wm.expected_passport(spec(command="python w.py -d {device}"), state)) == ["command"]


def test_remote_config_shows_what_of_the_passport_the_hosts_file_decides():
    from remote import configview

    c = config.parse({"hosts": {"h": {"address": "x"}}, "containers": {200: {"host": "h"}},
                      "warmup": {"command": "python w.py --device {device}", "devices": [0, 1]},
                      "train": {"env": {"TORCHINDUCTOR_MAX_AUTOTUNE": "1", "WANDB_API_KEY": "secret"}}}, "f")
    text = configview.render(c, [c.containers[200]], "x")
    assert "cache passport" in text and "devices: [0, 1]" in text
    assert "TORCHINDUCTOR_MAX_AUTOTUNE" in text.split("cache passport", 1)[1] and "secret" not in text


def test_what_a_container_wrote_into_its_passport_reaches_no_terminal_raw():
    evil = {**make(), "torch": "2.11\x1b[2J\x07"}
    text = pp.describe(evil, make())
    assert "\x1b" not in text and "\\x1b[2J\\x07" in text


def test_a_hand_edited_passport_of_the_wrong_shape_is_a_difference_not_a_crash():
    odd = {**make(), "devices": 5, "env_keys": "x"}
    assert pp.differences(odd, make()) == ["devices"]
    assert "devices warmed none (cache) lack 0,1 (here)" in pp.describe(odd, make())
    from remote.doctor import passport_line
    assert "devices -" in passport_line(odd)


def test_a_cache_made_on_another_compute_capability_or_driver_major_is_a_difference():
    """Triton builds kernels for one capability: a warm cache copied from sm_120 to sm_121 gave garbled outputs
    (vLLM #41871). The capability and the driver's major version are passport fields (issue 33)."""
    here = make(verify={**VERIFY, "gpu_capability": "sm_121", "driver_major": "580"})
    there = make(verify={**VERIFY, "gpu_capability": "sm_120", "driver_major": "580"})
    assert pp.differences(there, here) == ["capability"]
    assert "compute capability sm_120 (cache) != sm_121 (here)" in pp.describe(there, here)
    newer_driver = make(verify={**VERIFY, "gpu_capability": "sm_121", "driver_major": "590"})
    assert pp.differences(newer_driver, here) == ["driver"]
    # a passport written before these fields existed cannot vouch for them where they are known
    old = {k: v for k, v in here.items() if k not in ("capability", "driver")}
    assert pp.differences(old, here) == ["capability", "driver"]


def test_nothing_derived_from_a_path_enters_a_field_that_must_match():
    a = make(env={"TORCH_HOME": "/root/.cache/torch", "TRITON_HOME": "/root", "CUDA_HOME": "/usr/local/cuda",
                  "TORCHINDUCTOR_DUMP_PATH": "/tmp/x", "TORCHINDUCTOR_MAX_AUTOTUNE": "1"})
    b = make(env={"TORCH_HOME": "/home/u/.cache/torch", "TRITON_HOME": "/home/u", "CUDA_HOME": "/opt/cuda",
                  "TORCHINDUCTOR_DUMP_PATH": "/var/y", "TORCHINDUCTOR_MAX_AUTOTUNE": "1"})
    assert pp.differences(a, b) == [] and set(a["env_keys"]) == {"TORCHINDUCTOR_MAX_AUTOTUNE"}
    assert "/root" not in json.dumps(a)


@pytest.mark.fault("A passport answered with wrong JSON types (not a string, a non-string field)",
                   promise="read as no passport: that container's cache is not trusted, and no command crashes")
@pytest.mark.parametrize("answer", [{"format": 1}, ["x"], 5, True,
                                    json.dumps({**make(), "format": 1, "torch": ["2.11.0"]}),
                                    json.dumps({**make(), "format": 1, "gpu": {"name": "H200"}}),
                                    json.dumps({**make(), "format": 1, "devices": [{"i": 0}]}),
                                    json.dumps({**make(), "format": 1, "env_keys": {"A": 1}}),
                                    json.dumps({**make(), "format": 1, "made_by": "200"})])
def test_a_passport_of_the_wrong_types_is_no_passport(answer):
    assert pp.parse(answer) is None


def test_a_well_typed_passport_still_parses():
    good = {**make(), "format": 1, "made_by": 200, "made_at": "2026-12-02T01:00:00+0000", "copied_from": 201}
    assert pp.parse(json.dumps(good)) == good
    assert pp.parse(json.dumps({**good, "devices": [0, 1]}))["devices"] == [0, 1]  # an older record's ints


def test_the_cache_listing_with_a_passport_of_another_type_is_that_containers_cache_without_one(monkeypatch):
    """cachecopy.look reads the container's listing: a `passport` that is not a string was a TypeError
    ("internal error") that stopped `remote cache` for every container."""
    from remote.ops import cachecopy

    class Ran:
        out = json.dumps({"passport": {"format": 1}, "files": {"a": 1}})

    class Ct:
        def script(self, *a, **k):
            return Ran()

    class Session:
        class config:  # noqa: N801
            @staticmethod
            def container(ctid):
                return config.parse({"hosts": {"h": {"address": "x"}}, "containers": {200: {"host": "h"}}},
                                    "f").containers[200]

        def container_for(self, spec, venv_on_path=True):
            return Ct()

    monkeypatch.setattr(cachecopy, "_system", lambda ct: ct)
    monkeypatch.setattr(cachecopy.wm, "deployed_now", lambda t: Deployed.of({}, {}))
    monkeypatch.setattr(cachecopy.wm, "expected_passport", lambda spec, state: make())
    from remote.target import resolve

    held = cachecopy.look(resolve(Session(), 200))
    assert held.passport is None and held.sizes == {"a": 1} and held.files == 1 and not held.serves_itself


FLEET = config.parse({"hosts": {"h1": {"address": "a"}, "h2": {"address": "b"}},
                      "containers": {200: {"host": "h1"}, 201: {"host": "h2"}, 202: {"host": "h1"},
                                     203: {"host": "h2"}}}, "hosts.yaml")
T200 = type("T", (), {"ct": None, "spec": FLEET.containers[200]})()  # what deployed_now reads of a Target


def holding(ctid, files, **passport):
    from remote.results import CacheHolding

    spec = FLEET.containers[ctid]
    sizes, have = {f"f{i}": 1 for i in range(files)}, {**make(), **passport}
    return CacheHolding(ctid, "/c", files, files, have, bool(files) and not pp.differences(have, make()),
                        host=spec.host.name, sizes=sizes, want=make())


@pytest.mark.fault("A cache source with a forged passport and padding",
                   promise="never chosen for holding the most files: a source on the target's host first, then the "
                   "group's warmer (its cache its own warmup made), then the hosts file's order")
def test_the_source_on_the_same_host_and_the_warmer_win_over_the_most_files(monkeypatch):
    import types

    from remote.ops import cachecopy

    def choose(held):
        monkeypatch.setattr(cachecopy, "look", lambda t: holding(t.spec.ctid, 0))
        monkeypatch.setattr(cachecopy, "_look_at", lambda session, c: held[c])
        t = types.SimpleNamespace(session=types.SimpleNamespace(config=FLEET), spec=FLEET.containers[200])
        return cachecopy.find_source(t).container

    padded = holding(201, 100_000)  # another host, a passport that matches, the most files
    assert choose({201: padded, 202: holding(202, 10, copied_from=203), 203: holding(203, 50)}) == 202
    # None on the target's host: the warmer (no copied_from) over a copy holding more.
    assert choose({201: holding(201, 100_000, copied_from=203), 202: holding(202, 0), 203: holding(203, 5)}) == 203
    # A group's leader: the warmer whose cache serves it, in the order given, not the fullest.
    held = {201: holding(201, 100_000, copied_from=202), 202: holding(202, 5), 203: holding(203, 0)}
    monkeypatch.setattr(cachecopy, "_look_at", lambda session, c: held[c])
    p = cachecopy.plan(types.SimpleNamespace(config=FLEET), [201, 202, 203])
    assert p.leaders == {202: [201, 203]}


@pytest.mark.fault("A container migrated to a node with another GPU or driver",
                   promise="its passport's GPU, compute capability and driver are what it has now (nvidia-smi), not "
                   "its deploy node's: no cache made for the old GPU is copied to it or from it as if it were")
def test_the_passport_follows_the_gpu_the_container_has_now(monkeypatch):
    verify = {**VERIFY, "gpu_capability": "sm_90", "driver_major": "580"}
    state = Deployed.of({"commit": "c0ffee"}, {"verify": verify, "lock_sha256": "l0ck"})
    smi = {"rc": 0, "out": "0, NVIDIA H100 80GB HBM3, 570.86.15, 0, 81559, GPU-1\n"}
    raw = {"gpus": smi}
    monkeypatch.setattr(wm.facts, "read_raw", lambda t, parts: (raw, (0.0, 0.0)))
    monkeypatch.setattr(wm, "deployed_in", lambda raw, spec: state)
    now = wm.deployed_now(T200)
    assert now.verify == verify_of({**verify, "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_capability": None,
                                    "driver_major": "570"})
    want = wm.expected_passport(FLEET.containers[200], now)
    assert want["gpu"] == "NVIDIA H100 80GB HBM3" and want["driver"] == "570" and want["capability"] is None
    # The same GPU, another driver: the capability stays; nvidia-smi unanswered: the record as it is.
    raw["gpus"] = {"rc": 0, "out": "0, NVIDIA H200, 575.1.2, 0, 143771, GPU-2\n"}
    assert wm.deployed_now(T200).verify == verify_of({**verify, "driver_major": "575"})
    raw["gpus"] = {"rc": 9, "out": ""}
    assert wm.deployed_now(T200) == state


def test_a_cpu_containers_passport_says_so_not_none():
    """Issue 40 item 8: doctor printed `GPU None , driver -` for a CPU container."""
    from remote.doctor import passport_line

    line = passport_line({"torch": "2.13.0+cpu", "cuda": None, "triton": None, "gpu": None, "capability": None,
                          "driver": None, "commit": "c" * 40, "venv_lock": "l" * 64})
    assert "GPU none (CPU)" in line and "CUDA none" in line and "None" not in line
    assert "driver" not in line


def test_preflight_says_none_for_a_cpu_venvs_cuda_build_not_None():
    """Issue 40 item 8's kind: preflight printed `(CUDA build None)` for a CPU torch."""
    from remote.ops.jobs import _verified

    assert _verified(venv_record_of({"verify": {"torch": "2.13.0+cpu", "cuda_build": None}})) == \
        "venv verified: torch 2.13.0+cpu (CUDA build none)"
