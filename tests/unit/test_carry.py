"""Save or refuse, and a rollback's checkpoint carry (remote.ops.carry), as data: what is carried and where it
goes back, the host's free space, the sudo rule's lines for each host command the carry builds, the refusal's
words, and a drain that goes on past a container that could not save. The lab runs them for real:
tests/lab/test_resume_lab.py (rollback), tests/local/test_stop_save_local.py (save.sh's refuse mode)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from remote import config, shell, sudo
from remote.errors import SaveRefused
from remote.lab.testing import FakeCluster
from remote.ops import carry, checkpoints
from remote.ops import move as mv
from remote.results import Checkpoint
from remote.transport.session import Session

HOSTS = """
hosts:
  pve1: {address: 10.0.0.1, user: trainer, sudo: true}
containers:
  200: {host: pve1}
  201: {host: pve1}
train:
  command: python train.py
  checkpoint: {path: /root/out/ckpt.pt, resume: --init-from resume, grace: 30}
"""


def target() -> SimpleNamespace:
    spec = config.parse(yaml.safe_load(HOSTS), "hosts.yaml").containers[200]
    return SimpleNamespace(spec=spec, ctid=200, host=spec.host)


@pytest.mark.fault("rollback of a container whose checkpoint is on a mount point, or that has none complete",
                   promise="no checkpoint is carried (the rollback keeps a mount point), and the plan says why; "
                   "the run folders still are, unless they too are on a mount point (then nothing is carried)")
def test_the_carry_plan_carries_the_latest_complete_checkpoint_and_skips_a_mount_point(monkeypatch):
    own = Checkpoint("/root/out/ckpt.pt", True, "torch", 100, 1.0, step=40)
    kept = Checkpoint("/root/runs/.checkpoints/ckpt.pt", True, "torch", 100, 2.0, step=35, kept=True)
    torn = Checkpoint("/root/out/ckpt.pt", False, "torch", 10, 3.0, why="truncated")
    t = target()
    monkeypatch.setattr(checkpoints, "listing", lambda t: [own, kept])
    p, said = carry.plan(t, ["/data"], "20261206-0530-ab12")
    assert p is not None and p.checkpoint == own and p.dest == "/root/out/ckpt.pt" and p.run_dir == "/root/runs"
    assert re.fullmatch(r"/var/lib/remote/carry/200/20261206-0530-ab12-[0-9]{8}-[0-9]{6}[.]ckpt", p.host_file)
    assert "step 40" in said
    assert "checkpoint /root/out/ckpt.pt (step 40) and the run folders of /root/runs across the rollback" in said
    # The job's own is torn: the watch's kept copy goes, back to where the job reads it.
    monkeypatch.setattr(checkpoints, "listing", lambda t: [torn, kept])
    p, _ = carry.plan(t, [], None)
    assert p is not None and p.checkpoint == kept and p.dest == "/root/out/ckpt.pt"
    assert re.fullmatch(r".*/latest-[0-9]{8}-[0-9]{6}[.]ckpt", p.host_file)
    p, said = carry.plan(t, ["/root/out"], "r1")  # the checkpoint kept by the rollback: the run folders go alone
    assert p is not None and p.checkpoint is None and p.dest == "" and p.run_dir == "/root/runs"
    assert "on mount point /root/out: the rollback keeps it" in said and "the run folders of /root/runs" in said
    p, said = carry.plan(t, ["/root"], "r1")
    assert p is None and "the rollback keeps it" in said and "the rollback keeps them: nothing to carry" in said
    monkeypatch.setattr(checkpoints, "listing", lambda t: [torn])
    p, said = carry.plan(t, [], "r1")
    assert p is not None and p.checkpoint is None and p.run_dir == "/root/runs" and "no complete checkpoint" in said
    p, said = carry.plan(t, ["/root/runs"], "r1")  # run folders on a mount point, the checkpoint in the rootfs
    assert p is None, said
    assert "no complete checkpoint matches /root/out/ckpt.pt" in said and "on mount point /root/runs" in said
    monkeypatch.setattr(checkpoints, "listing", lambda t: [own])
    p, said = carry.plan(t, ["/root/runs"], "r1")
    assert p is not None and p.checkpoint == own and p.run_dir == "" and "the run folders" not in said.split("(")[0]


@pytest.mark.fault("rollback's checkpoint carry", promise="each carry writes a host file of its own (the run and the "
                   "time in its name): a second rollback never overwrites the copy a failed put-back left there")
def test_a_run_id_that_is_no_plain_name_is_not_put_in_a_host_path():
    assert carry.host_name("20261206-0530-ab12", "20261206-074501") == "20261206-0530-ab12-20261206-074501.ckpt"
    for odd in ("../../etc/x", "a b", "", None):
        assert carry.host_name(odd, "20261206-074501") == "latest-20261206-074501.ckpt"
    first = carry.host_name("r1")
    assert re.fullmatch(r"r1-[0-9]{8}-[0-9]{6}[.]ckpt", first) and first != "r1.ckpt"
    # the sudo rule's pattern takes it
    assert sudo.allows("pct", ["pull", "200", carry.STAGE, f"/var/lib/remote/carry/200/{first}"], [200])


@pytest.mark.fault("the carry's host folder made by another user, or a link part-way", promise="the host folder a root-run `pct pull` writes into is "
                   "checked from / down: a folder the login user owns or may write, or a link part-way, refuses the "
                   "carry (nothing changed) naming it")
def test_the_carry_host_folder_must_be_roots_alone_from_the_root_down():
    dirs = carry.host_dirs("/var/lib/remote/carry/200")
    assert dirs == ["/", "/var", "/var/lib", "/var/lib/remote", "/var/lib/remote/carry", "/var/lib/remote/carry/200"]

    def stat(**odd):
        rows = {d: ("0", "755", "directory") for d in dirs}
        rows.update(odd)
        return "".join(f"{u}:{m}:{k}:{d}\n" for d, (u, m, k) in rows.items())

    assert carry.host_dir_problem(stat(), dirs) is None
    assert "owned by uid 1000" in carry.host_dir_problem(stat(**{"/var/lib/remote": ("1000", "755", "directory")}), dirs)
    assert "writable by others" in carry.host_dir_problem(
        stat(**{"/var/lib/remote/carry": ("0", "1777", "directory")}), dirs)
    assert "symbolic link" in carry.host_dir_problem(
        stat(**{"/var/lib/remote/carry/200": ("0", "777", "symbolic link")}), dirs)
    assert "could not be checked" in carry.host_dir_problem("", dirs)
    # and for real, on this machine: its own /var/lib is root's
    real = carry.host_dirs("/var/lib")
    r = subprocess.run([*sudo.CLEAN_BASH, "-c", 'exec /usr/bin/stat -c "%u:%a:%F:%n" -- "$@"', "stat", *real],
                       capture_output=True, text=True, check=True)
    assert carry.host_dir_problem(r.stdout, real) is None, r.stdout


def test_the_hosts_free_space_is_read_from_df():
    out = "Filesystem 1024-blocks Used Available Capacity Mounted on\n/dev/sda1 100 50 2048 50% /\n"
    assert carry.free_bytes(out) == 2048 * 1024
    assert carry.free_bytes("") is None and carry.free_bytes("head\nx y z\n") is None


@pytest.mark.fault("sudo rule for a rollback's checkpoint carry", promise="allows pct pull/push of ONE fixed "
                   "container path to and from /var/lib/remote/carry/CTID/ only, and install/sha256sum/rm of that "
                   "folder's files; any other host path is refused")
def test_every_host_command_the_carry_builds_passes_the_rule_and_no_other_path_does():
    host = config.parse(yaml.safe_load(HOSTS), "hosts.yaml").hosts["pve1"]
    f = "/var/lib/remote/carry/200/20261206-0530-ab12.ckpt"
    built = [sudo.host_argv(host, "install", "-d", "-m", "0700", "/var/lib/remote/carry/200"),
             sudo.host_argv(host, "sha256sum", "--", f), sudo.host_argv(host, "rm", "-f", "--", f)]
    for argv in built:
        assert argv[:2] == ["sudo", "-n"] and argv[2].startswith("/usr/bin/"), argv
        assert sudo.allows(argv[2].rsplit("/", 1)[1], argv[3:], [200]), argv
    assert sudo.host_argv(host, "df", "-Pk", "/var/lib/remote/carry/200")[0] == "/usr/bin/df"  # the login user
    assert sudo.allows("pct", ["pull", "200", carry.STAGE, f], [200])
    assert sudo.allows("pct", ["push", "200", f, carry.STAGE], [200])
    for args in (["pull", "200", "/etc/shadow", f], ["pull", "200", carry.STAGE, "/etc/sudoers.d/zz"],
                 ["pull", "200", carry.STAGE, "/var/lib/remote/carry/200/../../../etc/x.ckpt"],
                 ["push", "200", "/etc/shadow", carry.STAGE], ["push", "200", f, "/root/x"]):
        assert not sudo.allows("pct", args, [200]), args
    assert not sudo.allows("rm", ["-f", "--", "/etc/passwd"], [200])
    assert not sudo.allows("rm", ["-rf", "--", "/var/lib/remote/carry/200"], [200])
    assert not sudo.allows("sha256sum", ["--", "/etc/shadow"], [200])
    with pytest.raises(ValueError):
        sudo.host_argv(host, "rm", "-f", "--", "/etc/passwd")


@pytest.mark.fault("save-or-refuse's refusal words", promise="names what was refused, that nothing changed, the grace, "
                   "the last complete checkpoint with its step and age, that the run still runs, and --force")
def test_the_refusal_names_the_grace_the_last_checkpoint_its_age_and_force():
    t = target()
    st = SimpleNamespace(run="r1")
    text = ('{"saved": null, "latest": {"path": "/root/out/ckpt.pt", "complete": true, "kind": "torch", "size": 9, '
            '"mtime": 1000.0, "step": 40}, "why": "grace", "signals": 0, "waited": 30.1, "now": 1090.0}')
    e = checkpoints.save_refused(t, st, "the rollback to remote-20261206-1", text, "iter 44: loss 1.0")  # type: ignore[arg-type]
    assert isinstance(e, SaveRefused) and e.exit_code == 3 and e.run == "r1" and e.grace == 30
    assert (e.checkpoint, e.step, e.age_s) == ("/root/out/ckpt.pt", 40, 90.0)
    said = str(e)
    for words in ("the rollback to remote-20261206-1 refused, nothing was changed", "grace (30 s)", "still running",
                  "its last complete checkpoint is /root/out/ckpt.pt (step 40), 90 s old", "force=True"):
        assert words in said, said
    assert any(w.cli == "--force" for w in e.words)
    e = checkpoints.save_refused(t, st, "gpu fix", "", "")  # type: ignore[arg-type]
    assert "it has no complete checkpoint at all" in str(e) and e.checkpoint is None


@pytest.mark.fault("host drain where one container's run saves nothing new within its grace",
                   promise="that container is reported NOT drained, its run STILL RUNNING (exit status non-zero: a "
                   "reboot after it would end the run unsaved), with the command that ends it; the others are drained")
def test_a_drain_reports_the_container_it_could_not_save_and_drains_the_others(tmp_path, monkeypatch):
    from remote.results import Saved, Stopped

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    hosts = yaml.safe_load(HOSTS)
    hosts["hosts"]["pve1"] = {"address": "10.0.0.1"}
    asked: list[tuple[int, str | None]] = []

    def stop(t, run_id=None, save=False, refuse=None):
        asked.append((t.ctid, refuse))
        if t.ctid == 200:
            raise SaveRefused(200, "refused", "r200", 30.0, "/root/out/ckpt.pt", 40, 90.0)
        return Stopped("r201", True, "TERM", 143, None, saved=Saved("saved", Checkpoint("/root/out/ckpt.pt", True,
                                                                                      "torch", step=7)))

    monkeypatch.setattr(mv, "_live", lambda t, running: ("r",))
    monkeypatch.setattr(mv.jobs, "stop", stop)
    fake = FakeCluster({})
    with Session(config.parse(hosts, "hosts.yaml"), transport_factory=fake.transport) as s:
        monkeypatch.setattr(type(mv.resolve(s, 200).system), "status", lambda self: "running")
        d = mv.drain(s, "pve1", to=None, mover=lambda c: None)  # type: ignore[arg-type,return-value]
    assert asked == [(200, "the drain of host pve1"), (201, "the drain of host pve1")]
    first, second = d.containers
    assert not d.ok and first.error and second.error is None and second.run == "r201"
    assert "NOT drained: run r200 is STILL RUNNING" in first.error and "grace (30 s)" in first.error
    assert "/root/out/ckpt.pt (step 40), 90 s old" in first.error and "`remote stop -c 200`" in first.error


class FakeCt:
    """The pct Container a rollback drives: what it was asked, in order."""

    def __init__(self, calls: list, *, running: bool = True, rollback_rc: int = 0):
        self.calls, self.running, self.rollback_rc = calls, running, rollback_rc
        self.dry, self.where = False, "container 200 on pve1"

    def status(self):
        return "running" if self.running else "stopped"

    def start(self):
        self.calls.append(("pct", "start"))
        self.running = True

    def stop(self):
        self.calls.append(("pct", "stop"))
        self.running = False

    def run_pct(self, *args, mutates, deadline=120):
        self.calls.append(("pct", args[0]) if args[0] != "rollback" else ("pct", "rollback", "--start", args[-1]))
        return SimpleNamespace(ok=True, exit_code=self.rollback_rc if args[0] == "rollback" else 0,
                               out="rootfs: local-lvm:vm-200-disk-0\n", err="storage gone")

    def wait_running(self, timeout=60):
        pass

    def run(self, argv, **k):
        pass


def rolled(monkeypatch, calls, *, live=("r1",), force=False, refuse=False, running=True, rollback_rc=0,
           keep_out=False, back=None, dry=False):
    from contextlib import nullcontext

    from remote.ops import jobs, snapshots
    from remote.results import Saved, Snapshot, Stopped

    spec = config.parse(yaml.safe_load(HOSTS.replace("sudo: true", "sudo: false")), "hosts.yaml").containers[200]
    ct = FakeCt(calls, running=running, rollback_rc=rollback_rc)
    ct.dry = dry
    said: list[str] = []
    t = SimpleNamespace(spec=spec, ctid=200, host=spec.host, ct=ct, system=ct, step=said.append, note=said.append,
                        warn=said.append, output=said.append)
    snap = Snapshot("remote-20261206-1", "2026-12-06 05:00:00", "before deploy of 0123456", True)
    ck = Checkpoint("/root/out/ckpt.pt", True, "torch", 9, 1.0, step=40)
    monkeypatch.setattr(snapshots, "list_snapshots", lambda t: [snap])
    monkeypatch.setattr(snapshots.oplock, "hold", lambda ct, what: nullcontext(SimpleNamespace(verify=lambda: None)))
    monkeypatch.setattr(jobs, "state", lambda t: SimpleNamespace(live=tuple(SimpleNamespace(run=r) for r in live)))
    monkeypatch.setattr(jobs, "live_text", lambda live: "run " + ", ".join(r.run for r in live))

    def stop(t, run_id=None, grace=10, save=False, refuse=None):
        calls.append(("stop", "save" if save else "unsaved"))
        if refuse and refused:
            raise SaveRefused(200, f"{refuse} refused", "r1", 30.0)
        return Stopped("r1", True, "TERM", 143, None, saved=Saved("saved", ck) if save else None)

    refused = refuse
    monkeypatch.setattr(jobs, "stop", stop)
    monkeypatch.setattr(jobs, "start", lambda t, resume=False: calls.append(("start", resume)) or ("r2", 7))
    got = carry.Carried(carry.CarryPlan(ck, ck.path, "/var/lib/remote/carry/200",
                                        "/var/lib/remote/carry/200/r1.ckpt"), "file", 9, "a" * 64)
    monkeypatch.setattr(carry, "plan", lambda t, mounts, run: calls.append(("plan", run)) or (got.plan, "carry it"))
    if not keep_out:
        monkeypatch.setattr(carry, "out", lambda t, p: calls.append(("carry", "out")) or got)
    monkeypatch.setattr(carry, "back", back or (lambda t, g: calls.append(("carry", "back")) or ("r1",)))
    return snapshots.rollback(t, force=force), said  # type: ignore[arg-type]


@pytest.mark.fault("rollback's order with a live run", promise="save (or refuse) first, the checkpoint out to the host "
                   "before `pct rollback`, back after it, then the resume; --force: stopped unsaved, still carried, "
                   "not resumed; a refusal carries and rolls back nothing")
@pytest.mark.fault("rollback with no live run (after stop --save) and a complete checkpoint in the rootfs",
                   promise="the checkpoint is carried all the same and put back at its path, so train --resume after "
                   "the rollback starts from it, not from what the snapshot held")
def test_a_rollback_saves_carries_out_rolls_back_carries_back_and_resumes_in_that_order(monkeypatch):
    calls: list = []
    done, _ = rolled(monkeypatch, calls)
    assert calls == [("stop", "save"), ("pct", "config"), ("plan", "r1"), ("carry", "out"), ("pct", "rollback", "--start", "1"),
                     ("carry", "back"), ("start", True)]
    assert done.stopped == "r1" and done.resumed == "r2" and done.carried and done.carried.step == 40
    assert done.carried_via == "/var/lib/remote/carry/200/r1.ckpt"
    calls.clear()
    done, _ = rolled(monkeypatch, calls, force=True)
    assert calls == [("stop", "unsaved"), ("pct", "config"), ("plan", None), ("carry", "out"), ("pct", "rollback", "--start", "1"),
                     ("carry", "back")]
    assert done.resumed is None and done.carried is not None
    calls.clear()
    done, _ = rolled(monkeypatch, calls, live=())  # stop --save, then rollback: carried all the same
    assert calls == [("pct", "config"), ("plan", None), ("carry", "out"), ("pct", "rollback", "--start", "1"), ("carry", "back")]
    calls.clear()
    with pytest.raises(SaveRefused, match="the rollback to remote-20261206-1 refused"):
        rolled(monkeypatch, calls, refuse=True)
    assert calls == [("stop", "save")]  # nothing carried, nothing rolled back


@pytest.mark.fault("rollback whose `pct rollback` fails after the checkpoint was carried out",
                   promise="the error names the host's copy and the command that puts it back, and the run to resume")
def test_a_failed_rollback_names_the_hosts_copy_and_how_to_put_it_back(monkeypatch):
    from remote.errors import SnapshotError

    calls: list = []
    with pytest.raises(SnapshotError) as e:
        rolled(monkeypatch, calls, rollback_rc=1)
    said = str(e.value)
    assert "the carry (checkpoint /root/out/ckpt.pt) is on pve1 at /var/lib/remote/carry/200/r1.ckpt" in said, said
    assert ("`pct push 200 /var/lib/remote/carry/200/r1.ckpt /var/tmp/remote-carry-checkpoint` on pve1, then `remote "
            "exec -c 200 'mkdir -p /var/tmp/remote-carry-checkpoint.d && tar -C /var/tmp/remote-carry-checkpoint.d "
            "-xf /var/tmp/remote-carry-checkpoint'`; there ckpt/payload is the checkpoint (its place: "
            "/root/out/ckpt.pt)") in said
    assert "`remote train -c 200 --resume` resumes it" in said and ("carry", "back") not in calls


@pytest.mark.fault("rollback of a stopped container with train.checkpoint", promise="started for the carry (said so), "
                   "its checkpoint and run folders carried out, rolled back, carried back, stopped again (as it "
                   "was); a failure before the rollback stops it again; --force starts nothing and carries nothing")
def test_a_stopped_container_is_started_for_the_carry_and_stopped_again(monkeypatch):
    calls: list = []
    done, said = rolled(monkeypatch, calls, running=False, live=())
    assert calls == [("pct", "config"), ("pct", "start"), ("pct", "config"), ("plan", None), ("carry", "out"),
                     ("pct", "rollback", "--start", "1"), ("carry", "back"), ("pct", "stop")]
    assert any("container 200 is stopped: started for the carry" in line and "--force" in line for line in said)
    assert "container 200 stopped again, as it was" in said
    assert done.started is False and done.carried is not None and done.carried_runs == ("r1",)
    calls.clear()  # the carry out fails: nothing rolled back, the container stopped again
    monkeypatch.setattr(carry, "out", lambda t, p: (_ for _ in ()).throw(carry.CarryError("no room on pve1")))
    with pytest.raises(carry.CarryError, match="no room"):
        rolled(monkeypatch, calls, running=False, live=(), keep_out=True)
    assert calls[-1] == ("pct", "stop") and not any(c[:2] == ("pct", "rollback") for c in calls)
    calls.clear()  # --dry: the plan in words, nothing started
    _, said = rolled(monkeypatch, calls, running=False, live=(), dry=True)
    assert ("pct", "start") not in calls and any("(dry run) pct start 200; the carry out" in line for line in said)
    calls.clear()
    done, _ = rolled(monkeypatch, calls, running=False, live=(), force=True)
    assert calls == [("pct", "config"), ("pct", "rollback", "--start", "0")] and done.carried is None


def test_a_carry_that_cannot_be_put_back_leaves_a_container_started_for_it_running(monkeypatch):
    calls: list = []

    def back(t, g):
        raise carry.NotPutBack("container 200: rolled back, but checkpoint X could not be put back")

    with pytest.raises(carry.NotPutBack, match=r"left running for that: `pct stop 200` stops it"):
        rolled(monkeypatch, calls, running=False, live=(), back=back)
    assert ("pct", "stop") not in calls  # pct push needs it running


CARRY = shell.load("carry")


def sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", CARRY, "carry", *args], capture_output=True, text=True)


def fields(out: str) -> dict[str, list[str]]:
    got: dict[str, list[str]] = {}
    for line in out.splitlines():
        k, _, v = line.partition("=")
        got.setdefault(k, []).append(v)
    return got


def run_folder(runs: Path, rid: str, log: str) -> None:
    (runs / rid).mkdir(parents=True)
    (runs / rid / "manifest.json").write_text(json.dumps({"run": rid}))
    (runs / rid / "log").write_text(log)


@pytest.mark.fault("rollback of a container whose run folders are in the rootfs",
                   promise="the run folders made since the snapshot (the stopped run's too) and `current` come back "
                   "after it, in the same verified tar as the checkpoint; a run folder the snapshot holds is left as "
                   "it is (a differing carried copy kept beside it, never over it); a large file is left out, named")
@pytest.mark.parametrize("kind", ["file", "folder"])
def test_carry_sh_packs_the_checkpoint_and_run_folders_and_puts_back_what_the_rollback_took(tmp_path, kind):
    root, stage = tmp_path / "ct", str(tmp_path / "stage")
    runs, ckpt = root / "runs", root / "out" / "ckpt"
    run_folder(runs, "r0", "old run\n")
    run_folder(runs, "r1", "since the snapshot\n")
    run_folder(runs, "r2", "the stopped run\n")
    (runs / "r2" / "big.bin").write_bytes(b"x" * 2048)
    (runs / "current").symlink_to("r2")
    (runs / "known-good.json").write_text("{}")  # the environment's: reverted with it, not carried
    (runs / ".checkpoints").mkdir()  # the watch's kept copy: carried only as the checkpoint, where it is the latest
    ckpt.parent.mkdir(parents=True)
    if kind == "folder":
        ckpt.mkdir()
        (ckpt / ".metadata").write_text("step 40")
    else:
        ckpt.write_text("step 40")
    packed = sh("pack", str(ckpt), stage, str(runs), "1024")
    assert packed.returncode == 0, packed.stderr
    got = fields(packed.stdout)
    assert got["kind"] == [kind] and got["runs"] == ["3"] and got["skipped"] == [f"2048 {runs}/r2/big.bin"], got
    listed = subprocess.run(["tar", "-tf", stage], capture_output=True, text=True, check=True).stdout.split()
    assert "./runs/r2/log" in listed and "./current" in listed and not any("known-good" in n or ".checkpoints" in n
                                                                            for n in listed), listed
    assert (runs / "r2" / "big.bin").stat().st_size == 2048  # left out of the tar, never deleted
    sha = got["sha"][0]
    # The rollback: the snapshot held r0 only (r1's log as it was then), an older checkpoint, `current` at r0.
    subprocess.run(["rm", "-rf", str(runs), str(ckpt)], check=True)
    run_folder(runs, "r0", "old run\n")
    run_folder(runs, "r1", "half a log\n")
    (runs / "current").symlink_to("r0")
    (ckpt.mkdir() if kind == "folder" else ckpt.write_text("step 2"))
    bad = sh("unpack", stage, str(ckpt), kind, "0" * 64, str(runs))
    assert bad.returncode == 4 and fields(bad.stdout)["sha"] == [sha] and (runs / "r1" / "log").read_text() == "half a log\n"
    back = sh("unpack", stage, str(ckpt), kind, sha, str(runs))
    assert back.returncode == 0, back.stderr
    got = fields(back.stdout)
    assert got["placed"] == [str(ckpt)] and got["back"] == ["r2"] and got["differs"] == ["r1"]
    assert got["current"] == ["r2"] and (runs / "current").resolve() == runs / "r2"
    assert (runs / "r2" / "log").read_text() == "the stopped run\n" and not (runs / "r2" / "big.bin").exists()
    assert (runs / "r1" / "log").read_text() == "half a log\n"  # the snapshot's, left as it is
    assert (Path(got["kept"][0]) / "r1" / "log").read_text() == "since the snapshot\n"  # the carried one beside it
    assert Path(got["kept"][0]).name.startswith(".carried-") and Path(got["kept"][0]).parent == runs
    assert (ckpt / ".metadata" if kind == "folder" else ckpt).read_text() == "step 40"
    assert Path(got["aside"][0]).name.startswith("ckpt.old-")  # the snapshot's checkpoint renamed, not deleted
    assert not Path(stage).exists() and not Path(stage + ".d").exists()


def test_carry_sh_carries_run_folders_alone_where_there_is_no_checkpoint(tmp_path):
    runs, stage = tmp_path / "runs", str(tmp_path / "stage")
    run_folder(runs, "r1", "log\n")
    packed = sh("pack", "", stage, str(runs), "1024")
    got = fields(packed.stdout)
    assert packed.returncode == 0 and got["kind"] == ["none"] and got["runs"] == ["1"], packed
    subprocess.run(["rm", "-rf", str(runs)], check=True)
    back = sh("unpack", stage, "", "none", got["sha"][0], str(runs))
    assert back.returncode == 0 and fields(back.stdout)["back"] == ["r1"] and "placed" not in back.stdout, back
    assert (runs / "r1" / "log").read_text() == "log\n"
