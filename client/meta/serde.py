"""LedgerMetadata <-> znode bytes, in the shape of BookKeeper's LedgerMetadataSerDe format V3 (R2).

The data starts with the ASCII header `"BookieMetadataFormatVersion\\t3\\n"`, followed by one
varint-length-delimited binary `LedgerMetadataFormat` protobuf (proto/formats.proto). The ledger id
is not stored inside (it is the znode's name), so decoding takes it as an argument. Every field of
`LedgerMetadata` round-trips exactly: the last entry id and ctime are always written, the password
always (empty when none), custom metadata sorted by key, plus the payload compression. Anything else
(another header, version, a truncated or trailing body, a bad enum) raises MetadataFormatError.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from bkledger.client.meta.errors import MetadataFormatError
from bkledger.client.protocol.metadata import DigestType, Fragment, LedgerMetadata, LedgerState
from bkledger.proto import formats_pb2 as fpb
from bkledger.wire.codec import varint as encode_varint

HEADER_PREFIX = b"BookieMetadataFormatVersion\t"
FORMAT_VERSION = 3
HEADER = HEADER_PREFIX + str(FORMAT_VERSION).encode("ascii") + b"\n"
_MAX_VARINT_BYTES = 10
_PB = fpb.LedgerMetadataFormat


def decode_varint(data: bytes | memoryview, pos: int = 0) -> tuple[int, int]:
    """(value, position after it); MetadataFormatError if truncated or longer than 10 bytes."""
    value, shift = 0, 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= len(data):
            raise MetadataFormatError("ledger metadata is truncated inside the length prefix")
        byte = data[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise MetadataFormatError("ledger metadata length prefix is longer than 10 bytes")


def to_proto(md: LedgerMetadata) -> fpb.LedgerMetadataFormat:
    msg = _PB(
        write_quorum_size=md.write_quorum,
        ensemble_size=md.ensemble_size,
        length=md.length,
        last_entry_id=md.last_entry_id,
        state=md.state.name,
        digest_type=md.digest_type.name,
        password=bytes(md.password),
        ack_quorum_size=md.ack_quorum,
        ctime=md.ctime_ms,
        compression=md.compression,
    )
    for fragment in md.fragments:
        msg.segment.add(ensemble_member=list(fragment.ensemble), first_entry_id=fragment.first_entry_id)
    for key in sorted(md.custom_metadata):
        msg.custom_metadata.add(key=key, value=bytes(md.custom_metadata[key]))
    return msg


def from_proto(ledger_id: int, msg: fpb.LedgerMetadataFormat) -> LedgerMetadata:
    try:
        state = LedgerState[_PB.State.Name(msg.state)]
    except KeyError:
        raise MetadataFormatError(f"ledger {ledger_id}: metadata has no valid state ({msg.state})") from None
    try:
        digest = DigestType[_PB.DigestType.Name(msg.digest_type)]
    except KeyError:
        raise MetadataFormatError(
            f"ledger {ledger_id}: metadata has no valid digest type ({msg.digest_type})") from None
    return LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=msg.ensemble_size,
        write_quorum=msg.write_quorum_size,
        ack_quorum=msg.ack_quorum_size,
        state=state,
        last_entry_id=msg.last_entry_id,
        length=msg.length,
        fragments=tuple(Fragment(s.first_entry_id, tuple(s.ensemble_member)) for s in msg.segment),
        digest_type=digest,
        password=bytes(msg.password),
        ctime_ms=msg.ctime,
        custom_metadata={e.key: bytes(e.value) for e in msg.custom_metadata},
        compression=msg.compression,
    )


def serialize(md: LedgerMetadata) -> bytes:
    """The znode data for `md`: V3 header + varint length + LedgerMetadataFormat."""
    body = to_proto(md).SerializeToString(deterministic=True)
    return HEADER + encode_varint(len(body)) + body


def format_version(data: bytes) -> int:
    """The N of the `BookieMetadataFormatVersion\\tN\\n` header; MetadataFormatError if there is none."""
    if not data.startswith(HEADER_PREFIX):
        raise MetadataFormatError(
            f"not ledger metadata: the data does not start with 'BookieMetadataFormatVersion\\t' "
            f"(starts with {bytes(data[:32])!r})")
    end = data.find(b"\n", len(HEADER_PREFIX))
    number = data[len(HEADER_PREFIX):end] if end >= 0 else b""
    if not number.isdigit():
        raise MetadataFormatError("ledger metadata header has no version number")
    return int(number)


def deserialize(ledger_id: int, data: bytes) -> LedgerMetadata:
    """Parse znode data written by `serialize` (format V3); MetadataFormatError on anything else."""
    version = format_version(data)
    if version != FORMAT_VERSION:
        raise MetadataFormatError(
            f"ledger {ledger_id}: metadata format version {version} is not supported (only V3, binary)")
    length, pos = decode_varint(data, len(HEADER))
    if pos + length != len(data):
        raise MetadataFormatError(
            f"ledger {ledger_id}: metadata body is {len(data) - pos} bytes but its prefix says {length}")
    msg = _PB()
    try:
        msg.ParseFromString(data[pos:])
    except DecodeError as exc:
        raise MetadataFormatError(f"ledger {ledger_id}: metadata body is not a LedgerMetadataFormat: {exc}") \
            from exc
    return from_proto(ledger_id, msg)
