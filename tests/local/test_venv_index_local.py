"""Local tier: credentials in an index or find-links URL reach a real uv (run by bash through withenv.sh)
through stdin, never an argv or a message (the plans of the same row are in tests/unit/test_plans.py)."""

import pytest

from remote.config import VenvSpec
from remote.ops import fetched, venv

PLAIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # a fresh machine's: no uv there


@pytest.mark.fault("Index URL with credentials", "it reaches uv through stdin (withenv.sh), never an argv "
                   "(`ps`, `deploy -n`) or a message")
def test_an_index_url_with_credentials_never_appears_in_an_argv(tmp_path):
    import subprocess

    from remote import shell
    from remote.ops import jobenv

    token = "s3cr3t-t0ken"
    spec = VenvSpec(packages=("six",), index_url=f"http://ci:{token}@127.0.0.1:9/cu128",
                    extra_index_urls=("https://pypi.org/simple",))
    args, env = venv.uv_index_args(spec), venv.uv_index_env(spec)
    assert token not in " ".join(args) and args == ["--extra-index-url", "https://pypi.org/simple"]
    assert env == {"UV_INDEX_URL": spec.index_url}
    assert venv.expected_cuda(spec) == ("12.8", "index_url http://***@127.0.0.1:9/cu128")
    # uv reads it from the environment withenv.sh builds from stdin: it asks that index (port 9: refused).
    (tmp_path / "in.txt").write_text("six\n")
    only = VenvSpec(packages=("six",), index_url=spec.index_url)  # no other index to ask first
    argv = ["bash", "-c", shell.load("withenv"), "withenv", str(fetched.find_uv()), "pip", "compile", "--no-cache",
            "--quiet", *venv.uv_index_args(only), str(tmp_path / "in.txt")]
    assert token not in " ".join(argv)
    r = subprocess.run(argv, input=jobenv.stdin_for(env), capture_output=True, timeout=120,
                       env={"PATH": PLAIN_PATH, "UV_NO_CONFIG": "1", "HOME": str(tmp_path)})
    assert r.returncode != 0 and b"127.0.0.1:9" in r.stderr, r.stderr[-2000:]
    assert token.encode() not in r.stderr


@pytest.mark.fault("Index URL with credentials", "it reaches uv through stdin (withenv.sh), never an argv "
                   "(`ps`, `deploy -n`) or a message")
def test_a_find_links_url_with_credentials_never_appears_in_an_argv(tmp_path):
    import subprocess

    from remote import shell
    from remote.ops import jobenv

    token = "s3cr3t-l1nks"
    links = (str(tmp_path / "wheels"), f"http://ci:{token}@127.0.0.1:9/wheels/")
    spec = VenvSpec(packages=("six",), find_links=links)
    args, env = venv.uv_index_args(spec), venv.uv_index_env(spec)
    assert token not in " ".join(args) and "--find-links" not in args
    assert env == {"UV_FIND_LINKS": ",".join(links)}
    # Without credentials they stay arguments, as before.
    assert venv.uv_index_args(VenvSpec(find_links=links[:1])) == ["--find-links", links[0]]
    # uv reads both from UV_FIND_LINKS, which withenv.sh builds from stdin: it asks the URL (port 9: refused).
    (tmp_path / "wheels").mkdir()
    (tmp_path / "in.txt").write_text("six\n")
    argv = ["bash", "-c", shell.load("withenv"), "withenv", str(fetched.find_uv()), "pip", "compile", "--no-cache",
            "--quiet", "--no-index", *args, str(tmp_path / "in.txt")]
    assert token not in " ".join(argv)
    r = subprocess.run(argv, input=jobenv.stdin_for(env), capture_output=True, timeout=120,
                       env={"PATH": PLAIN_PATH, "UV_NO_CONFIG": "1", "HOME": str(tmp_path)})
    assert r.returncode != 0 and b"127.0.0.1:9" in r.stderr, r.stderr[-2000:]
    assert token.encode() not in r.stderr
