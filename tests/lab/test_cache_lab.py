"""Lab tier: warm once, copy to the rest (remote/ops/cachecopy.py) between real containers, the passport
that guards the copy, an interrupted copy, and the cache-missed finding of a seeded run that compiled."""

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest
from support import lab_ids, load_config

from remote import config, doctor
from remote.errors import BusyError, TransferError
from remote.ops import cachecopy
from remote.ops import warmup as wm
from remote.ops.deploy import deploy
from remote.ops.jobs import train
from remote.transport.session import Session
from remote.target import resolve as target_of

pytestmark = pytest.mark.lab
A, B = lab_ids(__file__)[:2]  # on conftest's third_lab (support.THIRD_LAB_MODULES)
CACHE = "/root/.cache/torch-compile"


def cache_files(ct, base=CACHE) -> dict[str, str]:
    """Every cache file of every per-version folder -> its sha256: staging, the passport and tmp/ left out,
    but for inductor's precompiled headers there (tmp/torchinductor_*/precompiled_headers/*)."""
    out = ct.run(["bash", "-c", f"cd {base} 2>/dev/null && find . -type f -print0 | sort -z | xargs -0r sha256sum; "
                                "true"]).out
    keep = re.compile(r"\./torch-[^/]+/(?!tmp/|\.remote-incoming/|passport\.json$)"
                      r"|\./torch-[^/]+/tmp/torchinductor_[^/]+/precompiled_headers/[^/]+$")
    return {line[66:]: line[:64] for line in out.splitlines() if keep.match(line[66:])}


def records(ct, base=CACHE):
    return [json.loads(l) for l in ct.run(["bash", "-c", f"cat {base}/warmups.jsonl 2>/dev/null; true"]).out.splitlines()]


@pytest.fixture(scope="module")
def fleet_warm(deployed, lab_session):
    """A and B deployed, their per-version cache folders set aside (a fresh B, a cold A), then
    `remote warmup -c A,B`."""
    deploy(target_of(lab_session, B))
    aside = f'for d in {CACHE}/torch-*; do [ -e "$d" ] && mv "$d" "$d.aside-$$"; done; true'
    for c in (A, B):
        lab_session.container(c).run(["bash", "-c", aside])
    lines = []
    outcomes = cachecopy.warm_fleet(dataclasses.replace(lab_session, events=lambda e: lines.append(e.line)), [A, B])  # its lines
    return outcomes, lines, {c: cache_files(lab_session.container(c)) for c in (A, B)}


def test_warmup_of_two_containers_warms_one_and_copies_its_cache_to_the_other(fleet_warm, lab_session):
    outcomes, lines, before = fleet_warm
    assert [o.ok for o in outcomes.values()] == [True, True], outcomes
    assert any(f"warming {A} for {A}, {B}" in l for l in lines), lines
    a, b = (cache_files(lab_session.container(c)) for c in (A, B))
    assert a and set(a.items()) <= set(b.items())  # every file of A's, byte for byte
    recs_b = records(lab_session.container(B))
    assert sorted(r["device"] for r in recs_b) == ["0", "1"]  # no warmup of its own ran there: only the copy
    assert all(r["copied_from"] == A for r in recs_b), recs_b
    assert wm.missing_warmups(target_of(lab_session, B), wm.deployed(target_of(lab_session, B))) == []
    holding = cachecopy.look(target_of(lab_session, B))
    assert holding.passport["copied_from"] == A and holding.serves_itself


def test_a_compile_on_the_copy_through_exec_misses_nothing(fleet_warm, lab_session, lab_hosts):
    stats = "/root/stats-exec"
    r = subprocess.run([sys.executable, "-c", "from remote.cli import program; program.run()", "exec", "-c", str(B),
                        "--hosts", str(lab_hosts), "--", "env", f"REMOTE_CACHE_STATS={stats}", "python", "-m",
                        "drafter.warmup", "--device", "0"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "REMOTE_HOSTS_FILE": str(lab_hosts)})
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout.split("REMOTE_WARMUP ", 1)[1].splitlines()[0])
    assert report["fxgraph_miss"] == 0 and report["fxgraph_hit"] > 0, report
    # the venv's hook saw the same, for a process that did not report anything itself
    got = [json.loads(x) for x in lab_session.container(B).run(["bash", "-c", f"cat {stats}/*.json"]).out.splitlines()]
    assert got and got[0]["fxgraph_miss"] == 0 and got[0]["fxgraph_hit"] > 0, got
    lab_session.container(B).run(["rm", "-rf", stats])


@pytest.mark.fault("A compile-cache copy whose link is cut mid-way", "no partial file is ever in place (only whole, "
                   "verified files are linked in); the next copy completes it")
def test_a_copy_cut_mid_way_leaves_no_partial_file_and_the_next_completes_it(fleet_warm, lab_session, lab_hosts):
    fresh = "/root/.cache/torch-compile-cut"  # B's cache elsewhere: a fresh folder, nothing set aside or deleted
    other = load_config(lab_hosts, **{f"  {B}:\n": f"  {B}:\n    warmup:\n      cache_dir: {fresh}\n"})
    with Session(config.load(str(other)), agent=True) as s:
        ctb = s.container(B)
        a = cache_files(s.container(A))
        total = cachecopy.look(target_of(s, A)).bytes
        with pytest.raises(TransferError, match="cut"):
            cachecopy.copy(target_of(s, A), target_of(s, B), cut_after=total // 2, via_controller=True)
        half = cache_files(ctb, fresh)
        assert 0 < len(half) < len(a)  # some files made it, some did not
        assert set(half.items()) <= set(a.items())  # each one in place is whole (its sha256 is the source's)
        staged = ctb.run(["bash", "-c", f"find {fresh} -path '*/.remote-incoming/*' -type f | wc -l"]).out.strip()
        assert int(staged) <= 1  # a torn file: in the staging folder only, which torch never reads
        assert records(ctb, fresh) == []  # nothing says copied
        done = cachecopy.copy(target_of(s, A), target_of(s, B), via_controller=True)
        assert done.files == len(a) - len(half) and cache_files(ctb, fresh) == a
        assert [r["copied_from"] for r in records(ctb, fresh)] == [A, A]


def test_a_passport_mismatch_refuses_the_copy_names_the_field_and_warms_it_alone(fleet_warm, lab_session, lab_hosts):
    other = load_config(lab_hosts, **{f"  {B}:\n": f"  {B}:\n    train:\n      env: {{TORCHINDUCTOR_COMPILE_THREADS: '1'}}\n"})
    with Session(config.load(str(other)), agent=True) as s:
        with pytest.raises(cachecopy.CacheMismatch, match=r"inductor environment differs "
                                                          r"\(TORCHINDUCTOR_COMPILE_THREADS\)") as exc:
            cachecopy.copy(target_of(s, A), target_of(s, B))
        assert exc.value.fields == ["env"]
        lines = []
        outcomes = cachecopy.warm_fleet(dataclasses.replace(s, events=lambda e: lines.append(e.line)), [A, B])  # its lines
        assert [o.ok for o in outcomes.values()] == [True, True]
        assert any(f"{B} is warmed on its own: unlike {A}: inductor environment differs "
                   "(TORCHINDUCTOR_COMPILE_THREADS)" in l for l in lines), lines
        spec = s.config.container(B)
        state = wm.deployed(target_of(s, B))
        mine = [r for r in records(s.container(B)) if r["key"] == wm.warmup_key(spec, state, "0")["key"]]
        assert mine and "copied_from" not in mine[-1]  # its own warmup


def test_a_seeded_run_that_compiled_anyway_is_a_cache_missed_finding(fleet_warm, lab_session, lab_hosts):
    # A train command that compiles a graph no warmup made: the cache was seeded for this commit, lock,
    # command and environment, and the run still missed.
    cmd = ("python -c 'import torch; f = torch.compile(lambda x: x * 3 + 1); f(torch.ones(7)); print(\"1.0 it/s\")'")
    other = load_config(lab_hosts, **{"  command: python -m drafter.train --target-gpus 0 --drafter-gpus 0,1 --steps 200 "
                                      "--log-interval 0.5": f"  command: {json.dumps(cmd)}"})
    cachecopy.copy(target_of(lab_session, A), target_of(lab_session, B))  # seeded again (the test above warmed B for another environment)
    with Session(config.load(str(other)), agent=True) as s:
        final = train(target_of(s, B))
        assert final is not None and final.exit == 0, final
        spec = s.config.container(B)
        found = doctor.findings(doctor.gather(target_of(s, B)), spec)
    missed = [f for f in found if f.code == "cache-missed"]
    assert missed and "FX-graph" in missed[0].what and "no passport field differs" in missed[0].why, found
    assert "TORCH_LOGS=+torch._inductor.codecache" in missed[0].fix
    assert any(f.code == "cache-passport" for f in found)


def test_no_task_deleted_a_cache_file(fleet_warm, lab_session):
    _, _, before = fleet_warm
    for c in (A, B):
        now = cache_files(lab_session.container(c))
        assert set(before[c]) <= set(now), sorted(set(before[c]) - set(now))[:5]


@pytest.mark.fault("A compile-cache copy from a container whose job made symlinks",
                   "nothing whose real path leaves the cache folder is listed, sent or written: a cache folder "
                   "linked to /root/.ssh sends no key")
@pytest.mark.parametrize("via_controller", [False, True], ids=["host-relay", "controller"])
def test_a_job_that_links_the_precompiled_headers_to_ssh_sends_no_key(fleet_warm, lab_session, lab_hosts,
                                                                      via_controller):
    fresh = f"/root/.cache/torch-compile-links-{int(via_controller)}"
    other = load_config(lab_hosts, **{f"  {B}:\n": f"  {B}:\n    warmup:\n      cache_dir: {fresh}\n"})
    with Session(config.load(str(other)), agent=True) as s:
        cta, ctb = s.container(A), s.container(B)
        folder = cachecopy.look(target_of(s, A)).folder
        # what a job in A can do: its TMPDIR is the cache's tmp/
        cta.run(["bash", "-c", "mkdir -p /root/.ssh && echo PRIVATE-KEY > /root/.ssh/id_remote_test && "
                               f"mkdir -p {folder}/tmp/torchinductor_job && "
                               f"ln -sfn /root/.ssh {folder}/tmp/torchinductor_job/precompiled_headers"])
        try:
            assert not any("id_remote_test" in p for p in cachecopy.look(target_of(s, A)).sizes)
            done = cachecopy.copy(target_of(s, A), target_of(s, B), via_controller=via_controller)
            assert done.files > 0
            found = ctb.run(["bash", "-c", f"grep -rl PRIVATE-KEY {fresh} /root/.ssh 2>/dev/null; true"]).out
            assert found == "", found
        finally:
            cta.run(["bash", "-c", f"rm -rf {folder}/tmp/torchinductor_job /root/.ssh/id_remote_test"])
            ctb.run(["rm", "-rf", fresh])


def test_copy_from_others_false_warms_that_container_on_its_own(fleet_warm, lab_hosts):
    other = load_config(lab_hosts, **{f"  {B}:\n": f"  {B}:\n    warmup:\n      copy_from_others: false\n"})
    with Session(config.load(str(other)), agent=True) as s:
        p = cachecopy.plan(s, [A, B])
        assert p.leaders == {} and "copy_from_others is false" in p.alone[B]


LEASE_RACE = ("A compile-cache copy racing another controller",
              "what to copy is read under the target's lease; a copy whose lease was taken over writes no "
              "passport and no warmup record")


@pytest.mark.fault(*LEASE_RACE)
def test_a_copy_reads_the_target_under_its_lease_and_writes_no_passport_once_it_lost_it(fleet_warm, lab_hosts,
                                                                                       monkeypatch):
    from remote.naming import LEASE
    from remote.ops import oplock

    fresh = "/root/.cache/torch-compile-lease"
    other = load_config(lab_hosts, **{f"  {B}:\n": f"  {B}:\n    warmup:\n      cache_dir: {fresh}\n"})
    with Session(config.load(str(other)), agent=True) as s:
        ctb = s.container(B)
        seen = {}
        real_look, real_stream = cachecopy._look, cachecopy._stream_copy

        def look(t):
            if t.ctid == B:  # the target's holding: is its lease ours while it is read?
                seen["lease"] = ctb.run(["bash", "-c", f"cat {LEASE} 2>/dev/null; true"]).out
            return real_look(t)

        def stream_then_taken_over(*args, **kw):
            got = real_stream(*args, **kw)
            # another controller takes the lease over (as after an expiry) before the passport is written
            ctb.run(["bash", "-c", f"flock {LEASE}.flock sed -i 's/^token=.*/token=0123456789abcdef/; "
                                   "s/^holder=.*/holder=elsewhere pid 7/' "
                                   f"{LEASE}"])
            return got

        monkeypatch.setattr(cachecopy, "_look", look)  # what look() and copy() read through
        monkeypatch.setattr(cachecopy, "_stream_copy", stream_then_taken_over)
        try:
            with pytest.raises(BusyError, match="lost the operation lease.*elsewhere pid 7"):
                cachecopy.copy(target_of(s, A), target_of(s, B))
            assert f"holder={oplock.default_holder()}" in seen["lease"] and "cache copy --from" in seen["lease"]
            folders = ctb.run(["bash", "-c", f"ls {fresh}"]).out.split()
            assert folders and not ctb.run(["bash", "-c", f"ls {fresh}/*/passport.json 2>/dev/null; true"]).out
            assert records(ctb, fresh) == []
        finally:
            ctb.run(["rm", "-rf", fresh, LEASE])
