"""BookieClient's add queue against a fake add stream: requests in flight are bounded, adds queued
meanwhile leave together (one batch per ledger), every ack reaches its ledger, close flushes the rest."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from bkledger.client.add_port import AddPortCall
from bkledger.client.bookie_client import BookieClient, _Batch, _Queued
from bkledger.proto import bookie_pb2 as pb
from bkledger.wire.add_stream import REQUEST, FrameReader

KEY = b"k" * 20


class FakeCall:
    """A bidi add stream whose bookie answers only when the test says so."""

    def __init__(self) -> None:
        self.written: list[pb.AddRequest] = []
        self.responses: asyncio.Queue[pb.AddResponse | None] = asyncio.Queue()
        self.wrote = asyncio.Event()

    async def write(self, request: bytes) -> None:
        self.written.append(pb.AddRequest.FromString(request))
        self.wrote.set()

    async def done_writing(self) -> None:
        await self.responses.put(None)

    def answer(self, request: pb.AddRequest) -> None:
        acks = [pb.AddAck(ledger_id=b.ledger_id, status=pb.EOK, entry_ids=b.entry_ids) for b in request.batches]
        self.responses.put_nowait(pb.AddResponse(acks=acks))

    def __aiter__(self) -> AsyncIterator[pb.AddResponse]:
        return self._responses()

    async def _responses(self) -> AsyncIterator[pb.AddResponse]:
        while (response := await self.responses.get()) is not None:
            yield response


class Acks:
    def __init__(self) -> None:
        self.entries: dict[int, list[int]] = {}
        self.failed = False

    def on_ack(self, bookie_id: str, ack: pb.AddAck) -> None:
        self.entries.setdefault(ack.ledger_id, []).extend(ack.entry_ids)

    def on_bookie_failed(self, bookie_id: str) -> None:
        self.failed = True


def _client(limit: int, bulk_bytes: int = 0, pipeline: int = 0) -> tuple[BookieClient, FakeCall, Acks]:
    client = BookieClient("b1", "127.0.0.1:1", max_requests_in_flight=limit, max_bulk_bytes_in_flight=bulk_bytes,
                          pipeline_min_bytes=pipeline)
    call = FakeCall()
    client.add_stream = lambda: call
    acks = Acks()
    for ledger_id in (1, 2):
        client.register(ledger_id, acks)
    return client, call, acks


def _add(client: BookieClient, ledger_id: int, entry_id: int) -> None:
    client.send_add(ledger_id, KEY, [entry_id], [3], bytes([entry_id]) * 3)


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_adds_queued_behind_a_request_in_flight_leave_together() -> None:
    async def scenario() -> None:
        client, call, acks = _client(limit=1)
        _add(client, 1, 0)
        await _settle()
        assert len(call.written) == 1
        for entry_id in (1, 2, 3):
            _add(client, 1, entry_id)
        _add(client, 2, 0)
        await _settle()
        assert len(call.written) == 1                       # the first one is unanswered: the rest wait
        call.answer(call.written[0])
        await _settle()
        assert len(call.written) == 2
        second = call.written[1]
        by_ledger = {b.ledger_id: b for b in second.batches}
        assert list(by_ledger[1].entry_ids) == [1, 2, 3]   # one batch per ledger, entries in order
        assert list(by_ledger[1].sizes) == [3, 3, 3]
        assert by_ledger[1].data == b"\x01" * 3 + b"\x02" * 3 + b"\x03" * 3
        assert list(by_ledger[2].entry_ids) == [0]
        call.answer(second)
        await _settle()
        assert acks.entries == {1: [0, 1, 2, 3], 2: [0]}
        await client.close()
        assert not acks.failed

    asyncio.run(scenario())


def test_without_a_bound_every_wakeup_writes() -> None:
    async def scenario() -> None:
        client, call, acks = _client(limit=0)
        for entry_id in range(3):
            _add(client, 1, entry_id)
            await _settle()
        assert [list(r.batches[0].entry_ids) for r in call.written] == [[0], [1], [2]]
        for request in call.written:
            call.answer(request)
        await _settle()
        assert acks.entries == {1: [0, 1, 2]}
        await client.close()

    asyncio.run(scenario())


def test_close_flushes_adds_still_queued() -> None:
    async def scenario() -> None:
        client, call, acks = _client(limit=1)
        _add(client, 1, 0)
        await _settle()
        _add(client, 1, 1)
        await _settle()
        assert len(call.written) == 1
        await client.close()
        assert [list(r.batches[0].entry_ids) for r in call.written] == [[0], [1]]

    asyncio.run(scenario())


def test_saturated_until_an_answer_frees_a_slot_which_calls_when_free_once() -> None:
    """The writer parks its adds while every bookie is saturated; when_free is what unparks it."""
    async def scenario() -> None:
        client, call, acks = _client(limit=2)
        freed: list[str] = []
        _add(client, 1, 0)
        await _settle()
        assert not client.saturated
        _add(client, 1, 1)
        await _settle()
        assert client.saturated and len(call.written) == 2
        client.when_free(lambda: freed.append("a"))
        client.when_free(lambda: freed.append("b"))
        _add(client, 1, 2)                                   # waits in the queue: no slot frees
        await _settle()
        assert freed == []
        call.answer(call.written[0])                         # a slot frees; the queued request takes it
        await _settle()
        assert freed == ["a", "b"] and len(call.written) == 3 and client.saturated
        call.answer(call.written[1])
        await _settle()
        assert freed == ["a", "b"]                           # once each
        client.when_free(lambda: freed.append("c"))
        await client.close()
        assert not client.saturated

    asyncio.run(scenario())


def test_a_failed_stream_calls_when_free() -> None:
    async def scenario() -> None:
        client, call, acks = _client(limit=1)
        freed: list[str] = []
        _add(client, 1, 0)
        await _settle()
        assert client.saturated
        client.when_free(lambda: freed.append("x"))
        await call.responses.put(None)                       # the bookie ends the stream: it failed
        await _settle()
        assert acks.failed and freed == ["x"] and not client.saturated
        await client.close()

    asyncio.run(scenario())


def test_answers_out_of_order_still_free_the_slots() -> None:
    async def scenario() -> None:
        client, call, acks = _client(limit=2)
        _add(client, 1, 0)
        await _settle()
        _add(client, 2, 0)
        await _settle()
        _add(client, 1, 1)                                   # two in flight: this one waits
        await _settle()
        assert len(call.written) == 2
        call.answer(call.written[1])                         # the later request is answered first
        await _settle()
        assert len(call.written) == 3
        call.answer(call.written[0])
        call.answer(call.written[2])
        await _settle()
        assert acks.entries == {1: [0, 1], 2: [0]}
        await client.close()

    asyncio.run(scenario())


@given(st.lists(st.tuples(st.integers(0, 2**40), st.binary(max_size=20), st.booleans(), st.booleans(),
                          st.integers(0, 7), st.lists(st.binary(max_size=300), min_size=1, max_size=5)),
                min_size=1, max_size=4))
def test_hand_serialized_request_parses_as_the_protobuf_one(batches) -> None:
    """The AddRequest written on the stream is byte-for-byte a valid protobuf of the queued batches."""
    queued = _Queued()
    for ledger_id, key, recovery, priority, flags, chunks in batches:
        batch = queued.batches.setdefault((ledger_id, key, recovery, priority, flags), _Batch())
        for chunk in chunks:
            batch.add([len(batch.entry_ids) * 2**33], [len(chunk)], chunk)
    parsed = pb.AddRequest.FromString(queued.encode())
    assert len(parsed.batches) == len(queued.batches)
    for got, ((ledger_id, key, recovery, priority, flags), batch) in zip(parsed.batches, queued.batches.items(),
                                                                         strict=True):
        assert (got.ledger_id, got.master_key, got.recovery_add, got.high_priority, got.write_flags) == (
            ledger_id, key, recovery, priority, flags)
        assert list(got.entry_ids) == batch.entry_ids and list(got.sizes) == batch.sizes
        assert got.data == b"".join(batch.chunks)


@given(st.lists(st.lists(st.binary(max_size=300), min_size=1, max_size=5), min_size=1, max_size=4))
def test_a_request_framed_in_its_own_join_is_the_frame_the_bookie_reads(ledgers) -> None:
    """The add port's request frame is built in the AddRequest's one join (no second copy of its
    payload): the header of the request's own size, then the same bytes; the bookie's reader gets them."""
    queued = _Queued()
    for ledger_id, chunks in enumerate(ledgers):
        batch = queued.batches.setdefault((ledger_id, KEY, False, False, 0), _Batch())
        for chunk in chunks:
            batch.add([len(batch.entry_ids)], [len(chunk)], chunk)
    body = queued.encode()
    framed = queued.encode(AddPortCall.frame_head)
    assert framed == AddPortCall.frame_head(len(body)) + body
    assert FrameReader(frozenset({REQUEST}), len(body)).feed(framed) == [(REQUEST, body)]


@given(st.lists(st.integers(0, 2**62), min_size=1, max_size=50), st.integers(0, 2**40), st.booleans(),
       st.integers(0, 7), st.data())
def test_a_batch_given_as_arrays_encodes_as_protobuf_does(ids: list[int], ledger_id: int, recovery: bool,
                                                          flags: int, data: st.DataObject) -> None:
    """A bulk's chunk hands its ids and sizes over as numpy arrays, encoded without protobuf (packed by
    numpy): the request must be byte for byte what protobuf writes for the same batch, and a batch merged
    into it afterwards (lists) must still be encoded whole."""
    sizes = data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=len(ids), max_size=len(ids)))
    key = (ledger_id, KEY, recovery, False, flags)
    queued = _Queued()
    batch = queued.batches[key] = _Batch()
    batch.add(np.asarray(ids, dtype=np.int64), np.asarray(sizes, dtype=np.int64), b"xyz")
    expected = pb.AddRequest(batches=[pb.AddBatch(ledger_id=ledger_id, master_key=KEY, recovery_add=recovery,
                                                  write_flags=flags, entry_ids=ids, sizes=sizes, data=b"xyz")])
    assert queued.encode() == expected.SerializeToString()
    batch.add([7], [1], b"!")
    merged = pb.AddRequest.FromString(queued.encode()).batches[0]
    assert list(merged.entry_ids) == [*ids, 7] and list(merged.sizes) == [*sizes, 1] and merged.data == b"xyz!"


def test_a_batch_sent_as_its_own_request_is_merged_with_nothing() -> None:
    """own_request (a chunk of a bulk): each such batch is one AddRequest, answered on its own, so a large
    bulk is acknowledged chunk by chunk; adds queued after it still leave together."""
    async def scenario() -> None:
        client, call, acks = _client(limit=1)
        _add(client, 1, 0)
        await _settle()
        for first in (1, 3):
            client.send_add(1, KEY, [first, first + 1], [3, 3], bytes(6), own_request=True)
        _add(client, 1, 5)
        _add(client, 1, 6)
        for _ in range(3):
            call.answer(call.written[-1])
            await _settle()
        assert [[list(b.entry_ids) for b in r.batches] for r in call.written] == [
            [[0]], [[1, 2]], [[3, 4]], [[5, 6]]]
        call.answer(call.written[-1])
        await _settle()
        assert acks.entries == {1: list(range(7))}
        await client.close()

    asyncio.run(scenario())


def _chunk(client: BookieClient, first: int, count: int = 2, size: int = 100) -> None:
    client.send_add(1, KEY, list(range(first, first + count)), [size] * count, bytes(size * count), own_request=True)


def test_bulk_chunks_leave_past_the_request_bound_until_their_bytes_reach_the_byte_bound() -> None:
    """A bulk's chunk cannot grow by waiting, so it goes while the unanswered bytes stay within
    max_bulk_bytes_in_flight; single adds queued behind the chunks still wait for the request bound."""
    async def scenario() -> None:
        client, call, acks = _client(limit=1, bulk_bytes=500)
        for first in (0, 2, 4, 6):                      # four chunks of 200 bytes
            _chunk(client, first)
        _add(client, 2, 0)
        await _settle()
        assert [list(r.batches[0].entry_ids) for r in call.written] == [[0, 1], [2, 3]]   # 400 <= 500 < 600
        call.answer(call.written[0])
        await _settle()
        assert len(call.written) == 3                   # 200 + 200 unanswered again: the next chunk fits
        call.answer(call.written[1])
        call.answer(call.written[2])
        await _settle()
        assert len(call.written) == 4                   # the last chunk; the single add waits for the bound
        assert [b.ledger_id for r in call.written for b in r.batches] == [1, 1, 1, 1]
        call.answer(call.written[3])
        await _settle()
        assert [list(r.batches[0].entry_ids) for r in call.written][4:] == [[0]]
        assert call.written[4].batches[0].ledger_id == 2
        call.answer(call.written[4])
        await _settle()
        assert acks.entries == {1: list(range(8)), 2: [0]}
        await client.close()

    asyncio.run(scenario())


def test_without_a_byte_bound_bulk_chunks_obey_the_request_bound() -> None:
    async def scenario() -> None:
        client, call, acks = _client(limit=1, bulk_bytes=0)
        for first in (0, 2):
            _chunk(client, first)
        await _settle()
        assert len(call.written) == 1
        call.answer(call.written[0])
        await _settle()
        assert len(call.written) == 2
        call.answer(call.written[1])
        await _settle()
        assert acks.entries == {1: [0, 1, 2, 3]}
        await client.close()

    asyncio.run(scenario())


def test_below_pipeline_min_bytes_one_request_at_a_time_and_a_pipeline_once_requests_are_large() -> None:
    """addPipelineMinBytes: while the unanswered request is small, the next adds wait for its answer and
    leave together (and the writer may park them: saturated); once it carries that many bytes, a second
    request leaves at once, up to maxAddRequestsInFlight."""
    async def scenario() -> None:
        client, call, acks = _client(limit=2, pipeline=10)
        _add(client, 1, 0)                                   # 3 bytes unanswered: below 10
        await _settle()
        assert len(call.written) == 1 and client.saturated
        for entry_id in range(1, 5):
            _add(client, 1, entry_id)
        await _settle()
        assert len(call.written) == 1                        # one at a time while requests are small
        call.answer(call.written[0])
        await _settle()
        assert [list(r.batches[0].entry_ids) for r in call.written] == [[0], [1, 2, 3, 4]]
        assert not client.saturated                          # 12 bytes unanswered: a pipeline
        _add(client, 1, 5)
        await _settle()
        assert len(call.written) == 3 and client.saturated   # the second request; now at the bound of 2
        _add(client, 1, 6)
        await _settle()
        assert len(call.written) == 3
        for request in call.written[1:3]:
            call.answer(request)
        await _settle()
        assert [list(r.batches[0].entry_ids) for r in call.written][3:] == [[6]]
        call.answer(call.written[3])
        await _settle()
        assert acks.entries == {1: list(range(7))}
        await client.close()

    asyncio.run(scenario())
