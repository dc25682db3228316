"""What narrows a planned read, and how: time bounds found by binary search, filters' id ranges, and
`minPartitions`. Pure (the driver's probes come in as a function).

* `first_at_or_after` finds the first position whose record timestamp is >= a time, as Kafka's
  `offsetsForTimes`: first the ledger, from the time spans the log records per ledger (no read) or,
  for ledgers without one, a binary search probing candidate ledgers' last entries; then a binary
  search over the entries of the one found: O(log entries) probes with spans, O(log ledgers + log
  entries) without, never a scan. It takes timestamps to be non-decreasing in log order; a record
  without a timestamp counts as older than any time (Kafka's NO_TIMESTAMP, -1, which its time index
  never returns). With records out of time order the answer is still a position (README).
* `narrow` cuts per-ledger bounds to [lo, hi) positions; `narrow_ids` applies ledger/entry id filters.
* `at_least` splits the largest partitions until there are `n` (Kafka's `minPartitions`).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Mapping, Sequence

from bkledger.spark_connector.coalesce import CoalescedPartition
from bkledger.spark_connector.planning import Bounds, LedgerPartition
from bkledger.spark_connector.pushdown import Pushed

Probe = Callable[[int, int], "int | None"]       # (ledger id, entry id) -> timestamp in us, None if none
Spot = tuple[int, int]                            # (ledger id, entry id)
Known = tuple[int, int, bool]                     # a ledger's recorded (min us, max us, own: not a compacted group's)


def first_at_or_after(spans: Sequence[tuple[int, int, int]], probe: Probe, at_us: int,
                      known: Mapping[int, Known] | None = None) -> Spot | None:
    """The first (ledger id, entry id) in `spans` ((ledger id, first, end exclusive), in log order) whose
    record's timestamp is >= at_us; None if no record is.

    The ledger: with every ledger's own span recorded (`known`), the first whose max reaches the time,
    picked from the spans alone (no read); otherwise a binary search over the ledgers in which a
    recorded span answers without a read where it can (its max below the time: not there) and the
    others are probed at their last entry. Then a binary search over that ledger's entries. If that
    ledger's entries in range hold no record at or after the time (possible only with records out of
    time order, or a range cut short), the answer is the start of the next ledger in range."""
    spans = [s for s in spans if s[2] > s[1]]
    spans_known = known or {}

    def reached(ledger_id: int, entry_id: int) -> bool:
        ts = probe(ledger_id, entry_id)
        return ts is not None and ts >= at_us

    if spans and all(spans_known.get(s[0], (0, 0, False))[2] for s in spans):
        at = next((i for i, s in enumerate(spans) if spans_known[s[0]][1] >= at_us), len(spans))
        probed_last = False
    else:
        at = _first_ledger(spans, spans_known, reached, at_us)
        probed_last = True
    if at == len(spans):
        return None
    ledger_id, first, end = spans[at]
    a, b = first, end - 1 if probed_last else end   # b: first entry known to reach it (end: none known)
    while a < b:
        mid = (a + b) // 2
        if reached(ledger_id, mid):
            b = mid
        else:
            a = mid + 1
    if a < end:
        return ledger_id, a
    return (spans[at + 1][0], spans[at + 1][1]) if at + 1 < len(spans) else None


def _first_ledger(spans: Sequence[tuple[int, int, int]], known: Mapping[int, Known],
                  reached: Callable[[int, int], bool], at_us: int) -> int:
    """Binary search for the first span whose last record (as probed) reaches the time; a recorded span
    whose max is below the time says no without a read."""
    def reaches(span: tuple[int, int, int]) -> bool:
        recorded = known.get(span[0])
        if recorded is not None and recorded[1] < at_us:
            return False
        return reached(span[0], span[2] - 1)

    lo, hi = 0, len(spans)
    while lo < hi:
        mid = (lo + hi) // 2
        if reaches(spans[mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo


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
