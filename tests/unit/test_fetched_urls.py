"""A bad URL in venv.index_url, or a wheel link urllib cannot open, is a DeployError naming the key (its
password redacted), never an internal error."""
from __future__ import annotations

import pytest

from remote.errors import DeployError
from remote.ops import fetched

WHEEL = "uv-0.5.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"


def test_an_index_url_whose_port_does_not_parse_is_named_redacted():
    sources = fetched.Sources(index_urls=("https://me:s3cret@mirror.example:99999/simple",))
    with pytest.raises(DeployError) as e:
        fetched._from_index(fetched.UV, "0.5.0", "x86_64", sources)
    assert "venv.index_url https://***@mirror.example:99999/simple" in str(e.value) and "s3cret" not in str(e.value)


def test_a_wheel_link_urllib_cannot_open_is_that_indexs_error(monkeypatch):
    assert fetched.wheel_matches(WHEEL, fetched.UV, "0.5.0", "x86_64")
    monkeypatch.setattr(fetched, "_files", lambda *a: [(WHEEL, "http://mirror.example:nonnumeric/uv.whl", "a" * 64)])
    sources = fetched.Sources(index_urls=("https://mirror.example/simple",))
    with pytest.raises(DeployError, match=r"https://mirror.example/simple: .*" + WHEEL):
        fetched._from_index(fetched.UV, "0.5.0", "x86_64", sources)


def test_an_index_url_with_a_port_that_is_no_number_is_that_indexs_error():
    sources = fetched.Sources(index_urls=("https://mirror.example:abc/simple",))
    with pytest.raises(DeployError, match=r"https://mirror.example:abc/simple: .*nonnumeric port"):
        fetched._from_index(fetched.UV, "0.5.0", "x86_64", sources)
