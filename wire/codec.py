"""Protobuf wire format by hand, for the messages that carry megabytes of entries.

Python protobuf (upb) copies a `bytes` field into the message and again out of it when the message is
serialized, and takes a Python int per element of a repeated field. So the big messages (an AddRequest's
batches, a ReadRangeBatch) are written as their small fields (serialized by protobuf, or here with numpy
for packed integers) followed by the bytes field's tag and length and the bytes, joined once. The result
is protobuf's own encoding of the message (the bytes field last, as protobuf writes it). The reading
half does the inverse for the bookie's AddRequests: fields as views of the received buffer, packed
integers decoded by numpy. numpy is imported when first used: the client imports this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from bkledger.wire.native import NATIVE

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

VARINT = 0                    # protobuf wire type of integers
UINT64 = (1 << 64) - 1
UINT32 = (1 << 32) - 1
LENGTH_DELIMITED = 2          # protobuf wire type of bytes, strings and embedded messages


def varint(value: int) -> bytes:
    """Unsigned base-128 varint (value >= 0), as protobuf writes lengths and tags."""
    if value < 0:
        raise ValueError(f"varint of a negative number {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field_prefix(field_number: int, size: int) -> bytes:
    """The tag and length that precede `size` bytes of a length-delimited field."""
    return varint(field_number << 3 | LENGTH_DELIMITED) + varint(size)


def varint_field(field_number: int, value: int) -> bytes:
    """An int64 field; protobuf leaves out a field at its default, 0, and writes a negative one as
    its 64-bit two's complement (ten bytes)."""
    return varint(field_number << 3 | VARINT) + varint(value & UINT64) if value else b""


def packed_varints(values: npt.NDArray[np.int64]) -> bytes:
    """The varints of a packed repeated integer field, with no Python object per value: a negative int64
    takes ten bytes, as protobuf writes it. One native call where wire._native was built."""
    import numpy as np  # not at import: the client imports this module, and numpy starts threads

    v = np.ascontiguousarray(values).astype(np.uint64, copy=False)
    if NATIVE is not None:
        return bytes(NATIVE.pack_varints(v))
    return numpy_packed_varints(v)


def numpy_packed_varints(v: npt.NDArray[np.uint64]) -> bytes:
    """packed_varints with numpy alone (where the native module was not built)."""
    import numpy as np

    if not len(v):
        return b""
    most = max(1, (int(v.max()).bit_length() + 6) // 7)       # bytes of the longest varint
    if most == 1:
        return v.astype(np.uint8).tobytes()
    widths = np.ones(len(v), dtype=np.uint64)
    for k in range(1, most):
        widths += v >= np.uint64(1 << (7 * k))
    shifts = np.arange(most, dtype=np.uint64)
    groups = ((v[:, None] >> (np.uint64(7) * shifts)) & np.uint64(0x7F)).astype(np.uint8)
    groups[shifts[None, :] + np.uint64(1) < widths[:, None]] |= 0x80    # more bytes follow
    return groups[shifts[None, :] < widths[:, None]].tobytes()


def packed_field(field_number: int, values: npt.NDArray[np.int64]) -> bytes:
    """A packed repeated integer field; nothing when empty, as protobuf writes it."""
    body = packed_varints(values)
    return field_prefix(field_number, len(body)) + body if body else b""


# ---- reading ----------------------------------------------------------------------------------
FIXED64 = 1                   # wire types that are skipped when a field is not known
FIXED32 = 5
MAX_VARINT_BYTES = 10
MAX_TAG_BYTES = 5            # a field's tag is a uint32: protobuf refuses a longer varint for it,
MAX_TAG = (1 << 32) - 1      # or a larger value (a field number past 2**29 - 1)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The unsigned varint at `pos` and the position after it; ValueError when it is cut off or too long."""
    value = shift = 0
    end = min(len(buf), pos + MAX_VARINT_BYTES)
    while pos < end:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & UINT64, pos
        shift += 7
    raise ValueError("varint cut off or longer than ten bytes")


def fields(buf: bytes | memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """Each field of a message in order: (field number, wire type, value). A varint's value is an int, a
    length-delimited field's a view of `buf` (no copy); fixed-size fields are passed over. ValueError
    for what protobuf's parser refuses too (a field cut off, field number 0 or past 2**29 - 1, a tag longer
    than five bytes, groups, wire types 6-7)."""
    view = memoryview(buf)
    pos, size = 0, len(view)
    while pos < size:
        key, end = read_varint(view, pos)
        if end - pos > MAX_TAG_BYTES or key > MAX_TAG:
            raise ValueError("field tag longer than five bytes or beyond 32 bits (field number over 2**29 - 1)")
        pos = end
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire_type == VARINT:
            value, pos = read_varint(view, pos)
            yield number, wire_type, value
        elif wire_type == LENGTH_DELIMITED:
            length, pos = read_varint(view, pos)
            if pos + length > size:
                raise ValueError(f"field {number} of {length} bytes cut off at {size - pos}")
            yield number, wire_type, view[pos : pos + length]
            pos += length
        elif wire_type in (FIXED64, FIXED32):
            pos += 8 if wire_type == FIXED64 else 4
            if pos > size:
                raise ValueError(f"fixed-size field {number} cut off")
        else:
            raise ValueError(f"wire type {wire_type} of field {number} is not read here")


def unpack_varints(body: bytes | memoryview) -> npt.NDArray[np.uint64]:
    """The values of a packed repeated integer field (no Python object per value); the inverse of
    `packed_varints`. ValueError when the last varint is cut off or one is too long. One native call
    where wire._native was built: numpy's decoding cost 11-13 us a call even for a few
    values, twice per batch a bookie receives, and most of the time of a Spark append's large ones."""
    import numpy as np

    if NATIVE is not None:
        return np.frombuffer(NATIVE.unpack_varints(body), dtype=np.uint64)
    return numpy_unpack_varints(body)


def numpy_unpack_varints(body: bytes | memoryview) -> npt.NDArray[np.uint64]:
    """unpack_varints with numpy alone (where the native module was not built)."""
    import numpy as np

    raw = np.frombuffer(body, dtype=np.uint8)
    if not len(raw):
        return np.zeros(0, dtype=np.uint64)
    if raw[-1] >= 0x80:
        raise ValueError("packed varints end inside a varint")
    ends = np.flatnonzero(raw < 0x80)
    if len(ends) == len(raw):               # every value below 128: one byte each
        return raw.astype(np.uint64)
    starts = np.zeros(len(ends), dtype=np.int64)
    starts[1:] = ends[:-1] + 1
    widths = ends - starts + 1
    if int(widths.max()) > MAX_VARINT_BYTES:
        raise ValueError("a packed varint is longer than ten bytes")
    place = np.arange(len(raw), dtype=np.int64) - np.repeat(starts, widths)
    groups = (raw & 0x7F).astype(np.uint64) << (np.uint64(7) * place.astype(np.uint64))
    return np.add.reduceat(groups, starts)  # the groups' bits never overlap: the sum is their union


def signed(value: int, bits: int) -> int:
    """A varint's value as the signed integer of `bits` bits that protobuf reads from it (int64, int32)."""
    return value - (1 << bits) if value >> (bits - 1) else value


def joined(parts: list[npt.NDArray[np.uint64]]) -> npt.NDArray[np.uint64]:
    """The values of a repeated integer field written in several pieces (packed runs, single values)."""
    import numpy as np

    return parts[0] if len(parts) == 1 else np.concatenate(parts)
