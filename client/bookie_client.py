"""One client connection to one bookie: a long-lived add stream plus unary and streaming reads.

Mirrors BookKeeper's PerChannelBookieClient. Adds queued on the event loop are coalesced into one
AddRequest per write (many ledgers, many entries per message; the batches of one ledger merged into
one); acknowledgements come back batched and are handed to the handler registered for their ledger.
With `max_requests_in_flight` set, at most that many AddRequests are unanswered on the stream: adds
queued meanwhile wait and leave together once an answer frees a slot (Nagle's rule, like a Netty
channel's write-buffer watermarks). A bookie busy with an fsync would group them anyway; this way
they cost one message instead of one each, which is what keeps latency low when adds trickle in.
With `pipeline_min_bytes` set, a second request (up to that bound) leaves only while the unanswered
ones carry at least that many bytes: under light load one request at a time, each carrying everything
that came during the last round trip (fewer requests, less CPU on two small cores, half the p99 at 20%
of peak), and under heavy load a pipeline, so that a bookie never idles between two requests.
A chunk of a bulk is a request of its own that nothing joins, so waiting gains it nothing: chunks leave
while fewer than `max_bulk_bytes_in_flight` bytes are unanswered (with two requests of 0.5 MiB in
flight, each bookie's journal committed one request per fsync and the bulk loop idled between them).
The add stream is gRPC's AddStream, or the same messages on the bookie's add port when its registration
names one (client.add_port: plain TCP, about half the round trip). An add port stream that ends before
the bookie answered anything on it (a bookie at addStreamPortMaxConnections refuses a connection before
reading it) goes on over gRPC's AddStream: the requests written to it go again, first, to the same
bookie. When a stream breaks otherwise, every registered handler hears `on_bookie_failed`, so the
ledgers can treat what they had in flight on this bookie as failed (R9). Runs on the client's event
loop; not thread-safe by itself.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import grpc

from bkledger.client.add_port import AddPortCall, AddPortError
from bkledger.client.add_trace import AddTrace, stamp_sent
from bkledger.client.errors import BookieTlsError, BookieUnavailableError
from bkledger.client.tls import TlsSettings, rejection
from bkledger.proto import bookie_pb2 as pb
from bkledger.proto import bookie_pb2_grpc as pb_grpc
from bkledger.wire import codec as wire

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from bkledger.wire.range_batch import RangeBatchView

    IntArray = npt.NDArray[np.int64]

log = logging.getLogger("bkledger.client.bookie")

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_RESPONSE_BYTES),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 10000),
    ("grpc.enable_retries", 0),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.use_local_subchannel_pool", 1),        # a fresh channel must not inherit an old one's backoff
    ("grpc.initial_reconnect_backoff_ms", 100),   # (min_reconnect_backoff would also cap connect time)
    ("grpc.max_reconnect_backoff_ms", 2000),
]
ADD_PORT_CONNECT_TIMEOUT_S = 10.0
MAX_REQUEST_BYTES = 4 * 1024 * 1024   # payload bytes of one AddRequest; a bookie takes messages of at least
                                      # 1.5 times this (bookie.core.request_checks.max_message_bytes)


class AckHandler(Protocol):
    def on_ack(self, bookie_id: str, ack: pb.AddAck) -> None: ...

    def on_bookie_failed(self, bookie_id: str) -> None: ...


_BatchKey = tuple[int, bytes, bool, bool, int]   # ledger id, master key, recovery add, high priority, flags


class _Batch:
    """One ledger's adds queued for the next AddRequest: merged until the request is written. A request of
    its own (a bulk's chunk) keeps the ids and sizes it was given, numpy arrays then, which are encoded
    without a Python int per entry."""

    __slots__ = ("entry_ids", "sizes", "chunks")

    def __init__(self) -> None:
        self.entry_ids: list[int] | IntArray = []
        self.sizes: list[int] | IntArray = []
        self.chunks: list[bytes | memoryview] = []

    def add(self, entry_ids: Sequence[int] | IntArray, sizes: Sequence[int] | IntArray, data: bytes | memoryview
            ) -> None:
        if not self.chunks and not isinstance(entry_ids, range | list | tuple):   # arrays, kept as they are
            self.entry_ids, self.sizes = entry_ids, sizes          # type: ignore[assignment]
        else:
            ids = self.entry_ids if isinstance(self.entry_ids, list) else self.entry_ids.tolist()
            szs = self.sizes if isinstance(self.sizes, list) else self.sizes.tolist()
            ids.extend(entry_ids)
            szs.extend(sizes)
            self.entry_ids, self.sizes = ids, szs
        self.chunks.append(data)

    def head(self, key: _BatchKey) -> bytes:
        """The AddBatch's fields but its data, serialized as protobuf would (in field order)."""
        ledger_id, master_key, recovery_add, high_priority, write_flags = key
        if isinstance(self.entry_ids, list):
            return pb.AddBatch(ledger_id=ledger_id, master_key=master_key, recovery_add=recovery_add,
                               high_priority=high_priority, write_flags=write_flags, entry_ids=self.entry_ids,
                               sizes=self.sizes).SerializeToString()
        flags = pb.AddBatch(ledger_id=ledger_id, master_key=master_key, recovery_add=recovery_add,
                            high_priority=high_priority, write_flags=write_flags).SerializeToString()
        return flags + wire.packed_field(ADD_BATCH_ENTRY_IDS, self.entry_ids) + wire.packed_field(
            ADD_BATCH_SIZES, self.sizes)  # type: ignore[arg-type]

    def data(self) -> bytes:
        return bytes(self.chunks[0]) if len(self.chunks) == 1 else b"".join(self.chunks)


class _Queued:
    """An AddRequest being gathered: its batches by ledger (and flags), and its payload bytes."""

    __slots__ = ("batches", "nbytes", "sealed", "traces")

    def __init__(self) -> None:
        self.batches: dict[_BatchKey, _Batch] = {}
        self.nbytes = 0
        self.sealed = False         # takes no more batches (it holds a chunk sent as its own request)
        self.traces: list[AddTrace] | None = None    # sampled adds it carries (client.add_trace)

    def to_proto(self) -> pb.AddRequest:
        return pb.AddRequest.FromString(self.encode())

    def encode(self, frame_head: Callable[[int], bytes] | None = None) -> bytes:
        """The serialized AddRequest, every payload copied once, by the final join (`wire.codec`):
        each AddBatch is its small fields serialized by protobuf followed by the data field. With
        `frame_head`, `frame_head(size of the AddRequest)` comes first in the same join (the add port's
        frame header), so framing the request costs no second copy of its payload."""
        parts: list[bytes | memoryview] = [b""]
        for key, batch in self.batches.items():
            head = batch.head(key)
            size = sum(map(len, batch.chunks))
            data_prefix = wire.field_prefix(ADD_BATCH_DATA, size)
            parts += [wire.field_prefix(ADD_REQUEST_BATCHES, len(head) + len(data_prefix) + size), head, data_prefix]
            parts += batch.chunks
        if frame_head is not None:
            parts[0] = frame_head(sum(map(len, parts)))
        return b"".join(parts)


ADD_REQUEST_BATCHES = 2     # AddRequest.batches
ADD_BATCH_ENTRY_IDS = 6     # AddBatch.entry_ids (packed)
ADD_BATCH_SIZES = 7         # AddBatch.sizes (packed)
ADD_BATCH_DATA = 8          # AddBatch.data


class BookieClient:
    def __init__(self, bookie_id: str, address: str, max_requests_in_flight: int = 0,
                 credentials: grpc.ChannelCredentials | None = None, tls: TlsSettings | None = None,
                 max_bulk_bytes_in_flight: int = 0, pipeline_min_bytes: int = 0, add_port: int = 0):
        """`max_requests_in_flight`: AddRequests unanswered on the stream before adds wait (0: no bound).
        `pipeline_min_bytes`: unanswered bytes below which one unanswered request is already the bound (0:
        never; the client setting addPipelineMinBytes).
        `credentials`: TLS channel credentials (client.tls; None: plaintext); `tls` explains rejections.
        `max_bulk_bytes_in_flight`: unanswered bytes up to which a bulk's chunk leaves past that bound (0: it
        obeys the bound; the client setting maxAddBulkBytesInFlight).
        `add_port`: the bookie's add port (client.add_port), where the adds go instead of gRPC's AddStream
        (0: AddStream)."""
        self.bookie_id = bookie_id
        self.address = address
        self.add_port = add_port
        self.tls = tls or TlsSettings()
        self.tls_error: BookieTlsError | None = None      # the TLS rejection that broke this connection
        self.channel = (grpc.aio.secure_channel(address, credentials, options=CHANNEL_OPTIONS) if credentials
                        else grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS))
        self.stub = pb_grpc.BookieStub(self.channel)
        self.add_stream = self.channel.stream_stream(   # AddStream taking requests already serialized
            "/bkledger.v1.Bookie/AddStream", request_serializer=None,
            response_deserializer=pb.AddResponse.FromString)
        self.range_views = self.channel.unary_stream(   # ReadRange whose batches are parsed without copies
            "/bkledger.v1.Bookie/ReadRange", request_serializer=pb.ReadRangeRequest.SerializeToString,
            response_deserializer=_parse_range_batch)
        self.ranges_views = self.channel.unary_stream(  # ReadRanges: many ledgers' ranges, parsed the same way
            "/bkledger.v1.Bookie/ReadRanges", request_serializer=pb.ReadRangesRequest.SerializeToString,
            response_deserializer=_parse_range_batch)
        self._handlers: dict[int, AckHandler] = {}
        self._queued: collections.deque[_Queued] = collections.deque()
        self._limit = max_requests_in_flight
        self._bulk_limit = max_bulk_bytes_in_flight
        self._pipeline_min_bytes = pipeline_min_bytes
        self._in_flight: collections.deque[tuple[int, int]] = collections.deque()   # (batches, bytes) of each
        self._in_flight_bytes = 0                                                    # unanswered request
        self._answered = 0                   # acks received but not yet matched to a whole request
        self._wakeup = asyncio.Event()
        self._stream_task: asyncio.Task[None] | None = None
        self._on_free: dict[Callable[[], None], None] = {}   # called once when a request slot frees (or it fails)
        self._closed = False
        self.failed = False

    # ---- handlers -------------------------------------------------------------------------
    def register(self, ledger_id: int, handler: AckHandler) -> None:
        self._handlers[ledger_id] = handler

    def unregister(self, ledger_id: int) -> None:
        self._handlers.pop(ledger_id, None)

    # ---- adds -----------------------------------------------------------------------------
    @property
    def saturated(self) -> bool:
        """Would a single add queued now wait for an answer?"""
        return not self.failed and self._at_bound()

    def _at_bound(self) -> bool:
        """Are as many requests unanswered as single adds may have: maxAddRequestsInFlight, or one while
        the unanswered bytes are below addPipelineMinBytes."""
        unanswered = len(self._in_flight)
        if not self._limit or not unanswered:
            return False
        return unanswered >= self._limit or self._in_flight_bytes < self._pipeline_min_bytes

    def when_free(self, callback: Callable[[], None]) -> None:
        """Call `callback` once, on the loop, when a request slot frees or the connection fails (registering
        the same callback again before then changes nothing)."""
        self._on_free[callback] = None

    def _freed(self) -> None:
        callbacks, self._on_free = self._on_free, {}
        for callback in callbacks:
            callback()

    def send_add(
        self,
        ledger_id: int,
        master_key: bytes,
        entry_ids: Sequence[int] | IntArray,
        sizes: Sequence[int] | IntArray,
        data: bytes | memoryview,
        *,
        recovery_add: bool = False,
        high_priority: bool = False,
        write_flags: int = 0,
        own_request: bool = False,
        traces: list[AddTrace] | None = None,
    ) -> None:
        """Queue a batch; it leaves with the next write of the stream. Acks reach the handler.
        `own_request`: the batch is an AddRequest of its own, merged with nothing, so it is acknowledged on
        its own (a large bulk sent in chunks is acknowledged chunk by chunk, not all at its end).
        `traces`: sampled adds of the batch (client.add_trace), stamped when their request is written."""
        if self.failed:
            raise ConnectionError(f"bookie {self.bookie_id} connection failed")
        if len(data) > MAX_REQUEST_BYTES and len(sizes) > 1:      # a bookie refuses messages past its limit
            for lo, hi, start, end in _pieces(sizes, MAX_REQUEST_BYTES):
                self.send_add(ledger_id, master_key, entry_ids[lo:hi], sizes[lo:hi], memoryview(data)[start:end],
                              recovery_add=recovery_add, high_priority=high_priority, write_flags=write_flags,
                              own_request=own_request)
            return
        queued = self._queued[-1] if self._queued else None
        if (queued is None or queued.sealed or (own_request and queued.nbytes)
                or (queued.nbytes and queued.nbytes + len(data) > MAX_REQUEST_BYTES)):
            queued = _Queued()
            self._queued.append(queued)
        queued.sealed = own_request
        key = (ledger_id, master_key, recovery_add, high_priority, write_flags)
        batch = queued.batches.get(key)
        if batch is None:
            batch = queued.batches[key] = _Batch()
        batch.add(entry_ids, sizes, data)
        queued.nbytes += len(data)
        if traces:
            queued.traces = [*(queued.traces or ()), *traces]
        if self._stream_task is None:
            self._stream_task = asyncio.get_running_loop().create_task(self._run_stream())
        if self._may_write():
            self._wakeup.set()

    def _may_write(self) -> bool:
        """May the oldest queued request leave now? (Call with something queued.)"""
        if not self._at_bound():
            return True
        head = self._queued[0]
        return head.sealed and self._in_flight_bytes + head.nbytes <= self._bulk_limit

    async def _open_add_call(self) -> grpc.aio.StreamStreamCall | AddPortCall:
        """The add stream: on the bookie's add port when it has one, else gRPC's AddStream."""
        if not self.add_port:
            return self.add_stream()
        call = AddPortCall(self.bookie_id, _host(self.address), self.add_port, MAX_RESPONSE_BYTES)
        await call.open(ADD_PORT_CONNECT_TIMEOUT_S)
        return call

    async def _run_stream(self) -> None:
        try:
            call = await self._open_add_call()
        except AddPortError as exc:
            log.warning("add stream to %s failed: %s", self.bookie_id, exc)
            if not self._closed:
                self._fail()
            return
        try:
            unanswered = await self._serve(call)
            if unanswered is not None and not self._closed:
                log.warning("add stream to %s: its add port ended the stream before answering anything (%s); this "
                            "connection adds over bookiePort (gRPC) instead", self.bookie_id, unanswered.why)
                self._requeue(unanswered.sent)
                await self._serve(self.add_stream())
        finally:
            if not self._closed:
                self._fail()

    async def _serve(self, call: grpc.aio.StreamStreamCall | AddPortCall) -> _Unanswered | None:
        """Write the queued requests to `call` until it ends or the connection closes. _Unanswered: an add
        port stream ended before the bookie answered anything on it (it refused the stream, or it broke:
        the refusal is lost when the bookie's close resets the connection under a write), with the
        requests written to it, oldest first, to be sent again over gRPC (to the same bookie, which takes
        an entry again when its bytes are the same: `decisions.check_rewrites`)."""
        reader = asyncio.get_running_loop().create_task(self._read_acks(call))
        sent: list[_Queued] | None = [] if isinstance(call, AddPortCall) else None
        failure: BaseException | None = None
        try:
            while not self._closed:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._queued and (self._closed or self._may_write()):
                    queued = self._queued.popleft()
                    self._in_flight.append((len(queued.batches), queued.nbytes))
                    self._in_flight_bytes += queued.nbytes
                    if isinstance(call, AddPortCall):
                        if call.responses:      # kept until the bookie answers something on this stream
                            sent = None
                        elif sent is not None:
                            sent.append(queued)
                        await call.write_frame(queued.encode(call.frame_head))
                    else:
                        await call.write(queued.encode())
                    if queued.traces:
                        stamp_sent(queued.traces, self.bookie_id)
                if reader.done():
                    break
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError, AddPortError) as exc:
            failure = exc
        finally:
            if not reader.done():
                if self._closed:
                    await _quiet(call.done_writing())
                    await _quiet(asyncio.wait_for(reader, 5))
                reader.cancel()
            if isinstance(call, AddPortCall):
                call.close()
        ended = reader.result() if reader.done() and not reader.cancelled() and not reader.exception() else None
        if isinstance(call, AddPortCall) and not call.responses and not self._closed:
            how = ended or failure
            return _Unanswered(_short(how) if how is not None else "it closed the stream", sent or [])
        if failure is not None:
            self._note_tls(failure)
            log.warning("add stream to %s failed: %s", self.bookie_id, self.tls_error or _short(failure))
        return None

    def _requeue(self, sent: list[_Queued]) -> None:
        """The requests of an unanswered stream go first again, and nothing is in flight."""
        self._queued.extendleft(reversed(sent))
        self._in_flight.clear()
        self._in_flight_bytes = self._answered = 0
        if self._queued:
            self._wakeup.set()

    async def _read_acks(self, call: grpc.aio.StreamStreamCall | AddPortCall) -> AddPortError | None:
        """Hand the acks to their ledgers' handlers until the stream ends. Returned: how an add port stream
        failed before any answer (not logged here: the connection goes on over gRPC, see `_serve`)."""
        try:
            async for response in call:
                for ack in response.acks:
                    handler = self._handlers.get(ack.ledger_id)
                    if handler is not None:
                        handler.on_ack(self.bookie_id, ack)
                self._answer(len(response.acks))
        except (grpc.aio.AioRpcError, AddPortError) as exc:
            if isinstance(call, AddPortCall) and not call.responses:
                return exc if isinstance(exc, AddPortError) else None
            if not self._closed:
                self._note_tls(exc)
                log.warning("ack stream from %s failed: %s", self.bookie_id, self.tls_error or _short(exc))
        finally:
            self._wakeup.set()
        return None

    def _answer(self, acks: int) -> None:
        """Every batch gets exactly one ack: a request is answered once acks cover all its batches
        (counted oldest first; the bookie may answer out of order, which only blurs the count)."""
        self._answered += acks
        in_flight = self._in_flight
        while in_flight and self._answered >= in_flight[0][0]:
            batches, nbytes = in_flight.popleft()
            self._answered -= batches
            self._in_flight_bytes -= nbytes
        if self._queued and self._may_write():
            self._wakeup.set()
        if self._on_free and not self.saturated:
            self._freed()

    def _fail(self) -> None:
        """The stream is gone: nothing in flight on it will be acknowledged."""
        self.failed = True
        self._queued.clear()
        for handler in list(self._handlers.values()):
            handler.on_bookie_failed(self.bookie_id)
        self._freed()

    # ---- unary calls ------------------------------------------------------------------------
    def _broken(self, exc: grpc.aio.AioRpcError) -> None:
        """The bookie could not be reached: let the pool open a fresh connection next time instead of
        waiting out this channel's reconnect backoff (a restarted bookie is used again at once).
        A TLS rejection is raised as a BookieTlsError that says what to fix."""
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            self.failed = True
            found = self._note_tls(exc)
            if found is not None:
                raise found from exc

    def _note_tls(self, exc: BaseException) -> BookieTlsError | None:
        if isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.UNAVAILABLE:
            found = rejection(exc.details() or "", self.tls, self.bookie_id, self.address)
            if found is not None:
                self.tls_error = found
            return found
        return None

    def _closed_under(self) -> BookieUnavailableError | None:
        """A call's CancelledError that is not its task's own cancellation: its channel was closed under it
        (the pool replaced this failed connection). That is the bookie's failure, told as one, not a bare
        cancellation that ends the caller (a Spark task) without saying why. None: the task was cancelled."""
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            return None
        self.failed = True
        return BookieUnavailableError(f"bookie {self.bookie_id}: its connection was closed during the call (a "
                                      "failed connection was replaced); read from another bookie or retry",
                                      bookie_id=self.bookie_id)

    @contextlib.contextmanager
    def _read_failures(self) -> Iterator[None]:
        """How a read call's failures are told: an unreachable bookie marks this connection failed
        (`_broken`), a channel closed under the call is a BookieUnavailableError (`_closed_under`)."""
        try:
            yield
        except grpc.aio.AioRpcError as exc:
            self._broken(exc)
            raise
        except asyncio.CancelledError as exc:
            if (error := self._closed_under()) is None:
                raise
            raise error from exc

    async def read(self, request: pb.ReadRequest, timeout: float) -> pb.ReadResponse:
        with self._read_failures():
            return await self.stub.Read(request, timeout=timeout)

    async def read_range(
        self, ledger_id: int, first: int, last: int, timeout: float, max_batch_bytes: int = 1 << 20,
        fence: bool = False, master_key: bytes = b"", residues: tuple[int, int] = (0, 0),
    ) -> AsyncIterator[pb.ReadRangeBatch]:
        """The entries held in [first, last]; with `fence`, the bookie fences the ledger first (R18); with
        `residues` (modulus, mask), only those whose id % modulus is a bit of mask (a bookie may send more)."""
        request = _range_request(ledger_id, first, last, max_batch_bytes, fence, master_key, residues)
        with self._read_failures():
            async for batch in self.stub.ReadRange(request, timeout=timeout):
                yield batch

    async def read_range_views(
        self, ledger_id: int, first: int, last: int, timeout: float, max_batch_bytes: int = 1 << 20,
        residues: tuple[int, int] = (0, 0),
    ) -> AsyncIterator[RangeBatchView]:
        """read_range for bulk readers: each batch's data a view of what arrived, its ids and sizes numpy
        arrays (`wire.range_batch`)."""
        request = _range_request(ledger_id, first, last, max_batch_bytes, False, b"", residues)
        with self._read_failures():
            async for batch in self.range_views(request, timeout=timeout):
                yield batch

    async def read_ranges_views(self, ranges: list[tuple[int, int, int, int]], timeout: float,
                                max_batch_bytes: int = 1 << 20) -> AsyncIterator[RangeBatchView]:
        """ReadRanges: (ledger id, first, last, most entries) of many ledgers in one call; each batch's
        entries are tagged with their ledgers (`ledger_ids`), a failed range is a batch with its status.
        Leaving the iteration early cancels the call."""
        request = pb.ReadRangesRequest(max_batch_bytes=max_batch_bytes, ranges=[
            pb.ReadRangeRequest(ledger_id=ledger, first_entry_id=first, last_entry_id=last, max_batch_entries=most)
            for ledger, first, last, most in ranges])
        call = self.ranges_views(request, timeout=timeout)
        try:
            with self._read_failures():
                async for batch in call:
                    yield batch
        finally:
            call.cancel()

    async def read_lac(self, ledger_id: int, timeout: float) -> pb.ReadLacResponse:
        return await self.stub.ReadLac(pb.ReadLacRequest(ledger_id=ledger_id), timeout=timeout)

    async def write_lac(self, request: pb.WriteLacRequest, timeout: float) -> pb.WriteLacResponse:
        return await self.stub.WriteLac(request, timeout=timeout)

    async def force_ledger(self, ledger_id: int, timeout: float) -> pb.ForceLedgerResponse:
        return await self.stub.ForceLedger(pb.ForceLedgerRequest(ledger_id=ledger_id), timeout=timeout)

    async def info(self, timeout: float) -> pb.GetBookieInfoResponse:
        try:
            return await self.stub.GetBookieInfo(pb.GetBookieInfoRequest(requested=3), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            self._broken(exc)
            raise

    async def list_entries(self, ledger_id: int, timeout: float) -> pb.GetListOfEntriesResponse:
        request = pb.GetListOfEntriesRequest(ledger_id=ledger_id)
        return await self.stub.GetListOfEntries(request, timeout=timeout)

    async def close(self) -> None:
        self._closed = True
        self._wakeup.set()
        if self._stream_task is not None:
            await _quiet(asyncio.wait_for(self._stream_task, 5))
        await self.channel.close()


def _pieces(sizes: Sequence[int] | IntArray, limit: int) -> Iterator[tuple[int, int, int, int]]:
    """(first index, end index, first byte, end byte) of consecutive runs of entries of at most `limit`
    bytes each (an entry larger than that alone)."""
    lo = start = offset = 0
    for i, size in enumerate(sizes):
        if i > lo and offset + int(size) - start > limit:
            yield lo, i, start, offset
            lo, start = i, offset
        offset += int(size)
    yield lo, len(sizes), start, offset


@dataclasses.dataclass(frozen=True)
class _Unanswered:
    """An add port stream that ended before the bookie answered anything: how, and the requests written to it."""

    why: str
    sent: list[_Queued]


def _host(address: str) -> str:
    """The host of a "host:port" (or "[v6]:port") address."""
    return address.rsplit(":", 1)[0].strip("[]")


def _short(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc)


async def _quiet(awaitable: object) -> None:
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await awaitable  # type: ignore[misc]


StatusCallback = Callable[[str, pb.AddAck], None]


def _parse_range_batch(raw: bytes) -> RangeBatchView:
    from bkledger.wire.range_batch import parse_range_batch  # imports numpy: not at the client's import

    return parse_range_batch(raw)


def _range_request(ledger_id: int, first: int, last: int, max_batch_bytes: int, fence: bool, master_key: bytes,
                   residues: tuple[int, int]) -> pb.ReadRangeRequest:
    return pb.ReadRangeRequest(
        ledger_id=ledger_id, first_entry_id=first, last_entry_id=last, max_batch_bytes=max_batch_bytes,
        fence=fence, master_key=master_key, residue_modulus=residues[0], residue_mask=residues[1],
    )
