"""The bookie's request machine (pure): the add/fence/LAC decisions in request order and the order of replies.

One `BookieMachine` per bookie owns what must hold whatever thread runs it:
- each add batch, fence and explicit LAC that needs the journal gets the next *journal sequence* number;
  the driver queues its records in that order and reports each sequence's outcome (`on_synced`,
  `on_not_journaled`, `on_sync_failed`);
- a reply that depends on the journal is released only once every sequence up to the one that covers it
  has completed (R8: an add after its fsync; R15: a fence answer, and an EFENCED refusal, after the fence is
  durable); nothing is answered past a sequence that has not completed;
- a failed sync answers EIO to everything waiting and fails every later request until the bookie restarts;
- a fence is marked at once (later adds see it) and is durable only after its sequence syncs; a storage
  flush that fails keeps every fence (`on_flush_failed`).
The request checks themselves are `bookie.core.decisions`. The machine returns typed effects (the closed
union `Effect`), which a driver runs with `match` and `typing.assert_never`: `bookie.server` /
`bookie.bookie` on their threads, and the simulator's bookie (`tests.sim.bookie`) over a simulated disk.
`BookieRules` switches single rules off, for the simulator's mutants only (`tests.sim.mutations`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Generic, TypeVar

from bkledger.bookie.core import decisions
from bkledger.proto import bookie_pb2 as pb

T = TypeVar("T")     # the driver's reply token: what it needs to send one answer


@dataclasses.dataclass(frozen=True)
class BookieRules:
    """The bookie's rules; every field True in production. A mutant turns one off (tests.sim.mutations)."""

    ack_after_sync: bool = True            # R8: an add is acknowledged after the sync that covers it
    fence_barrier: bool = True             # R15: a fencing read of a fenced ledger waits for a journal barrier
    journal_fence: bool = True             # R15: the fence is written to the journal (survives a restart)
    refuse_rewrites: bool = True           # issue 41: an add with other bytes for a stored entry: EBADREQ
    keep_fence_on_failed_flush: bool = True  # R15: a failed storage flush leaves every fence in place


DEFAULT_RULES = BookieRules()


@dataclasses.dataclass(frozen=True)
class AddLimits:
    """What R26's checks of an add batch need from the bookie's configuration."""

    max_entry_size: int
    entry_id_window: int
    max_entry_id: int


# ---- effects (a closed union) -----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Reply(Generic[T]):
    """Send `token` its answer now."""

    token: T
    status: int
    reason: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class StoreAdd(Generic[T]):
    """Store the batch of `token` just decided, then queue its records (and the master key's, `record_key`)
    for the journal as sequence `seq`; with `check_rewrites`, refuse it (`on_not_journaled` EBADREQ) first
    if it would change the bytes of a stored entry (`decisions.check_rewrites`)."""

    token: T
    seq: int
    record_key: bool
    max_lac: int
    check_rewrites: bool


@dataclasses.dataclass(frozen=True, slots=True)
class MarkFenced:
    """Mark the ledger fenced in memory now (with its master key if `record_key`): later adds see it."""

    ledger_id: int
    master_key: bytes
    record_key: bool


@dataclasses.dataclass(frozen=True, slots=True)
class JournalFence:
    """Queue the fence record (and the master key's, `record_key`) as sequence `seq`, synced."""

    seq: int
    ledger_id: int
    master_key: bytes
    record_key: bool


@dataclasses.dataclass(frozen=True, slots=True)
class JournalBarrier:
    """Queue an empty synced record as sequence `seq`: it completes once everything queued before is durable."""

    seq: int


@dataclasses.dataclass(frozen=True, slots=True)
class JournalLac(Generic[T]):
    """Queue the explicit LAC of `token`'s request as sequence `seq`, synced; once durable it goes to storage."""

    token: T
    seq: int
    ledger_id: int


@dataclasses.dataclass(frozen=True, slots=True)
class AdvanceLac:
    """The bookie now knows `lac` of the ledger (long polls waiting on it may answer)."""

    ledger_id: int
    lac: int


@dataclasses.dataclass(frozen=True, slots=True)
class ForgetFence:
    """Drop the ledger's fence from memory (only ever returned by the "flush drops a fence" mutant)."""

    ledger_id: int


Effect = (Reply[T] | StoreAdd[T] | MarkFenced | JournalFence | JournalBarrier | JournalLac[T] | AdvanceLac
          | ForgetFence)


@dataclasses.dataclass(slots=True)
class _Add(Generic[T]):
    token: T
    ledger_id: int
    max_lac: int


class BookieMachine(Generic[T]):
    """The request rules of one bookie; every method returns the effects to run, in order."""

    def __init__(self, limits: AddLimits, rules: BookieRules = DEFAULT_RULES) -> None:
        self.limits = limits
        self.rules = rules
        self.failed = ""                          # why a sync failed: everything is answered EIO until restart
        self._next_seq = 1
        self._completed = 0                       # every sequence up to this one has completed
        self._early: set[int] = set()             # completed sequences past `_completed`
        self._held: dict[int, list[Effect[T]]] = {}     # sequence -> what is released once it has completed
        self._adds: dict[int, _Add[T]] = {}       # sequence -> the add batch it journals
        self._fence_seq: dict[int, int] = {}      # ledger -> the sequence of its fence, until that completes
        self._unflushed_fences: set[int] = set()  # fenced since the last storage flush that succeeded

    # ---- requests ----------------------------------------------------------------------------------
    def on_add(self, token: T, ledger_id: int, entry_ids: decisions.IntArray | Sequence[int],
               sizes: decisions.IntArray | Sequence[int], data: bytes | memoryview, *, master_key: bytes,
               view: decisions.LedgerView | None, known_last: int, recovery_add: bool = False,
               high_priority: bool = False, read_only: bool = False) -> list[Effect[T]]:
        """An add batch, in request order; `known_last`: the highest of the last entry stored and the LAC
        known for the ledger (R26)."""
        why, max_lac, highest_id = decisions.check_add(ledger_id, entry_ids, sizes, data, self.limits.max_entry_size)
        if not why:
            why = decisions.check_entry_range(highest_id, known_last, max_lac, self.limits.entry_id_window,
                                              self.limits.max_entry_id)
        if why:
            return [Reply(token, pb.EBADREQ, why)]
        if self.failed:
            return [Reply(token, pb.EIO, self.failed)]
        check = decisions.decide_add(view, master_key, recovery_add=recovery_add, high_priority=high_priority,
                                     read_only=read_only)
        if check.status == pb.EFENCED:       # R15: refused only once the fence it relies on is durable
            return self._hold(self._fence_seq.get(ledger_id, 0), Reply(token, pb.EFENCED, check.reason))
        if check.status != pb.EOK:
            return [Reply(token, check.status, check.reason)]
        seq = self._take_seq()
        self._adds[seq] = _Add(token, ledger_id, max_lac)
        effects: list[Effect[T]] = [StoreAdd(token, seq, check.record_key, max_lac, self.rules.refuse_rewrites)]
        if not self.rules.ack_after_sync:    # mutant: acknowledged before it is even journaled
            del self._adds[seq]
            effects += [AdvanceLac(ledger_id, max_lac), Reply(token, pb.EOK)]
        return effects

    def on_fence(self, token: T, ledger_id: int, master_key: bytes,
                 view: decisions.LedgerView | None) -> list[Effect[T]]:
        """A fencing read (R15): answered EOK once the fence, and everything journaled before it, is durable;
        the driver then reads what it answers with."""
        check = decisions.decide_fence(view, master_key)
        if check.status != pb.EOK:
            return [Reply(token, check.status)]
        if self.failed:
            return [Reply(token, pb.EIO, self.failed)]
        if not check.newly_fenced and not self.rules.fence_barrier:    # mutant: the fence may not be durable
            return [Reply(token, pb.EOK)]
        seq = self._take_seq()
        effects: list[Effect[T]] = []
        if check.newly_fenced:
            effects.append(MarkFenced(ledger_id, master_key, check.record_key))
            self._unflushed_fences.add(ledger_id)
            if self.rules.journal_fence:
                self._fence_seq[ledger_id] = seq
                effects.append(JournalFence(seq, ledger_id, master_key, check.record_key))
            else:                                    # mutant: the fence lives in memory only
                effects.append(JournalBarrier(seq))
        else:
            effects.append(JournalBarrier(seq))
        return effects + self._hold(seq, Reply(token, pb.EOK))

    def on_write_lac(self, token: T, ledger_id: int, master_key: bytes, view: decisions.LedgerView | None,
                     lac: int) -> list[Effect[T]]:
        """An explicit LAC: journaled, answered and known (long polls) once durable."""
        status = decisions.decide_write_lac(view, master_key)
        if status != pb.EOK:
            return [Reply(token, status)]
        if self.failed:
            return [Reply(token, pb.EIO, self.failed)]
        seq = self._take_seq()
        self._held[seq] = [AdvanceLac(ledger_id, lac), Reply(token, pb.EOK)]
        return [JournalLac(token, seq, ledger_id)]

    # ---- journal outcomes, in sequence order (except on_not_journaled) -----------------------------
    def on_synced(self, seq: int) -> list[Effect[T]]:
        """Sequence `seq` is durable (or written, for a deferred-sync add)."""
        add = self._adds.pop(seq, None)
        if add is not None:
            self._held.setdefault(seq, []).extend((AdvanceLac(add.ledger_id, add.max_lac), Reply(add.token, pb.EOK)))
        return self._complete(seq)

    def on_not_journaled(self, seq: int, status: int, reason: str) -> list[Effect[T]]:
        """The driver did not journal sequence `seq` (an add refused by storage, or that storage failed to
        take): its add is answered `status` after the sequences before it."""
        add = self._adds.pop(seq, None)
        if add is not None:
            self._held.setdefault(seq, []).append(Reply(add.token, status, reason))
        return self._complete(seq)

    def on_sync_failed(self, seq: int, reason: str) -> list[Effect[T]]:
        """The journal failed at sequence `seq`: everything waiting is answered EIO, and so is every later
        request until the bookie restarts (its later sequences complete with nothing to answer)."""
        if not self.failed:
            self.failed = reason or "journal sync failed"
        replies: list[Effect[T]] = [Reply(add.token, pb.EIO, self.failed) for add in self._adds.values()]
        for held in self._held.values():
            replies += [Reply(e.token, pb.EIO, self.failed) for e in held if isinstance(e, Reply)]
        self._adds.clear()
        self._held.clear()
        self._fence_seq.clear()
        self._early.discard(seq)
        return replies

    # ---- storage flushes (checkpoints) ---------------------------------------------------------------
    def on_flushed(self) -> list[Effect[T]]:
        """A storage flush succeeded: the fences before it are in ledger storage."""
        self._unflushed_fences.clear()
        return []

    def on_flush_failed(self) -> list[Effect[T]]:
        """A storage flush failed: the journal is kept, and so is every fence (R15)."""
        if self.rules.keep_fence_on_failed_flush:
            return []
        dropped, self._unflushed_fences = sorted(self._unflushed_fences), set()   # mutant
        return [ForgetFence(ledger_id) for ledger_id in dropped]

    # ---- the reply queue -------------------------------------------------------------------------------
    @property
    def waiting(self) -> int:
        """Replies and adds not answered yet."""
        return len(self._adds) + sum(len(h) for h in self._held.values())

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _hold(self, need: int, effect: Effect[T]) -> list[Effect[T]]:
        """`effect` now if sequence `need` has completed, else once it has."""
        if need <= self._completed:
            return [effect]
        self._held.setdefault(need, []).append(effect)
        return []

    def _complete(self, seq: int) -> list[Effect[T]]:
        if seq <= self._completed or self.failed:
            self._held.pop(seq, None)
            return []
        self._early.add(seq)
        released: list[Effect[T]] = []
        while self._completed + 1 in self._early:
            self._completed += 1
            self._early.discard(self._completed)
            if self._fence_seq:
                self._fence_seq = {k: v for k, v in self._fence_seq.items() if v > self._completed}
            released += self._held.pop(self._completed, ())
        return released
