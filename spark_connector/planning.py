"""Partition planning of a batch read: which entry ranges of which ledgers each Spark task reads. Pure.

Mirrors how Pulsar SQL splits a topic (per ledger, by entry range) and Kafka's offset ranges: one
partition per fragment of each ledger (a fragment is a run of entries on one ensemble, so a task talks
to one set of bookies), and a fragment longer than `max_entries` is cut into equal pieces. Bounds come
from what the driver saw while planning: a CLOSED ledger up to its last entry id, an OPEN one up to
its LAC (never beyond: R11). Starting/ending positions (see `spark_connector.options`) narrow each
ledger to [first, end). No I/O here: the driver gathers `LedgerView`s, this module does the arithmetic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from pyspark.sql.datasource import InputPartition

from bkledger.client import DataLossError
from bkledger.spark_connector.options import EARLIEST, LATEST, BkLedgerOptionError, PositionSpec


@dataclasses.dataclass(frozen=True)
class LedgerView:
    """What planning needs of one ledger, read on the driver."""

    ledger_id: int
    fragment_starts: tuple[int, ...]   # first entry id of each fragment, ascending, starting at 0
    last_entry_id: int                 # last readable entry: last entry id if CLOSED, else the LAC (-1: none)
    envelope: int = 0                  # -1: not read while planning (the task takes it from the ledger)
    closed: bool = True
    size: int | None = None            # bytes, when the log records them (closed ledgers)
    physical: int | None = None        # compacted: the ledger now holding its entries, from entry `base` on
    base: int = 0
    # the record time span the log records for it: (min us, max us, own: False if it is the span of the
    # compacted ledger now holding it); None: not recorded
    time_span: tuple[int, int, bool] | None = None
    # offloaded: (the log's table store URI, Parquet file below the table root) as the snapshot of the
    # log's metadata taken at planning names them; its entries are that file's rows from `base` on
    offloaded: tuple[str, str] | None = None


@dataclasses.dataclass(frozen=True)
class LedgerPartition(InputPartition):
    """Entries first..last (inclusive) of one ledger; read by one task."""

    log: str | None
    ledger_id: int
    first_entry_id: int
    last_entry_id: int
    envelope: int = 0
    physical: int | None = None        # compacted: entries first..last are base+first..base+last of it
    base: int = 0
    offloaded: tuple[str, str] | None = None    # (table store URI, file): rows base+first..base+last of it

    @property
    def entries(self) -> int:
        return self.last_entry_id - self.first_entry_id + 1


Bounds = dict[int, tuple[int, int]]     # ledger id -> (first entry, end entry exclusive)
UNKNOWN_ENTRY_BYTES = 1024.0     # an entry's size estimate when no ledger of the read has a recorded size


def _data_loss(what: str, fail_on_data_loss: bool) -> None:
    if fail_on_data_loss:
        raise DataLossError(f"{what}; set failOnDataLoss=false to read what is left")


def resolve_bounds(log: str | None, ledgers: Sequence[LedgerView], starting: PositionSpec, ending: PositionSpec,
                   fail_on_data_loss: bool = True) -> Bounds:
    """Per ledger to read: [first, end). Ledgers are those of the log (ascending ids) or the raw list.

    A starting ledger below the first one present is data loss (truncated, or deleted); one that is
    not there but lies within the ledgers is a mistake in the option (BkLedgerOptionError)."""
    ids = [v.ledger_id for v in ledgers]
    end_of = {v.ledger_id: v.last_entry_id + 1 for v in ledgers}
    lowest = -1
    starts: dict[int, int] = {}
    if isinstance(starting, dict):
        for ledger_id, entry_id in sorted(starting.items()):
            if ledger_id in end_of:
                starts[ledger_id] = 0 if entry_id == EARLIEST else entry_id
            elif not ids or ledger_id < ids[0]:
                _data_loss(f"startingPositions names ledger {ledger_id}, which is gone from "
                           f"{_what(log)} (its first ledger is now {ids[:1]})", fail_on_data_loss)
            else:
                raise BkLedgerOptionError("startingPositions", f"ledger {ledger_id} is not one of the ledgers "
                                                               f"of {_what(log)}: {ids}")
        lowest = min(starts) if starts else (ids[0] if ids else -1)
    highest, ends = _ending(log, ids, end_of, ending)
    out: Bounds = {}
    for ledger_id in ids:
        if ledger_id < lowest or ledger_id > highest:
            continue
        first = starts.get(ledger_id, 0)
        end = min(ends.get(ledger_id, end_of[ledger_id]), end_of[ledger_id])
        out[ledger_id] = (first, end)
    return out


def _ending(log: str | None, ids: list[int], end_of: Mapping[int, int],
            ending: PositionSpec) -> tuple[int, dict[int, int]]:
    if not isinstance(ending, dict):
        return (ids[-1] if ids else -1), {}
    ends: dict[int, int] = {}
    for ledger_id, entry_id in ending.items():
        if ledger_id not in end_of:
            raise BkLedgerOptionError("endingPositions", f"ledger {ledger_id} is not one of the ledgers of "
                                                         f"{_what(log)}: {ids}")
        ends[ledger_id] = end_of[ledger_id] if entry_id == LATEST else entry_id
    return max(ends), ends


def _what(log: str | None) -> str:
    return f"log {log!r}" if log is not None else "the ledgers option"


def fragment_ranges(view: LedgerView, first: int, end: int) -> list[tuple[int, int]]:
    """[first, end) cut at fragment boundaries, as inclusive (lo, hi) pairs."""
    out: list[tuple[int, int]] = []
    starts = view.fragment_starts or (0,)
    for start, following in zip(starts, [*starts[1:], end], strict=True):
        lo, hi = max(first, start), min(end, following) - 1
        if lo <= hi:
            out.append((lo, hi))
    return out


def split_range(lo: int, hi: int, max_entries: int) -> list[tuple[int, int]]:
    """Cut lo..hi (inclusive) into the fewest equal pieces of at most max_entries each."""
    count = hi - lo + 1
    pieces = -(-count // max_entries)
    size, extra = divmod(count, pieces)
    out: list[tuple[int, int]] = []
    start = lo
    for i in range(pieces):
        length = size + (1 if i < extra else 0)
        out.append((start, start + length - 1))
        start += length
    return out


def plan_partitions(log: str | None, ledgers: Sequence[LedgerView], bounds: Mapping[int, tuple[int, int]],
                    max_entries: int, target_bytes: int = 0) -> list[LedgerPartition]:
    """One partition per fragment of each ledger within its bounds, long fragments split by max_entries
    and, with `target_bytes`, by that many bytes (`piece_entries`); in log order (ledger id, then entry id)."""
    if max_entries < 1:
        raise BkLedgerOptionError("maxEntriesPerPartition", f"must be >= 1, got {max_entries}")
    caps, other_cap = piece_entries(ledgers, max_entries, target_bytes)
    out: list[LedgerPartition] = []
    for view in ledgers:
        if view.ledger_id not in bounds:
            continue
        first, end = bounds[view.ledger_id]
        cap = caps.get(view.ledger_id, other_cap)
        if len(view.fragment_starts) <= 1 and end - first <= cap:     # the common small ledger
            if end > first:
                out.append(LedgerPartition(log, view.ledger_id, first, end - 1, view.envelope, view.physical,
                                           view.base, view.offloaded))
            continue
        for lo, hi in fragment_ranges(view, first, end):
            out += [LedgerPartition(log, view.ledger_id, a, b, view.envelope, view.physical, view.base,
                                    view.offloaded) for a, b in split_range(lo, hi, cap)]
    return out


def recorded_entry_bytes(ledgers: Sequence[LedgerView]) -> dict[int, float]:
    """Average entry size of each closed ledger whose size the log records (and that has entries)."""
    return {v.ledger_id: v.size / (v.last_entry_id + 1) for v in ledgers
            if v.closed and v.size is not None and v.last_entry_id >= 0}


def piece_entries(ledgers: Sequence[LedgerView], max_entries: int, target_bytes: int) -> tuple[dict[int, int], int]:
    """The most entries a piece of each ledger holds: max_entries, and with target_bytes also no more than
    that many bytes at the ledger's average entry size (as Spark cuts files at maxPartitionBytes). Returns
    the caps of the ledgers with a recorded size, and the cap of the others (the mean of those averages,
    or UNKNOWN_ENTRY_BYTES when the read has none)."""
    if target_bytes <= 0:
        return {}, max_entries
    known = recorded_entry_bytes(ledgers)
    fallback = sum(known.values()) / len(known) if known else UNKNOWN_ENTRY_BYTES

    def cap(avg: float) -> int:
        return max(1, min(max_entries, int(target_bytes // max(avg, 1.0))))

    return {lid: cap(avg) for lid, avg in known.items()}, cap(fallback)
