"""The writer side of a ledger handle: pipelined, batched adds; acks in order; ensemble change; close.

Mirrors BookKeeper's LedgerHandle write path. Adds come from any thread into a queue; the client loop
drains it once per wake-up (no wake-up while every bookie is saturated: the first freed request slot
drains what queued meanwhile), gives each add the next entry id through the pure WriterMachine
(client/protocol/writer_machine.py: every protocol decision below is its, this module runs its effects),
packages the whole drain as one blob (R7) and sends each bookie one batch. Acks go back into the
machine, whose effects complete futures in entry order (R6), ask for an ensemble change (R9) or
fail the adds (R21: EFENCED fails them, never changes the ensemble). As BookKeeper's per-request add
timeout: a bookie of the ensemble that leaves an add request unanswered for addEntryTimeoutSec is treated
as failed and replaced, even while the other bookies keep the adds completing (Qa < Qw); when no bookie is
free to replace it and every write set keeps Qa bookies, the adds go on without it (under-replicated, a
warning, a retry every addEntryTimeoutSec). Close CASes CLOSED with the rules of R10. All of that is the
machine's: an ensemble change reaches this module as steps (`FindReplacements`: list the writable bookies;
`StoreEnsembleChange`: the CAS through the metadata store, then connect), each answered back to the
machine, and a close feeds it how its wait ended. The effects are a closed union run by one `match`
(`_execute`) that fails on an unknown effect.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import concurrent.futures
import itertools
import logging
import struct
import threading
import time
from collections.abc import Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, assert_never

from bkledger.client.add_future import PendingFutures
from bkledger.client.add_trace import AddTrace, SlowAddLog
from bkledger.client.errors import (
    BKError,
    ClientForkedError,
    ClientInternalError,
    LedgerClosedError,
)
from bkledger.client.protocol.digest import HEADER_LENGTH, make_digest, master_key, package_batch, package_lac
from bkledger.client.protocol.metadata import LedgerMetadata
from bkledger.client.protocol.pending_adds import (
    CompleteAdds,
    FailAdds,
    Resend,
    SendAdd,
    SendAdds,
)
from bkledger.client.protocol.writer_machine import (
    DEFAULT_WRITER_RULES,
    FindReplacements,
    GoingOnWithout,
    RetryReplacement,
    SendLac,
    StoreEnsembleChange,
    SuspectBookie,
    WriterEffect,
    WriterMachine,
    WriterRules,
)
from bkledger.proto import bookie_pb2 as pb

if TYPE_CHECKING:
    from bkledger.client.context import ClientContext
    from bkledger.client.protocol.bulk import Bulk, Offsets

    IntArray = Offsets

log = logging.getLogger("bkledger.client.writer")
_LENGTH = struct.Struct(">q")
TICK = 0.1
BULK_CHUNK_BYTES = 4 * 1024 * 1024   # a bulk is packaged, sent and acknowledged in pieces of at most this size


class LedgerWriter:
    """Owned by one LedgerHandle; every method but `submit` runs on the client loop."""

    def __init__(self, ctx: ClientContext, md: LedgerMetadata, version: int, password: bytes,
                 rules: WriterRules = DEFAULT_WRITER_RULES):
        self.ctx = ctx
        self.md = md
        self.version = version
        self.ledger_id = md.ledger_id
        self.digest = make_digest(md.digest_type, password)
        self.master_key = master_key(password)
        # every protocol decision (pending adds, LAC, timeouts, ensemble change, close) is the machine's
        self.machine = WriterMachine(md, add_timeout=ctx.config.addEntryTimeoutSec,
                                     change_attempts=ctx.config.ensembleChangeMaxAttempts, rules=rules,
                                     now=time.monotonic())
        self.pending = self.machine.pending
        self._incoming = _Incoming()
        self._bulk_queued = False                # some item of _incoming is a Bulk
        self._lock = threading.Lock()            # guards _incoming, _scheduled, _parked and the window
        self._scheduled = False
        self._parked = False                     # every bookie is saturated: adds wait without waking the loop
        self._window_limit = ctx.config.maxOutstandingAdds
        self._in_window = 0                      # adds queued or in flight (bounded memory)
        self._window_waiters = 0
        self._bulk_waiters = 0
        self._window_space = threading.Condition(self._lock)
        # the future of every pending add or bulk, ascending: a future completes once its last entry does
        # (R6), and a bulk has one future for all its entries
        self._futures = PendingFutures()
        self._sent: collections.deque[_SentBatch] = collections.deque()   # pending entries, packaged
        self._length = 0                 # cumulative payload bytes of every entry given an id
        self.lac_length = 0              # cumulative length at the LAC
        self._change_task: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._retry_task: asyncio.Task[None] | None = None
        self.error: BKError | None = None
        self.closing = False
        # where sampled adds spend their time (client.add_trace): (index in _incoming, enqueued ns) of the
        # queued ones, then the traces of pending entries by id (ascending)
        self._slow_log: SlowAddLog | None = getattr(ctx, "slow_log", None)   # (a bare test context has none)
        self._trace_every = self._slow_log.sample_every if self._slow_log is not None else 0
        self._trace_count = self._trace_every - 1            # the first add is traced
        self._incoming_marks: list[tuple[int, int]] = []
        self._traces: dict[int, AddTrace] = {}
        self._trace_ids: list[int] = []

    # ---- set-up -----------------------------------------------------------------------------
    async def start(self) -> None:
        await self._connect(self.pending.ensemble)
        self._timer = asyncio.get_running_loop().create_task(self._tick())

    async def _connect(self, ensemble: tuple[str, ...]) -> None:
        for bookie_id in ensemble:
            try:
                client = await self.ctx.pool.get(bookie_id)
                client.register(self.ledger_id, self)
            except BKError as exc:
                log.warning("ledger %d: cannot reach bookie %s: %s", self.ledger_id, bookie_id, exc)

    # ---- adds, from any thread ----------------------------------------------------------------
    def submit(self, payload: bytes, future: concurrent.futures.Future[int], block: bool = True) -> bool:
        """Queue an add. Returns False (and queues nothing) if the window is full and block is False.
        One lock round per add: the window (maxOutstandingAdds) and the queue share it."""
        if self.ctx.runtime.forked:          # a fork child: the loop is the parent's (before any lock)
            future.set_exception(ClientForkedError())
            return True
        if self.error is not None or self.closing:
            future.set_exception(self._refusal())
            return True
        with self._lock:
            if self._in_window >= self._window_limit:
                if not block:
                    return False
                self._wait_for_window()
                if self.error is not None or self.closing:     # closed or shut down while waiting
                    future.set_exception(self._refusal())
                    return True
            self._in_window += 1
            if self._trace_every:
                self._mark_locked()
            self._incoming.append(payload, future)
            wake = self._claim_drain_locked()
        if wake:
            self.ctx.runtime.call_soon(self._drain)
        return True

    def submit_bulk(self, bulk: Bulk, future: concurrent.futures.Future[int]) -> None:
        """Queue a bulk of adds; `future` gives the entry id of its last entry. It takes as many window
        slots as it has entries, at most half the window, so two large bulks can be in flight at once (the
        caller holds their bytes anyway; what the window bounds is the per-add state)."""
        if self.ctx.runtime.forked:
            future.set_exception(ClientForkedError())
            return
        if self.error is not None or self.closing:
            future.set_exception(self._refusal())
            return
        slots = _bulk_slots(bulk.count, self._window_limit)
        with self._lock:
            if self._in_window + slots > self._window_limit:
                self._bulk_waiters += 1
                try:
                    self._wait_for_window(slots)
                finally:
                    self._bulk_waiters -= 1
                if self.error is not None or self.closing:     # closed or shut down while waiting
                    future.set_exception(self._refusal())
                    return
            self._in_window += slots
            self._incoming.append(bulk, future)
            self._bulk_queued = True
            wake = self._claim_drain_locked()
        if wake:
            self.ctx.runtime.call_soon(self._drain)

    def _mark_locked(self) -> None:
        """With the lock held, an add about to be queued: note when, if it is the sampled one."""
        self._trace_count += 1
        if self._trace_count >= self._trace_every:
            self._trace_count = 0
            self._incoming_marks.append((len(self._incoming), time.perf_counter_ns()))

    def _wait_for_window(self, slots: int = 1) -> None:
        """With the lock held: wait until `slots` more adds fit in the window."""
        self._window_waiters += 1
        try:
            while self._in_window + slots > self._window_limit:
                self._window_space.wait()
        finally:
            self._window_waiters -= 1

    def _release_window(self, count: int) -> None:
        if count <= 0:
            return
        with self._lock:
            self._in_window -= count
            if self._bulk_waiters:
                self._window_space.notify_all()      # a bulk waits for many slots: let everyone re-check
            elif self._window_waiters:
                self._window_space.notify(count)

    def _drain(self) -> None:
        with self._lock:
            items, self._incoming = self._incoming, _Incoming()
            marks, self._incoming_marks = self._incoming_marks, []
            bulk, self._bulk_queued = self._bulk_queued, False
            self._scheduled = self._parked = False
        if not items:
            return
        try:
            self._drain_items(items, bulk, marks)
        except Exception as exc:  # noqa: BLE001 - a loop callback: fail the adds it held, never drop them
            self._fail_held(items, exc)
        finally:
            self._park_if_saturated()

    def _park_if_saturated(self) -> None:
        """Nagle's rule without a wake-up per add: while every bookie of the ensemble has
        maxAddRequestsInFlight requests unanswered, an add could only join the next request, so adds queue
        here without waking the loop (a cross-thread wake-up and a drain per add cost more CPU than the add
        itself when adds trickle in one at a time). The first freed slot, or a failure, drains them."""
        if self.error is not None or self.closing:
            return
        clients = [self.ctx.pool.cached(bookie_id) for bookie_id in self.pending.ensemble]
        if not all(client is not None and client.saturated for client in clients):
            return
        with self._lock:
            self._parked = True
        for client in clients:
            assert client is not None
            client.when_free(self._unpark)

    def _unpark(self) -> None:
        with self._lock:
            if not self._parked:
                return
            self._parked = False
            wake = bool(self._incoming) and self._claim_drain_locked()
        if wake:
            asyncio.get_running_loop().call_soon(self._drain)

    def _claim_drain_locked(self) -> bool:
        """With the lock held, something queued: should the caller schedule a drain? (Not when one is
        scheduled already, nor while parked.) A True answer marks the drain scheduled."""
        wake = not self._scheduled and not self._parked
        self._scheduled = self._scheduled or wake
        return wake

    def _drain_items(self, items: _Incoming, bulk: bool,
                     marks: list[tuple[int, int]] | None = None) -> None:
        if self.error is None and self.pending.error is not None:
            self.error = self.pending.error              # the machine failed: it takes no more adds
        if self.error is not None or self.closing:
            self._fail_items(items, self._refusal())
            return
        self._send_items(items, bulk, marks)

    def _fail_held(self, items: _Incoming, exc: Exception) -> None:
        """Something raised while adds were being sent: fail the adds taken from the queue (sent or not) and
        every pending one; the writer takes no more adds (entry ids may have been given out)."""
        error = self._typed(exc)
        registered = self._futures.holds()
        left = _Incoming()
        for payload, future in items.pairs():
            if id(future) not in registered and not future.done():
                left.append(payload, future)
        self._fail_items(left, error)
        self._fail_writer(error)

    def _typed(self, exc: BaseException) -> BKError:
        if isinstance(exc, BKError):
            return exc
        log.error("ledger %d: unexpected error in the writer; its adds fail", self.ledger_id, exc_info=exc)
        error = ClientInternalError(f"ledger {self.ledger_id}: the writer failed unexpectedly ({exc!r}); the "
                                    "adds it held were maybe written; open the ledger again to read them")
        error.__cause__ = exc
        return error

    def _fail_writer(self, error: BKError) -> None:
        """Fail every pending add with `error` and refuse further adds (the machine too)."""
        try:
            actions = self.machine.fail(error)
        except Exception as exc:  # noqa: BLE001 - whatever the machine's state, the futures must settle
            log.error("ledger %d: failing the pending adds raised", self.ledger_id, exc_info=exc)
            actions = []
        if not any(isinstance(a, FailAdds) and a.entry_ids for a in actions):
            actions.append(FailAdds(tuple(self._futures.entry_ids()), error))
        self._execute(actions)

    def _guard(self, what: str, exc: Exception) -> None:
        """A loop callback (a bookie's answer, a timer) raised: fail the writer instead of letting the
        exception escape to the loop, where nobody would settle the adds."""
        log.error("ledger %d: %s raised", self.ledger_id, what, exc_info=exc)
        self._fail_writer(self._typed(exc))

    def _refusal(self) -> BKError:
        """What an add gets once the writer failed or is closing."""
        return self.error or LedgerClosedError(f"ledger {self.ledger_id} is closed for adds")

    def _fail_items(self, items: _Incoming, error: BKError) -> None:
        """Fail queued adds that were never sent, giving back their window slots."""
        self._release_window(sum(1 if isinstance(p, bytes) else _bulk_slots(p.count, self._window_limit)
                                 for p in items.payloads))
        for fut in items.futures:
            fut.set_exception(error)

    def _send_items(self, items: _Incoming, bulk: bool,
                    marks: list[tuple[int, int]] | None = None) -> None:
        self._idle.clear()
        if bulk:
            self._drain_mixed(items)
            return
        sends = self.machine.on_adds(len(items), time.monotonic())
        first = sends.first_entry_id
        payloads: list[bytes] = items.payloads  # type: ignore[assignment]  # no Bulk in this drain
        lac = self.pending.last_add_confirmed
        data, sizes = package_batch(self.digest, self.ledger_id, first, lac, self._length, payloads)
        self._length += sum(map(len, payloads))
        self._sent.append(_SentBatch(first, data, _offsets_of(sizes)))
        self._futures.add_run(first, items.futures)
        traces = self._start_traces(first, marks) if marks else None
        if not sends.skip and self.md.ensemble_size == self.md.write_quorum:
            entry_ids = list(sends.entry_ids)
            for bookie_id in self.pending.ensemble:     # E == Qw and no failure: one blob for everyone
                self._send(bookie_id, entry_ids, sizes, data, traces=traces)
        else:
            self._route(sends.targets(self.md.ensemble_size, self.md.write_quorum))

    def _start_traces(self, first: int, marks: list[tuple[int, int]]) -> list[AddTrace]:
        """The traces of the sampled adds of a drain whose first entry is `first` (client.add_trace)."""
        drained = time.perf_counter_ns()
        traces = [AddTrace(self.ledger_id, first + index, self.md.ack_quorum, enqueued, drained)
                  for index, enqueued in marks]
        for trace in traces:
            self._traces[trace.entry_id] = trace
            self._trace_ids.append(trace.entry_id)
        return traces

    def _drain_mixed(self, items: _Incoming) -> None:
        """A drain holding bulks: single adds and bulks in their order, packaged as consecutive entries;
        a bulk is packaged in chunks (no Python object per entry) and has one future, for its last entry."""
        count = sum(1 if isinstance(p, bytes) else p.count for p in items.payloads)
        sends = self.machine.on_adds(count, time.monotonic())
        lac = self.pending.last_add_confirmed
        entry_id = sends.first_entry_id
        batches: list[_SentBatch] = []
        run: list[bytes] = []

        def flush_run() -> None:
            nonlocal entry_id
            if run:
                data, sizes = package_batch(self.digest, self.ledger_id, entry_id, lac, self._length, run)
                self._length += sum(map(len, run))
                batches.append(_SentBatch(entry_id, data, _offsets_of(sizes)))
                entry_id += len(run)
                run.clear()

        for payload, fut in items.pairs():
            if isinstance(payload, bytes):
                run.append(payload)
                self._futures.add(entry_id + len(run) - 1, fut)
                continue
            flush_run()
            batches += self._package_bulk(payload, entry_id, lac)
            entry_id += payload.count
            self._futures.add(entry_id - 1, fut, _bulk_slots(payload.count, self._window_limit))
        flush_run()
        self._sent.extend(batches)

        e, qw = self.md.ensemble_size, self.md.write_quorum
        for batch in batches:            # each an AddRequest of its own: a bulk is acknowledged chunk by chunk
            count = batch.last - batch.first + 1
            if not sends.skip and e == qw:              # E == Qw and no failure: each blob to everyone
                entry_ids = range(batch.first, batch.last + 1)
                sizes = _sizes(batch.offsets)
                for bookie_id in self.pending.ensemble:
                    self._send(bookie_id, entry_ids, sizes, batch.data, own_request=True)
            elif not sends.skip:                        # E > Qw: each bookie's entries gathered
                self._route_striped(batch)
            else:
                self._route(SendAdds(batch.first, count, sends.skip).targets(e, qw), own_request=True)

    def _route_striped(self, batch: _SentBatch) -> None:
        """A batch of consecutive entries to every bookie of the ensemble, each getting the entries of its
        write sets (R5) as one request: a mask per bookie and one native gather, no Python object per entry."""
        import numpy as np

        from bkledger.client.protocol.bulk import striped_targets  # numpy: only once bulks are used
        from bkledger.wire.gather import gather_entries
        offsets = np.asarray(batch.offsets, dtype=np.int64)
        ids = np.arange(batch.first, batch.last + 1, dtype=np.int64)
        sizes = np.diff(offsets)
        ensemble = self.pending.ensemble
        for index, keep in striped_targets(batch.first, offsets, self.md.ensemble_size, self.md.write_quorum):
            self._send(ensemble[index], ids[keep], sizes[keep], gather_entries(batch.data, offsets, keep),
                       own_request=True)

    def _package_bulk(self, bulk: Bulk, first: int, lac: int) -> list[_SentBatch]:
        from bkledger.client.protocol.bulk import chunk_bounds, package_bulk  # numpy: only once bulks are used

        out: list[_SentBatch] = []

        bounds = chunk_bounds(bulk.offsets, HEADER_LENGTH + self.digest.mac_length, BULK_CHUNK_BYTES)
        for lo, hi in itertools.pairwise(bounds):
            offsets = bulk.offsets[lo:hi + 1]
            data, packaged = package_bulk(self.digest, self.ledger_id, first + lo, lac, self._length,
                                          bulk.data, offsets)
            self._length += int(offsets[-1] - offsets[0])
            out.append(_SentBatch(first + lo, data, packaged))
        return out

    def _entry(self, entry_id: int) -> memoryview:
        """The packaged bytes of a pending entry (binary search: the batches hold ascending ids)."""
        sent = self._sent
        lo, hi = 0, len(sent)
        while lo < hi:
            mid = (lo + hi) // 2
            if sent[mid].last < entry_id:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(sent) and sent[lo].first <= entry_id:
            return sent[lo].view(entry_id)
        raise KeyError(f"ledger {self.ledger_id}: entry {entry_id} is not pending")

    def _route(self, sends: list[tuple[int, tuple[int, ...]]], recovery: bool = False,
               own_request: bool = False) -> None:
        """Send each entry to the given ensemble indices, one batch per bookie."""
        per_index: dict[int, list[int]] = collections.defaultdict(list)
        for entry_id, indices in sends:
            for index in indices:
                per_index[index].append(entry_id)
        ensemble = self.pending.ensemble
        for index, entry_ids in per_index.items():
            views = [self._entry(e) for e in entry_ids]
            traced = self._traces
            traces = [traced[e] for e in entry_ids if e in traced] if traced else None
            self._send(ensemble[index], entry_ids, [len(v) for v in views], b"".join(views), own_request, traces)

    def _send(self, bookie_id: str, entry_ids: Sequence[int] | IntArray, sizes: Sequence[int] | IntArray, data: bytes,
              own_request: bool = False, traces: list[AddTrace] | None = None) -> None:
        client = self.ctx.pool.cached(bookie_id)
        if client is None:
            self.on_bookie_failed(bookie_id)
            return
        client.register(self.ledger_id, self)
        client.send_add(self.ledger_id, self.master_key, entry_ids, sizes, data, own_request=own_request,
                        traces=traces)
        self.machine.on_sent(bookie_id, len(entry_ids), time.monotonic())

    # ---- events from bookies (client loop) ------------------------------------------------------
    def on_ack(self, bookie_id: str, ack: pb.AddAck) -> None:
        try:
            self._on_ack(bookie_id, ack)
        except Exception as exc:  # noqa: BLE001 - called by the bookie connection's reader: never escape
            self._guard("an add answer", exc)

    def _on_ack(self, bookie_id: str, ack: pb.AddAck) -> None:
        if ack.status == pb.EOK:
            if self._trace_ids:
                self._stamp_acked(bookie_id, ack.entry_ids)
            self._execute(self.machine.on_acks(bookie_id, ack.entry_ids, time.monotonic()))
            return
        level = logging.INFO if ack.status == pb.EFENCED else logging.WARNING
        log.log(level, "ledger %d: bookie %s answered %s", self.ledger_id, bookie_id, pb.StatusCode.Name(ack.status))
        self._execute(self.machine.on_errors(bookie_id, ack.entry_ids, ack.status, time.monotonic()))

    def _stamp_acked(self, bookie_id: str, entry_ids: Sequence[int]) -> None:
        """The traced entries among these (ascending) ids were acknowledged by `bookie_id` now."""
        if not entry_ids:
            return
        first, last = entry_ids[0], entry_ids[-1]
        ids = self._trace_ids
        contiguous = last - first + 1 == len(entry_ids)
        now = time.perf_counter_ns()
        for i in range(bisect.bisect_left(ids, first), len(ids)):
            entry_id = ids[i]
            if entry_id > last:
                break
            if contiguous or _contains(entry_ids, entry_id):
                self._traces[entry_id].acked.setdefault(bookie_id, now)

    def _finish_traces(self, last: int, completed: int) -> None:
        """The traced entries up to `last` completed at `completed` (ns: when their futures began to be set)."""
        ids = self._trace_ids
        done = bisect.bisect_right(ids, last)
        if not done:
            return
        finished = [self._traces.pop(entry_id) for entry_id in ids[:done]]
        del ids[:done]
        if self._slow_log is not None:
            self._slow_log.finish(finished, completed)

    def on_bookie_failed(self, bookie_id: str) -> None:
        try:
            self._on_bookie_failed(bookie_id)
        except Exception as exc:  # noqa: BLE001 - called by the bookie connection: never escape
            self._guard("a bookie failure", exc)

    def _on_bookie_failed(self, bookie_id: str) -> None:
        self._execute(self.machine.on_bookie_failed(bookie_id))

    def _execute(self, effects: Sequence[WriterEffect]) -> None:
        """Run the machine's effects, in order. The union is closed: an effect this does not know fails
        the type check, and at run time fails the writer (never a silent drop)."""
        for effect in effects:
            match effect:
                case CompleteAdds():
                    self._complete(effect)
                case Resend() | SendAdd():
                    self._route([(effect.entry_id, effect.indices)])
                case FindReplacements():
                    self._change_step(self._find_replacements())
                case StoreEnsembleChange():
                    self._change_step(self._store_change(effect))
                case FailAdds():
                    self._fail(effect.entry_ids, effect.error)
                case RetryReplacement():
                    self._retry_replacement()
                case SendLac():
                    self._send_explicit_lac(effect.last_add_confirmed)
                case SuspectBookie():
                    log.warning("ledger %d: bookie %s %s within %.1fs: replacing it", self.ledger_id,
                                effect.bookie_id, effect.reason, self.ctx.config.addEntryTimeoutSec)
                case GoingOnWithout():
                    log.warning("ledger %d: no bookie free to replace %s (%s); adds go on with the ack quorum "
                                "left, under-replicated until a bookie is free", self.ledger_id,
                                list(effect.bookie_ids), effect.error)
                case _:
                    assert_never(effect)

    def _complete(self, action: CompleteAdds) -> None:
        last = action.last_add_confirmed
        completed = time.perf_counter_ns() if self._trace_ids else 0
        self.lac_length = self._length_at(last)
        done = self._futures.complete_through(last)
        if self._trace_ids:
            self._finish_traces(last, completed)
        self._release_window(done)
        self.ctx.metrics.adds.inc(done)
        if not self._futures:
            self._idle.set()

    def _length_at(self, entry_id: int) -> int:
        """The cumulative length carried by entry_id, now acknowledged; forgets the batches before it."""
        sent = self._sent
        while sent and sent[0].last < entry_id:
            sent.popleft()
        if not sent or sent[0].first > entry_id:
            return self.lac_length                  # its adds were failed already (close timed out)
        batch = sent[0]
        length: int = _LENGTH.unpack_from(batch.data, int(batch.offsets[entry_id - batch.first]) + 24)[0]
        if batch.last == entry_id:
            sent.popleft()
        return length

    def _fail(self, entry_ids: Sequence[int], error: BKError) -> None:
        """Fail the adds of these entries (the pending ones: from the lowest on) and every later one: a
        bulk whose first entries are acknowledged but not its last fails whole, as its last add would."""
        if self.error is None:
            self.error = error
            log.warning("ledger %d: adds fail: %s", self.ledger_id, error)
        if not entry_ids:
            return
        lowest = min(entry_ids)
        failed = self._futures.fail_from(lowest, error)
        if self._trace_ids and self._trace_ids[-1] >= lowest:     # the failed adds' traces go
            keep = bisect.bisect_left(self._trace_ids, lowest)
            for entry_id in self._trace_ids[keep:]:
                self._traces.pop(entry_id, None)
            del self._trace_ids[keep:]
        self._release_window(failed)
        self.ctx.metrics.add_failures.inc(failed)
        if not self._futures:
            self._sent.clear()
            self._idle.set()

    # ---- ensemble change (R9): the machine decides each step, these run its I/O ----------------
    def _change_step(self, step: Coroutine[None, None, None]) -> None:
        """Run one step of the ensemble change (the machine starts the next only once this one answered)."""
        self._change_task = asyncio.get_running_loop().create_task(step)

    async def _find_replacements(self) -> None:
        """List the writable bookies and let the machine pick replacements with the placement policy."""
        try:
            try:
                writable = await asyncio.to_thread(self.ctx.store.writable_bookies)
            except BKError as exc:
                self._execute(self.machine.on_change_failed(exc, time.monotonic()))
                return
            self._execute(self.machine.on_writable_bookies(writable, self.ctx.placement.replace_bookie,
                                                           time.monotonic(), self._tls_rejection()))
        except Exception as exc:  # noqa: BLE001 - a task nobody awaits: the adds must not wait for ever
            self._guard("the ensemble change", exc)

    def _tls_rejection(self) -> BKError | None:
        """A TLS rejection that made a failed bookie unusable, if one did (the reason to report when no bookie
        is left to replace it)."""
        errors = (self.ctx.pool.tls_error(bookie_id) for bookie_id in sorted(self.machine.bad_bookies))
        return next((error for error in errors if error is not None), None)

    async def _store_change(self, change: StoreEnsembleChange) -> None:
        """CAS the machine's ensemble change, connect to the replacements, tell the machine."""
        try:
            ensemble, known, first, replacements = self.pending.ensemble, self.md, change.first_entry_id, change.chosen

            def transform(current: LedgerMetadata) -> LedgerMetadata | None:
                return self.machine.ensemble_change(current, known, first, replacements)

            try:
                md, version = await asyncio.to_thread(self.ctx.store.update_ledger, self.ledger_id, transform,
                                                      max_attempts=self.ctx.config.metadataMaxAttempts)
            except BKError as exc:
                self._execute(self.machine.on_change_failed(exc, time.monotonic()))
                return
            self.md, self.version = md, version
            self.ctx.metrics.ensemble_changes.inc()
            log.info("ledger %d: ensemble change from entry %d: %s -> %s", self.ledger_id, first,
                     [ensemble[i] for i in replacements], list(replacements.values()))
            await self._connect(tuple(replacements.values()))
            self._execute(self.machine.on_ensemble_changed(md.last_fragment.ensemble, first, time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - a task nobody awaits: the adds must not wait for ever
            self._guard("the ensemble change", exc)

    # ---- timers: add timeouts and explicit LAC ----------------------------------------------
    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            try:
                self._tick_once(time.monotonic())
            except Exception as exc:  # noqa: BLE001 - the timer must outlive a bug, and the adds settle
                self._guard("the writer's timer", exc)

    def _tick_once(self, now: float) -> None:
        self._unpark()              # a safety net: a freed slot or a failure unparks sooner
        if self.error is None:
            self._execute(self.machine.on_tick(now))

    def _retry_replacement(self) -> None:
        """Failed bookies left in the ensemble (none was free): list the writable ones for the machine."""
        if self._retry_task is None or self._retry_task.done():
            self._retry_task = asyncio.get_running_loop().create_task(self._retry_if_free())

    async def _retry_if_free(self) -> None:
        try:
            writable = await asyncio.to_thread(self.ctx.store.writable_bookies)
        except BKError as exc:
            log.debug("ledger %d: cannot list writable bookies: %s", self.ledger_id, exc)
            return
        try:
            self._execute(self.machine.on_free_bookies(writable))
        except Exception as exc:  # noqa: BLE001 - a task nobody awaits: the adds must not wait for ever
            self._guard("a replacement's retry", exc)

    def _send_explicit_lac(self, lac: int) -> None:
        """Tell the bookies the LAC of an idle writer, so tailing readers see the last entries."""
        body = package_lac(self.digest, self.ledger_id, lac)
        request = pb.WriteLacRequest(ledger_id=self.ledger_id, lac=lac, master_key=self.master_key, body=body)
        for bookie_id in self.pending.ensemble:
            client = self.ctx.pool.cached(bookie_id)
            if client is not None:
                asyncio.get_running_loop().create_task(_quiet_write_lac(client, request))

    # ---- close (R10) ------------------------------------------------------------------------
    async def close(self, timeout: float) -> LedgerMetadata:
        """Send the adds queued before the close (parked ones too: a close is no reason to drop them),
        wait for every add in flight (at most `timeout`: what the adds still pending then get is the
        machine's decision), then CAS the ledger CLOSED at the LAC (R10, the machine's `close_metadata`).
        Adds submitted from here on fail with LedgerClosedError."""
        with self._lock:
            items, self._incoming = self._incoming, _Incoming()
            marks, self._incoming_marks = self._incoming_marks, []
            bulk, self._bulk_queued = self._bulk_queued, False
            self._scheduled = self._parked = False
            self.closing = True
        if items and self.error is None:
            self._send_items(items, bulk, marks)
        elif items:
            self._fail_items(items, self._refusal())
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            drained = True
        except TimeoutError:
            drained = False
        self._execute(self.machine.on_close_waited(drained, time.monotonic()))
        while self._change_task is not None and not self._change_task.done():   # each step may start the next
            await asyncio.gather(self._change_task, return_exceptions=True)
        length = self.lac_length

        def close(current: LedgerMetadata) -> LedgerMetadata | None:
            return self.machine.close_metadata(current, length)

        try:
            md, version = await asyncio.to_thread(
                self.ctx.store.update_ledger, self.ledger_id, close, max_attempts=self.ctx.config.metadataMaxAttempts
            )
        finally:
            self.shutdown(LedgerClosedError(f"ledger {self.ledger_id} is closed; create a new ledger to add to"))
        self.md, self.version = md, version
        return md

    def shutdown(self, error: BKError) -> None:
        """Stop: timers, connections' handlers; adds still pending fail with `error` (or with the writer's
        own error, if it failed before)."""
        self.ctx.writers.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        if self._retry_task is not None:
            self._retry_task.cancel()
        for bookie_id in self.md.all_bookies():
            client = self.ctx.pool.cached(bookie_id)
            if client is not None:
                client.unregister(self.ledger_id)
        if self.error is None:
            self.error = error
        self._abandon(self.error)

    def _abandon(self, error: BKError) -> None:
        """Fail every add still queued or in flight: nothing will answer them now (a close gave up on them,
        or the client is closing). Callers blocked on the window wake and fail too."""
        with self._lock:
            items, self._incoming = self._incoming, _Incoming()
            self._incoming_marks = []
            self._bulk_queued = False
        self._fail_items(items, error)
        if self._futures:
            self._fail(self._futures.entry_ids(), error)


class _Incoming:
    """Adds queued by callers and not yet drained, in order: payloads (bytes, or a Bulk) and their futures,
    in two lists rather than a tuple per add (one object less per add for the garbage collector)."""

    __slots__ = ("payloads", "futures")

    def __init__(self) -> None:
        self.payloads: list[bytes | Bulk] = []
        self.futures: list[concurrent.futures.Future[int]] = []

    def __len__(self) -> int:
        return len(self.payloads)

    def append(self, payload: bytes | Bulk, future: concurrent.futures.Future[int]) -> None:
        self.payloads.append(payload)
        self.futures.append(future)

    def pairs(self) -> Iterator[tuple[bytes | Bulk, concurrent.futures.Future[int]]]:
        return zip(self.payloads, self.futures, strict=True)


class _SentBatch:
    """Packaged consecutive entries (a drain's single adds, or a chunk of a bulk), kept until acknowledged
    (for resends and the LAC length): one blob and the n + 1 offsets of its entries in it."""

    __slots__ = ("first", "last", "data", "offsets")

    def __init__(self, first: int, data: bytes, offsets: Offsets | list[int]):
        self.first = first
        self.last = first + len(offsets) - 2
        self.data = data
        self.offsets = offsets

    def view(self, entry_id: int) -> memoryview:
        i = entry_id - self.first
        return memoryview(self.data)[int(self.offsets[i]) : int(self.offsets[i + 1])]


def _contains(ascending: Sequence[int], value: int) -> bool:
    i = bisect.bisect_left(ascending, value)
    return i < len(ascending) and ascending[i] == value


def _bulk_slots(count: int, window: int) -> int:
    """Window slots a bulk of `count` entries takes: one per entry, at most half the window."""
    return min(count, max(1, window // 2))


def _offsets_of(sizes: list[int]) -> list[int]:
    return [0, *itertools.accumulate(sizes)]


async def _quiet_write_lac(client: object, request: pb.WriteLacRequest) -> None:
    try:
        await client.write_lac(request, timeout=5)  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - best effort: the next add carries the LAC anyway
        log.debug("explicit LAC to %s failed: %s", getattr(client, "bookie_id", "?"), exc)


def _sizes(offsets: Offsets | list[int]) -> list[int]:
    """Entry sizes from a batch's offsets (a list, or a bulk's numpy array)."""
    bounds = offsets.tolist() if hasattr(offsets, "tolist") else offsets
    return [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
