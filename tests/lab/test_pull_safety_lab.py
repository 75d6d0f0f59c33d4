"""Lab tier: `pull --run` from a hostile container (a polluted image, hand-patched code): its run id,
manifest and tree stream never write outside DEST, never through a symlink, never a device, fifo or
setuid file, and what was refused is named."""

import dataclasses
import os
import stat

import pytest
from support import LAB_CONTAINERS

from remote.errors import TransferError
from remote.ops.jobs import pull_run
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
CT = LAB_CONTAINERS[0]
RUN = "20260101-000000-beef"

# A `tar` that a polluted container puts first on PATH: the real tree, then hostile members.
FAKE_TAR = r'''#!/usr/bin/python3
import io, os, sys, tarfile
if sys.argv[1:] != ["-c", "-f", "-", "."]:
    os.execv("/usr/bin/tar", ["tar", *sys.argv[1:]])
with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as t:
    t.add(".")
    for name, kind, link in (("lnk", tarfile.SYMTYPE, "sub"), ("up", tarfile.SYMTYPE, "../../../.."),
                             ("dev", tarfile.CHRTYPE, ""), ("fifo", tarfile.FIFOTYPE, ""),
                             ("../../../../escaped-by-tar", tarfile.REGTYPE, "")):
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.devmajor, info.devminor = kind, link, 1, 3
        t.addfile(info, io.BytesIO(b""))
    info = tarfile.TarInfo("lnk/through")
    info.size = 1
    t.addfile(info, io.BytesIO(b"x"))
'''


def everything_under(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.fault("Hostile container: a run id or output path with .., a tree with links out, devices, setuid",
                   promise="nothing written outside DEST or through a symlink, no device/fifo/setuid file; each refused member named")
def test_pull_of_a_hostile_containers_run_writes_only_inside_dest(lab_session, tmp_path):
    ct = lab_session.container(CT)
    outside = tmp_path / "w"
    dest = outside / "a" / "b" / "dest"
    elsewhere = outside / "elsewhere"
    elsewhere.mkdir(parents=True)
    ct.script("mkdir -p /root/runs /root/evil && echo '{\"outputs\": []}' > /root/evil/manifest.json && "
              ": > /root/evil/log && ln -sfn ../evil /root/runs/current")
    try:
        with pytest.raises(TransferError, match=r"run id '\.\./evil' refused"):
            pull_run(target_of(lab_session, CT), "latest", str(dest), progress=False)
        assert not (outside / "a" / "b" / "evil").exists()

        ct.script(f"mkdir -p /root/runs/{RUN} /root/dflash/tree/sub /root/dflash/old && cd /root/runs/{RUN} && "
                  "echo '{\"outputs\": [\"../../../escaped\", \"tree\", \"old\", \"/root/dflash/ok.txt\"]}' > manifest.json "
                  f"&& echo log > log && echo 0 > exit && ln -sfn {RUN} /root/runs/current && "
                  "echo ok > /root/dflash/ok.txt && echo run > /root/dflash/tree/sub/f && echo old > /root/dflash/old/f && "
                  "printf '#!/bin/sh\\n' > /root/dflash/tree/suid && chmod 4755 /root/dflash/tree/suid")
        ct.run(["tee", "/usr/local/bin/tar"], stdin=FAKE_TAR.encode())
        ct.run(["chmod", "755", "/usr/local/bin/tar"])
        # An earlier pull left a symlink where this run has a folder.
        (dest / RUN / "outputs").mkdir(parents=True)
        (dest / RUN / "outputs" / "old").symlink_to(elsewhere)
        lines = []
        got = pull_run(target_of(dataclasses.replace(lab_session, events=lambda e: lines.append(e.line)), CT), "latest", str(dest),
                       progress=False)  # its lines
    finally:
        ct.script(f"rm -rf /usr/local/bin/tar /root/evil /root/runs/{RUN} /root/dflash/tree /root/dflash/old "
                  "/root/dflash/ok.txt; rm -f /root/runs/current")
    assert sorted(os.listdir(outside)) == ["a", "elsewhere"] and os.listdir(outside / "a" / "b") == ["dest"]
    assert os.listdir(elsewhere) == []
    refused = "\n".join(got.refused)
    for what in ("outputs/../../../escaped", "outputs/old", "tree/lnk/through", "tree/up", "tree/dev", "tree/fifo",
                 "tree/../../../../escaped-by-tar", "tree/suid: setuid/setgid bit dropped"):
        assert what in refused, (what, refused)
    assert all(f"!! {r}" in "\n".join(lines) or r.split(":")[0] in "\n".join(lines) for r in got.refused)
    out = dest / RUN / "outputs"
    assert (out / "root" / "dflash" / "ok.txt").read_text() == "ok\n" and (out / "tree" / "sub" / "f").read_text() == "run\n"
    assert everything_under(out / "tree") == ["lnk", "sub", "sub/f", "suid"]
    assert not os.stat(out / "tree" / "suid").st_mode & (stat.S_ISUID | stat.S_ISGID)
    assert (dest / RUN / "log").read_text() == "log\n"
