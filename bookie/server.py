"""The bookie's gRPC service: BookKeeper's v3 request processors over a grpc.aio server.

Adds arrive on a bidirectional stream, many entries per message; each batch is checked by the pure
decisions of `bookie.core.decisions`, journaled, and acknowledged from the journal's callback after
the fsync that covers it. Acks waiting on one stream are coalesced into one response message.
Reads, fencing reads, long polls on the LAC, explicit LAC and force-ledger are unary calls; range
reads stream batches of packaged entries (one buffer plus sizes); ReadRanges streams many ledgers' ranges
in shared batches (`bookie.ranges_read`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import AsyncIterator, Callable
from typing import assert_never

import grpc
import numpy as np
import numpy.typing as npt
from google.protobuf.message import Message

from bkledger.bookie import ranges_read, request_guard
from bkledger.bookie.add_request import AddBatchView
from bkledger.bookie.add_trace import AddTracer, BatchTrace
from bkledger.bookie.bookie import Bookie, EntryRewriteError, NotStoredError
from bkledger.bookie.config import BookieConfig
from bkledger.bookie.core import decisions, machine, request_checks
from bkledger.bookie.core.request_checks import Malformed
from bkledger.bookie.log_limit import LogLimit, left_out_note
from bkledger.bookie.metrics import NO_STATS, NoServerStats
from bkledger.bookie.storage import Batch, StorageError
from bkledger.proto import bookie_pb2 as pb
from bkledger.proto import bookie_pb2_grpc as pb_grpc
from bkledger.wire import codec as wire

log = logging.getLogger("bkledger.server")
CUT_OFF_LOG_INTERVAL_S = 10.0    # at most one line per this for add streams the client cut off
Answer = Callable[[int, str], None]     # the machine's reply token here: sends one answer (status, why)


class BookieService(pb_grpc.BookieServicer):
    def __init__(self, bookie: Bookie, bookie_id: str, loop: asyncio.AbstractEventLoop):
        self.bookie = bookie
        self.bookie_id = bookie_id
        self.loop = loop
        self.read_only = bookie.config.forceReadOnlyBookie
        self._lac: dict[int, int] = {}
        self._lac_waiters: dict[int, set[asyncio.Future[None]]] = {}   # long polls; each leaves when it ends
        self.max_entry_size = bookie.config.nettyMaxFrameSizeBytes
        self.max_read_batch_bytes = bookie.config.maxReadBatchBytes
        self.stats: NoServerStats = NO_STATS       # bookie.metrics.ServerStats when metrics are on
        self._cut_off_lines = LogLimit(CUT_OFF_LOG_INTERVAL_S)
        cfg = bookie.config
        self.tracer = AddTracer(cfg.addTraceSampleEvery, cfg.slowAddThresholdMs, cfg.slowAddLogSize)
        self.machine: machine.BookieMachine[Answer] = machine.BookieMachine(
            machine.AddLimits(self.max_entry_size, cfg.entryIdWindow, bookie.max_entry_id))
        bookie.on_checkpoint = self._checkpointed
        assert bookie.storage is not None
        for ledger_id in bookie.storage.ledgers():
            self._lac[ledger_id] = bookie.storage.max_lac(ledger_id)

    # ---- LAC known to this bookie, and long polls -------------------------------------------
    def _advance_lac(self, ledger_id: int, lac: int) -> None:
        if lac > self._lac.get(ledger_id, -1):
            self._lac[ledger_id] = lac
            for fut in self._lac_waiters.pop(ledger_id, []):
                if not fut.done():
                    fut.set_result(None)

    async def _wait_lac(self, ledger_id: int, previous_lac: int, timeout_ms: int) -> None:
        timeout = min(timeout_ms, self.bookie.config.longPollMaxTimeoutMs) / 1000.0
        deadline = self.loop.time() + timeout
        while not decisions.long_poll_ready(self._lac.get(ledger_id, -1), previous_lac):
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                return
            fut: asyncio.Future[None] = self.loop.create_future()
            self._lac_waiters.setdefault(ledger_id, set()).add(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                return
            finally:
                self._forget_waiter(ledger_id, fut)

    def _forget_waiter(self, ledger_id: int, fut: asyncio.Future[None]) -> None:
        """A long poll ended (answered, timed out or cancelled): its waiter goes, and the ledger's entry
        with its last one, also for a ledger this bookie never heard of (no add would ever clear it)."""
        waiters = self._lac_waiters.get(ledger_id)
        if waiters is not None:
            waiters.discard(fut)
            if not waiters:
                del self._lac_waiters[ledger_id]

    @property
    def long_poll_waiters(self) -> int:
        """Long polls waiting now (each holds a future until its timeout at most)."""
        return sum(len(w) for w in self._lac_waiters.values())

    # ---- adds -----------------------------------------------------------------------------
    async def AddStream(  # requests parsed by bookie.request_guard.parse_add_stream
        self, request_iterator: AsyncIterator[list[AddBatchView] | Malformed], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """Acks go out as serialized AddResponses (`add_response_bytes`), as many as are ready in each.
        A message that does not parse ends the stream with INVALID_ARGUMENT, once the batches before it
        are answered; nothing after it is read."""
        peer = context.peer()
        out: asyncio.Queue[bytes | str | None] = asyncio.Queue()     # None: the requests ended; str: refused
        pump = asyncio.create_task(self._pump_adds(request_iterator, out, peer))
        try:
            while True:
                item = await out.get()
                if item is None:
                    if not context.peer():    # the call is gone: gRPC ended it, not the client's close
                        self._cut_off(peer)
                    break
                if isinstance(item, str):
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, item)
                    return
                acks: list[bytes] = [item]
                while not out.empty():
                    nxt = out.get_nowait()
                    if not isinstance(nxt, bytes):
                        out.put_nowait(nxt)     # the end: it came after every ack (see _pump_adds)
                        break
                    acks.append(nxt)
                yield add_response_bytes(acks)
        except asyncio.CancelledError:
            self._cut_off(peer)
            raise
        finally:
            pump.cancel()

    def _cut_off(self, peer: str) -> None:
        """Logged at most once per CUT_OFF_LOG_INTERVAL_S: a client may open and cancel streams at will (one
        opened 50,000 on one connection and cancelled them: as many lines)."""
        left_out = self._cut_off_lines.allow()
        if left_out is not None:
            log.info("add stream from %s cut off: the client went away, or sent a message over the %d-byte "
                     "limit (refused by gRPC with RESOURCE_EXHAUSTED)%s", peer, self.max_message_bytes,
                     left_out_note(left_out))

    @property
    def max_message_bytes(self) -> int:
        return request_checks.max_message_bytes(self.bookie.config.nettyMaxFrameSizeBytes)

    async def _pump_adds(self, requests: AsyncIterator[list[AddBatchView] | Malformed],
                         out: asyncio.Queue[bytes | str | None], peer: str) -> None:
        outstanding = [0]
        drained = asyncio.Event()
        drained.set()

        def reply(ack: bytes) -> None:
            out.put_nowait(ack)
            outstanding[0] -= 1
            if outstanding[0] == 0:
                drained.set()

        end: str | None = None
        try:
            async for request in requests:
                if isinstance(request, Malformed):
                    log.warning("add stream from %s ended with INVALID_ARGUMENT: %s", peer, request.why)
                    end = f"{request.why}; the stream is closed, nothing sent after it was read"
                    break
                for batch in request:
                    outstanding[0] += 1
                    drained.clear()
                    self.submit_batch(batch, reply, peer)
            await drained.wait()
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass
        finally:
            out.put_nowait(end)

    def submit_batch(self, batch: AddBatchView, reply: Callable[[bytes], None], peer: str = "") -> None:
        """Decide the batch (`machine.on_add`) and run what it says: store and journal it, or answer now."""
        ledger_id, entry_ids = batch.ledger_id, batch.entry_ids
        started = self.stats.add_started()
        trace = self.tracer.start(ledger_id, entry_ids)     # where the batch's time goes (bookie.add_trace)

        def answer(status: int, why: str = "") -> None:
            self.stats.add_done(started, status == pb.EOK, len(entry_ids), len(batch.data))
            if trace is not None and status == pb.EOK:
                self.tracer.finish(trace)
            if status == pb.EBADREQ:
                log.warning("add to ledger %d from %s refused with EBADREQ: %s", ledger_id, peer or "?", why)
            elif status != pb.EOK:
                log.debug("add to ledger %d refused with %s: %s", ledger_id, pb.StatusCode.Name(status), why)
            reply(add_ack_bytes(ledger_id, status, entry_ids))

        self._note_journal_failure()
        storage = self.bookie.storage
        assert storage is not None
        known_last = max(storage.last_entry_id(ledger_id), self._lac.get(ledger_id, -1))
        effects = self.machine.on_add(answer, ledger_id, entry_ids, batch.sizes, batch.data,
                                      master_key=batch.master_key, view=self.bookie.view(ledger_id),
                                      known_last=known_last, recovery_add=batch.recovery_add,
                                      high_priority=batch.high_priority, read_only=self.read_only)
        for effect in effects:
            if isinstance(effect, machine.StoreAdd):
                self._store(batch, effect, trace)
            else:
                self._run(effect)

    def _store(self, batch: AddBatchView, effect: machine.StoreAdd[Answer], trace: BatchTrace | None) -> None:
        """Run a StoreAdd: the batch goes to ledger storage and the journal as sequence `effect.seq`."""
        if trace is not None:
            trace.decided = time.perf_counter_ns()
        self.bookie.add_batch(batch.ledger_id, batch.master_key, effect.record_key, batch.entry_ids, batch.sizes,
                              batch.data, sync=not (batch.write_flags & pb.DEFERRED_SYNC),
                              done=self._journal_done(effect.seq, trace),
                              max_lac=effect.max_lac, trace=trace, check_rewrites=effect.check_rewrites)

    def _journaled(self, seq: int, err: BaseException | None, trace: BatchTrace | None = None) -> None:
        """The outcome of journal sequence `seq`, on the loop: the machine says which replies it releases.
        `trace`: the add batch's, stamped as its outcome reaches the loop."""
        if trace is not None:
            trace.on_loop = time.perf_counter_ns()
        if err is None:
            effects = self.machine.on_synced(seq)
        elif isinstance(err, EntryRewriteError):
            effects = self.machine.on_not_journaled(seq, pb.EBADREQ, str(err))
        elif isinstance(err, NotStoredError):
            effects = self.machine.on_not_journaled(seq, pb.EIO, str(err))
        else:
            log.error("journal sequence %d failed: %s; everything waiting is answered EIO", seq, err)
            effects = self.machine.on_sync_failed(seq, f"journal failed: {err}")
        self._run_all(effects)

    def _journal_done(self, seq: int, trace: BatchTrace | None = None) -> Callable[[BaseException | None], None]:
        """The journal's callback for sequence `seq` (from its thread): `_journaled` on the loop."""
        def done(err: BaseException | None) -> None:
            self.loop.call_soon_threadsafe(self._journaled, seq, err, trace)
        return done

    def _note_journal_failure(self) -> None:
        """A journal that failed outside the machine's sequences (a force or an explicit LAC) fails it too."""
        if self.bookie.journal_failed and not self.machine.failed:
            self._run_all(self.machine.on_sync_failed(0, "journal failed"))

    def _checkpointed(self, flushed: bool) -> None:
        """From the checkpoint thread: tell the machine on the loop whether the storage flush worked."""
        with contextlib.suppress(RuntimeError):     # the loop is closed: the bookie is stopping
            self.loop.call_soon_threadsafe(self._flush_outcome, flushed)

    def _flush_outcome(self, flushed: bool) -> None:
        self._run_all(self.machine.on_flushed() if flushed else self.machine.on_flush_failed())

    def _run_all(self, effects: list[machine.Effect[Answer]]) -> None:
        for effect in effects:
            self._run(effect)

    def _run(self, effect: machine.Effect[Answer]) -> None:
        """Run one effect of the machine (a StoreAdd or JournalLac only comes with its request's data, and is
        run where the request is decided: `submit_batch`, `WriteLac`)."""
        match effect:
            case machine.Reply(token=token, status=status, reason=reason):
                token(status, reason)
            case machine.AdvanceLac(ledger_id=ledger_id, lac=lac):
                self._advance_lac(ledger_id, lac)
            case machine.MarkFenced(ledger_id=ledger_id, master_key=key, record_key=record_key):
                self.bookie.mark_fenced(ledger_id, key, record_key)
                log.info("ledger %d fenced", ledger_id)
            case machine.JournalFence(seq=seq, ledger_id=ledger_id, master_key=key, record_key=record_key):
                self.bookie.journal_fence(ledger_id, key, record_key, self._journal_done(seq))
            case machine.JournalBarrier(seq=seq):
                self.bookie.force_ledger(self._journal_done(seq))
            case machine.ForgetFence(ledger_id=ledger_id):
                self.bookie.forget_fence(ledger_id)
            case machine.StoreAdd() | machine.JournalLac():
                raise AssertionError(f"{effect} is run with its request, where the request is decided")
            case _:
                assert_never(effect)

    # ---- journaled operations awaited from the loop -----------------------------------------
    def _journal_future(self) -> tuple[asyncio.Future[BaseException | None], Callable[[BaseException | None], None]]:
        fut: asyncio.Future[BaseException | None] = self.loop.create_future()

        def settle(err: BaseException | None) -> None:
            if not fut.done():
                fut.set_result(err)

        def done(err: BaseException | None) -> None:
            self.loop.call_soon_threadsafe(settle, err)

        return fut, done

    # ---- reads ----------------------------------------------------------------------------
    async def Read(self, request: pb.ReadRequest, context: grpc.aio.ServicerContext) -> pb.ReadResponse:
        started = self.stats.read_started()
        if request.fence or request.has_previous_lac:
            self.stats.request("fence" if request.fence else "long_poll")
        response = await self._read(request)
        self.stats.read_done(started, response.status == pb.EOK, 1 if response.body else 0, len(response.body),
                             timed=not request.has_previous_lac)
        return response

    async def _read(self, request: pb.ReadRequest) -> pb.ReadResponse:
        ledger_id = request.ledger_id
        if request.fence:
            status = await self._fence(ledger_id, request.master_key)
            if status != pb.EOK:
                return pb.ReadResponse(status=status, ledger_id=ledger_id, entry_id=request.entry_id)  # type: ignore[arg-type]
        if request.has_previous_lac:
            await self._wait_lac(ledger_id, request.previous_lac, request.timeout_ms)
            if request.piggyback_entry and self._lac.get(ledger_id, -1) > request.previous_lac:
                return self._read_one(ledger_id, request.previous_lac + 1)
            return self._read_one(ledger_id, -1 if request.entry_id < 0 else request.entry_id)
        return self._read_one(ledger_id, request.entry_id)

    async def _fence(self, ledger_id: int, master_key: bytes) -> int:
        """R15: answer only once the fence, and every add journaled before it, is durable and applied,
        also when the ledger was already fenced in memory (the machine then asks for a journal barrier)."""
        fut: asyncio.Future[int] = self.loop.create_future()

        def settle(status: int, _why: str = "") -> None:
            if not fut.done():
                fut.set_result(status)

        self._note_journal_failure()
        self._run_all(self.machine.on_fence(settle, ledger_id, master_key, self.bookie.view(ledger_id)))
        status = await fut
        if status == pb.EIO:
            log.error("fence of ledger %d not durable: %s", ledger_id, self.machine.failed)
        return status

    def _read_one(self, ledger_id: int, entry_id: int) -> pb.ReadResponse:
        """Read one entry; entry_id -1 reads the last entry held (a known but empty ledger: EOK, -1)."""
        storage = self.bookie.storage
        assert storage is not None
        max_lac = self._lac.get(ledger_id, -1)
        known = storage.has_ledger(ledger_id) or self.bookie.view(ledger_id) is not None
        try:
            if entry_id < 0:
                entry_id = storage.last_entry_id(ledger_id)
                if entry_id < 0:
                    empty = pb.EOK if known else pb.ENOLEDGER
                    return pb.ReadResponse(status=empty, ledger_id=ledger_id, entry_id=-1, max_lac=max_lac)
            body = storage.read_entry(ledger_id, entry_id)
        except (StorageError, OSError) as exc:
            log.error("read of ledger %d entry %d failed: %s", ledger_id, entry_id, exc)
            return pb.ReadResponse(status=pb.EIO, ledger_id=ledger_id, entry_id=entry_id, max_lac=max_lac)
        status = decisions.decide_read(body is not None, known)
        return pb.ReadResponse(
            status=status,  # type: ignore[arg-type]  # a plain int from the pure decisions
            ledger_id=ledger_id,
            entry_id=entry_id,
            body=body or b"",
            max_lac=max_lac,
        )

    async def ReadRange(
        self, request: pb.ReadRangeRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReadRangeBatch | bytes]:
        """Batches of held entries, serialized here (`range_batch_bytes`); a status other than EOK ends it."""
        started, entries, size = self.stats.read_started(), 0, 0
        async for batch in self._read_range(request):
            if isinstance(batch, pb.ReadRangeBatch):      # an error (or ENOLEDGER): the last message
                yield batch
                self.stats.read_done(started, False, entries, size)
                return
            entry_ids, sizes, data = batch
            entries, size = entries + len(entry_ids), size + len(data)
            yield range_batch_bytes(request.ledger_id, entry_ids, sizes, data)
        self.stats.read_done(started, True, entries, size)

    async def _read_range(self, request: pb.ReadRangeRequest
                          ) -> AsyncIterator[pb.ReadRangeBatch | Batch]:
        """(entry ids, sizes, data) of each batch of held entries, or the status message that ends the stream."""
        storage = self.bookie.storage
        assert storage is not None
        ledger_id = request.ledger_id
        if request.fence:
            self.stats.request("fence")
            status = await self._fence(ledger_id, request.master_key)
            if status != pb.EOK:
                yield pb.ReadRangeBatch(status=status, ledger_id=ledger_id)  # type: ignore[arg-type]
                return
        if not storage.has_ledger(ledger_id):
            # known (fenced, or adds still in the journal) but holding nothing: an empty range
            if self.bookie.view(ledger_id) is None:
                yield pb.ReadRangeBatch(status=pb.ENOLEDGER, ledger_id=ledger_id)
            return
        max_bytes = request_checks.read_batch_bytes(request.max_batch_bytes, self.max_read_batch_bytes, 1 << 20)
        max_entries = request.max_batch_entries or 10000
        residues = (request.residue_modulus, request.residue_mask)
        batches = storage.read_range(ledger_id, request.first_entry_id, request.last_entry_id, max_bytes, max_entries,
                                     residues)
        while True:
            try:
                item = await asyncio.to_thread(next, batches, None)
            except (StorageError, OSError) as exc:
                log.error("range read of ledger %d failed: %s", ledger_id, exc)
                yield pb.ReadRangeBatch(status=pb.EIO, ledger_id=ledger_id)
                return
            if item is None:
                return
            yield item

    async def ReadRanges(
        self, request: pb.ReadRangesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ReadRangeBatch | bytes]:
        """Many ledgers' ranges (`bookie.ranges_read`): batches of their entries, each tagged with its
        ledger, and a status batch for each range that failed; the stream goes on after one."""
        storage = self.bookie.storage
        assert storage is not None
        started, entries, size, ok = self.stats.read_started(), 0, 0, True
        items = ranges_read.answer(storage, lambda ledger_id: self.bookie.view(ledger_id) is not None,
                                   ranges_read.ranges_of(request),
                                   request_checks.read_batch_bytes(request.max_batch_bytes, self.max_read_batch_bytes,
                                                                   ranges_read.DEFAULT_BATCH_BYTES))
        while (item := await asyncio.to_thread(next, items, None)) is not None:
            if isinstance(item, ranges_read.Failed):
                ok = ok and item.status != pb.EIO
                yield pb.ReadRangeBatch(status=item.status, ledger_id=item.ledger_id)  # type: ignore[arg-type]
                continue
            entries, size = entries + len(item.entry_ids), size + len(item.data)
            yield ranges_batch_bytes(item)
        self.stats.read_done(started, ok, entries, size)

    async def ReadLac(self, request: pb.ReadLacRequest, context: grpc.aio.ServicerContext) -> pb.ReadLacResponse:
        storage = self.bookie.storage
        assert storage is not None
        ledger_id = request.ledger_id
        if not storage.has_ledger(ledger_id):
            return pb.ReadLacResponse(status=pb.ENOLEDGER, ledger_id=ledger_id)
        try:
            last = storage.last_entry_id(ledger_id)
            body = storage.read_entry(ledger_id, last) if last >= 0 else None
        except (StorageError, OSError):
            return pb.ReadLacResponse(status=pb.EIO, ledger_id=ledger_id)
        return pb.ReadLacResponse(
            status=pb.EOK,
            ledger_id=ledger_id,
            lac_body=storage.explicit_lac(ledger_id) or b"",
            last_entry_body=body or b"",
        )

    async def WriteLac(self, request: pb.WriteLacRequest, context: grpc.aio.ServicerContext) -> pb.WriteLacResponse:
        ledger_id = request.ledger_id
        self.stats.request("write_lac")
        fut: asyncio.Future[int] = self.loop.create_future()

        def settle(status: int, _why: str = "") -> None:
            if not fut.done():
                fut.set_result(status)

        self._note_journal_failure()
        for effect in self.machine.on_write_lac(settle, ledger_id, request.master_key, self.bookie.view(ledger_id),
                                                request.lac):
            if isinstance(effect, machine.JournalLac):
                self.bookie.write_explicit_lac(ledger_id, request.body, self._journal_done(effect.seq))
            else:
                self._run(effect)
        status = await fut
        return pb.WriteLacResponse(status=status, ledger_id=ledger_id)  # type: ignore[arg-type]

    async def ForceLedger(
        self, request: pb.ForceLedgerRequest, context: grpc.aio.ServicerContext
    ) -> pb.ForceLedgerResponse:
        self.stats.request("force_ledger")
        fut, done = self._journal_future()
        self.bookie.force_ledger(done)
        status = pb.EIO if await fut is not None else pb.EOK
        return pb.ForceLedgerResponse(status=status, ledger_id=request.ledger_id)

    async def GetBookieInfo(
        self, request: pb.GetBookieInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetBookieInfoResponse:
        usage = shutil.disk_usage(self.bookie.config.ledger_dirs[0])
        return pb.GetBookieInfoResponse(
            status=pb.EOK,
            total_disk_capacity=usage.total,
            free_disk_space=usage.free,
            bookie_id=self.bookie_id,
            read_only=self.read_only,
        )

    async def GetListOfEntries(
        self, request: pb.GetListOfEntriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetListOfEntriesResponse:
        """The entries held of a ledger: an index scan, on a thread (never on the loop: R26), over the data
        of the index file only (`LedgerStorage.entry_ids` skips its holes)."""
        storage = self.bookie.storage
        assert storage is not None
        if not storage.has_ledger(request.ledger_id):
            return pb.GetListOfEntriesResponse(status=pb.ENOLEDGER, ledger_id=request.ledger_id)
        try:
            entry_ids = await asyncio.to_thread(storage.entry_ids, request.ledger_id)
        except (StorageError, OSError) as exc:
            log.error("listing the entries of ledger %d failed: %s", request.ledger_id, exc)
            return pb.GetListOfEntriesResponse(status=pb.EIO, ledger_id=request.ledger_id)
        return pb.GetListOfEntriesResponse(status=pb.EOK, ledger_id=request.ledger_id, entry_ids=entry_ids)


GRPC_OPTIONS = [
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.so_reuseport", 0),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5000),
    ("grpc.http2.max_ping_strikes", 0),
]


def grpc_options(config: BookieConfig, max_connections: int) -> list[tuple[str, int]]:
    """GRPC_OPTIONS, the largest message received and the most connections open at once.
    The message limit follows nettyMaxFrameSizeBytes (plus the batch overhead,
    `request_checks.max_message_bytes`): a larger one is refused by gRPC with RESOURCE_EXHAUSTED before it
    is buffered (it was 256 MiB: four 200 MB adds took a bookie to 1.6 GB). Past `max_connections`
    (bookiePortMaxConnections) gRPC closes a new connection as soon as it is accepted, before any byte:
    unbounded, a client opening connections at will took every descriptor of the process."""
    limit = request_checks.max_message_bytes(config.nettyMaxFrameSizeBytes)
    return [("grpc.max_receive_message_length", limit), ("grpc.max_allowed_incoming_connections", max_connections),
            *GRPC_OPTIONS]


def range_batch_bytes(ledger_id: int, entry_ids: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64],
                      data: bytes | bytearray) -> bytes:
    """A serialized ReadRangeBatch (EOK) of these entries, written by hand (`wire.codec`) as
    protobuf writes it, without a Python int per entry id and size or the copies of `data` into and out
    of a message (15-20% of a bookie's GIL time while serving a range read)."""
    head = b"".join((wire.varint_field(RANGE_LEDGER_ID, ledger_id), wire.packed_field(RANGE_ENTRY_IDS, entry_ids),
                     wire.packed_field(RANGE_SIZES, sizes)))
    return b"".join((head, wire.field_prefix(RANGE_DATA, len(data)), data)) if data else head


def ranges_batch_bytes(packed: ranges_read.Packed) -> bytes:
    """A serialized ReadRangeBatch (EOK) of a ReadRanges answer: range_batch_bytes with each entry's ledger."""
    data = wire.field_prefix(RANGE_DATA, len(packed.data)) if packed.data else b""
    return b"".join((wire.packed_field(RANGE_ENTRY_IDS, packed.entry_ids), wire.packed_field(RANGE_SIZES, packed.sizes),
                     data, packed.data, wire.packed_field(RANGE_LEDGER_IDS, packed.ledger_ids)))


RANGE_LEDGER_ID, RANGE_ENTRY_IDS, RANGE_SIZES, RANGE_DATA, RANGE_LEDGER_IDS = 2, 3, 4, 5, 6  # ReadRangeBatch's


def add_ack_bytes(ledger_id: int, status: int, entry_ids: npt.NDArray[np.int64]) -> bytes:
    """A serialized AddAck, written by hand as protobuf writes it: a 4 MiB bulk chunk's thousands of entry
    ids go out as packed varints in one native call, not as a Python int each in a repeated field (that
    took 9% of a bookie's event-loop time in a Spark append)."""
    return b"".join((wire.varint_field(ACK_LEDGER_ID, ledger_id), wire.varint_field(ACK_STATUS, status),
                     wire.packed_field(ACK_ENTRY_IDS, entry_ids)))


def add_response_bytes(acks: list[bytes]) -> bytes:
    """A serialized AddResponse of serialized AddAcks (its txn_id, unused, left at 0)."""
    return b"".join(wire.field_prefix(RESPONSE_ACKS, len(ack)) + ack for ack in acks)


ACK_LEDGER_ID, ACK_STATUS, ACK_ENTRY_IDS, RESPONSE_ACKS = 1, 2, 3, 2    # AddAck's and AddResponse's field numbers


def _serialize(message: Message | bytes) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


def add_to_server(service: BookieService, server: grpc.aio.Server) -> None:
    """Register the service as the generated code does, except that AddStream's requests are parsed by
    `bookie.add_request` (through `bookie.request_guard`), its responses are serialized already
    (`add_response_bytes`), ReadRange's and ReadRanges' responses may be (`range_batch_bytes`,
    `ranges_batch_bytes`), and every other request passes `bookie.request_guard` first."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}

    class Capture:
        def add_generic_rpc_handlers(self, _: object) -> None:
            pass

        def add_registered_method_handlers(self, _: str, found: dict[str, grpc.RpcMethodHandler]) -> None:
            handlers.update(found)

    pb_grpc.add_BookieServicer_to_server(service, Capture())
    handlers["ReadRange"] = handlers["ReadRange"]._replace(response_serializer=_serialize)
    handlers["ReadRanges"] = handlers["ReadRanges"]._replace(response_serializer=_serialize)
    handlers["AddStream"] = handlers["AddStream"]._replace(request_deserializer=request_guard.parse_add_stream,
                                                           response_serializer=_serialize)
    request_guard.guard(handlers, service.max_message_bytes)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)


SERVICE_NAME = "bkledger.v1.Bookie"
