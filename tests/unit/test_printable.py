"""remote.naming.printable: the one terminal-safety rule for what a container (or a host) supplies."""

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remote.naming import printable

HOSTILE = ["\x1b]52;c;SGVsbG8=\x07", "\x1b[1A\x1b[2K", "\x9b31m", "\x1bP+q\x1b\\", "\x90", "\r", "\b", "\x00",
           "\x7f", "\u202e", "\u2028", "\u200b"]


def _controls(text: str) -> list[str]:
    return [c for c in text if c != "\t" and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


@settings(max_examples=500)
@given(st.text(alphabet=st.characters(codec=None), max_size=200) | st.text(alphabet=st.sampled_from(
    [chr(i) for i in range(0xA0)] + ["\u202e", "\u2028", "\ud800", "\udc9b"]), max_size=200))
def test_no_output_character_is_a_control_but_tab(text):
    assert _controls(printable(text)) == []
    assert _controls(printable(text, lines=True).replace("\n", "")) == []
    assert "\n" not in printable(text)


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=200))
def test_printable_ascii_is_unchanged(text):
    assert printable(text) == text


@given(st.binary(max_size=200))
def test_bytes_become_safe_text_and_bytes_not_utf8_show_as_xNN(data):
    out = printable(data)
    assert _controls(out) == [] and "\n" not in out
    for byte in data.decode("utf-8", "surrogateescape"):
        if 0xDC80 <= ord(byte) <= 0xDCFF:
            assert f"\\x{ord(byte) - 0xDC00:02x}" in out


@pytest.mark.fault("Hostile container: terminal escapes in run ids, names, versions",
                   promise="shown as visible escapes (\\x1b, \\x07, \\x9b): no raw control byte reaches the terminal")
@pytest.mark.parametrize("evil", HOSTILE)
def test_each_escape_sequence_is_shown_visibly(evil):
    out = printable(f"run-{evil}-x")
    assert _controls(out) == [] and out.startswith("run-") and out.endswith("-x")
    assert "\\x" in out or "\\u" in out


def test_the_visible_forms():
    assert printable("a\x1b]52;c;SGk=\x07b\x9bc\td") == "a\\x1b]52;c;SGk=\\x07b\\x9bc\td"
    assert printable(b"x\xff\xc2\x9by") == "x\\xffy".replace("y", "\\x9by")
    assert printable("one\ntwo") == "one\\x0atwo" and printable("one\ntwo", lines=True) == "one\ntwo"
    assert printable("torch 2.13.0+cpu ▁▂▃ é — ok") == "torch 2.13.0+cpu ▁▂▃ é — ok"
    assert printable(None) == "None" and printable(12) == "12"
