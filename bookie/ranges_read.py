"""What a ReadRanges call answers: the ranges of many ledgers, their entries packed into shared batches.

A reader of many small ledgers (a log of one-entry ledgers) paid one unary Read or ReadRange call per
ledger, and gRPC's cost per call (several hundred microseconds of a bookie's CPU) was most of the read.
Here each range is answered as `LedgerStorage.read_range` answers it (the entries held from its first id
on, up to its max_batch_entries or the byte limit), but the entries of consecutive ranges travel
together: one batch once they hold max_batch_bytes or RANGES_PER_BATCH ranges (the first batch
FIRST_BATCH_RANGES: a reader gives a quiet bookie only a short wait for its first answer; so at most
twice max_batch_bytes: each range may bring up to max_batch_bytes), each entry tagged with its ledger. A
range whose ledger this bookie never knew gets a status item (ENOLEDGER), one whose read failed EIO; a
ledger known but holding nothing (fenced, or its adds still in the journal) has no entries to send, as
with ReadRange. Runs on the storage side (a thread): no event loop here.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from bkledger.bookie.storage import LedgerStorage, StorageError
from bkledger.proto import bookie_pb2 as pb

log = logging.getLogger("bkledger.server")
First = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], bytes | bytearray | memoryview] | None | Exception

RANGES_PER_BATCH = 512       # a batch goes out after this many ranges even if small: progress for the reader
FIRST_BATCH_RANGES = 8       # ... the first one sooner: the reader waits only so long for a call's first batch
DEFAULT_BATCH_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class Range:
    ledger_id: int
    first: int
    last: int
    max_entries: int           # 0: no limit but the batch's bytes


@dataclasses.dataclass(frozen=True)
class Packed:
    """Entries of several ranges, back to back in `data`, each with its ledger, id and size."""

    ledger_ids: npt.NDArray[np.int64]
    entry_ids: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    data: bytes


@dataclasses.dataclass(frozen=True)
class Failed:
    ledger_id: int
    status: int


def ranges_of(request: pb.ReadRangesRequest) -> list[Range]:
    return [Range(r.ledger_id, r.first_entry_id, r.last_entry_id, r.max_batch_entries) for r in request.ranges]


def answer(storage: LedgerStorage, known: Callable[[int], bool], ranges: Sequence[Range], max_bytes: int
           ) -> Iterator[Packed | Failed]:
    """The answer to these ranges, in their order: batches of packed entries and the failed ranges'
    statuses. `known(ledger_id)`: whether this bookie knows the ledger (it may hold no entries of it)."""
    max_bytes = max_bytes or DEFAULT_BATCH_BYTES
    held = _Held()
    sent = False
    for r, first in zip(ranges, _firsts(storage, ranges, max_bytes), strict=True):
        if isinstance(first, Exception):
            log.error("range read of ledger %d failed: %s", r.ledger_id, first)
            yield from held.flush()
            yield Failed(r.ledger_id, pb.EIO)
            continue
        if first is not None:
            held.add(r.ledger_id, *first)
        elif not storage.has_ledger(r.ledger_id) and not known(r.ledger_id):
            yield from held.flush()
            yield Failed(r.ledger_id, pb.ENOLEDGER)
            continue
        if held.size >= max_bytes or held.ranges >= (RANGES_PER_BATCH if sent else FIRST_BATCH_RANGES):
            sent = True
            yield from held.flush()
    yield from held.flush()


def _firsts(storage: LedgerStorage, ranges: Sequence[Range], max_bytes: int) -> Iterator[First]:
    """Each range's first batch as `read_range` gives it (None: nothing held; an exception: its read
    failed), read many ranges at a time (`LedgerStorage.first_batches`: one index lookup and one pass of
    preads for all), the first group small so that the first batch goes out soon; ranges that cannot be
    read together are read one by one."""
    at, group = 0, FIRST_BATCH_RANGES
    while at < len(ranges):
        part = ranges[at:at + group]
        try:
            got: Sequence[First] | None = storage.first_batches(
                [(r.ledger_id, r.first, r.last, r.max_entries or (1 << 31)) for r in part], max_bytes)
        except (StorageError, OSError):
            got = None                            # an index page unreadable: each range says for itself
        if got is None:
            got = [_first(storage, r, max_bytes) for r in part]
        yield from got
        at += len(got)
        group = RANGES_PER_BATCH


def _first(storage: LedgerStorage, r: Range, max_bytes: int) -> First:
    try:
        return next(storage.read_range(r.ledger_id, r.first, r.last, max_bytes, r.max_entries or (1 << 31)), None)
    except (StorageError, OSError) as exc:
        return exc


class _Held:
    """The ranges' entries gathered for the next batch."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.ledgers: list[int] = []
        self.counts: list[int] = []
        self.ids: list[npt.NDArray[np.int64]] = []
        self.sizes: list[npt.NDArray[np.int64]] = []
        self.blobs: list[bytes | bytearray | memoryview] = []
        self.size = 0
        self.ranges = 0

    def add(self, ledger_id: int, ids: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64],
            blob: bytes | bytearray | memoryview) -> None:
        self.ledgers.append(ledger_id)
        self.counts.append(len(ids))
        self.ids.append(ids)
        self.sizes.append(sizes)
        self.blobs.append(blob)
        self.size += len(blob)
        self.ranges += 1

    def flush(self) -> Iterator[Packed]:
        if not self.ledgers:
            return
        packed = Packed(np.repeat(np.array(self.ledgers, dtype=np.int64), self.counts), np.concatenate(self.ids),
                        np.concatenate(self.sizes), b"".join(self.blobs))
        self._reset()
        yield packed
