"""An AddRequest as the bookie reads it: parsed by hand from the received bytes, without copying them.

The generated class copies each batch's data into the message and out again when `.data` is read, and
makes a Python int per entry id and size; on a Spark append that was a fifth of a bookie's event-loop
time. Here each batch's data is a view of the request's bytes (immutable, so the view stays valid for
as long as anything holds it), and its entry ids and sizes are numpy arrays. The result is what the
generated parser gives (tests/unit/test_add_request.py holds the two to each other): repeated integers
packed or not, later scalars overriding earlier ones, unknown fields passed over, and what protobuf
refuses refused with ValueError, which gRPC answers as a request it could not deserialize.
`parse_add_request_wide` also finds, in the same pass, a varint wider than 64 bits (which protobuf would cut
silently: `request_checks.wide_varint`, whose second walk over each request cost as much as the parse).
Where `wire._native` was built, the walk is one native call (`parse_add_request`: 7 us for a request of
90 entries, its views made, against 30 us here) and this module only wraps its tuples; the Python walk below is the
fallback, and tests/unit/test_native_add_request.py holds the two to each other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from bkledger.wire import codec as wire
from bkledger.wire.native import NATIVE

ADD_REQUEST_BATCHES = 2
LEDGER_ID, MASTER_KEY, RECOVERY_ADD, WRITE_FLAGS, HIGH_PRIORITY, ENTRY_IDS, SIZES, DATA = range(1, 9)


@dataclasses.dataclass
class AddBatchView:
    """One AddBatch: proto/bookie.proto's fields, with the data a view of the request."""

    ledger_id: int = 0
    master_key: bytes = b""
    recovery_add: bool = False
    write_flags: int = 0
    high_priority: bool = False
    entry_ids: npt.NDArray[np.int64] = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sizes: npt.NDArray[np.int64] = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    data: memoryview = dataclasses.field(default_factory=lambda: memoryview(b""))


def parse_add_request(raw: bytes) -> list[AddBatchView]:
    """The batches of a serialized AddRequest (its txn_id is not used by the bookie)."""
    return parse_add_request_wide(raw)[0]


Wide = tuple[str, int] | None     # the first varint wider than 64 bits: (message, field number), or None


def parse_add_request_wide(raw: bytes) -> tuple[list[AddBatchView], Wide]:
    """The batches, and where the first varint wider than 64 bits is, walking as `request_checks.wide_varint`
    walks (the request's fields in order, each batch's where it lies): ("AddRequest" or "AddBatch", number)."""
    if NATIVE is not None:
        return native_parse_add_request_wide(raw)
    return python_parse_add_request_wide(raw)


def native_parse_add_request_wide(raw: bytes) -> tuple[list[AddBatchView], Wide]:
    """`parse_add_request_wide` by wire._native: its tuples made AddBatchViews over `raw`."""
    assert NATIVE is not None
    found, wide = NATIVE.parse_add_request(raw)
    view = memoryview(raw)
    return [AddBatchView(ledger_id, master_key, recovery_add, write_flags, high_priority,
                         _NO_IDS if ids is None else np.frombuffer(ids, dtype=np.int64),
                         _NO_IDS if sizes is None else np.frombuffer(sizes, dtype=np.int64),
                         _NO_DATA if start < 0 else view[start:end])
            for ledger_id, master_key, recovery_add, write_flags, high_priority, ids, sizes, start, end in found], wide


def python_parse_add_request_wide(raw: bytes) -> tuple[list[AddBatchView], Wide]:
    """`parse_add_request_wide` in Python, field by field."""
    batches: list[AddBatchView] = []
    wide: Wide = None
    for number, wire_type, value, too_wide in _fields(raw):
        if too_wide and wide is None:
            wide = ("AddRequest", number)
        if number == ADD_REQUEST_BATCHES and wire_type == wire.LENGTH_DELIMITED and isinstance(value, memoryview):
            batch, inner = _parse_batch(value)
            batches.append(batch)
            wide = wide or inner
    return batches, wide


def parse_add_batch(buf: memoryview) -> AddBatchView:
    return _parse_batch(buf)[0]


def _parse_batch(buf: memoryview) -> tuple[AddBatchView, Wide]:
    ids: list[npt.NDArray[np.uint64]] = []
    sizes: list[npt.NDArray[np.uint64]] = []
    # the arrays and the data are given to the constructor: its default factories cost a few us a batch
    batch = AddBatchView(entry_ids=_NO_IDS, sizes=_NO_IDS, data=_NO_DATA)
    wide: Wide = None
    for number, _wire_type, value, too_wide in _fields(buf):
        if too_wide and wide is None:
            wide = ("AddBatch", number)
        if isinstance(value, int):
            _scalar(batch, number, value, ids, sizes)
        elif number in (ENTRY_IDS, SIZES):
            (ids if number == ENTRY_IDS else sizes).append(wire.unpack_varints(value))
        elif number == MASTER_KEY:
            batch.master_key = bytes(value)
        elif number == DATA:
            batch.data = value
    if ids:
        batch.entry_ids = wire.joined(ids).view(np.int64)       # int64: two's complement of the varint
    if sizes:
        batch.sizes = (wire.joined(sizes) & np.uint64(wire.UINT32)).astype(np.int64)   # uint32: its low 32 bits
    return batch, wide


def _fields(buf: bytes | memoryview) -> Iterator[tuple[int, int, int | memoryview, bool]]:
    """`wire.fields`, each field with whether it is a varint wider than 64 bits (its value is then cut to
    64 bits, as protobuf and `wire.fields` cut it). The same refusals, with ValueError."""
    view = memoryview(buf)
    pos, size = 0, len(view)
    while pos < size:
        key, end = wire.read_varint(view, pos)
        if end - pos > wire.MAX_TAG_BYTES or key > wire.MAX_TAG:
            raise ValueError("field tag longer than five bytes or beyond 32 bits (field number over 2**29 - 1)")
        pos = end
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire_type == wire.VARINT:
            start = pos
            value, pos = wire.read_varint(view, pos)
            # wider than 64 bits: ten bytes (the most read_varint takes) whose last carries more than bit 63
            yield number, wire_type, value, pos - start == wire.MAX_VARINT_BYTES and view[pos - 1] > 1
        elif wire_type == wire.LENGTH_DELIMITED:
            length, pos = wire.read_varint(view, pos)
            if pos + length > size:
                raise ValueError(f"field {number} of {length} bytes cut off at {size - pos}")
            yield number, wire_type, view[pos : pos + length], False
            pos += length
        elif wire_type in (wire.FIXED64, wire.FIXED32):
            pos += 8 if wire_type == wire.FIXED64 else 4
            if pos > size:
                raise ValueError(f"fixed-size field {number} cut off")
        else:
            raise ValueError(f"wire type {wire_type} of field {number} is not read here")


_NO_IDS: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)    # read-only: shared by every batch without any
_NO_IDS.flags.writeable = False
_NO_DATA = memoryview(b"")


def _scalar(batch: AddBatchView, number: int, value: int, ids: list[npt.NDArray[np.uint64]],
            sizes: list[npt.NDArray[np.uint64]]) -> None:
    if number == LEDGER_ID:
        batch.ledger_id = wire.signed(value, 64)
    elif number == RECOVERY_ADD:
        batch.recovery_add = value != 0
    elif number == WRITE_FLAGS:
        batch.write_flags = wire.signed(value & wire.UINT32, 32)
    elif number == HIGH_PRIORITY:
        batch.high_priority = value != 0
    elif number in (ENTRY_IDS, SIZES):                 # one element of a repeated field written unpacked
        (ids if number == ENTRY_IDS else sizes).append(np.array([value], dtype=np.uint64))
