"""An AddRequest as the bookie reads it: parsed by hand from the received bytes, without copying them.

The generated class copies each batch's data into the message and out again when `.data` is read, and
makes a Python int per entry id and size; on a Spark append that was a fifth of a bookie's event-loop
time. Here each batch's data is a view of the request's bytes (immutable, so the view stays valid for
as long as anything holds it), and its entry ids and sizes are numpy arrays. The result is what the
generated parser gives (tests/unit/test_add_request.py holds the two to each other): repeated integers
packed or not, later scalars overriding earlier ones, unknown fields passed over, and what protobuf
refuses refused with ValueError, which gRPC answers as a request it could not deserialize.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from bkledger.wire import codec as wire

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
    return [parse_add_batch(value) for number, wire_type, value in wire.fields(raw)
            if number == ADD_REQUEST_BATCHES and wire_type == wire.LENGTH_DELIMITED
            and isinstance(value, memoryview)]


def parse_add_batch(buf: memoryview) -> AddBatchView:
    ids: list[npt.NDArray[np.uint64]] = []
    sizes: list[npt.NDArray[np.uint64]] = []
    # the arrays and the data are given to the constructor: its default factories cost a few us a batch
    batch = AddBatchView(entry_ids=_NO_IDS, sizes=_NO_IDS, data=_NO_DATA)
    for number, _wire_type, value in wire.fields(buf):
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
    return batch


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
