"""Protobuf wire format by hand, for the messages that carry megabytes of entries.

Python protobuf (upb) copies a `bytes` field into the message and again out of it when the message is
serialized, and takes a Python int per element of a repeated field. So the big messages (an AddRequest's
batches, a ReadRangeBatch) are written as their small fields (serialized by protobuf, or here with numpy
for packed integers) followed by the bytes field's tag and length and the bytes, joined once. The result
is protobuf's own encoding of the message (the bytes field last, as protobuf writes it); readers parse it
with the generated classes. numpy is imported when first used: the client imports this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

VARINT = 0                    # protobuf wire type of integers
UINT64 = (1 << 64) - 1
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
    """The varints of a packed repeated integer field, numpy-built (no Python object per value): a
    negative int64 takes ten bytes, as protobuf writes it."""
    import numpy as np  # not at import: the client imports this module, and numpy starts threads

    v = np.ascontiguousarray(values).astype(np.uint64)
    if not len(v):
        return b""
    widths = np.ones(len(v), dtype=np.int64)
    for k in range(1, 10):
        widths += v >= np.uint64(1 << (7 * k))
    shifts = np.arange(int(widths.max()), dtype=np.uint64)
    groups = ((v[:, None] >> (np.uint64(7) * shifts)) & np.uint64(0x7F)).astype(np.uint8)
    groups[shifts[None, :] + np.uint64(1) < widths[:, None].astype(np.uint64)] |= 0x80    # more bytes follow
    return groups[shifts[None, :] < widths[:, None].astype(np.uint64)].tobytes()


def packed_field(field_number: int, values: npt.NDArray[np.int64]) -> bytes:
    """A packed repeated integer field; nothing when empty, as protobuf writes it."""
    body = packed_varints(values)
    return field_prefix(field_number, len(body)) + body if body else b""
