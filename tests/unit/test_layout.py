"""remote.ops.layout: what preflight and doctor say about compiling threads per device (pure, no torch)."""

import ast

import pytest

from remote.ops.layout import compile_layout_notes, device_key, devices_from_command, torch_minor


def test_one_thread_per_device_has_nothing_to_say():
    assert compile_layout_notes(["0", "1"], "2.11.0+cu130") == []
    assert compile_layout_notes([5, 6, 7], None) == []
    assert compile_layout_notes([], "2.13.0+cpu") == [] and compile_layout_notes(None, "2.13.0") == []


def test_two_threads_on_one_device_are_named_with_their_positions():
    notes = compile_layout_notes(["0", "1", "0"], "2.11.0+cu130")
    assert len(notes) == 2
    assert "cuda:0 has 2 threads (1, 3)" in notes[0] and "cuda:1" not in notes[0].split("layout")[0]
    assert "CompileGuard.compile" in notes[0]


@pytest.mark.parametrize("devices", [[0, "0"], ["cuda:0", 0], ["0", "cuda:0 "]])
def test_index_and_cuda_name_are_one_device(devices):
    assert compile_layout_notes(devices, "2.11.0")[0].startswith("several compiling threads on one device: cuda:0")


def test_cpu_threads_count_too():
    assert "cpu has 3 threads" in compile_layout_notes(["cpu"] * 3, "2.13.0+cpu")[0]


@pytest.mark.parametrize("version, says", [
    ("2.11.0+cu130", "FX-tracing flag is global"),
    ("2.13.0+cpu", "FX-tracing flag is global"),
    ("2.14.0", "was not measured with this layout"),
    ("2.15.0.dev20261101+cu130", "was not measured with this layout"),
    (None, "torch version unknown"),
    ("weird", "torch version unknown"),
])
def test_the_second_note_depends_on_the_torch_version(version, says):
    notes = compile_layout_notes(["0", "0"], version)
    assert says in notes[1] and "one compiling thread per device" in notes[1]


def test_parsers():
    assert device_key(" CUDA:1") == "cuda:1" and device_key(3) == "cuda:3" and device_key("cpu") == "cpu"
    assert torch_minor("2.13.0+cpu") == (2, 13) and torch_minor("10.2") == (10, 2) and torch_minor("") is None


@pytest.mark.parametrize("command, devices", [
    ("python -m drafter.train --target-gpus 0 --drafter-gpus 0,1,0 --steps 9", ["0", "1", "0"]),
    ("python -m drafter.train --drafter-gpus=5,6,7", ["5", "6", "7"]),
    ("python -m drafter.train --target-gpus 0", None),
    ("python -m drafter.train --drafter-gpus", []),
    ("python 'unclosed", None),
    (None, None),
])
def test_devices_from_a_training_command(command, devices):
    assert devices_from_command(command) == devices


def test_the_story_layout_and_the_race_layout_from_their_commands():
    assert compile_layout_notes(devices_from_command("train.py --drafter-gpus 5,6,7"), "2.11.0") == []
    assert compile_layout_notes(devices_from_command("train.py --drafter-gpus 0,1,0"), "2.11.0")


def test_layout_module_imports_nothing_that_needs_torch():
    import remote.ops.layout

    tree = ast.parse(open(remote.ops.layout.__file__).read())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= {"__future__", "re", "shlex", "collections"}, names
