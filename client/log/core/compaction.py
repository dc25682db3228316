"""Compaction of a log's small ledgers, the pure part: which runs to rewrite, the record of the ledger
that replaces a run, the swap, and the old ledgers that wait out a grace period before deletion.

A run is consecutive CLOSED ledgers of the log, each smaller than the target, together at most the target
bytes and at least `min_ledgers` long; the log's last `KEEP_TAIL` ledgers are never touched (a writer may
still be closing or recovering them). The new ledger holds the run's entries in order; its record keeps,
for every ledger it replaced, (old ledger id, entry where that ledger's entries begin, bytes), so every
position (old ledger id, entry id) still resolves (`client.log.core.meta.locate`) and readers keep
seeing the same positions. The swap is valid only if the run is still in the log as it was (a
truncation may have removed part of it meanwhile): else that run is skipped. The replaced ledgers go
on the log's pending-deletion list (`PENDING_KEY` in the head, the ids in a child znode) with the time
after which they may go.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from bkledger.client.log.core.meta import LogLedger, LogMetadata

KEEP_TAIL = 2
MAX_REPLACED = 1000          # ledgers one compacted ledger may stand for (its record stays small)
PENDING_KEY = "pending_deletes"


@dataclasses.dataclass(frozen=True)
class Run:
    """Consecutive ledgers of the log (their ids as listed) to rewrite into one."""

    ledger_ids: tuple[int, ...]


def _replaced_count(led: LogLedger) -> int:
    return len(led.replaced) or 1


def plan_runs(meta: LogMetadata, target_bytes: int, min_ledgers: int, keep_tail: int = KEEP_TAIL) -> list[Run]:
    """The runs to compact, in log order (see the module docstring)."""
    runs: list[Run] = []
    current: list[LogLedger] = []
    size = replaced = 0

    def flush() -> None:
        if len(current) >= max(2, min_ledgers):
            runs.append(Run(tuple(led.ledger_id for led in current)))
        current.clear()

    for led in meta.ledgers[:max(0, len(meta.ledgers) - keep_tail)]:
        led_size = led.size or 0
        if not led.sealed or led_size >= target_bytes or led.offloaded is not None:    # offloaded: in the table
            flush()
            size = replaced = 0
            continue
        if current and (size + led_size > target_bytes or replaced + _replaced_count(led) > MAX_REPLACED):
            flush()
            size = replaced = 0
        current.append(led)
        size += led_size
        replaced += _replaced_count(led)
    flush()
    return runs


def compacted_ledger(elements: Sequence[LogLedger], ledger_id: int, now_ms: int) -> LogLedger:
    """The record of the ledger holding `elements`' entries in order (their replaced maps merged, their
    time spans if every one is known: the least min and the greatest max, and their envelope version if
    every one records the same)."""
    replaced: list[tuple[int, int, int]] = []
    base = 0
    for led in elements:
        if led.entries is None:
            raise ValueError(f"ledger {led.ledger_id} is not sealed: it cannot be compacted")
        if led.replaced:
            replaced += [(old, base + start, size) for old, start, size in led.replaced]
        else:
            replaced.append((led.ledger_id, base, led.size or 0))
        base += led.entries
    closed = max((led.closed_ms or 0) for led in elements)
    return LogLedger(ledger_id, now_ms, elements[0].first_position, base, sum(led.size or 0 for led in elements),
                     closed, tuple(replaced), merged_span(elements), merged_envelope(elements))


def merged_envelope(elements: Sequence[LogLedger]) -> int | None:
    """The envelope version every ledger records; None if one records none or two differ."""
    versions = {led.envelope for led in elements}
    return versions.pop() if len(versions) == 1 else None


def merged_span(elements: Sequence[LogLedger]) -> tuple[int, int] | None:
    """(min of the mins, max of the maxes) of the ledgers' time spans; None if any is unknown."""
    spans = [led.time_span for led in elements]
    if not spans or any(span is None for span in spans):
        return None
    known = [span for span in spans if span is not None]
    return min(low for low, _ in known), max(high for _, high in known)


def with_compacted(meta: LogMetadata, run: Run, new: LogLedger) -> LogMetadata | None:
    """The log with the run replaced by `new`, or None if the run is no longer in the log as it was."""
    ids = meta.ledger_ids
    try:
        at = ids.index(run.ledger_ids[0])
    except ValueError:
        return None
    elements = meta.ledgers[at:at + len(run.ledger_ids)]
    if tuple(led.ledger_id for led in elements) != run.ledger_ids or not all(led.sealed for led in elements):
        return None
    if any(led.offloaded is not None for led in elements):       # offloaded meanwhile: its copy is the table's
        return None
    if at + len(run.ledger_ids) > len(meta.ledgers) - KEEP_TAIL:
        return None
    if compacted_ledger(elements, new.ledger_id, new.created_ms).replaced != new.replaced:
        return None
    merged = merged_envelope(elements)
    new = dataclasses.replace(new, time_span=merged_span(elements),     # as the log records them now
                              envelope=new.envelope if merged is None else merged)
    ledgers = (*meta.ledgers[:at], new, *meta.ledgers[at + len(run.ledger_ids):])
    return dataclasses.replace(meta, ledgers=ledgers)


# ---- the ledgers waiting for their grace period to end ----------------------------------------------------
# The head lists (delete after ms, what): `what` names a child znode of the log holding the ledger ids
# (`encode_pending`; written in the swap's transaction, so the head stays small whatever a compaction
# replaced), or is the ids themselves (as a head stored them before).
def pending(meta: LogMetadata) -> list[tuple[int, list[int] | str]]:
    """(delete after, ms since the epoch; ledger ids or the child znode holding them) of the log's
    replaced ledgers not yet deleted."""
    raw: Any = meta.extra.get(PENDING_KEY) or []
    return [(int(after), what if isinstance(what, str) else [int(i) for i in what]) for after, what in raw]


def with_pending(meta: LogMetadata, what: Sequence[int] | str, after_ms: int) -> LogMetadata:
    if not what:
        return meta
    item: list[int] | str = what if isinstance(what, str) else list(what)
    items = [*pending(meta), (after_ms, item)]
    return dataclasses.replace(meta, extra={**meta.extra, PENDING_KEY: [[a, w] for a, w in items]})


def without_due(meta: LogMetadata, now_ms: int) -> tuple[LogMetadata, list[int], list[str]]:
    """The log without the pending deletions due by `now_ms`; their ledger ids listed in the head, and
    the child znodes holding the others."""
    items = pending(meta)
    due = [what for after, what in items if after <= now_ms]
    if not due:
        return meta, [], []
    kept = [[after, what] for after, what in items if after > now_ms]
    extra = {k: v for k, v in meta.extra.items() if k != PENDING_KEY}
    if kept:
        extra[PENDING_KEY] = kept
    ids = [i for what in due if not isinstance(what, str) for i in what]
    return dataclasses.replace(meta, extra=extra), ids, [what for what in due if isinstance(what, str)]


def encode_pending(ledger_ids: Sequence[int]) -> bytes:
    return json.dumps({"ledgers": list(ledger_ids)}, separators=(",", ":")).encode("utf-8")


def decode_pending(data: bytes) -> list[int]:
    try:
        return [int(i) for i in json.loads(data)["ledgers"]]
    except (UnicodeDecodeError, TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"pending deletions are not readable: {exc}") from exc
