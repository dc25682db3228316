"""R2: ledger metadata <-> znode bytes in BookKeeper's V3 shape (header + length-delimited protobuf)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkledger.client.meta import serde
from bkledger.client.meta.errors import MetadataFormatError
from bkledger.client.protocol.metadata import DigestType, Fragment, LedgerMetadata, LedgerState
from bkledger.proto import formats_pb2 as fpb


def sample(**changes: object) -> LedgerMetadata:
    md = LedgerMetadata(
        ledger_id=7, ensemble_size=3, write_quorum=2, ack_quorum=2, state=LedgerState.OPEN,
        last_entry_id=-1, length=0,
        fragments=(Fragment(0, ("b1:3181", "b2:3181", "b3:3181")),),
        digest_type=DigestType.CRC32C, password=b"pw", ctime_ms=1_700_000_000_000,
        custom_metadata={"app": b"x", "bin": bytes(range(256))}, compression="lz4",
    )
    return dataclasses.replace(md, **changes)  # type: ignore[arg-type]


def test_header_and_round_trip() -> None:
    """R2: all fields survive, including custom metadata, compression, ctime and fragments."""
    md = sample(state=LedgerState.CLOSED, last_entry_id=41, length=4242,
                fragments=(Fragment(0, ("a:1", "b:1", "c:1")), Fragment(10, ("a:1", "d:1", "c:1"))))
    data = serde.serialize(md)
    assert data.startswith(b"BookieMetadataFormatVersion\t3\n")
    assert serde.format_version(data) == 3
    assert serde.deserialize(7, data) == md


def test_body_is_length_delimited_ledger_metadata_format() -> None:
    data = serde.serialize(sample())
    length, pos = serde.decode_varint(data, len(serde.HEADER))
    assert pos + length == len(data)
    msg = fpb.LedgerMetadataFormat.FromString(data[pos:])
    assert msg.ensemble_size == 3 and msg.write_quorum_size == 2 and msg.ack_quorum_size == 2
    assert msg.state == fpb.LedgerMetadataFormat.OPEN
    assert msg.digest_type == fpb.LedgerMetadataFormat.CRC32C
    assert [s.first_entry_id for s in msg.segment] == [0]
    assert msg.last_entry_id == -1


def test_empty_password_and_metadata_round_trip() -> None:
    md = sample(password=b"", custom_metadata={}, compression="", ctime_ms=0,
                state=LedgerState.IN_RECOVERY, digest_type=DigestType.DUMMY)
    assert serde.deserialize(7, serde.serialize(md)) == md


def test_serialization_is_deterministic() -> None:
    a = sample(custom_metadata={"z": b"1", "a": b"2"})
    b = sample(custom_metadata={"a": b"2", "z": b"1"})
    assert serde.serialize(a) == serde.serialize(b)


_bookie = st.from_regex(r"[a-z0-9.]{1,12}:[0-9]{1,5}", fullmatch=True)


@st.composite
def metadata(draw: st.DrawFn) -> LedgerMetadata:
    ensemble_size = draw(st.integers(1, 6))
    write_quorum = draw(st.integers(1, ensemble_size))
    firsts = sorted(draw(st.sets(st.integers(0, 2**40), min_size=1, max_size=4)))
    fragments = tuple(Fragment(f, tuple(draw(st.lists(_bookie, min_size=ensemble_size, max_size=ensemble_size))))
                      for f in firsts)
    return LedgerMetadata(
        ledger_id=draw(st.integers(0, 2**63 - 1)),
        ensemble_size=ensemble_size, write_quorum=write_quorum, ack_quorum=draw(st.integers(1, write_quorum)),
        state=draw(st.sampled_from(list(LedgerState))),
        last_entry_id=draw(st.integers(-1, 2**62)), length=draw(st.integers(0, 2**62)),
        fragments=fragments, digest_type=draw(st.sampled_from(list(DigestType))),
        password=draw(st.binary(max_size=32)), ctime_ms=draw(st.integers(0, 2**50)),
        custom_metadata=draw(st.dictionaries(st.text(max_size=10), st.binary(max_size=20), max_size=4)),
        compression=draw(st.sampled_from(["", "lz4"])),
    )


@given(md=metadata())
def test_round_trip_property(md: LedgerMetadata) -> None:
    assert serde.deserialize(md.ledger_id, serde.serialize(md)) == md


@given(value=st.integers(0, 2**64 - 1))
def test_varint_round_trip(value: int) -> None:
    encoded = serde.encode_varint(value)
    assert serde.decode_varint(encoded) == (value, len(encoded))


@pytest.mark.parametrize(("data", "match"), [
    (b"", "does not start"),
    (b"garbage", "does not start"),
    (b"BookieMetadataFormatVersion\t2\nquorumSize: 2\n", "version 2 is not supported"),
    (b"BookieMetadataFormatVersion\tx\n", "no version number"),
    (serde.HEADER, "truncated"),
    (serde.HEADER + b"\x05abc", "prefix says 5"),
    (serde.HEADER + b"\x80" * 11, "longer than 10 bytes"),
    (serde.HEADER + b"\x03\xff\xff\xff", "not a LedgerMetadataFormat"),
])
def test_garbage_is_a_clear_error(data: bytes, match: str) -> None:
    with pytest.raises(MetadataFormatError, match=match):
        serde.deserialize(1, data)


def test_trailing_bytes_rejected() -> None:
    with pytest.raises(MetadataFormatError, match="prefix says"):
        serde.deserialize(7, serde.serialize(sample()) + b"x")


def test_missing_state_or_digest_rejected() -> None:
    body = fpb.LedgerMetadataFormat(ensemble_size=1, write_quorum_size=1, ack_quorum_size=1).SerializeToString()
    data = serde.HEADER + serde.encode_varint(len(body)) + body
    with pytest.raises(MetadataFormatError, match="state"):
        serde.deserialize(1, data)
