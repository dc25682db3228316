"""R26's input, read by hand: `bookie.add_request` gives what protobuf's own parser gives for any
AddRequest, whichever way its repeated integers are written, and refuses what protobuf refuses."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from bkledger.bookie.add_request import parse_add_request
from bkledger.bookie.core.request_checks import Malformed, wide_varint
from bkledger.bookie.request_guard import parse_add_stream
from bkledger.proto import bookie_pb2 as pb
from bkledger.wire import codec as wire
from tests.unit.protobuf_oracle import assert_read_as_protobuf_reads

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
BATCHES = st.builds(
    pb.AddBatch, ledger_id=INT64, master_key=st.binary(max_size=24), recovery_add=st.booleans(),
    write_flags=st.integers(min_value=-(2**31), max_value=2**31 - 1), high_priority=st.booleans(),
    entry_ids=st.lists(INT64, max_size=20), sizes=st.lists(st.integers(min_value=0, max_value=2**32 - 1), max_size=20),
    data=st.binary(max_size=200))


def as_parsed(batch: pb.AddBatch) -> tuple[object, ...]:
    return (batch.ledger_id, batch.master_key, batch.recovery_add, batch.write_flags, batch.high_priority,
            list(batch.entry_ids), list(batch.sizes), bytes(batch.data))


def parsed(raw: bytes) -> list[tuple[object, ...]]:
    return [(b.ledger_id, b.master_key, b.recovery_add, b.write_flags, b.high_priority, b.entry_ids.tolist(),
             b.sizes.tolist(), bytes(b.data)) for b in parse_add_request(raw)]


@given(st.integers(min_value=0, max_value=2**64 - 1), st.lists(BATCHES, max_size=4))
def test_an_add_request_parses_as_protobuf_parses_it(txn_id: int, batches: list[pb.AddBatch]) -> None:
    raw = pb.AddRequest(txn_id=txn_id, batches=batches).SerializeToString()
    assert parsed(raw) == [as_parsed(b) for b in pb.AddRequest.FromString(raw).batches]


def unpacked(batch: pb.AddBatch) -> bytes:
    """The batch with entry ids and sizes written one field per value (legal protobuf), an unknown field
    of each wire type, and a ledger id written twice (the later one counts)."""
    head = pb.AddBatch(ledger_id=batch.ledger_id + 1 if batch.ledger_id < 2**63 - 1 else 0).SerializeToString()
    rest = pb.AddBatch(master_key=batch.master_key, recovery_add=batch.recovery_add, write_flags=batch.write_flags,
                       high_priority=batch.high_priority, data=batch.data)
    ids = b"".join(wire.varint(6 << 3) + wire.varint(v & wire.UINT64) for v in batch.entry_ids)
    sizes = b"".join(wire.varint(7 << 3) + wire.varint(v) for v in batch.sizes)
    unknown = wire.varint(99 << 3) + b"\x05" + wire.varint(98 << 3 | 1) + bytes(8) + wire.varint(97 << 3 | 5) + bytes(4)
    unknown += wire.field_prefix(96, 3) + b"abc"
    ledger = wire.varint(1 << 3) + wire.varint(batch.ledger_id & wire.UINT64)     # even when 0
    return head + ids + unknown + rest.SerializeToString() + ledger + sizes


@given(BATCHES)
def test_unpacked_repeated_integers_and_unknown_fields_parse_as_protobuf_parses_them(batch: pb.AddBatch) -> None:
    body = unpacked(batch)
    raw = wire.field_prefix(2, len(body)) + body
    expected = pb.AddRequest.FromString(raw)
    assert parsed(raw) == [as_parsed(b) for b in expected.batches] == [as_parsed(batch)]


def test_a_batch_data_is_a_view_of_the_request_not_a_copy() -> None:
    raw = pb.AddRequest(batches=[pb.AddBatch(ledger_id=3, data=b"x" * 64)]).SerializeToString()
    data = parse_add_request(raw)[0].data
    assert isinstance(data, memoryview) and data.obj is raw


@given(st.binary(max_size=80))
@example(b"\x80\x80\x80\x80\x10\x00")             # tag 2**32: field number 2**29, one past the last (CI)
@example(bytes([0xF8, 0xFF, 0xFF, 0xFF, 0x0F, 0x00]))    # field number 2**29 - 1: the last one, passed over
@example(b"\x98\x80\x80\x80\x00\x00")              # field 3's tag in five bytes: accepted
@example(b"\x98\x80\x80\x80\x80\x00\x00")          # ... in six: refused
def test_garbage_is_refused_where_protobuf_refuses_it_and_read_alike_where_it_is_not(raw: bytes) -> None:
    assert_read_as_protobuf_reads(raw, lambda r: [as_parsed(b) for b in pb.AddRequest.FromString(r).batches], parsed)


def _varint_field(number: int, value: int) -> bytes:
    """A varint field of any width up to 70 bits, written as protobuf's encoder would not (ten bytes at most)."""
    out = bytearray(wire.varint(number << 3))
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


VARINTS = st.integers(min_value=0, max_value=2**70 - 1)
BATCH_FIELDS = st.lists(st.one_of(
    st.builds(_varint_field, st.integers(min_value=1, max_value=9), VARINTS),
    st.builds(lambda n, b: wire.field_prefix(n, len(b)) + b, st.sampled_from([2, 6, 7, 8, 12]), st.binary(max_size=12)),
), max_size=6).map(b"".join)


@given(st.lists(st.one_of(st.builds(_varint_field, st.sampled_from([1, 2, 5]), VARINTS),
                          BATCH_FIELDS.map(lambda b: wire.field_prefix(2, len(b)) + b)), max_size=4).map(b"".join))
@example(b"\x12\x0b\x08" + b"\x80" * 9 + b"\x02")        # ledger id 2**64 in a batch
@example(b"\x12\x0b\x08" + b"\x80" * 9 + b"\x01")        # 2**63: ten bytes, not wider than 64 bits
@example(b"\x08" + b"\xff" * 9 + b"\x7f" + b"\x12\x00")   # txn id 2**70 - 1
@example(b"\x08" + b"\xff" * 9 + b"\x7f" + b"\x12\x0b\x08" + b"\x80" * 9 + b"\x02")   # the first named: txn_id
def test_a_varint_wider_than_64_bits_is_found_in_the_parse_as_request_checks_finds_it(raw: bytes) -> None:
    """R26: the parse's own width check (one pass) refuses exactly what `request_checks.wide_varint` refuses,
    naming the same field; everything else parses as before."""
    try:
        parse_add_request(raw)
    except ValueError:
        assert isinstance(parse_add_stream(raw), Malformed)
        return
    expected = wide_varint(memoryview(raw), pb.AddRequest.DESCRIPTOR, prescan=False)
    got = parse_add_stream(raw)
    if expected:
        assert isinstance(got, Malformed) and got.why == f"the AddRequest has {expected}"
    else:
        assert not isinstance(got, Malformed)
