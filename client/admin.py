"""Administration on top of a BookKeeper client: re-replication of fragments, bookie recovery, decommission.

Mirrors BookKeeper's BookKeeperAdmin (`recoverBookieData`, `replicateLedgerFragment`, `decommissionBookie`)
and the fragment copy of its ReplicationWorker (R32, R33):

- a fragment is the run of entries [first entry id, next fragment's first - 1] (the last fragment of a
  closed ledger ends at its last entry id); the entries a lost bookie held are those whose write set
  contains its ensemble index (R5);
- they are read from the surviving members of the fragment with range reads, verified (digest), and
  written to the new bookie with `recovery_add` and `high_priority` (allowed on fenced ledgers and
  read-only bookies), waiting for every acknowledgement;
- then one compare-and-swap replaces the lost bookie by the new one in that fragment's ensemble (only if
  the fragment is still the same and still names the lost bookie);
- an OPEN ledger whose last fragment names a lost bookie has no defined end: it is fenced and closed first
  (open with recovery), which only callers that waited out the grace period ask for (R33).

Blocking API (call it from any thread but the client's event loop). The ledger password is in the
metadata, so the master key and digest are derived from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Collection, Coroutine, Iterable
from typing import Any, TypeVar

import grpc

from bkledger.client.bookie_client import BookieClient
from bkledger.client.bookkeeper import BookKeeper
from bkledger.client.context import ClientContext
from bkledger.client.errors import BKError, BookieUnavailableError, NoSuchLedgerError
from bkledger.client.meta.underreplication import UnderReplicationManager
from bkledger.client.progress import NO_PROGRESS, ProgressSink
from bkledger.client.protocol.digest import DigestManager, make_digest, master_key, unpack_batch
from bkledger.client.protocol.metadata import Fragment, LedgerMetadata, LedgerState
from bkledger.client.protocol.write_set import bookie_holds, entries_for_index
from bkledger.proto import bookie_pb2 as pb

log = logging.getLogger("bkledger.admin")

T = TypeVar("T")


class ReplicationError(BKError):
    """A fragment could not be copied (no surviving replica of some entry, or the new bookie failed)."""


@dataclasses.dataclass
class ReplicationStats:
    """What a re-replication run copied."""

    ledgers: int = 0
    fragments: int = 0
    entries: int = 0
    bytes: int = 0
    seconds: float = 0.0
    failed: dict[int, str] = dataclasses.field(default_factory=dict)
    total_ledgers: int = 0          # ledgers that named a lost bookie when the run started
    interrupted: bool = False       # stopped on request (Ctrl-C) between two fragments or ledgers
    left: list[int] = dataclasses.field(default_factory=list)   # ledgers not gone through (interrupted)

    def add(self, other: ReplicationStats) -> None:
        self.ledgers += other.ledgers
        self.fragments += other.fragments
        self.entries += other.entries
        self.bytes += other.bytes
        self.failed.update(other.failed)

    def as_dict(self) -> dict[str, object]:
        mb_s = self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0
        return {**dataclasses.asdict(self), "failed": {str(k): v for k, v in self.failed.items()},
                "seconds": round(self.seconds, 3),
                "mb_per_s": round(mb_s, 3)}


@dataclasses.dataclass(frozen=True)
class LedgerOutcome:
    """After `replicate_ledger`: whether the metadata still names a lost bookie, and why if so."""

    done: bool
    waiting_open: bool = False      # the last fragment of an OPEN ledger is left (grace period not over)
    reason: str = ""


def fragment_end(md: LedgerMetadata, index: int) -> int | None:
    """The last entry id of fragment `index`; None when it has no defined end (last fragment, not CLOSED)."""
    if index + 1 < len(md.fragments):
        return md.fragments[index + 1].first_entry_id - 1
    if md.state is LedgerState.CLOSED:
        return md.last_entry_id
    return None


def names_any(md: LedgerMetadata, bookies: Collection[str]) -> bool:
    return any(b in bookies for f in md.fragments for b in f.ensemble)


def estimated_copy_bytes(md: LedgerMetadata, lost: Collection[str]) -> int:
    """About how many bytes re-replicating the lost bookies' share of the ledger copies (progress only:
    fragments weigh the same; an open ledger's length is not known yet, so it counts 0)."""
    if not md.fragments or md.ensemble_size == 0:
        return 0
    slots = sum(b in lost for f in md.fragments for b in f.ensemble) / len(md.fragments)
    return int(md.length * slots * md.write_quorum / md.ensemble_size)


class _AddSink:
    """Writes copied entries to one bookie (recovery adds) and waits for their acknowledgements."""

    def __init__(self, client: BookieClient, ledger_id: int, key: bytes, window_entries: int,
                 window_bytes: int = 8 << 20, ack_timeout: float = 30.0) -> None:
        self.client = client
        self.ledger_id = ledger_id
        self.key = key
        self.window_entries = max(window_entries, 1)
        self.window_bytes = window_bytes
        self.ack_timeout = ack_timeout
        self.pending: dict[int, int] = {}
        self.pending_bytes = 0
        self.error: BaseException | None = None
        self.changed = asyncio.Event()
        client.register(ledger_id, self)

    def on_ack(self, bookie_id: str, ack: pb.AddAck) -> None:
        if ack.status != pb.EOK and self.error is None:
            self.error = ReplicationError(
                f"bookie {bookie_id} refused re-replicated entries of ledger {self.ledger_id} with "
                f"{pb.StatusCode.Name(ack.status)}")
        for entry_id in ack.entry_ids:
            self.pending_bytes -= self.pending.pop(entry_id, 0)
        self.changed.set()

    def on_bookie_failed(self, bookie_id: str) -> None:
        if self.error is None:
            self.error = BookieUnavailableError(f"connection to {bookie_id} failed during re-replication",
                                                bookie_id=bookie_id)
        self.changed.set()

    async def _wait(self, until: Callable[[], bool]) -> None:
        while not until():
            if self.error is not None:
                raise self.error
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), self.ack_timeout)
            except TimeoutError:
                self.error = ReplicationError(
                    f"bookie {self.client.bookie_id} acknowledged nothing for {self.ack_timeout:.0f}s "
                    f"({len(self.pending)} re-replicated entries of ledger {self.ledger_id} pending)")
        if self.error is not None:
            raise self.error

    async def send(self, entry_ids: list[int], sizes: list[int], blob: bytes) -> None:
        await self._wait(lambda: len(self.pending) < self.window_entries and self.pending_bytes < self.window_bytes)
        for entry_id, size in zip(entry_ids, sizes, strict=True):
            self.pending[entry_id] = size
            self.pending_bytes += size
        self.client.send_add(self.ledger_id, self.key, entry_ids, sizes, blob, recovery_add=True, high_priority=True)

    async def drain(self) -> None:
        await self._wait(lambda: not self.pending)

    async def close(self) -> None:
        self.client.unregister(self.ledger_id)
        await self.client.close()


class Admin:
    """Re-replication and recovery through one BookKeeper client (its ZooKeeper session and event loop)."""

    def __init__(self, bk: BookKeeper, *, window_entries: int = 1000, read_batch_bytes: int = 1 << 20) -> None:
        self.bk = bk
        self.store = bk.store
        self.underreplication = UnderReplicationManager(bk.store)
        self.window_entries = window_entries
        self.read_batch_bytes = read_batch_bytes

    @property
    def _ctx(self) -> ClientContext:
        """The client's shared context (event loop, bookie pool, config); admin is part of the client."""
        return self.bk._ctx

    # ---- queries -------------------------------------------------------------------------
    def registered_bookies(self) -> set[str]:
        return set(self.store.writable_bookies()) | set(self.store.readonly_bookies())

    def ledgers_on_bookies(self, bookies: Collection[str]) -> list[int]:
        """Every ledger whose metadata names one of `bookies` in any fragment."""
        out = []
        for ledger_id, md in self.store.ledgers_with_metadata():
            if names_any(md, bookies):
                out.append(ledger_id)
        return out

    # ---- one ledger ----------------------------------------------------------------------
    def replicate_ledger(self, ledger_id: int, lost: Collection[str], *, target: str | None = None,
                         fence_open: bool = True, stats: ReplicationStats | None = None,
                         progress: ProgressSink = NO_PROGRESS) -> LedgerOutcome:
        """Copy every fragment of the ledger that names a bookie of `lost` to a new bookie, CAS each one.

        `target`: the new bookie (a replication worker's local bookie); None picks a random writable
        bookie outside the fragment for each lost slot (manual recovery). A fragment that already holds
        `target` is left for someone else. `fence_open`: also fence and close an OPEN ledger whose last
        fragment names a lost bookie (R33: callers pass it once the grace period is over).
        """
        lost = set(lost)
        stats = stats if stats is not None else ReplicationStats()
        try:
            md, _ = self.store.read_ledger(ledger_id)
        except NoSuchLedgerError:
            return LedgerOutcome(True, reason="deleted")
        if not names_any(md, lost):
            return LedgerOutcome(True)
        stats.ledgers += 1
        open_last = md.state is not LedgerState.CLOSED and any(b in lost for b in md.last_fragment.ensemble)
        if open_last and fence_open:
            log.info("ledger %d is open and its last fragment names %s: fencing it", ledger_id, sorted(lost))
            handle = self.bk.open_ledger(ledger_id, md.password, recovery=True)
            with contextlib.suppress(Exception):
                handle.close()
            md, _ = self.store.read_ledger(ledger_id)
        reason = ""
        waiting_open = False
        for index, fragment in enumerate(md.fragments):
            if progress.stop_requested():       # between fragments: every CAS so far is complete
                reason = "interrupted"
                break
            end = fragment_end(md, index)
            slots = [i for i, b in enumerate(fragment.ensemble) if b in lost]
            if not slots:
                continue
            if end is None:
                waiting_open = True
                continue
            used: set[str] = set(fragment.ensemble)
            for slot in slots:
                new = target if target is not None else self._pick_target(used | lost)
                if new in used:
                    reason = f"fragment at entry {fragment.first_entry_id} already holds {new}"
                    continue
                copied = self._run(self._copy_slot(md, fragment, end, slot, new, lost))
                md = self._swap(md, fragment, slot, new)
                used.add(new)
                stats.fragments += 1
                stats.entries += copied[0]
                stats.bytes += copied[1]
                progress.advance(nbytes=copied[1])
                progress.note(f"ledger {ledger_id} entries {fragment.first_entry_id}..{end}: "
                              f"{fragment.ensemble[slot]} -> {new}, {copied[0]} entries")
                if target is not None:
                    break           # one local bookie takes one slot of a fragment
        try:
            md, _ = self.store.read_ledger(ledger_id)
        except NoSuchLedgerError:
            return LedgerOutcome(True, reason="deleted")
        done = not names_any(md, lost)
        if waiting_open and not done:
            reason = reason or "open ledger: its last fragment waits for the grace period"
        return LedgerOutcome(done, waiting_open and not done, reason)

    def _pick_target(self, exclude: Collection[str]) -> str:
        candidates = sorted(set(self.store.writable_bookies()) - set(exclude))
        if not candidates:
            raise ReplicationError("no writable bookie outside the fragment's ensemble to copy it to")
        return random.choice(candidates)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._ctx.runtime.run(coro, None)

    def _swap(self, md: LedgerMetadata, fragment: Fragment, slot: int, new: str) -> LedgerMetadata:
        """CAS: in the fragment that starts where `fragment` does, replace the lost bookie by `new`."""
        lost_bookie = fragment.ensemble[slot]
        index = md.fragments.index(fragment)
        old_end = fragment_end(md, index)

        def change(current: LedgerMetadata) -> LedgerMetadata | None:
            for i, f in enumerate(current.fragments):
                if f.first_entry_id != fragment.first_entry_id:
                    continue
                if f.ensemble[slot] != lost_bookie:
                    return None                     # someone else replaced it already
                if fragment_end(current, i) != old_end:
                    raise ReplicationError(f"ledger {md.ledger_id}: fragment at {f.first_entry_id} changed its "
                                           "end while it was copied; retry")
                if new in f.ensemble:
                    raise ReplicationError(f"ledger {md.ledger_id}: {new} is already in {list(f.ensemble)}")
                ensemble = list(f.ensemble)
                ensemble[slot] = new
                fragments = list(current.fragments)
                fragments[i] = Fragment(f.first_entry_id, tuple(ensemble))
                return dataclasses.replace(current, fragments=tuple(fragments))
            return None
        stored, _ = self.store.update_ledger(md.ledger_id, change)
        return stored

    async def _copy_slot(self, md: LedgerMetadata, fragment: Fragment, end: int, slot: int, target: str,
                         lost: Collection[str]) -> tuple[int, int]:
        """Copy the entries ensemble slot `slot` holds in [first, end] from the survivors to `target`.

        Returns (entries, bytes) copied.
        """
        e, qw = md.ensemble_size, md.write_quorum
        remaining = set(entries_for_index(slot, fragment.first_entry_id, end, e, qw))
        if not remaining:
            return 0, 0
        ctx = self._ctx
        digest = make_digest(md.digest_type, md.password)
        client = await ctx.pool.dedicated(target)
        sink = _AddSink(client, md.ledger_id, master_key(md.password), self.window_entries,
                        ack_timeout=max(ctx.config.addEntryTimeoutSec * 6, 30.0))
        copied = [0, 0]
        try:
            sources = [(j, b) for j, b in enumerate(fragment.ensemble) if j != slot and b not in lost]
            for j, source in sources:
                want = sorted(x for x in remaining if bookie_holds(j, x, e, qw))
                if want:
                    await self._copy_from(md, source, want, remaining, digest, sink, copied)
            await sink.drain()
        finally:
            await sink.close()
        if remaining:
            few = sorted(remaining)[:10]
            raise ReplicationError(f"ledger {md.ledger_id}: entries {few} (of {len(remaining)}) were found on no "
                                   f"surviving bookie of {list(fragment.ensemble)}")
        return copied[0], copied[1]

    async def _copy_from(self, md: LedgerMetadata, source: str, want: list[int], remaining: set[int],
                         digest: DigestManager, sink: _AddSink, copied: list[int]) -> None:
        ctx = self._ctx
        try:
            client = await ctx.pool.get(source)
            stream = client.read_range(md.ledger_id, want[0], want[-1], timeout=max(ctx.config.readTimeout * 20, 60),
                                       max_batch_bytes=self.read_batch_bytes)
            async for batch in stream:
                if batch.status != pb.EOK:
                    log.info("ledger %d: %s answered %s to a range read", md.ledger_id, source,
                             pb.StatusCode.Name(batch.status))
                    return
                ids, sizes, data = list(batch.entry_ids), list(batch.sizes), batch.data
                unpack_batch(digest, md.ledger_id, ids, sizes, data)  # raises DigestMismatchError if corrupt
                take_ids, take_sizes, parts = [], [], []
                offset = 0
                for entry_id, size in zip(ids, sizes, strict=True):
                    if entry_id in remaining:
                        take_ids.append(entry_id)
                        take_sizes.append(size)
                        parts.append(data[offset:offset + size])
                    offset += size
                if take_ids:
                    await sink.send(take_ids, take_sizes, parts[0] if len(parts) == 1 else b"".join(parts))
                    remaining.difference_update(take_ids)
                    copied[0] += len(take_ids)
                    copied[1] += sum(take_sizes)
        except (grpc.aio.AioRpcError, BKError, OSError) as exc:
            if sink.error is not None:
                raise sink.error from None
            log.info("ledger %d: range read from %s failed (%s); trying other replicas", md.ledger_id, source, exc)

    # ---- bookies -------------------------------------------------------------------------
    def recover_bookies(self, bookies: Iterable[str], *, target: str | None = None, force: bool = False,
                        progress: ProgressSink = NO_PROGRESS) -> ReplicationStats:
        """Manual recovery: re-replicate every ledger that names one of `bookies` (fencing open ones).

        When `progress.stop_requested()` turns true the run stops between two fragments (each copied
        fragment is already swapped in by its CAS) and returns with `interrupted` and the ledgers `left`."""
        lost = set(bookies)
        registered = lost & self.registered_bookies()
        if registered and not force:
            raise BKError(f"bookie(s) {sorted(registered)} are still registered (running): stop them first, or "
                          "force the recovery")
        if target is not None and target in lost:
            raise BKError(f"target {target} is one of the bookies being recovered")
        start = time.monotonic()
        stats = ReplicationStats()
        ledgers = [(ledger_id, estimated_copy_bytes(md, lost))
                   for ledger_id, md in self.store.ledgers_with_metadata() if names_any(md, lost)]
        stats.total_ledgers = len(ledgers)
        progress.begin(len(ledgers), sum(est for _, est in ledgers))
        for n, (ledger_id, _) in enumerate(ledgers):
            if progress.stop_requested():
                stats.interrupted, stats.left = True, [lid for lid, _ in ledgers[n:]]
                break
            try:
                outcome = self.replicate_ledger(ledger_id, lost, target=target, fence_open=True, stats=stats,
                                                progress=progress)
                if outcome.reason == "interrupted" and not outcome.done:
                    stats.interrupted, stats.left = True, [lid for lid, _ in ledgers[n:]]
                    break
                if not outcome.done:
                    stats.failed[ledger_id] = outcome.reason or "still names a lost bookie"
            except (BKError, OSError, TimeoutError) as exc:
                log.warning("ledger %d: recovery failed: %s", ledger_id, exc)
                stats.failed[ledger_id] = str(exc) or type(exc).__name__
            progress.advance(items=1)
        stats.seconds = time.monotonic() - start
        return stats

    def decommission(self, bookie_id: str, progress: ProgressSink = NO_PROGRESS) -> ReplicationStats:
        """Move every fragment off a bookie that is down, check no metadata names it, delete its cookie.
        Interrupted (see `recover_bookies`), it keeps the cookie and returns: run it again to finish."""
        if bookie_id in self.registered_bookies():
            raise BKError(f"bookie {bookie_id} is still registered (running): stop it before decommissioning")
        stats = self.recover_bookies([bookie_id], progress=progress)
        if stats.interrupted:
            return stats
        left = self.ledgers_on_bookies([bookie_id])
        if left:
            raise BKError(f"decommission of {bookie_id} incomplete: ledgers {left[:20]} still name it "
                          f"({stats.failed}); the cookie was kept, run it again")
        self.store.delete_cookie(bookie_id)
        return stats
