"""The record envelope: how one entry carries (key, timestamp, value), encoded and decoded in bulk.

A ledger written with the envelope says so in its custom metadata (`bkledger.envelope` = b"1", the
version), so a reader knows from the ledger metadata alone which columns exist, like Kafka's record
format carries key and timestamp beside the value. A ledger without that key holds bare values.

Envelope v1, per entry (little-endian), a fixed 13-byte header so that whole chunks decode with numpy:

    flags u8 (bit 0: key present, bit 1: timestamp present) | timestamp i64 (microseconds since the
    epoch, UTC; 0 if absent) | key length u32 (0 if absent) | key bytes | value bytes (the rest)

Pure functions only. Bulk forms work on a concatenated byte buffer plus offsets (n + 1 of them), the
layout of an Arrow binary column, without one Python object per entry.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from bkledger.client.log.core import meta as lm
from bkledger.spark_connector.gather import packed_parts

ENVELOPE_KEY = lm.ENVELOPE_KEY              # the log records what it names (client.log.core.meta)
NONE = 0
V1 = 1
SUPPORTED = (NONE, V1)
HEADER = struct.Struct("<BqI")
HEADER_SIZE = HEADER.size          # 13
FLAG_KEY = 1
FLAG_TIMESTAMP = 2
_NO_INDEX = np.zeros(0, dtype=np.int64)         # one buffer: `gather.packed` needs no buffer index

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


class EnvelopeError(ValueError):
    """An entry or a ledger's envelope marker that this reader cannot decode."""


def custom_metadata(version: int) -> dict[str, bytes]:
    """What a writer puts in the ledger's custom metadata for this envelope version."""
    return {} if version == NONE else {ENVELOPE_KEY: str(version).encode()}


def version_of(custom: Mapping[str, bytes]) -> int:
    """The envelope version a ledger was written with (NONE for bare values)."""
    raw = custom.get(ENVELOPE_KEY)
    if raw is None:
        return NONE
    try:
        version = int(bytes(raw).decode())
    except (UnicodeDecodeError, ValueError):
        raise EnvelopeError(f"ledger custom metadata {ENVELOPE_KEY}={raw!r} is not a version number") from None
    if version not in SUPPORTED:
        raise EnvelopeError(f"envelope version {version} is not supported (this reader knows {SUPPORTED}); "
                            "upgrade bkledger")
    return version


# ---- one record -------------------------------------------------------------------------------
def encode(key: bytes | None, timestamp_us: int | None, value: bytes) -> bytes:
    flags = (FLAG_KEY if key is not None else 0) | (FLAG_TIMESTAMP if timestamp_us is not None else 0)
    k = key or b""
    return HEADER.pack(flags, timestamp_us or 0, len(k)) + k + value


def decode(entry: bytes | memoryview) -> tuple[bytes | None, int | None, bytes]:
    if len(entry) < HEADER_SIZE:
        raise EnvelopeError(f"entry of {len(entry)} bytes is shorter than the {HEADER_SIZE}-byte envelope header")
    flags, ts, key_len = HEADER.unpack_from(entry, 0)
    if HEADER_SIZE + key_len > len(entry):
        raise EnvelopeError(f"envelope key length {key_len} runs past the entry ({len(entry)} bytes)")
    key = bytes(entry[HEADER_SIZE:HEADER_SIZE + key_len]) if flags & FLAG_KEY else None
    return key, (ts if flags & FLAG_TIMESTAMP else None), bytes(entry[HEADER_SIZE + key_len:])


# ---- bulk ---------------------------------------------------------------------------------------
def gather(data: U8, starts: I64, ends: I64) -> tuple[U8, I64]:
    """The bytes of the ranges of `data`, packed back to back, and their offsets (n + 1)."""
    return packed_parts([data], _NO_INDEX, starts, ends)


def _field(data: U8, starts: I64, at: int, width: int, dtype: str) -> npt.NDArray[np.generic]:
    idx = starts[:, None] + np.arange(at, at + width, dtype=np.int64)
    return np.ascontiguousarray(data[idx]).view(dtype).reshape(-1)


@dataclasses.dataclass
class Decoded:
    """Columns of a chunk of enveloped entries, as buffers + offsets + validity."""

    key_data: U8
    key_offsets: I64
    key_valid: Bools
    timestamps: I64
    timestamp_valid: Bools
    value_data: U8
    value_offsets: I64


def decode_bulk(data: U8, offsets: I64) -> Decoded:
    """Decode n enveloped entries laid out as `data[offsets[i]:offsets[i+1]]`."""
    starts = offsets[:-1].astype(np.int64)
    ends = offsets[1:].astype(np.int64)
    if len(starts) and int((ends - starts).min()) < HEADER_SIZE:
        raise EnvelopeError(f"an entry is shorter than the {HEADER_SIZE}-byte envelope header")
    if len(starts) == 0:
        empty = np.zeros(0, dtype=np.uint8)
        zero = np.zeros(1, dtype=np.int64)
        none = np.zeros(0, dtype=np.bool_)
        return Decoded(empty, zero, none, np.zeros(0, dtype=np.int64), none, empty, zero)
    flags = data[starts]
    ts = _field(data, starts, 1, 8, "<i8").astype(np.int64)
    key_len = _field(data, starts, 9, 4, "<u4").astype(np.int64)
    key_start = starts + HEADER_SIZE
    key_end = key_start + key_len
    if bool((key_end > ends).any()):
        raise EnvelopeError("an envelope key length runs past its entry")
    key_data, key_offsets = gather(data, key_start, key_end)
    value_data, value_offsets = gather(data, key_end, ends)
    return Decoded(key_data, key_offsets, (flags & FLAG_KEY) != 0, ts, (flags & FLAG_TIMESTAMP) != 0,
                   value_data, value_offsets)


def encode_bulk(values: tuple[U8, I64], keys: tuple[U8, I64, Bools] | None,
                timestamps: tuple[I64, Bools] | None) -> tuple[U8, I64]:
    """Envelope n records at once; each part is (data, offsets[, valid]). Returns (data, offsets).

    The n headers are built with numpy, then each record's header, key and value are packed in one pass
    (`gather`: 3n ranges over the headers, the keys and the values)."""
    value_data, value_offsets = values
    n = len(value_offsets) - 1
    if keys is not None:
        key_data, key_offsets, key_valid = keys
        key_len = np.where(key_valid, np.diff(key_offsets), 0).astype(np.int64)
    else:
        key_data, key_offsets, key_valid = np.zeros(0, np.uint8), np.zeros(n + 1, np.int64), np.zeros(n, np.bool_)
        key_len = np.zeros(n, dtype=np.int64)
    ts, ts_valid = timestamps if timestamps is not None else (np.zeros(n, np.int64), np.zeros(n, np.bool_))
    header = np.zeros((n, HEADER_SIZE), dtype=np.uint8)
    header[:, 0] = np.where(key_valid, FLAG_KEY, 0) | np.where(ts_valid, FLAG_TIMESTAMP, 0)
    header[:, 1:9] = np.where(ts_valid, ts, 0).astype("<i8").view(np.uint8).reshape(n, 8)
    header[:, 9:13] = key_len.astype("<u4").view(np.uint8).reshape(n, 4)
    header_start = np.arange(n, dtype=np.int64) * HEADER_SIZE
    key_start = np.asarray(key_offsets[:-1], dtype=np.int64)
    value_start = np.asarray(value_offsets[:-1], dtype=np.int64)
    starts = np.stack((header_start, key_start, value_start), axis=1).reshape(-1)
    ends = np.stack((header_start + HEADER_SIZE, key_start + key_len, np.asarray(value_offsets[1:], dtype=np.int64)),
                    axis=1).reshape(-1)
    which = np.tile(np.arange(3, dtype=np.int64), n)
    data, bounds = packed_parts([header.reshape(-1), key_data, value_data], which, starts, ends)
    return data, bounds[::3].copy()
