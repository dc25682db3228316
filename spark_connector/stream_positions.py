"""Positions and offsets of the streaming source, and how far a micro-batch may go in one log. Pure.

An offset is a position per log, plain JSON: `{"orders": {"ledger": 12, "entry": 40}}` ("the next record
to read is entry 40 of ledger 12"); `Segment`s are a log's ledgers as the driver sees them now; the
functions say where a reader can go (`readable_end`), how much lies between two positions, and how far a
budget of entries or bytes reaches (`advance`; `share` splits a budget over several logs, in proportion
to what each has, as Kafka's `maxOffsetsPerTrigger` over topic partitions).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from bkledger.spark_connector.options import EARLIEST, MAX_ID, BkLedgerOptionError, _position_map, option_json


# ---- positions and offsets -----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, order=True)
class Pos:
    """Where the next record of a log comes from: (ledger id, entry id). (-1, 0): before any ledger."""

    ledger: int
    entry: int


BEFORE_ANY = Pos(-1, 0)


def offset_of(log_name: str, pos: Pos) -> dict[str, Any]:
    """The offset dict Spark persists: plain JSON types only."""
    return {log_name: {"ledger": pos.ledger, "entry": pos.entry}}


def pos_of(log_name: str, offset: Mapping[str, Any]) -> Pos:
    """Parse an offset dict this source produced (or a user gave as startingPositions)."""
    item = offset.get(log_name)
    if not isinstance(item, Mapping) or "ledger" not in item or "entry" not in item:
        raise BkLedgerOptionError("startingPositions", f"offset {json.dumps(offset)} has no position of log "
                                  f"{log_name!r}; expected {{\"{log_name}\": {{\"ledger\": 12, \"entry\": 0}}}}")
    ledger, entry = item["ledger"], item["entry"]
    if isinstance(ledger, bool) or isinstance(entry, bool) or not isinstance(ledger, int) \
            or not isinstance(entry, int) or not -1 <= ledger <= MAX_ID or not 0 <= entry <= MAX_ID:
        raise BkLedgerOptionError("startingPositions", f"position {json.dumps(item)} of log {log_name!r} is "
                                  "not {\"ledger\": <ledger id >= 0>, \"entry\": <entry id >= 0>}")
    return Pos(ledger, entry)


def parse_starting(raw: str | None, log_name: str) -> str | Pos:
    """"earliest" (default), "latest", or a JSON position (this source's offset form or the batch form)."""
    if raw is None or raw.strip().lower() == "earliest":
        return "earliest"
    text = raw.strip()
    if text.lower() == "latest":
        return "latest"
    try:
        parsed = option_json("startingPositions", text)
    except json.JSONDecodeError:
        raise BkLedgerOptionError("startingPositions", f"must be earliest, latest or JSON like "
                                  f"{{\"{log_name}\": {{\"ledger\": 12, \"entry\": 0}}}}; got {raw!r}") from None
    if isinstance(parsed, dict) and isinstance(parsed.get(log_name), dict) and "ledger" in parsed[log_name]:
        return pos_of(log_name, parsed)
    per_ledger = _position_map(parsed, "startingPositions", log_name, "earliest")
    ledger = min(per_ledger)
    return Pos(ledger, max(0, per_ledger[ledger]) if per_ledger[ledger] != EARLIEST else 0)


# ---- what the driver sees of a log ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Segment:
    """One ledger of the log as seen now: readable entries [0, end), CLOSED or not, bytes if known."""

    ledger_id: int
    end: int
    closed: bool
    size: int | None = None

    @property
    def avg_entry_bytes(self) -> float | None:
        return self.size / self.end if self.size is not None and self.end > 0 else None


def readable_end(segments: Sequence[Segment], start: Pos) -> Pos:
    """How far a reader at `start` can go now: to the LAC of the first OPEN ledger at or after start
    (never past it), else to the end of the last ledger."""
    end = start
    for seg in segments:
        if seg.ledger_id < start.ledger:
            continue
        end = Pos(seg.ledger_id, max(seg.end, start.entry if seg.ledger_id == start.ledger else 0))
        if not seg.closed:
            break
    return end


def entries_between(segments: Sequence[Segment], start: Pos, end: Pos) -> int:
    return sum(hi - lo for lo, hi, _ in _spans(segments, start, end))


def advance(segments: Sequence[Segment], start: Pos, end: Pos, max_entries: int | None,
            max_bytes: int | None, avg_bytes: Mapping[int, float]) -> Pos:
    """The furthest position in (start, end] within the entry and byte budgets; at least one entry
    when any is available, so a record bigger than maxBytesPerTrigger does not stall the stream."""
    entries_left = float("inf") if max_entries is None else float(max_entries)
    bytes_left = float("inf") if max_bytes is None else float(max_bytes)
    pos, taken = start, 0
    for lo, hi, seg in _spans(segments, start, end):
        per_entry = max(1.0, avg_bytes.get(seg.ledger_id, 1.0))
        take = int(min(hi - lo, entries_left, bytes_left // per_entry))
        if take == 0 and taken == 0 and hi > lo:
            take = 1
        pos, taken = Pos(seg.ledger_id, lo + take), taken + take
        entries_left -= take
        bytes_left -= take * per_entry
        if lo + take < hi or entries_left <= 0 or bytes_left < per_entry:
            break
    return pos


def _spans(segments: Sequence[Segment], start: Pos, end: Pos) -> Iterator[tuple[int, int, Segment]]:
    """(first, end exclusive, segment) of each ledger between two positions, in log order."""
    for seg in segments:
        if start.ledger <= seg.ledger_id <= end.ledger:
            lo = start.entry if seg.ledger_id == start.ledger else 0
            hi = end.entry if seg.ledger_id == end.ledger else seg.end
            yield lo, max(lo, hi), seg


def ranges(segments: Sequence[Segment], start: Pos, end: Pos) -> dict[int, tuple[int, int]]:
    """Per ledger: [first, end) of the entries between two positions (for planning)."""
    return {seg.ledger_id: (lo, hi) for lo, hi, seg in _spans(segments, start, end) if hi > lo}


def share(budget: float | None, available: Mapping[str, int]) -> dict[str, float | None]:
    """A budget (entries or bytes; None: unlimited) split over logs in proportion to what each has
    available, each log with something getting a share > 0 (so none starves)."""
    total = sum(available.values())
    if budget is None or total == 0:
        return {name: budget for name in available}
    return {name: max(1.0, budget * count / total) if count else 0.0 for name, count in available.items()}
