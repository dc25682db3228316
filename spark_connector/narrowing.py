"""What narrows a planned read, and how: time bounds found by binary search, filters' id ranges, and
`minPartitions`. Pure (the driver's probes come in as a function).

* `first_at_or_after` finds the first position whose record timestamp is >= a time, as Kafka's
  `offsetsForTimes`: first over ledgers (probing each candidate ledger's last entry), then over the
  entries of the one found; O(log ledgers + log entries) probes, never a scan. It takes timestamps to
  be non-decreasing in log order; a record without a timestamp counts as older than any time (Kafka's
  NO_TIMESTAMP, -1, which its time index never returns). With records out of time order the answer is
  still a position where the probed record is at or after the time and the one before it (as probed)
  is not, but records on either side of it may be on the other side of the time (README).
* `narrow` cuts per-ledger bounds to [lo, hi) positions; `narrow_ids` applies ledger/entry id filters.
* `at_least` splits the largest partitions until there are `n` (Kafka's `minPartitions`).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Mapping, Sequence

from spark_connector.coalesce import CoalescedPartition
from spark_connector.planning import Bounds, LedgerPartition
from spark_connector.pushdown import Pushed

Probe = Callable[[int, int], "int | None"]       # (ledger id, entry id) -> timestamp in us, None if none
Spot = tuple[int, int]                            # (ledger id, entry id)


def first_at_or_after(spans: Sequence[tuple[int, int, int]], probe: Probe, at_us: int) -> Spot | None:
    """The first (ledger id, entry id) in `spans` ((ledger id, first, end exclusive), in log order) whose
    record's timestamp is >= at_us, by binary search; None if no record is."""
    spans = [s for s in spans if s[2] > s[1]]

    def reached(ledger_id: int, entry_id: int) -> bool:
        ts = probe(ledger_id, entry_id)
        return ts is not None and ts >= at_us

    lo, hi = 0, len(spans)                 # first span whose last record reached the time
    while lo < hi:
        mid = (lo + hi) // 2
        if reached(spans[mid][0], spans[mid][2] - 1):
            hi = mid
        else:
            lo = mid + 1
    if lo == len(spans):
        return None
    ledger_id, first, end = spans[lo]
    a, b = first, end - 1                  # the last entry is known to reach it
    while a < b:
        mid = (a + b) // 2
        if reached(ledger_id, mid):
            b = mid
        else:
            a = mid + 1
    return ledger_id, a


def narrow(bounds: Bounds, lo: Spot | None, hi: Spot | None) -> Bounds:
    """`bounds` cut to positions >= lo and < hi (None: no cut); ledgers left empty are dropped."""
    out: Bounds = {}
    for ledger_id, (first, end) in bounds.items():
        if lo is not None:
            if ledger_id < lo[0]:
                continue
            if ledger_id == lo[0]:
                first = max(first, lo[1])
        if hi is not None:
            if ledger_id > hi[0]:
                continue
            if ledger_id == hi[0]:
                end = min(end, hi[1])
        if end > first:
            out[ledger_id] = (first, end)
    return out


def narrow_ids(bounds: Bounds, pushed: Pushed) -> Bounds:
    """`bounds` cut by the pushed ledger_id / entry_id filters."""
    out: Bounds = {}
    for ledger_id, (first, end) in bounds.items():
        if not pushed.keeps_ledger(ledger_id):
            continue
        if pushed.entry_lo is not None:
            first = max(first, pushed.entry_lo)
        if pushed.entry_hi is not None:
            end = min(end, pushed.entry_hi + 1)
        if end > first:
            out[ledger_id] = (first, end)
    return out


def _halves(part: CoalescedPartition) -> list[CoalescedPartition]:
    """Two partitions of about half the entries each (pieces kept whole where there are several)."""
    pieces = part.pieces
    if len(pieces) > 1:
        total, run, cut = part.entries, 0, 1
        for i, piece in enumerate(pieces[:-1], start=1):
            run += piece.entries
            cut = i
            if run * 2 >= total:
                break
        return [CoalescedPartition(pieces[:cut]), CoalescedPartition(pieces[cut:])]
    one = pieces[0]
    middle = one.first_entry_id + one.entries // 2
    return [CoalescedPartition((dataclasses.replace(one, last_entry_id=middle - 1),)),
            CoalescedPartition((dataclasses.replace(one, first_entry_id=middle),))]


def at_least(parts: Sequence[CoalescedPartition], n: int) -> list[CoalescedPartition]:
    """Split the largest partitions in two until there are `n` (or none has two entries left), keeping
    the log order of all pieces (Kafka's minPartitions: a hint, not a cap)."""
    heap: list[tuple[int, int, CoalescedPartition]] = []
    for i, part in enumerate(parts):
        heapq.heappush(heap, (-part.entries, i, part))
    count, serial = len(parts), len(parts)
    while count < n and heap and -heap[0][0] >= 2:
        part = heapq.heappop(heap)[2]
        for half in _halves(part):
            heapq.heappush(heap, (-half.entries, serial, half))
            serial += 1
        count += 1
    return sorted((p for _, _, p in heap), key=_log_order)


def _log_order(part: CoalescedPartition) -> tuple[str, int, int]:
    first: LedgerPartition = part.pieces[0]
    return first.log or "", first.ledger_id, first.first_entry_id


def spans_of(bounds: Mapping[int, tuple[int, int]]) -> list[tuple[int, int, int]]:
    return [(ledger_id, first, end) for ledger_id, (first, end) in sorted(bounds.items())]
