"""The record envelope: how one entry carries (key, timestamp, headers, value), encoded and decoded alone
or in bulk. Used by the Spark writer and reader, the client's LogWriter and the `bkledger log` tools.

A ledger written with the envelope says so in its custom metadata (`bkledger.envelope` = b"1" or b"2",
the version), so a reader knows from the ledger metadata alone which columns exist, like Kafka's record
format carries key and timestamp beside the value. A ledger without that key holds bare values. A reader
refuses a version it does not know (`EnvelopeVersionError`: "upgrade bkledger") rather than misread it.

Per entry (little-endian), a fixed header so that whole chunks decode with numpy:

    v1 (13 bytes): flags u8 | timestamp i64 | key length u32 | key | value (the rest)
    v2 (17 bytes): flags u8 | timestamp i64 | key length u32 | headers length u32 | key | headers | value

flags: bit 0 key present, bit 1 timestamp present, bit 2 (v2) headers present; other bits are refused.
The timestamp is in microseconds since the epoch, UTC (0 if absent). The headers (Kafka's record headers,
an ordered list of (str key, bytes-or-None value), keys may repeat) are: count u32, then per header key
length u32 | key (UTF-8) | value length i32 (-1: None) | value.

Pure functions only (no I/O, no clock). Bulk forms work on a concatenated byte buffer plus offsets
(n + 1 of them), the layout of an Arrow binary column, without one Python object per entry.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from bkledger.client.log.core import meta as lm

ENVELOPE_KEY = lm.ENVELOPE_KEY              # the log records what it names (client.log.core.meta)
NONE = 0
V1 = 1
V2 = 2                             # v1 + headers
LATEST = V2
SUPPORTED = (NONE, V1, V2)
HEADER = struct.Struct("<BqI")
HEADER_SIZE = HEADER.size          # 13
HEADER_V2 = struct.Struct("<BqII")
HEADER_V2_SIZE = HEADER_V2.size    # 17
FLAG_KEY = 1
FLAG_TIMESTAMP = 2
FLAG_HEADERS = 4
FLAGS_KNOWN = {V1: FLAG_KEY | FLAG_TIMESTAMP, V2: FLAG_KEY | FLAG_TIMESTAMP | FLAG_HEADERS}
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_NO_INDEX = np.zeros(0, dtype=np.int64)         # one buffer: `gather.packed` needs no buffer index

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Headers = tuple[tuple[str, bytes | None], ...]
HeadersIn = Sequence[tuple[str, bytes | bytearray | memoryview | None]] | Mapping[str, bytes | None]


class EnvelopeError(ValueError):
    """An entry or a ledger's envelope marker that this reader cannot decode."""


class EnvelopeVersionError(EnvelopeError):
    """A ledger names an envelope version this bkledger does not know (written by a newer one)."""

    def __init__(self, version: int) -> None:
        super().__init__(f"envelope version {version} is not supported (this reader knows {SUPPORTED}); "
                         "upgrade bkledger")
        self.version = version


@dataclasses.dataclass(frozen=True)
class Record:
    """One decoded entry: key, timestamp (microseconds since the epoch), headers (None: none), value."""

    key: bytes | None
    timestamp_us: int | None
    value: bytes
    headers: Headers | None = None


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
    return check_version(version)


def check_version(version: int) -> int:
    """`version` if this bkledger can read and write it, else EnvelopeVersionError (TypeError if it is
    not an int: True or 1.0 would be written into a ledger's metadata as "True" or "1.0")."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"an envelope version is an int ({SUPPORTED}), not {version!r}")
    if version not in SUPPORTED:
        raise EnvelopeVersionError(version)
    return version


def header_size(version: int) -> int:
    return HEADER_V2_SIZE if version == V2 else HEADER_SIZE


# ---- headers --------------------------------------------------------------------------------------
def normalized_headers(headers: HeadersIn | None) -> Headers | None:
    """Headers as the codec keeps them: a tuple of (str, bytes or None); TypeError naming a bad one."""
    if headers is None:
        return None
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    out = []
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise TypeError(f"a header must be a (key, value) pair, got {pair!r}")
        key, value = pair
        if not isinstance(key, str):
            raise TypeError(f"a header key must be a str, got {type(key).__name__}")
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"header {key!r}: the value must be bytes or None, got {type(value).__name__}")
        out.append((key, None if value is None else bytes(value)))
    return tuple(out)


def encode_headers(headers: Headers) -> bytes:
    parts = [_U32.pack(len(headers))]
    for key, value in headers:
        raw = key.encode("utf-8")
        parts += [_U32.pack(len(raw)), raw]
        parts += [_I32.pack(-1)] if value is None else [_I32.pack(len(value)), value]
    return b"".join(parts)


def decode_headers(block: bytes | memoryview) -> Headers:
    """The headers of one encoded block; EnvelopeError if it is malformed (never reads past it)."""
    view = memoryview(block)
    at, out = 4, []
    if len(view) < 4:
        raise EnvelopeError(f"a headers block of {len(view)} bytes has no count")
    for _ in range(_U32.unpack_from(view, 0)[0]):
        key_len = _take(view, at, 4, _U32)
        key = bytes(view[at + 4:at + 4 + key_len])
        if len(key) != key_len:
            raise EnvelopeError("a header key runs past its headers block")
        at += 4 + key_len
        value_len = _take(view, at, 4, _I32)
        at += 4
        if value_len < -1 or at + max(value_len, 0) > len(view):
            raise EnvelopeError(f"a header value length {value_len} runs past its headers block")
        value = None if value_len == -1 else bytes(view[at:at + value_len])
        at += max(value_len, 0)
        try:
            out.append((key.decode("utf-8"), value))
        except UnicodeDecodeError:
            raise EnvelopeError(f"a header key is not UTF-8: {key!r}") from None
    if at != len(view):
        raise EnvelopeError(f"{len(view) - at} bytes follow the headers in their block")
    return tuple(out)


def _take(view: memoryview, at: int, width: int, field: struct.Struct) -> int:
    if at + width > len(view):
        raise EnvelopeError("a headers block ends inside a header")
    return int(field.unpack_from(view, at)[0])


def header_blocks(rows: Sequence[HeadersIn | None]) -> tuple[U8, I64, Bools]:
    """Each row's headers encoded (data, offsets, valid: False where the row has none), for `encode_bulk`."""
    blocks = [b"" if row is None else encode_headers(normalized_headers(row) or ()) for row in rows]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, blocks), dtype=np.int64, count=len(blocks)), out=offsets[1:])
    valid = np.fromiter((row is not None for row in rows), dtype=np.bool_, count=len(rows))
    return np.frombuffer(b"".join(blocks), dtype=np.uint8), offsets, valid


# ---- one record -------------------------------------------------------------------------------
def encode(key: bytes | None, timestamp_us: int | None, value: bytes, headers: HeadersIn | None = None,
           version: int | None = None) -> bytes:
    """One enveloped entry: version V1 unless it has headers (V2) or `version` says so."""
    norm = normalized_headers(headers)
    version = (V1 if norm is None else V2) if version is None else version
    flags = (FLAG_KEY if key is not None else 0) | (FLAG_TIMESTAMP if timestamp_us is not None else 0)
    k = bytes(key or b"")
    if version == V1:
        if norm is not None:
            raise EnvelopeError("headers need envelope version 2; this ledger is written with version 1")
        return HEADER.pack(flags, timestamp_us or 0, len(k)) + k + value
    if version != V2:
        raise EnvelopeVersionError(version)
    block = b"" if norm is None else encode_headers(norm)
    flags |= FLAG_HEADERS if norm is not None else 0
    return HEADER_V2.pack(flags, timestamp_us or 0, len(k), len(block)) + k + block + value


def decode(entry: bytes | memoryview, version: int = V1) -> tuple[bytes | None, int | None, bytes]:
    """(key, timestamp, value) of one entry of a ledger of this envelope version."""
    rec = decode_record(entry, version)
    return rec.key, rec.timestamp_us, rec.value


def decode_record(entry: bytes | memoryview, version: int = V1) -> Record:
    """One entry of a ledger of this envelope version; EnvelopeError if it does not decode."""
    size = header_size(check_version(version))
    if version == NONE:
        return Record(None, None, bytes(entry))
    if len(entry) < size:
        raise EnvelopeError(f"entry of {len(entry)} bytes is shorter than the {size}-byte envelope header")
    if version == V1:
        flags, ts, key_len = HEADER.unpack_from(entry, 0)
        headers_len = 0
    else:
        flags, ts, key_len, headers_len = HEADER_V2.unpack_from(entry, 0)
    if flags & ~FLAGS_KNOWN[version]:
        raise EnvelopeError(f"envelope flags {flags:#x} name fields that version {version} does not have")
    if size + key_len + headers_len > len(entry):
        raise EnvelopeError(f"envelope key length {key_len} (+ headers {headers_len}) runs past the entry "
                            f"({len(entry)} bytes)")
    key = bytes(entry[size:size + key_len]) if flags & FLAG_KEY else None
    at = size + key_len
    headers = decode_headers(entry[at:at + headers_len]) if flags & FLAG_HEADERS else None
    return Record(key, ts if flags & FLAG_TIMESTAMP else None, bytes(entry[at + headers_len:]), headers)


# ---- bulk ---------------------------------------------------------------------------------------
def gather(data: U8, starts: I64, ends: I64) -> tuple[U8, I64]:
    """The bytes of the ranges of `data`, packed back to back, and their offsets (n + 1)."""
    from bkledger.client.log.core.gather import packed_parts  # pyarrow: loaded by bulk use only

    return packed_parts([data], _NO_INDEX, starts, ends)


def _field(data: U8, starts: I64, at: int, width: int, dtype: str) -> npt.NDArray[np.generic]:
    idx = starts[:, None] + np.arange(at, at + width, dtype=np.int64)
    return np.ascontiguousarray(data[idx]).view(dtype).reshape(-1)


@dataclasses.dataclass
class Decoded:
    """Columns of a chunk of enveloped entries, as buffers + offsets + validity (headers: encoded blocks,
    `decode_headers` each; none in v1)."""

    key_data: U8
    key_offsets: I64
    key_valid: Bools
    timestamps: I64
    timestamp_valid: Bools
    value_data: U8
    value_offsets: I64
    header_data: U8 = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    header_offsets: I64 | None = None
    header_valid: Bools | None = None

    def headers(self) -> list[Headers | None]:
        """Each entry's headers (None where it has none)."""
        n = len(self.timestamps)
        if self.header_offsets is None or self.header_valid is None:
            return [None] * n
        raw, offs = self.header_data.tobytes(), self.header_offsets
        return [decode_headers(raw[offs[i]:offs[i + 1]]) if self.header_valid[i] else None for i in range(n)]


def decode_bulk(data: U8, offsets: I64, version: int = V1) -> Decoded:
    """Decode n enveloped entries laid out as `data[offsets[i]:offsets[i+1]]`."""
    size = header_size(check_version(version))
    starts = offsets[:-1].astype(np.int64)
    ends = offsets[1:].astype(np.int64)
    if len(starts) and int((ends - starts).min()) < size:
        raise EnvelopeError(f"an entry is shorter than the {size}-byte envelope header")
    if len(starts) == 0:
        empty = np.zeros(0, dtype=np.uint8)
        zero = np.zeros(1, dtype=np.int64)
        none = np.zeros(0, dtype=np.bool_)
        return Decoded(empty, zero, none, np.zeros(0, dtype=np.int64), none, empty, zero)
    flags = data[starts]
    if bool((flags & ~np.uint8(FLAGS_KNOWN.get(version, 0))).any()):
        raise EnvelopeError(f"envelope flags name fields that version {version} does not have")
    ts = _field(data, starts, 1, 8, "<i8").astype(np.int64)
    key_len = _field(data, starts, 9, 4, "<u4").astype(np.int64)
    headers_len = _field(data, starts, 13, 4, "<u4").astype(np.int64) if version == V2 else 0
    key_start = starts + size
    key_end = key_start + key_len
    headers_end = key_end + headers_len
    if bool((headers_end > ends).any()):
        raise EnvelopeError("an envelope key or headers length runs past its entry")
    key_data, key_offsets = gather(data, key_start, key_end)
    value_data, value_offsets = gather(data, headers_end, ends)
    out = Decoded(key_data, key_offsets, (flags & FLAG_KEY) != 0, ts, (flags & FLAG_TIMESTAMP) != 0,
                  value_data, value_offsets)
    if version == V2:
        out.header_data, out.header_offsets = gather(data, key_end, headers_end)
        out.header_valid = (flags & FLAG_HEADERS) != 0
    return out


def encode_bulk(values: tuple[U8, I64], keys: tuple[U8, I64, Bools] | None,
                timestamps: tuple[I64, Bools] | None, headers: tuple[U8, I64, Bools] | None = None,
                version: int = V1) -> tuple[U8, I64]:
    """Envelope n records at once; each part is (data, offsets[, valid]) (`headers`: encoded blocks,
    `header_blocks`; version 2 only). Returns (data, offsets).

    The n headers are built with numpy, then each record's header, key, [headers] and value are packed in
    one pass (`gather`: 3n or 4n ranges over the headers, the keys, [the header blocks] and the values)."""
    if headers is not None and version != V2:
        raise EnvelopeError("headers need envelope version 2")
    size = header_size(check_version(version))
    value_data, value_offsets = values
    n = len(value_offsets) - 1
    key_data, key_offsets, key_valid = keys if keys is not None else _no_parts(n)
    key_len = np.where(key_valid, np.diff(key_offsets), 0).astype(np.int64)
    ts, ts_valid = timestamps if timestamps is not None else (np.zeros(n, np.int64), np.zeros(n, np.bool_))
    h_data, h_offsets, h_valid = headers if headers is not None else _no_parts(n)
    h_len = np.where(h_valid, np.diff(h_offsets), 0).astype(np.int64)
    header = np.zeros((n, size), dtype=np.uint8)
    header[:, 0] = (np.where(key_valid, FLAG_KEY, 0) | np.where(ts_valid, FLAG_TIMESTAMP, 0)
                    | np.where(h_valid, FLAG_HEADERS, 0))
    header[:, 1:9] = np.where(ts_valid, ts, 0).astype("<i8").view(np.uint8).reshape(n, 8)
    header[:, 9:13] = key_len.astype("<u4").view(np.uint8).reshape(n, 4)
    header_start = np.arange(n, dtype=np.int64) * size
    key_start = np.asarray(key_offsets[:-1], dtype=np.int64)
    value_start = np.asarray(value_offsets[:-1], dtype=np.int64)
    value_end = np.asarray(value_offsets[1:], dtype=np.int64)
    ranges = [(header_start, header_start + size), (key_start, key_start + key_len)]
    buffers = [header.reshape(-1), key_data]
    if version == V2:
        header[:, 13:17] = h_len.astype("<u4").view(np.uint8).reshape(n, 4)
        h_start = np.asarray(h_offsets[:-1], dtype=np.int64)
        ranges.append((h_start, h_start + h_len))
        buffers.append(h_data)
    ranges.append((value_start, value_end))
    buffers.append(value_data)
    parts = len(ranges)
    starts = np.stack([r[0] for r in ranges], axis=1).reshape(-1)
    ends = np.stack([r[1] for r in ranges], axis=1).reshape(-1)
    which = np.tile(np.arange(parts, dtype=np.int64), n)
    from bkledger.client.log.core.gather import packed_parts

    data, bounds = packed_parts(buffers, which, starts, ends)
    return data, bounds[::parts].copy()


def _no_parts(n: int) -> tuple[U8, I64, Bools]:
    return np.zeros(0, np.uint8), np.zeros(n + 1, np.int64), np.zeros(n, np.bool_)
