"""A range read's batches, read by hand: `wire.range_batch` gives what protobuf's own parser
gives for any ReadRangeBatch, whichever way its repeated integers are written, and refuses what protobuf
refuses."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from bkledger.proto import bookie_pb2 as pb
from bkledger.wire import codec as wire
from bkledger.wire.range_batch import parse_range_batch
from tests.unit.protobuf_oracle import assert_read_as_protobuf_reads

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
BATCHES = st.builds(
    pb.ReadRangeBatch, status=st.sampled_from(sorted(pb.StatusCode.values())), ledger_id=INT64,
    entry_ids=st.lists(INT64, max_size=20), sizes=st.lists(st.integers(min_value=0, max_value=2**32 - 1), max_size=20),
    data=st.binary(max_size=200), ledger_ids=st.lists(INT64, max_size=20))


def as_parsed(batch: pb.ReadRangeBatch) -> tuple[object, ...]:
    return batch.status, batch.ledger_id, list(batch.entry_ids), list(batch.sizes), bytes(batch.data), \
        list(batch.ledger_ids)


def parsed(raw: bytes) -> tuple[object, ...]:
    b = parse_range_batch(raw)
    return b.status, b.ledger_id, b.entry_ids.tolist(), b.sizes.tolist(), bytes(b.data), b.ledger_ids.tolist()


@given(BATCHES)
def test_a_range_batch_parses_as_protobuf_parses_it(batch: pb.ReadRangeBatch) -> None:
    raw = batch.SerializeToString()
    assert parsed(raw) == as_parsed(pb.ReadRangeBatch.FromString(raw)) == as_parsed(batch)


@given(BATCHES)
def test_unpacked_repeated_integers_and_unknown_fields_parse_as_protobuf_parses_them(batch: pb.ReadRangeBatch
                                                                                      ) -> None:
    """Entry ids, sizes and ledger ids one field per value (legal protobuf), an unknown field of each wire type, a
    ledger id and a status written twice (the later ones count)."""
    head = pb.ReadRangeBatch(ledger_id=batch.ledger_id + 1 if batch.ledger_id < 2**63 - 1 else 0,
                             status=pb.EIO).SerializeToString()
    ids = b"".join(wire.varint(3 << 3) + wire.varint(v & wire.UINT64) for v in batch.entry_ids)
    sizes = b"".join(wire.varint(4 << 3) + wire.varint(v) for v in batch.sizes)
    sizes += b"".join(wire.varint(6 << 3) + wire.varint(v & wire.UINT64) for v in batch.ledger_ids)
    unknown = wire.varint(99 << 3) + b"\x05" + wire.varint(98 << 3 | 1) + bytes(8) + wire.varint(97 << 3 | 5) + bytes(4)
    unknown += wire.field_prefix(96, 3) + b"abc"
    last = wire.varint(2 << 3) + wire.varint(batch.ledger_id & wire.UINT64) + wire.varint(1 << 3) + \
        wire.varint(batch.status & wire.UINT64)
    raw = head + ids + unknown + pb.ReadRangeBatch(data=batch.data).SerializeToString() + last + sizes
    assert parsed(raw) == as_parsed(pb.ReadRangeBatch.FromString(raw)) == as_parsed(batch)


def test_the_data_is_a_view_of_the_message_not_a_copy() -> None:
    raw = pb.ReadRangeBatch(ledger_id=3, entry_ids=[1], sizes=[64], data=b"x" * 64).SerializeToString()
    data = parse_range_batch(raw).data
    assert isinstance(data, memoryview) and data.obj is raw


@given(st.binary(max_size=80))
@example(b"\x80\x80\x80\x80\x10\x00")             # tag 2**32: field number 2**29, one past the last
@example(b"\x18\x80")                            # an entry id cut off
@example(b"\x22\x02\x80\x80")                    # packed sizes ending inside a varint
def test_garbage_is_refused_where_protobuf_refuses_it_and_read_alike_where_it_is_not(raw: bytes) -> None:
    assert_read_as_protobuf_reads(raw, lambda r: as_parsed(pb.ReadRangeBatch.FromString(r)), parsed)
