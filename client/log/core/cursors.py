"""Cursors held by the cluster: what a cursor's znode says, how far it is behind the tail, and what
retention or truncation may delete given the cursors of a log. Pure (no I/O, no clock).

A cursor (Pulsar: a durable subscription; Kafka: a consumer group's committed offset) is the position of
the next record its consumer has NOT acknowledged. `position=None`: nothing acknowledged yet, the cursor
holds the whole log. A cursor over the log's quota (`max_lag_bytes`) does not hold retention back; when
retention then deletes records it had not acknowledged, it is marked `lost` with the deleted ledger ids,
and its consumer's next read or ack raises CursorLostError.

    held = held_cut(meta, proposed=3, cursors=[...], max_lag_bytes=None)   # -> Cut(count, lost, holders)
    lag(meta, Position(12, 40), tail_entries=7, now_ms=...)                # -> Lag(entries, bytes, seconds)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from bkledger.client.errors import InvalidLogNameError
from bkledger.client.log.core.meta import LogMetadata, Position, logical_ledgers
from bkledger.client.log.core.names import check_log_name

CURSOR_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Lost:
    """Records a cursor had not acknowledged were deleted: the ledgers, when, and why."""

    ledgers: tuple[int, ...]
    at_ms: int
    reason: str


@dataclasses.dataclass(frozen=True)
class CursorState:
    """A cursor's znode: the next unacknowledged position (None: none acknowledged yet, holds everything),
    when it was last acknowledged, and whether records it had not acknowledged were deleted."""

    name: str
    position: Position | None = None
    acked_ms: int | None = None
    lost: Lost | None = None


@dataclasses.dataclass(frozen=True)
class Lag:
    """How far a cursor is behind the tail: entries (exact where the ledgers' counts are known, the open
    ledger counted up to `tail_entries`), bytes (sealed ledgers' sizes, pro rata inside the cursor's
    ledger; the open ledger estimated at the sealed ledgers' average entry size) and seconds (0 at the
    tail, else since the ledger holding its next record was created: an upper bound)."""

    entries: int
    bytes: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class Cut:
    """What may be deleted: the first `count` ledgers (of the list), the cursors that lose records by it
    (cursor -> ledger ids deleted that it had not acknowledged) and the cursors that held the cut back."""

    count: int
    lost: Mapping[str, tuple[int, ...]]
    holders: tuple[str, ...]


# ---- names and encoding --------------------------------------------------------------------------
def check_cursor_name(name: object) -> str:
    """`name` if it can name a cursor (the rules of log names, `client.log.core.names`), else
    InvalidLogNameError saying it is a cursor name."""
    try:
        return check_log_name(name)
    except InvalidLogNameError as exc:
        raise InvalidLogNameError(str(exc).replace("log name", "cursor name"), name=exc.name, reason=exc.reason,
                                  char=exc.char, index=exc.index) from None


def encode_cursor(state: CursorState) -> bytes:
    raw: dict[str, Any] = {"format": CURSOR_FORMAT, "acked_ms": state.acked_ms,
                           "position": None if state.position is None else str(state.position)}
    if state.lost is not None:
        raw["lost"] = {"ledgers": list(state.lost.ledgers), "at_ms": state.lost.at_ms, "reason": state.lost.reason}
    return json.dumps(raw, sort_keys=True).encode()


def decode_cursor(name: str, data: bytes) -> CursorState:
    """The cursor's state from its znode; ValueError if the data is not a cursor's."""
    try:
        raw = json.loads(data.decode())
        position = None if raw.get("position") is None else Position.parse(str(raw["position"]))
        lost_raw = raw.get("lost")
        lost = None if lost_raw is None else Lost(tuple(int(i) for i in lost_raw["ledgers"]),
                                                  int(lost_raw["at_ms"]), str(lost_raw["reason"]))
        acked = raw.get("acked_ms")
        return CursorState(name, position, None if acked is None else int(acked), lost)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"cursor {name!r}: its znode does not hold a cursor ({data[:80]!r}): {exc}") from None


def encode_policy(max_lag_bytes: int | None) -> bytes:
    return json.dumps({"format": CURSOR_FORMAT, "max_lag_bytes": max_lag_bytes}).encode()


def decode_policy(data: bytes) -> int | None:
    """The log's cursor quota (`max_lag_bytes`) from the cursors' parent znode; None: no quota."""
    if not data.strip():
        return None
    try:
        value = json.loads(data.decode()).get("max_lag_bytes")
        return None if value is None else int(value)
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(f"the cursor policy znode holds {data[:80]!r}, not a policy: {exc}") from None


def check_quota(max_lag_bytes: object) -> int | None:
    if max_lag_bytes is None:
        return None
    if isinstance(max_lag_bytes, bool) or not isinstance(max_lag_bytes, int) or max_lag_bytes < 0:
        raise ValueError(f"cursor_max_lag_bytes must be an int >= 0 or None, got {max_lag_bytes!r}")
    return max_lag_bytes


# ---- where a cursor is ---------------------------------------------------------------------------
def _need_index(meta: LogMetadata, position: Position | None) -> int | None:
    """The index (in meta.ledgers) of the first ledger the cursor still needs; len(ledgers) if none;
    None if its position is before the log's first ledger (what it needed is gone already)."""
    if position is None or not meta.ledgers:
        return 0
    if position.ledger_id < meta.ledgers[0].key:
        return None
    for index, led in enumerate(meta.ledgers):
        ids = [r[0] for r in led.replaced] or [led.ledger_id]
        if position.ledger_id > ids[-1]:
            continue
        if position.ledger_id < ids[-1] or led.entries is None:
            return index
        done = position.entry_id >= _logical_entries(meta, index)
        return index + 1 if done else index
    return len(meta.ledgers)


def _logical_entries(meta: LogMetadata, index: int) -> int:
    """Entries of the last logical ledger held by meta.ledgers[index] (sealed)."""
    led = meta.ledgers[index]
    if not led.replaced:
        return led.entries or 0
    return (led.entries or 0) - led.replaced[-1][1]


def lag(meta: LogMetadata, position: Position | None, tail_entries: int | None, now_ms: int) -> Lag:
    """How far `position` is behind the end of the log (see `Lag`). `tail_entries`: entries readable in
    the open last ledger (its LAC + 1), None if unknown (counted as 0)."""
    located = logical_ledgers(meta)
    sealed = [x for x in located if x.entries is not None and x.size is not None]
    avg = sum(x.size or 0 for x in sealed) / max(1, sum(x.entries or 0 for x in sealed))
    entries, size, oldest = 0, 0.0, None
    for x in located:
        count = x.entries if x.entries is not None else (tail_entries or 0)
        bytes_ = float(x.size) if x.size is not None else count * avg
        if position is not None and x.ledger_id < position.ledger_id:
            continue
        if position is not None and x.ledger_id == position.ledger_id:
            left = max(0, count - position.entry_id)
            bytes_ = bytes_ * left / count if count else 0.0
            count = left
        if count > 0 and oldest is None:
            oldest = _created(meta, x.physical)
        entries += count
        size += bytes_
    seconds = 0.0 if oldest is None else max(0.0, (now_ms - oldest) / 1000.0)
    return Lag(entries, int(size), seconds)


def _created(meta: LogMetadata, physical: int) -> int | None:
    led = meta.ledger(physical)
    return None if led is None else led.created_ms


# ---- what retention may delete -----------------------------------------------------------------
def held_cut(meta: LogMetadata, proposed: int, cursors: Sequence[CursorState],
             max_lag_bytes: int | None, now_ms: int = 0) -> Cut:
    """Of the `proposed` first ledgers retention or truncation would delete, how many it may: none a
    cursor has not acknowledged, except those of a cursor whose lag in sealed bytes exceeds
    `max_lag_bytes` (None: no quota): that cursor is sacrificed and reported in `lost` if the cut deletes
    records it had not acknowledged. A cursor already marked lost, or whose position is before the log's
    first ledger, holds nothing (it is reported lost once more if not yet marked)."""
    count = proposed
    holders: list[str] = []
    lost: dict[str, tuple[int, ...]] = {}
    sacrificed: dict[str, int] = {}
    for cursor in cursors:
        if cursor.lost is not None:
            continue
        need = _need_index(meta, cursor.position)
        if need is None:
            lost[cursor.name] = ()
        elif max_lag_bytes is not None and lag(meta, cursor.position, None, now_ms).bytes > max_lag_bytes:
            sacrificed[cursor.name] = need
        elif need < proposed:
            count = min(count, need)
            holders.append(cursor.name)
    count = min(count, max(0, len(meta.ledgers) - 1))
    for name, need in sacrificed.items():
        if need < count:
            lost[name] = tuple(led.ledger_id for led in meta.ledgers[need:count])
    return Cut(count, lost, tuple(sorted(holders)))


def cut_front(meta: LogMetadata, count: int) -> tuple[LogMetadata, list[int]]:
    """The log without its first `count` ledgers, and their ids (the last ledger always stays)."""
    count = max(0, min(count, len(meta.ledgers) - 1))
    if count == 0:
        return meta, []
    return dataclasses.replace(meta, ledgers=meta.ledgers[count:]), [led.ledger_id for led in meta.ledgers[:count]]
