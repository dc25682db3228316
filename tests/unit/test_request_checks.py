"""bookie.core.request_checks (pure): which requests the bookie refuses before serving them (R26), the gRPC
message cap that follows nettyMaxFrameSizeBytes, the read-batch clamp; and the client's side of the cap
(client.bookie_client keeps each AddRequest under it)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from bkledger.bookie.core import request_checks as rc
from bkledger.bookie.request_guard import parse_add_stream
from bkledger.client.bookie_client import MAX_REQUEST_BYTES, _pieces
from bkledger.proto import bookie_pb2 as pb
from bkledger.wire import codec as wire


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def test_a_ledger_id_wider_than_64_bits_is_malformed_where_protobuf_alone_would_read_ledger_0():
    raw = b"\x08" + varint(1 << 64)
    assert pb.ReadRequest.FromString(raw).ledger_id == 0          # what protobuf makes of it
    parsed = rc.parse(pb.ReadRequest, raw)
    assert isinstance(parsed, rc.Malformed) and "wider than 64 bits in ledger_id" in parsed.why
    nested = pb.ReadRangesRequest(max_batch_bytes=5).SerializeToString() + b"\x0a" + varint(len(raw)) + raw
    assert isinstance(rc.parse(pb.ReadRangesRequest, nested), rc.Malformed)
    batch = b"\x08" + varint(1 << 64)
    assert isinstance(parse_add_stream(b"\x12" + varint(len(batch)) + batch), rc.Malformed)


def test_unparsable_messages_are_malformed_not_exceptions():
    assert isinstance(rc.parse(pb.ReadRequest, b"\xff\xff\xff"), rc.Malformed)
    assert isinstance(parse_add_stream(b"\x12\xff\xff"), rc.Malformed)
    good = pb.ReadRequest(ledger_id=(1 << 63) - 1, entry_id=-1, master_key=b"k" * 20)
    assert rc.parse(pb.ReadRequest, good.SerializeToString()) == good    # negative and maximal ids fit


@given(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 63), (1 << 63) - 1))
def test_every_64_bit_value_parses_as_protobuf_parses_it(ledger_id: int, entry_id: int):
    request = pb.ReadRequest(ledger_id=ledger_id, entry_id=entry_id)
    assert rc.parse(pb.ReadRequest, request.SerializeToString()) == request


def test_hostile_values_are_refused_and_ordinary_ones_pass():
    refused = [
        pb.ReadRequest(ledger_id=-1),
        pb.ReadRequest(ledger_id=1, entry_id=-2),
        pb.ReadRequest(ledger_id=1, entry_id=-1, has_previous_lac=True, previous_lac=-2),
        pb.ReadRangeRequest(ledger_id=1, first_entry_id=-1, last_entry_id=5),
        pb.ReadRangeRequest(ledger_id=1, last_entry_id=5, residue_modulus=65),
        pb.ReadRangesRequest(ranges=[pb.ReadRangeRequest(ledger_id=1), pb.ReadRangeRequest(ledger_id=-4)]),
        pb.ReadRangesRequest(ranges=[pb.ReadRangeRequest(ledger_id=1)] * (rc.MAX_RANGES + 1)),
        pb.ReadLacRequest(ledger_id=-1),
        pb.WriteLacRequest(ledger_id=1, lac=-2),
        pb.WriteLacRequest(ledger_id=1, lac=3, body=b"b" * (rc.MAX_EXPLICIT_LAC_BODY + 1)),
        pb.ForceLedgerRequest(ledger_id=-1),
        pb.ReadRequest(ledger_id=1, entry_id=-1, fence=True, master_key=b"k" * 21),
        pb.ReadRangeRequest(ledger_id=1, fence=True, master_key=b"k"),
        pb.WriteLacRequest(ledger_id=1, lac=3, master_key=b"k" * 5000),
        pb.GetListOfEntriesRequest(ledger_id=-1),
    ]
    for request in refused:
        assert rc.check(request), request
    passed = [
        pb.ReadRequest(ledger_id=0, entry_id=-1),
        pb.ReadRequest(ledger_id=1, entry_id=(1 << 63) - 1, has_previous_lac=True, previous_lac=-1),
        pb.ReadRangeRequest(ledger_id=1, first_entry_id=0, last_entry_id=-1, residue_modulus=64),
        pb.ReadRangesRequest(),
        pb.WriteLacRequest(ledger_id=1, lac=-1, body=b"b" * 48, master_key=b"k" * 20),
        pb.ReadRequest(ledger_id=1, entry_id=-1, fence=True, master_key=b"k" * 20),
        pb.GetBookieInfoRequest(requested=(1 << 64) - 1),
    ]
    for request in passed:
        assert rc.check(request) == "", request


def test_the_message_cap_follows_the_frame_size_with_the_batch_overhead():
    five = 5 << 20
    assert rc.max_message_bytes(five) == five + five // 2 + rc.MESSAGE_OVERHEAD_FIXED      # 256 MiB before
    assert rc.max_message_bytes(100 << 20) > 150 << 20
    floor = rc.max_message_bytes(1024)             # a lowered frame still takes a client's merged request
    assert floor == rc.max_message_bytes(rc.CLIENT_REQUEST_BYTES)
    assert MAX_REQUEST_BYTES <= rc.CLIENT_REQUEST_BYTES


def test_the_worst_client_request_fits_the_cap():
    """A client's AddRequest of MAX_REQUEST_BYTES of the smallest entries (a 32-byte header and a 4-byte
    CRC32C: most ids and sizes per byte), with 64-bit entry ids, is under the cap of the default frame."""
    count = MAX_REQUEST_BYTES // 36
    ids = np.arange((1 << 62), (1 << 62) + count, dtype=np.int64)
    batch = pb.AddBatch(ledger_id=(1 << 62), master_key=b"k" * 20, recovery_add=True, high_priority=True,
                        write_flags=1).SerializeToString()
    body = batch + wire.packed_field(6, ids) + wire.packed_field(7, np.full(count, 36, dtype=np.int64))
    size = len(body) + count * 36 + 16
    assert size <= rc.max_message_bytes(5 << 20)


def test_read_batches_are_clamped():
    assert rc.read_batch_bytes((1 << 32) - 1, 4 << 20, 1 << 20) == 4 << 20
    assert rc.read_batch_bytes(0, 4 << 20, 1 << 20) == 1 << 20
    assert rc.read_batch_bytes(4096, 4 << 20, 1 << 20) == 4096


@given(st.lists(st.integers(1, 300), min_size=1, max_size=60), st.integers(1, 1000))
def test_a_client_splits_a_large_add_into_requests_under_the_limit(sizes: list[int], limit: int):
    pieces = list(_pieces(sizes, limit))
    assert pieces[0][0] == 0 and pieces[-1][1] == len(sizes) and pieces[-1][3] == sum(sizes)
    for (lo, hi, start, end), nxt in zip(pieces, [*pieces[1:], None], strict=True):
        assert hi > lo and end - start == sum(sizes[lo:hi])
        assert end - start <= limit or hi - lo == 1                 # over the limit only as a single entry
        if nxt is not None:
            assert nxt[0] == hi and nxt[2] == end


def test_one_large_send_add_leaves_as_requests_each_under_the_bookies_cap() -> None:
    """A drain of many queued adds (here 12 MiB of 100 KiB entries in one send_add) used to be one message;
    a bookie now refuses messages over its cap, so the client sends it as several, every entry acked once."""
    import asyncio

    from tests.unit.test_bookie_client_queue import KEY, _client

    async def scenario() -> None:
        client, call, acks = _client(limit=0)
        entry = 100 * 1024
        count = 120
        data = b"".join(bytes([i % 251]) * entry for i in range(count))
        client.send_add(1, KEY, list(range(count)), [entry] * count, data)
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(call.written) == 3
        for request in call.written:
            assert request.ByteSize() <= rc.max_message_bytes(5 << 20)
            assert sum(len(b.data) for b in request.batches) <= MAX_REQUEST_BYTES
            call.answer(request)
        assert b"".join(b.data for r in call.written for b in r.batches) == data
        for _ in range(20):
            await asyncio.sleep(0)
        assert acks.entries == {1: list(range(count))}
        await client.close()

    asyncio.run(scenario())
