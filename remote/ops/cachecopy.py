"""Warm once, copy to the rest: a compile cache folder copied between containers whose passports match.

    look(target) -> CacheHolding            what container's cache holds and what it would need
    copy(src, dst) -> CacheCopy             only the files dst lacks, streamed, sha256-checked, each
                                            linked into place whole (remote/sh/cachecopy.py), under
                                            dst's operation lease; host to host where both share one
    find_source(target) -> CacheHolding|None a container of the hosts file whose cache serves it
    plan(session, ids) -> Plan              the containers grouped by the passport their warmup would
                                            write: one leader per group, why each other one is alone
    warm_fleet(session, ids) -> GroupResult each leader warmed, then its cache copied to its group

A copy refuses a source whose passport differs from what the target would write (remote/ops/passport.py
names each field). What it copies lands as torch would have written it: a file appears whole or not at
all, and no file in place is replaced or deleted. The target's warmup records say `copied_from`, keyed
like a warmup of its own (commit, lock, command, environment), so train's preflight accepts them.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import executor, shell
from ..errors import RemoteError, TransferError, WarmupError
from ..facts.deployed import Deployed
from ..naming import copied_line, json_loads
from ..results import CacheCopy, CacheHolding, GroupResult, Outcome
from ..target import Target, resolve
from ..transport.pct import DEFAULT_PATH, Container
from ..transport.session import Session
from . import jobenv, oplock
from . import passport as pp
from . import warmup as wm

CHUNK = 1 << 20


class CacheMismatch(WarmupError):
    """The source's passport does not match what the target needs; `fields` names the differences."""

    def __init__(self, message: str, fields: list[str]):
        super().__init__(message)
        self.fields = fields


def _system(ct: Container) -> Container:
    return dataclasses.replace(ct, path=DEFAULT_PATH)  # the system python3, never the venv's


def look(t: Target) -> CacheHolding:
    """What the container's cache holds (files, passport) and the passport it would need."""
    return _look(t)[0]


def _look(t: Target) -> tuple[CacheHolding, Deployed]:
    """look(), and the deployed state it was read for (a copy records its warmups under it)."""
    spec, ct = t.spec, t.ct
    state = wm.deployed_now(t)  # its GPU now: after a migration, not the deploy node's
    folder = jobenv.compile_cache(spec, state.verify.as_record())
    r = _system(ct).script(shell.load("cachecopy"), shell.load_python("cachecopy"), "list", folder, mutates=False,
                           timeout=300, label="list the compile cache")
    try:
        listing = json_loads(r.out)
        found = {str(k): int(v) for k, v in dict(listing.get("files") or {}).items()}
        if any(v < 0 for v in found.values()):
            raise ValueError("a negative size")
    except (ValueError, TypeError, AttributeError):
        raise WarmupError(f"container {spec.ctid}: the cache listing of {folder} is not JSON: {r.out[:200]!r}") from None
    passport, want = pp.parse(listing.get("passport")), wm.expected_passport(spec, state)
    serves = bool(found) and not pp.differences(passport, want)
    return CacheHolding(spec.ctid, folder, len(found), sum(found.values()), passport, serves,
                        "" if serves or not found else pp.describe(passport, want), host=spec.host.name, sizes=found,
                        want=want), state


def check(src: CacheHolding, dst: CacheHolding) -> None:
    """CacheMismatch unless src's cache was made for exactly what dst needs."""
    if not src.files:
        raise CacheMismatch(f"container {src.container} holds no compile cache in {src.folder}: warm it up first", ["files"])
    fields = pp.differences(src.passport, dst.want)
    if fields:
        raise CacheMismatch(f"refusing to copy the compile cache of {src.container} to {dst.container}, made for another setup: "
                            + pp.describe(src.passport, dst.want, fields, theirs=str(src.container), ours=str(dst.container)),
                            fields)


def _relay_host(src_ct: Container, dst_ct: Container, sender: list[str], receiver: list[str]):
    argv = ["bash", "-c", shell.load("relay"), "relay", str(len(sender)), *sender, *receiver]
    return src_ct.transport.open_stream(argv)


def _stream_copy(src_ct: Container, dst_ct: Container, src_folder: str, dst_folder: str, wanted: list[str], *,
                 same_host: bool, cut_after: int | None = None, budget: int | None = None) -> tuple[dict, str]:
    """Send `wanted` from src to dst; returns the receiver's summary and how it went. `budget`: the bytes the
    source's listing held for them, all the receiver takes (a source announcing more is stopped there).
    `cut_after`: drop both ends after that many bytes (the link cut, for tests)."""
    code = shell.load_python("cachecopy")
    bound = [str(max(0, budget))] if budget is not None else []
    src_ct, dst_ct = _system(src_ct), _system(dst_ct)
    request = (json.dumps(wanted) + "\n").encode()
    if same_host and cut_after is None:
        sender = src_ct.script_argv(shell.load("cachecopy"), code, "send", src_folder)
        receiver = dst_ct.script_argv(shell.load("cachecopy"), code, "recv", dst_folder, *bound)
        stream = _relay_host(src_ct, dst_ct, sender, receiver)
        try:
            stream.write(request)
            stream.close_stdin()
            out = b""
            while chunk := stream.read(CHUNK):
                out += chunk
            rc = stream.wait()
            err = stream.error_text()
        finally:
            stream.close()
        via = f"host {src_ct.transport.name}"
    else:
        send = src_ct.open_stream(shell.load("cachecopy"), code, "send", src_folder)
        recv = dst_ct.open_stream(shell.load("cachecopy"), code, "recv", dst_folder, *bound)
        moved = 0
        try:
            send.write(request)
            send.close_stdin()
            while chunk := send.read(CHUNK):
                if cut_after is not None and moved + len(chunk) > cut_after:
                    recv.write(chunk[:max(0, cut_after - moved)])
                    recv.close_stdin()  # the stream ends there, mid-file, as when the link drops
                    recv.wait(120)
                    raise TransferError(f"the link was cut after {cut_after} bytes (test): {recv.error_text().strip()}")
                recv.write(chunk)
                moved += len(chunk)
            recv.close_stdin()
            out = b""
            while chunk := recv.read(CHUNK):
                out += chunk
            rc, err = recv.wait(), recv.error_text()
            if send.wait() != 0:
                rc, err = rc or 1, err + send.error_text()
        finally:
            send.close()
            recv.close()
        via = "controller"
    if rc != 0:
        raise TransferError(f"the cache copy into {dst_folder} failed (exit {rc}): {err.strip()[-400:]}")
    try:
        summary = json_loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TransferError(f"the cache copy into {dst_folder} printed no summary: {out[-200:]!r}") from None
    if summary.get("failed_checksum"):
        raise TransferError(f"the cache copy into {dst_folder}: {summary['failed_checksum']} file(s) did not verify "
                            "(sha256) and were not put in place; run the copy again")
    return summary, via


def copy(src: Target, dst: Target, *, src_holding: CacheHolding | None = None,
         cut_after: int | None = None, via_controller: bool = False) -> CacheCopy:
    """Copy src's compile cache into dst: refused (CacheMismatch, naming each field) unless src's
    passport is what dst needs; only the files dst lacks; records dst's warmups as copied."""
    start = time.time()
    s = src_holding or look(src)
    sspec, dspec, dst_ct, src_ct = src.spec, dst.spec, dst.ct, src.ct
    # What dst holds, and so what to send, is read under dst's lease: a deploy or warmup of another
    # controller cannot change it between the decision and the copy.
    with oplock.hold(dst_ct, f"cache copy --from {s.container}") as lease:
        d, d_state = _look(dst)
        check(s, d)
        wanted = sorted(p for p in s.sizes if p not in d.sizes)
        dst.step(f"copying {len(wanted)} of {s.files} cache file(s) "
                 f"({sum(s.sizes[p] for p in wanted) / 2**20:.1f} MiB) from {s.container} into {d.folder}")
        if dst_ct.dry:
            return CacheCopy(s.container, d.container, "dry run", 0, 0, 0, s.files, 0.0)
        if wanted:
            summary, via = _stream_copy(src_ct, dst_ct, s.folder, d.folder, wanted,
                                        same_host=sspec.host.name == dspec.host.name and not via_controller,
                                        cut_after=cut_after, budget=sum(s.sizes[p] for p in wanted))
        else:
            summary, via = {"written": 0, "bytes": 0, "present": 0}, "nothing to send"
        if summary.get("refused"):
            dst.output(f"  {summary['refused']} cache file(s) not copied: a folder of them in {d.folder} is a "
                       "symlink or a file (left as it is; those compile again)")
        assert s.passport is not None  # check(s, d) refuses a source without one
        lease.verify()  # a copy that lost its lease says nothing: no passport, no warmup records
        wm.write_passport(dst_ct, d.folder, {**s.passport, "copied_from": s.container,
                                             "copied_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        end = time.time()
        total = len(set(d.sizes) | set(s.sizes))
        recs = [{"device": dev, **wm.warmup_key(dspec, d_state, dev), "start": start, "end": end,
                 "seconds": round(end - start, 3), "new_files": summary.get("written", 0), "cache_files": total,
                 "new_bytes": summary.get("bytes", 0), "hits": 0, "misses": 0, "copied_from": s.container}
                for dev in wm.devices_of(dspec)]
        wm._record(dst, recs)
    result = CacheCopy(s.container, d.container, via, summary.get("written", 0), summary.get("bytes", 0),
                    summary.get("present", 0) + s.files - len(wanted), s.files, time.time() - start)
    dst.output("  " + copied_line(result))
    return result


# -- finding a source, grouping ----------------------------------------------------------------------------

def _alike(a, b) -> bool:
    """Whether two containers' hosts-file entries could make the same passport (cheap, before any probe)."""
    same_warmup = dataclasses.replace(a.warmup, copy_from_others=True) == dataclasses.replace(b.warmup, copy_from_others=True)
    return a.venv == b.venv and same_warmup and a.train.env == b.train.env


def _look_at(session: Session, c: int) -> CacheHolding | RemoteError:
    """look() at container c, or why it could not be (not deployed, unreachable, not placed)."""
    try:
        return look(resolve(session, c))
    except RemoteError as exc:
        return exc


def _resolvable(session: Session, c: int) -> bool:
    """Whether container c can be placed (a cluster's container on a node the hosts file lacks cannot)."""
    try:
        session.config.containers[c]
    except RemoteError:
        return False
    return True


def find_source(t: Target, *, exclude: tuple[int, ...] = ()) -> CacheHolding | None:
    """A container of the hosts file whose cache serves t (its passport is exactly what t's warmup would
    write); None when none does. Among several: one on t's own host first, then one whose cache its own warmup
    made (no `copied_from`: the group's warmer), then the hosts file's order; never the one with the most files
    (a forged passport and padding would win that). Unreachable, undeployed or unplaceable ones are passed
    over. Candidates are picked on the hosts file's own entries: only they are placed on their nodes."""
    session, spec = t.session, t.spec
    me = look(t)
    raw = dict.items(session.config.containers)  # not Containers.items(): that places every container of the file
    candidates = [c for c, other in raw if c != spec.ctid and c not in exclude and _alike(other, spec)]
    candidates = [c for c in candidates if _resolvable(session, c)]
    if not candidates:
        return None
    found = [h for h in executor.values(session.config, candidates, lambda c: _look_at(session, c))
             if isinstance(h, CacheHolding) and h.files and not pp.differences(h.passport, me.want)]
    return min(found, key=lambda h: _preference(h, spec.host.name, candidates)) if found else None


def _preference(h: CacheHolding, host: str, order: list[int]) -> tuple:
    """The order sources are preferred in (smaller first): same host, the warmer itself, the given order."""
    copied = (h.passport or {}).get("copied_from") is not None
    return (h.host != host, copied, order.index(h.container) if h.container in order else len(order))


@dataclass
class Plan:
    leaders: dict[int, list[int]]  # leader -> the others of its group
    alone: dict[int, str]  # a container warmed on its own -> why
    holdings: dict[int, CacheHolding]


def plan(session: Session, ids: list[int]) -> Plan:
    """Group the containers by the passport their warmup would write; a group's leader is one whose cache
    already serves it (then nothing compiles), else the first. A container that cannot be looked at
    (not deployed, unreachable) is warmed on its own, and its warmup says why."""
    looked = dict(zip(ids, executor.values(session.config, ids, lambda c: _look_at(session, c)), strict=True))
    holdings = {c: h for c, h in looked.items() if isinstance(h, CacheHolding)}
    alone = {c: f"its cache could not be read: {h}" for c, h in looked.items() if not isinstance(h, CacheHolding)}
    leaders: dict[int, list[int]] = {}
    wants = {c: h.want for c, h in holdings.items()}
    for c in [c for c in wants if not session.config.containers[c].warmup.copy_from_others]:
        del wants[c]
        alone[c] = "warmup.copy_from_others is false: it compiles its own cache"
    for members in pp.groups(wants):
        if len(members) == 1:
            alone[members[0]] = pp.why_alone(members[0], wants) if len(wants) > 1 else "the only one selected"
            continue
        ready = [c for c in members if holdings[c].serves_itself]
        # The warmer whose cache already serves it (a copy's source before a copy), in the order given; never by
        # file count: a forged passport plus padding would lead the group.
        leader = min(ready, key=lambda c: _preference(holdings[c], holdings[c].host, members)) if ready else members[0]
        leaders[leader] = [c for c in members if c != leader]
    return Plan(leaders, alone, holdings)


def warm_fleet(session: Session, ids: list[int], *, fail_fast: bool = False, parallel: bool = False,
               on_done: Callable[[Outcome[None]], None] | None = None,
               on_tick: Callable[[dict[int, float]], None] | None = None) -> GroupResult[None]:
    """`remote warmup -c 200,201,202`: one warmup per group of containers that would write the same
    passport, then its cache copied to the rest of the group; the others warmed on their own (at once,
    through remote.executor: on_done and on_tick are its)."""
    p = plan(session, ids)
    for leader, rest in p.leaders.items():
        resolve(session, leader).step(f"warming {leader} for {', '.join(map(str, [leader, *rest]))} (same passport), "
                                      f"then copying its cache from {leader} (trusting its jobs' code; warmup.copy_from_others: false to compile each)")
    for c, why in p.alone.items():
        resolve(session, c).step(f"{c} is warmed on its own: {why}")
    first = [c for c in ids if c in p.leaders or c in p.alone]
    failed: set[int] = set()

    def warm(c: int) -> None:
        try:
            wm.warmup(resolve(session, c), parallel=parallel)
        except BaseException:
            failed.add(c)
            raise

    outcomes = dict(executor.each(session.config, first, warm, fail_fast=fail_fast, on_done=on_done, on_tick=on_tick))
    followers = {c: leader for leader, rest in p.leaders.items() for c in rest}

    def follow(c: int) -> None:
        leader = followers[c]
        if leader in failed:
            raise WarmupError(f"not copied: the warmup of {leader}, which was to serve it, failed")
        copy(resolve(session, leader), resolve(session, c))
        return None

    order = [c for c in ids if c in followers]
    if order and not (fail_fast and failed):
        outcomes.update(executor.each(session.config, order, follow, fail_fast=fail_fast, on_done=on_done,
                                      on_tick=on_tick))
    result: GroupResult[None] = GroupResult()
    for c in ids:
        result[c] = outcomes.get(c) or Outcome(c, session.config.containers[c].host.name, skipped=True)
    return result


def holdings(session: Session, ids: list[int]) -> list[CacheHolding]:
    """`remote cache`: what each container's cache holds, or why it could not be read (its error)."""
    out = []
    for ctid, h in zip(ids, inventory(session, ids), strict=True):
        if isinstance(h, RemoteError):
            out.append(CacheHolding(ctid, error=str(h)))
        else:
            out.append(h)
    return out


def inventory(session: Session, ids: list[int]) -> list[CacheHolding | RemoteError]:
    """`remote cache`: what each container's cache holds (or why it could not be read)."""
    return executor.values(session.config, ids, lambda c: _look_at(session, c))


def warmup_or_copy(t: Target, *, parallel: bool = False):
    """`remote warmup -c 201`: where 201 has no warmup for what it runs now and another container of the
    hosts file holds a cache made for exactly that, copy it (a CacheCopy); otherwise warm up (DeviceResults)."""
    spec, ct = t.spec, t.ct
    if not ct.dry and spec.warmup.command and spec.warmup.copy_from_others:
        state = wm.deployed(t)
        if wm.missing_warmups(t, state):
            src = find_source(t)
            if src is not None:
                t.step(f"container {src.container} holds a compile cache made for exactly this (same passport): "
                       f"copying it instead of compiling; this trusts {src.container}'s jobs (the cache holds code "
                       f"{spec.ctid} will load; warmup.copy_from_others: false compiles here instead)")
                return copy(resolve(t.session, src.container), t, src_holding=src)
    return wm.warmup(t, parallel=parallel)
