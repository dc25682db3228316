"""Runs ledger recovery (open with recovery, R14-R20) on real bookies, driven by the pure machine.

Mirrors BookKeeper's LedgerRecoveryOp. Steps: CAS the metadata to IN_RECOVERY (R14); execute the
machine's actions (fencing LAC reads, recovery reads with the fence flag, write-backs with the
recovery flag) and feed every answer back as an event; a bookie that does not answer never holds
recovery up once the machine has what it needs (each request is bounded by a timeout, and answers
that come late are ignored). The closing CAS adopts a close made by someone else (R20). Every step
is logged: ledger, LAC found, entries recovered, last entry.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, assert_never

import grpc

from bkledger.client.errors import BKError, LedgerRecoveryError
from bkledger.client.protocol import transforms
from bkledger.client.protocol.digest import make_digest, master_key
from bkledger.client.protocol.metadata import LedgerMetadata, LedgerState
from bkledger.client.protocol.pending_adds import NeedEnsembleChange
from bkledger.client.protocol.recovery import (
    DEFAULT_RULES,
    CloseLedger,
    LedgerRecovery,
    RecoveryAction,
    RecoveryFailed,
    RecoveryRules,
    SendFenceRead,
    SendRecoveryRead,
    WriteBack,
)
from bkledger.client.protocol.status import StatusCode
from bkledger.proto import bookie_pb2 as pb

if TYPE_CHECKING:
    from bkledger.client.context import ClientContext

RANGE_ENTRIES = 16     # entries per recovery range read: 16 x 5 MiB (the largest entry) fit in fenceTimeout

log = logging.getLogger("bkledger.client.recovery")


@dataclasses.dataclass(frozen=True)
class FenceAnswer:
    """A fencing LAC read answered (or timed out: TIMEOUT) by the bookie at `index` of the last fragment."""

    index: int
    status: int
    lac: int


@dataclasses.dataclass(frozen=True)
class ReadAnswer:
    """A recovery read of entry_id answered by the bookie at `index` of its write set (body on EOK)."""

    entry_id: int
    index: int
    status: int
    body: bytes | None


@dataclasses.dataclass(frozen=True)
class WriteAnswer:
    """A write-back of entry_id answered by bookie_id."""

    entry_id: int
    bookie_id: str
    status: int


@dataclasses.dataclass(frozen=True)
class BookieLost:
    """A bookie of a write-back did not answer within addEntryTimeoutSec (its connection failed)."""

    bookie_id: str


@dataclasses.dataclass(frozen=True)
class EnsembleChosen:
    """Replacements for the failed write-back bookies were picked: the local last fragment's ensemble."""

    ensemble: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ReplacementFailed:
    """No replacement could be picked for a failed write-back bookie."""

    error: BKError


#: What the driver's tasks report to the recovery loop (a closed union: `_dispatch` fails on anything else).
RecoveryEvent = FenceAnswer | ReadAnswer | WriteAnswer | BookieLost | EnsembleChosen | ReplacementFailed


class _WriteBackAcks:
    """Ack handler for write-backs: routes bookie answers into the recovery's event queue.

    A lost connection is reported to the machine only after `delay` (addEntryTimeoutSec), as
    BookKeeper notices a failed add by its timeout: if the other bookies of the write sets
    acknowledge meanwhile, recovery closes without replacing (or waiting for) the unreachable one."""

    def __init__(self, events: asyncio.Queue[RecoveryEvent], delay: float):
        self.events = events
        self.delay = delay
        self.reported: set[str] = set()

    def on_ack(self, bookie_id: str, ack: pb.AddAck) -> None:
        for entry_id in ack.entry_ids:
            self.events.put_nowait(WriteAnswer(entry_id, bookie_id, ack.status))

    def on_bookie_failed(self, bookie_id: str) -> None:
        if bookie_id in self.reported:
            return
        self.reported.add(bookie_id)
        asyncio.get_running_loop().call_later(self.delay, self.events.put_nowait, BookieLost(bookie_id))


class RecoveryRun:
    def __init__(self, ctx: ClientContext, md: LedgerMetadata, password: bytes, rules: RecoveryRules = DEFAULT_RULES):
        self.ctx = ctx
        self.md = md
        self.ledger_id = md.ledger_id
        self.digest = make_digest(md.digest_type, password)
        self.master_key = master_key(password)
        self.rules = rules
        self.events: asyncio.Queue[RecoveryEvent] = asyncio.Queue()
        self.acks = _WriteBackAcks(self.events, ctx.config.addEntryTimeoutSec)
        self.tasks: set[asyncio.Task[None]] = set()
        self.recovered = 0
        self.bad_bookies: set[str] = set()

    async def run(self) -> tuple[LedgerMetadata, int]:
        md, version = await asyncio.to_thread(
            self.ctx.store.update_ledger, self.ledger_id, transforms.to_in_recovery,
            max_attempts=self.ctx.config.metadataMaxAttempts)
        if md.state is LedgerState.CLOSED:
            return md, version
        log.info("ledger %d: recovery started (IN_RECOVERY), last fragment %s", self.ledger_id,
                 list(md.last_fragment.ensemble))
        machine = LedgerRecovery(md, self.digest, self.rules, read_window=self.ctx.config.recoveryReadWindow)
        try:
            close = await self._drive(machine)
        finally:
            for task in self.tasks:
                task.cancel()
            for bookie_id in md.all_bookies() | set(machine.local_metadata.all_bookies()):
                client = self.ctx.pool.cached(bookie_id)
                if client is not None:
                    client.unregister(self.ledger_id)
        return await self._close(close, md)

    async def _drive(self, machine: LedgerRecovery) -> CloseLedger:
        self._execute(machine.start())
        stall = self.ctx.config.fenceTimeout * 4 + self.ctx.config.addEntryTimeoutSec
        while True:
            try:
                event = await asyncio.wait_for(self.events.get(), stall)
            except TimeoutError:
                raise LedgerRecoveryError(
                    f"ledger {self.ledger_id}: recovery heard nothing from bookies for {stall:.0f}s; "
                    "the ledger stays in recovery: retry once bookies answer") from None
            actions = self._dispatch(machine, event)
            while not self.events.empty():      # a range read answers many entries at once: take them all
                actions += self._dispatch(machine, self.events.get_nowait())
            for action in actions:
                if isinstance(action, CloseLedger):
                    return action
                if isinstance(action, RecoveryFailed):
                    log.warning("ledger %d: recovery failed, not closed: %s", self.ledger_id, action.error)
                    raise action.error
            await self._execute_async(machine, actions)

    def _dispatch(self, machine: LedgerRecovery, event: RecoveryEvent) -> list[RecoveryAction]:
        match event:
            case FenceAnswer(index, status, lac):
                actions = machine.on_fence_response(index, status, lac)
                if machine.start_entry_id >= -1 and any(isinstance(a, SendRecoveryRead) for a in actions):
                    log.info("ledger %d: fenced %s, LAC found %d, reading from entry %d", self.ledger_id,
                             sorted(machine.fenced_indices), machine.start_entry_id, machine.start_entry_id)
                return actions
            case ReadAnswer(entry_id, index, status, body):
                return machine.on_read_response(entry_id, index, status, body)
            case WriteAnswer(entry_id, bookie_id, status):
                if status == pb.EOK:
                    return machine.on_write_ack(entry_id, bookie_id)
                return machine.on_write_error(entry_id, bookie_id, status)
            case BookieLost(bookie_id):
                self.bad_bookies.add(bookie_id)
                return machine.on_bookie_failed(bookie_id)
            case EnsembleChosen(ensemble):
                return machine.on_ensemble_changed(ensemble)
            case ReplacementFailed(error):
                return [RecoveryFailed(LedgerRecoveryError(
                    f"ledger {self.ledger_id}: recovery could not replace a failed bookie ({error}); "
                    "the ledger stays in recovery: bring bookies back and open it with recovery again"))]
            case _:
                assert_never(event)

    def _execute(self, actions: Sequence[RecoveryAction]) -> None:
        reads: dict[tuple[str, bool], dict[int, int]] = {}
        for action in actions:
            match action:
                case SendFenceRead():
                    self._spawn(self._fence(action))
                case SendRecoveryRead():
                    reads.setdefault((action.bookie_id, action.fence), {})[action.entry_id] = action.index
                case WriteBack():
                    self.recovered += 1
                    self._spawn(self._write_back(action))
                case NeedEnsembleChange() | CloseLedger() | RecoveryFailed():
                    pass                # run by _execute_async / _drive
                case _:
                    assert_never(action)
        for (bookie_id, fence), wanted in reads.items():   # range reads per bookie, not one RPC per entry
            ids = sorted(wanted)
            for start in range(0, len(ids), RANGE_ENTRIES):   # each within fenceTimeout even for big entries
                chunk = ids[start:start + RANGE_ENTRIES]
                self._spawn(self._read_range(bookie_id, fence, {e: wanted[e] for e in chunk}))

    async def _execute_async(self, machine: LedgerRecovery, actions: Sequence[RecoveryAction]) -> None:
        self._execute(actions)
        for action in actions:
            if isinstance(action, NeedEnsembleChange):
                self._spawn(self._choose_replacements(machine, action))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _call_read(self, bookie_id: str, request: pb.ReadRequest) -> pb.ReadResponse | None:
        try:
            client = await self.ctx.pool.get(bookie_id)
            return await client.read(request, self.ctx.config.fenceTimeout)
        except grpc.aio.AioRpcError as exc:
            log.info("ledger %d: recovery read to %s failed: %s %s", self.ledger_id, bookie_id, exc.code().name,
                     exc.details())
            return None
        except (BKError, OSError) as exc:
            log.info("ledger %d: recovery read to %s failed: %s", self.ledger_id, bookie_id, exc)
            return None

    async def _fence(self, action: SendFenceRead) -> None:
        request = pb.ReadRequest(ledger_id=self.ledger_id, entry_id=-1, fence=True, master_key=self.master_key,
                                 high_priority=True)
        response = await self._call_read(action.bookie_id, request)
        if response is None:
            self.events.put_nowait(FenceAnswer(action.index, StatusCode.TIMEOUT, -1))
            return
        self.events.put_nowait(FenceAnswer(action.index, response.status, response.max_lac))

    async def _read_range(self, bookie_id: str, fence: bool, wanted: dict[int, int]) -> None:
        """Recovery reads of the entries `wanted` (entry id -> index in its write set) from one bookie.

        A stream that ends normally holds every entry of the range the bookie has, so a wanted entry
        missing from it is NoSuchEntry there; an error status applies to every entry not yet answered;
        a broken stream leaves them unknown (TIMEOUT), never negative."""
        rest = dict(wanted)
        status: int = pb.ENOENTRY
        try:
            client = await self.ctx.pool.get(bookie_id)
            stream = client.read_range(self.ledger_id, min(wanted), max(wanted), self.ctx.config.fenceTimeout,
                                       max_batch_bytes=4 << 20, fence=fence, master_key=self.master_key)
            async for batch in stream:
                if batch.status != pb.EOK:
                    status = batch.status
                    break
                offset = 0
                for entry_id, size in zip(batch.entry_ids, batch.sizes, strict=True):
                    index = rest.pop(entry_id, None)
                    if index is not None:
                        body = batch.data[offset:offset + size]
                        self.events.put_nowait(ReadAnswer(entry_id, index, pb.EOK, body))
                    offset += size
        except grpc.aio.AioRpcError as exc:
            log.info("ledger %d: recovery read to %s failed: %s %s", self.ledger_id, bookie_id, exc.code().name,
                     exc.details())
            status = StatusCode.TIMEOUT
        except (BKError, OSError) as exc:
            log.info("ledger %d: recovery read to %s failed: %s", self.ledger_id, bookie_id, exc)
            status = StatusCode.TIMEOUT
        for entry_id, index in rest.items():
            self.events.put_nowait(ReadAnswer(entry_id, index, status, None))

    async def _write_back(self, action: WriteBack) -> None:
        for bookie_id in action.bookie_ids:
            try:
                client = await self.ctx.pool.get(bookie_id)
                client.register(self.ledger_id, self.acks)
                client.send_add(self.ledger_id, self.master_key, [action.entry_id], [len(action.body)],
                                action.body, recovery_add=True, high_priority=True)
            except (BKError, ConnectionError, OSError):
                self.acks.on_bookie_failed(bookie_id)

    async def _choose_replacements(self, machine: LedgerRecovery, action: NeedEnsembleChange) -> None:
        """R19: a bookie failed during write-back: pick replacements, kept locally until the close."""
        ensemble = list(machine.local_metadata.last_fragment.ensemble)
        writable = await asyncio.to_thread(self.ctx.store.writable_bookies)
        exclude = set(ensemble) | self.bad_bookies
        try:
            for index in action.failed_indices:
                chosen = self.ctx.placement.replace_bookie(ensemble, writable, exclude)
                ensemble[index] = chosen
                exclude.add(chosen)
        except BKError as exc:
            self.events.put_nowait(ReplacementFailed(exc))
            return
        log.info("ledger %d: recovery replaces bookies %s", self.ledger_id, list(action.failed_indices))
        self.events.put_nowait(EnsembleChosen(tuple(ensemble)))

    async def _close(self, close: CloseLedger, recovering: LedgerMetadata) -> tuple[LedgerMetadata, int]:
        """R20: the closing CAS; on a ledger closed meanwhile the rule decides (adopt the stored close)."""
        def closing(current: LedgerMetadata) -> LedgerMetadata | None:
            if current.state is LedgerState.IN_RECOVERY:
                return transforms.close_after_recovery(current, close.last_entry_id, close.length,
                                                       close.new_fragments)
            decision = transforms.decide_recovery_close_conflict(current, self.rules.adopt_stored_close)
            if decision is transforms.ConflictDecision.ADOPT:
                return None
            if decision is transforms.ConflictDecision.OVERWRITE:   # a known bug (RecoveryRules), tests only
                return transforms.close_after_recovery(recovering, close.last_entry_id, close.length,
                                                       close.new_fragments)
            raise transforms.conflict_error(decision, current, close.last_entry_id)

        md, version = await asyncio.to_thread(self.ctx.store.update_ledger, self.ledger_id, closing,
                                              max_attempts=self.ctx.config.metadataMaxAttempts)
        self.ctx.metrics.recoveries.inc()
        log.info("ledger %d: recovered %d entries, closed with last entry %d%s", self.ledger_id, self.recovered,
                 md.last_entry_id, "" if md.last_entry_id == close.last_entry_id else " (adopted another close)")
        return md, version
