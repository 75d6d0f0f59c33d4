"""Unit tier: the checkpoint tool (remote/sh/ckpt.py) as data: what is a complete checkpoint (a torch.save zip
with and without its end record, a growing file, safetensors, DCP/HF/marker folders), the step read from a
pickle without loading it (hostile pickles included), the keep copy, restore, fresh and the resume command.
Torch itself is not needed: a torch.save file is a zip whose `<name>/data.pkl` is the pickled object."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import time
import zipfile

import pytest
from support import ROOT  # noqa: E402

TOOL = ROOT / "remote" / "sh" / "ckpt.py"


@pytest.fixture(scope="module")
def ck():
    spec = importlib.util.spec_from_file_location("ckpt_under_test", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_like(path, obj, *, blob=b"\0" * 4096) -> bytes:
    """A file shaped as torch.save writes one: a stored zip with archive/data.pkl and a tensor's bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle.dumps(obj, protocol=2))
        z.writestr("archive/data/0", blob)
        z.writestr("archive/version", "3\n")
    path.write_bytes(buf.getvalue())
    os.utime(path, (time.time() - 10, time.time() - 10))
    return buf.getvalue()


def old(path, age=10.0):
    os.utime(path, (time.time() - age, time.time() - age))


def conf(path, tmp_path, **kw):
    return {"path": str(path), "complete": None, "keep": str(tmp_path / "keep"), "signal": None, "grace": 5, **kw}


@pytest.mark.fault("A torch.save checkpoint cut short (killed mid-save)",
                   promise="never taken as complete: its zip end record is missing, so a resume skips it")
def test_a_torch_zip_is_complete_only_with_its_end_record(ck, tmp_path):
    path = tmp_path / "ckpt.pt"
    data = torch_like(path, {"model": {"w": 1}, "iter_num": 250, "config": {"max_iters": 500}})
    c = ck.look(str(path))
    assert (c["kind"], c["complete"], c["step"], c["step_from"]) == ("torch", True, 250, "data.pkl iter_num")
    for cut in (len(data) - 1, len(data) - 22, len(data) // 2, 10):
        path.write_bytes(data[:cut])
        old(path)
        c = ck.look(str(path))
        assert (c["kind"], c["complete"], c["step"]) == ("torch", False, None), cut
        assert "end record" in c["why"]
    path.write_bytes(b"")
    assert ck.look(str(path))["complete"] is False  # truncated by torch.save, nothing written yet


def test_an_end_record_pointing_past_the_file_is_not_complete(ck, tmp_path):
    path = tmp_path / "ckpt.pt"
    data = bytearray(torch_like(path, {"step": 3}))
    i = data.rfind(b"PK\x05\x06")
    data[i + 16:i + 20] = struct.pack("<I", len(data) + 100)  # the central directory's offset, past the end
    path.write_bytes(bytes(data))
    old(path)
    c = ck.look(str(path))
    assert not c["complete"] and "past the file" in c["why"]


@pytest.mark.parametrize("obj,step,key", [
    ({"global_step": 7, "epoch": 1}, 7, "global_step"),
    ({"epoch": 4}, 4, "epoch"),
    ({"step": 2**40}, 2**40, "step"),  # a LONG1
    ({"iter_num": True}, None, None),  # a bool is no step
    ({"model": {"iter_num.weight": 5}}, None, None),
    ({"iter_num": "250"}, None, None),
])
def test_the_step_is_read_from_the_pickles_opcodes(ck, tmp_path, obj, step, key):
    path = tmp_path / "c.pt"
    torch_like(path, obj)
    c = ck.look(str(path))
    assert c["complete"] and c["step"] == step
    assert c["step_from"] == (f"data.pkl {key}" if key else None)


def test_a_hostile_pickle_is_walked_never_loaded(ck, tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = pickle.dumps({"x": Evil(), "iter_num": 9}, protocol=2)
    assert ck.pickle_step(evil) == ("iter_num", 9)
    assert not marker.exists()
    for junk in (b"\x80\x02\xff\xff", evil[: len(evil) // 2], b"", os.urandom(256), b"(" * 100000):
        assert ck.pickle_step(junk) in (None, ("iter_num", 9))  # never raises, never loads
    path = tmp_path / "evil.pt"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", evil)
    path.write_bytes(buf.getvalue())
    old(path)
    assert ck.look(str(path))["step"] == 9 and not marker.exists()


def test_a_file_of_unknown_form_is_complete_once_it_holds_still(ck, tmp_path):
    path = tmp_path / "weights.npz.part"
    path.write_bytes(b"abc" * 100)
    c = ck.look(str(path))
    assert c["kind"] == "file" and not c["complete"] and "may still be being written" in c["why"]
    assert ck.look(str(path), settle=False)["complete"]  # restore: the job is not running
    old(path)
    assert ck.look(str(path))["complete"]


def test_a_file_that_grows_while_it_is_read_is_not_complete(ck, tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    torch_like(path, {"step": 1})
    real = ck.file_state

    def growing(p, st, settle):
        out = real(p, st, settle)
        with open(p, "ab") as f:
            f.write(b"more")
        return out

    monkeypatch.setattr(ck, "file_state", growing)
    c = ck.look(str(path))
    assert not c["complete"] and "still being written" in c["why"]


def test_safetensors_is_as_long_as_its_header_says(ck, tmp_path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    assert ck.look(str(path))["complete"]
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    assert not ck.look(str(path))["complete"]


def test_folders_are_complete_by_their_marker(ck, tmp_path):
    dcp = tmp_path / "step-300"
    dcp.mkdir()
    (dcp / "__0_0.distcp").write_bytes(b"x")
    c = ck.look(str(dcp))
    assert not c["complete"] and ".metadata" in c["why"] and c["step"] == 300  # the name still tells the step
    (dcp / ".metadata").write_bytes(b"m")
    assert ck.look(str(dcp))["kind"] == "dcp" and ck.look(str(dcp))["complete"]
    hf = tmp_path / "checkpoint-500"
    hf.mkdir()
    (hf / "trainer_state.json").write_text(json.dumps({"global_step": 512}))
    c = ck.look(str(hf))
    assert (c["kind"], c["complete"], c["step"], c["step_from"]) == ("hf", True, 512, "trainer_state.json global_step")
    own = tmp_path / "mine"
    own.mkdir()
    assert not ck.look(str(own), "DONE*")["complete"]
    (own / "DONE.ok").write_text("")
    assert ck.look(str(own), "DONE*")["complete"]


def test_a_glob_lists_newest_first_and_skips_what_was_moved_aside(ck, tmp_path):
    for i, n in enumerate((100, 200, 300)):
        p = tmp_path / f"ckpt-{n}.pt"
        torch_like(p, {"step": n})
        os.utime(p, (time.time() - 100 + i, time.time() - 100 + i))
    (tmp_path / "ckpt-300.pt.incomplete-20261206-031500").write_bytes(b"PK\x03\x04")
    cands = ck.candidates(conf(tmp_path / "ckpt-*.pt", tmp_path))
    assert [c["step"] for c in cands] == [300, 200, 100]


@pytest.mark.fault("A job that overwrites its one checkpoint in place is killed mid-save",
                   promise="the watch's kept copy of the last complete one is put back before the resume; "
                           "the torn file is moved aside, never deleted")
def test_keep_then_restore_after_a_torn_in_place_save(ck, tmp_path):
    path = tmp_path / "out" / "ckpt.pt"
    path.parent.mkdir()
    data = torch_like(path, {"iter_num": 250})
    c = conf(path, tmp_path)
    last = ck.keep_once(c)
    kept = tmp_path / "keep" / "ckpt.pt"
    assert kept.read_bytes() == data and json.loads(kept.with_suffix(".pt.json").read_text())["step"] == 250
    assert ck.keep_once(c, last) is last  # unchanged: no second copy
    path.write_bytes(data[:1000])  # torch.save truncated it in place and was killed
    old(path)
    assert ck.keep_once(c, last) is last  # an incomplete one is never kept
    out, rc = ck.cmd_restore(c)
    assert rc == 0 and out["latest"]["step"] == 250 and out["restored"]["to"] == str(path)
    assert path.read_bytes() == data
    (aside,) = out["moved"]
    assert ".incomplete-" in aside["to"] and open(aside["to"], "rb").read() == data[:1000]


@pytest.mark.fault("The kept checkpoint copy after train.checkpoint.path changed",
                   promise="the kept copy records the path it was taken from (JSON beside it, written atomically); "
                           "restore puts it back only there: where the hosts file's path now differs it moves "
                           "nothing and names both (a resume refused, exit 2)")
def test_the_kept_copy_goes_back_only_where_it_came_from(ck, tmp_path):
    first = tmp_path / "a" / "ckpt.pt"
    first.parent.mkdir()
    data = torch_like(first, {"iter_num": 250})
    ck.keep_once(conf(first, tmp_path))
    meta = tmp_path / "keep" / "ckpt.pt.json"
    assert json.loads(meta.read_text())["source"] == str(first)
    assert not list((tmp_path / "keep").glob("*.tmp"))  # written beside, then renamed over
    moved = tmp_path / "b" / "ckpt.pt"  # the hosts file's path changed; the same name in another folder
    moved.parent.mkdir()
    moved.write_bytes(data[:100])  # torn there
    old(moved)
    out, rc = ck.cmd_restore(conf(moved, tmp_path))
    assert rc == 3 and out["restored"] is None and out["moved"] == []
    assert out["kept_elsewhere"] == {"kept": str(tmp_path / "keep" / "ckpt.pt"), "source": str(first),
                                     "path": str(moved)}
    assert moved.read_bytes() == data[:100]  # nothing put there, nothing moved aside
    out, rc = ck.cmd_pick(conf(moved, tmp_path), 250)  # a multi-node resume at the kept copy's step: the same
    assert rc == 3 and out["kept_elsewhere"]["source"] == str(first) and moved.read_bytes() == data[:100]
    run = tmp_path / "run"  # a restart inside a run (job.sh) says so in the log's line
    run.mkdir()
    said, rc = ck.cmd_resume(conf(moved, tmp_path), str(run))
    assert rc == 3 and f"the kept copy {tmp_path / 'keep' / 'ckpt.pt'} came from {first}, not {moved}" in said
    first.write_bytes(data[:100])  # where it came from: torn too; restore puts the copy back there
    old(first)
    out, rc = ck.cmd_restore(conf(first, tmp_path))
    assert rc == 0 and out["restored"]["to"] == str(first) and first.read_bytes() == data


def test_restore_skips_an_incomplete_newest_for_an_older_complete_one(ck, tmp_path):
    a, b = tmp_path / "step-1.pt", tmp_path / "step-2.pt"
    torch_like(a, {"step": 1})
    b.write_bytes(b"PK\x03\x04 torn")
    c = conf(tmp_path / "step-*.pt", tmp_path)
    out, rc = ck.cmd_restore(c)
    assert rc == 0 and out["latest"]["path"] == str(a) and out["moved"][0]["path"] == str(b)
    assert not b.exists() and os.path.exists(out["moved"][0]["to"])


def test_restore_refuses_naming_the_incomplete_one_and_moves_nothing(ck, tmp_path):
    b = tmp_path / "ckpt.pt"
    b.write_bytes(b"PK\x03\x04 torn")
    out, rc = ck.cmd_restore(conf(b, tmp_path))
    assert rc == 3 and out["latest"] is None and out["incomplete"][0]["path"] == str(b) and b.exists()


def test_fresh_moves_every_checkpoint_and_the_kept_copy_aside(ck, tmp_path):
    path = tmp_path / "ckpt.pt"
    torch_like(path, {"step": 5})
    c = conf(path, tmp_path)
    ck.keep_once(c)
    out, rc = ck.cmd_fresh(c)
    assert rc == 0 and len(out["moved"]) == 2 and not path.exists()
    assert all(os.path.exists(m["to"]) and ".old-" in m["to"] for m in out["moved"])
    assert ck.cmd_restore(c)[1] == 3  # nothing left to resume from


def test_the_resume_command_quotes_the_checkpoint_once(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    path = tmp_path / "it's here" / "ckpt-7.pt"
    path.parent.mkdir()
    torch_like(path, {"step": 7})
    (run / "command-resume").write_text("python train.py --resume {checkpoint}\n")
    c = conf(str(path.parent / "ckpt-*.pt"), tmp_path)
    r = subprocess.run([sys.executable, "-I", "-S", str(TOOL), "resume", json.dumps(c), str(run)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{path} (step 7)"
    assert (run / "command-next").read_text() == f"python train.py --resume '{tmp_path}/it'\"'\"'s here/ckpt-7.pt'\n"
    r = subprocess.run([sys.executable, "-I", "-S", str(TOOL), "resume", json.dumps(conf(tmp_path / "none.pt", tmp_path)),
                        str(run)], capture_output=True, text=True)
    assert r.returncode == 3 and "no complete checkpoint" in r.stdout
