"""Protobuf written by hand (`wire.codec`, `bookie.server.range_batch_bytes`, `ranges_batch_bytes`,
`add_ack_bytes`) parses as the generated classes' own serialization does."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.internal.decoder import _DecodeVarint  # type: ignore[attr-defined]
from hypothesis import given
from hypothesis import strategies as st

from bkledger.bookie.ranges_read import Packed
from bkledger.bookie.server import add_ack_bytes, add_response_bytes, range_batch_bytes, ranges_batch_bytes
from bkledger.proto import bookie_pb2 as pb
from bkledger.wire import codec as wire
from bkledger.wire.native import NATIVE


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_decodes_to_its_value_and_ends_where_it_says(value: int) -> None:
    encoded = wire.varint(value)
    assert _DecodeVarint(encoded, 0) == (value, len(encoded))


def test_varint_of_a_negative_number_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        wire.varint(-1)


@given(st.binary(max_size=3000))
def test_a_bytes_field_written_by_hand_is_protobufs_own(data: bytes) -> None:
    head = pb.ReadRangeBatch(ledger_id=7, entry_ids=[1, 2]).SerializeToString()
    message = head + wire.field_prefix(5, len(data)) + data
    expected = pb.ReadRangeBatch(ledger_id=7, entry_ids=[1, 2], data=data)
    assert pb.ReadRangeBatch.FromString(message) == expected
    if data:                      # protobuf leaves an empty field out; the rest is byte for byte its own
        assert message == expected.SerializeToString()


@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=40))
def test_packed_varints_are_protobufs_own(values: list[int]) -> None:
    expected = pb.GetListOfEntriesResponse(entry_ids=values).SerializeToString()
    assert wire.packed_field(3, np.array(values, dtype=np.int64)) == expected


@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=60))
def test_native_and_numpy_packed_varints_agree(values: list[int]) -> None:
    """The native packing (used where built) and numpy's (the fallback) write the same bytes."""
    if NATIVE is None:
        pytest.skip("wire._native was not built")
    v = np.array(values, dtype=np.uint64)
    assert bytes(NATIVE.pack_varints(v)) == wire.numpy_packed_varints(v) == b"".join(wire.varint(x) for x in values)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1),
       st.lists(st.tuples(st.integers(min_value=0, max_value=2**63 - 1), st.binary(max_size=100)), max_size=30))
def test_a_range_batch_serialized_by_the_bookie_is_protobufs_own(ledger_id: int, entries: list[tuple[int, bytes]]
                                                                 ) -> None:
    ids = [e for e, _ in entries]
    sizes = [len(b) for _, b in entries]
    data = b"".join(b for _, b in entries)
    got = range_batch_bytes(ledger_id, np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.int64), data)
    expected = pb.ReadRangeBatch(status=pb.EOK, ledger_id=ledger_id, entry_ids=ids, sizes=sizes, data=data)
    assert got == expected.SerializeToString()


@given(st.lists(st.tuples(st.integers(min_value=0, max_value=2**63 - 1), st.integers(min_value=0, max_value=2**63 - 1),
                          st.binary(max_size=100)), max_size=30))
def test_a_ranges_batch_serialized_by_the_bookie_is_protobufs_own(entries: list[tuple[int, int, bytes]]) -> None:
    """ReadRanges' batches: entries of several ledgers, each tagged with its ledger."""
    ledgers, ids, blobs = [e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries]
    sizes = [len(b) for b in blobs]
    got = ranges_batch_bytes(Packed(np.array(ledgers, dtype=np.int64), np.array(ids, dtype=np.int64),
                                    np.array(sizes, dtype=np.int64), b"".join(blobs)))
    expected = pb.ReadRangeBatch(entry_ids=ids, sizes=sizes, data=b"".join(blobs), ledger_ids=ledgers)
    assert got == expected.SerializeToString()


@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=60))
def test_unpacked_varints_are_the_values_packed(values: list[int]) -> None:
    packed = wire.packed_varints(np.array(values, dtype=np.uint64).view(np.int64))
    assert wire.unpack_varints(packed).tolist() == values
    body = b"".join(wire.varint(v) for v in values)
    assert wire.read_varint(body + b"\x01", len(body)) == (1, len(body) + 1)


@pytest.mark.parametrize("body", [b"\x80", b"\x01\xff", b"\xff" * 10 + b"\x01"])
def test_a_cut_off_or_overlong_varint_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        wire.unpack_varints(body)
    with pytest.raises(ValueError):
        wire.read_varint(body, len(body) - 1 if len(body) < 3 else 0)


@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=60))
def test_native_and_numpy_unpacked_varints_agree(values: list[int]) -> None:
    """The native unpacking (used where built) and numpy's (the fallback) read the same values."""
    if NATIVE is None:
        pytest.skip("wire._native was not built")
    body = b"".join(wire.varint(x) for x in values)
    native = np.frombuffer(NATIVE.unpack_varints(body), dtype=np.uint64)
    assert native.tolist() == wire.numpy_unpack_varints(body).tolist() == values


@pytest.mark.parametrize("body", [b"\x80", b"\x01\xff", b"\xff" * 10 + b"\x01"])
def test_the_numpy_fallback_refuses_a_cut_off_or_overlong_varint_too(body: bytes) -> None:
    with pytest.raises(ValueError):
        wire.numpy_unpack_varints(body)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.sampled_from(sorted(pb.StatusCode.values())),
       st.lists(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=30), min_size=1, max_size=4))
def test_add_acks_serialized_by_the_bookie_are_protobufs_own(ledger_id: int, status: int, ids: list[list[int]]
                                                             ) -> None:
    acks = [add_ack_bytes(ledger_id, status, np.array(one, dtype=np.int64)) for one in ids]
    expected = pb.AddResponse(acks=[pb.AddAck(ledger_id=ledger_id, status=status, entry_ids=one)  # type: ignore[arg-type]
                                    for one in ids])
    assert add_response_bytes(acks) == expected.SerializeToString()
