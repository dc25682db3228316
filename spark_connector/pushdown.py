"""Filter pushdown of a batch read (`DataSourceReader.pushFilters`, PySpark 4.1+): which of Spark's
filters on `log`, `ledger_id`, `entry_id` and `timestamp` planning can use. Pure.

Spark hands over the filters of the WHERE clause that are ANDed at the top (an OR is never pushed);
`absorb` keeps what it can use and returns the others, which Spark then applies after the scan:

| column | =, <, <=, >, >=, IN | returned to Spark? |
|---|---|---|
| `log` | = and IN pick the logs read | no (exact) |
| `ledger_id` | all: drop ledgers | no (exact) |
| `entry_id` | comparisons cut each ledger's entry range; IN cuts to [min, max] | only IN |
| `timestamp` | a time range, found like startingTimestamp/endingTimestamp | yes (see below) |

A timestamp filter narrows the read by binary search (`spark_connector.narrowing`), which takes a log's
timestamps to be in order; it is always returned too, so Spark drops the records inside the range that
do not match (records without a timestamp, records out of order). Where Spark's switch is off
(`spark.sql.python.filterPushdown.enabled`, default false) Spark never calls `pushFilters` and filters
every row itself (`spark_connector.datasource` hands out a reader without pushFilters then).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

from bkledger.spark_connector.spark_compat import (  # PySpark's; stand-ins before 4.1 (no pushdown)
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_COMPARISONS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


@dataclasses.dataclass(frozen=True)
class Pushed:
    """What the accepted filters allow: None means no limit. Id bounds are inclusive; times are
    microseconds since the epoch, `time_lo_us` inclusive and `time_hi_us` exclusive."""

    logs: frozenset[str] | None = None
    ledgers: frozenset[int] | None = None
    ledger_lo: int | None = None
    ledger_hi: int | None = None
    entry_lo: int | None = None
    entry_hi: int | None = None
    time_lo_us: int | None = None
    time_hi_us: int | None = None

    def keeps_log(self, name: str) -> bool:
        return self.logs is None or name in self.logs

    def keeps_ledger(self, ledger_id: int) -> bool:
        return (self.ledgers is None or ledger_id in self.ledgers) \
            and (self.ledger_lo is None or ledger_id >= self.ledger_lo) \
            and (self.ledger_hi is None or ledger_id <= self.ledger_hi)


def _micros(value: object) -> int | None:
    """A filter's timestamp literal (a datetime; naive ones are local time, as PySpark makes them) in
    microseconds since the epoch."""
    if not isinstance(value, dt.datetime):
        return None
    aware = value if value.tzinfo is not None else value.astimezone()
    return (aware - _EPOCH) // dt.timedelta(microseconds=1)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _range(f: Filter, value: int) -> tuple[int | None, int | None]:
    """(lowest, highest) inclusive integer bounds of a comparison with an integer."""
    if isinstance(f, EqualTo):
        return value, value
    if isinstance(f, GreaterThan):
        return value + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return value, None
    if isinstance(f, LessThan):
        return None, value - 1
    return None, value          # LessThanOrEqual


def _tighter(p: Pushed, lo_name: str, hi_name: str, lo: int | None, hi: int | None) -> Pushed:
    old_lo, old_hi = getattr(p, lo_name), getattr(p, hi_name)
    new_lo = lo if old_lo is None else (old_lo if lo is None else max(old_lo, lo))
    new_hi = hi if old_hi is None else (old_hi if hi is None else min(old_hi, hi))
    changes: dict[str, Any] = {lo_name: new_lo, hi_name: new_hi}
    return dataclasses.replace(p, **changes)


def _log_filter(p: Pushed, f: Filter) -> Pushed | None:
    values = (f.value,) if isinstance(f, EqualTo) else f.value if isinstance(f, In) else None
    if values is None or not all(isinstance(v, str) for v in values):
        return None
    names = frozenset(values)
    return dataclasses.replace(p, logs=names if p.logs is None else p.logs & names)


def _ledger_filter(p: Pushed, f: Filter) -> Pushed | None:
    if isinstance(f, In):
        ids = [_int(v) for v in f.value]
        if any(i is None for i in ids):
            return None
        found = frozenset(i for i in ids if i is not None)
        return dataclasses.replace(p, ledgers=found if p.ledgers is None else p.ledgers & found)
    value = _int(f.value) if isinstance(f, _COMPARISONS) else None
    return None if value is None else _tighter(p, "ledger_lo", "ledger_hi", *_range(f, value))


def _entry_filter(p: Pushed, f: Filter) -> tuple[Pushed, bool] | None:
    """(narrowed, exact) or None when not usable."""
    if isinstance(f, In):
        ids = [_int(v) for v in f.value]
        if not ids or any(i is None for i in ids):
            return None
        known = [i for i in ids if i is not None]
        return _tighter(p, "entry_lo", "entry_hi", min(known), max(known)), False
    value = _int(f.value) if isinstance(f, _COMPARISONS) else None
    return None if value is None else (_tighter(p, "entry_lo", "entry_hi", *_range(f, value)), True)


def _time_filter(p: Pushed, f: Filter) -> Pushed | None:
    if isinstance(f, In):
        times = [_micros(v) for v in f.value]
        if not times or any(t is None for t in times):
            return None
        known = [t for t in times if t is not None]
        return _tighter(p, "time_lo_us", "time_hi_us", min(known), max(known) + 1)
    value = _micros(f.value) if isinstance(f, _COMPARISONS) else None
    if value is None:
        return None
    lo, hi = _range(f, value)
    return _tighter(p, "time_lo_us", "time_hi_us", lo, None if hi is None else hi + 1)


_EXACT: dict[str, Callable[[Pushed, Filter], Pushed | None]] = {"log": _log_filter, "ledger_id": _ledger_filter}


def absorb(filters: Iterable[Filter]) -> tuple[Pushed, list[Filter]]:
    """The filters' combined limits, and the filters Spark must still apply (unused or inexact ones)."""
    pushed, rest = Pushed(), []
    for f in filters:
        column = getattr(f, "attribute", ())
        name = column[0] if isinstance(column, tuple) and len(column) == 1 else None
        exact = _EXACT.get(name or "")
        if exact is not None and (got := exact(pushed, f)) is not None:
            pushed = got
        elif name == "entry_id" and (both := _entry_filter(pushed, f)) is not None:
            pushed = both[0]
            if not both[1]:
                rest.append(f)
        elif name == "timestamp" and (got := _time_filter(pushed, f)) is not None:
            pushed = got
            rest.append(f)
        else:
            rest.append(f)
    return pushed, rest


def empty(p: Pushed) -> bool:
    """Whether the filters contradict each other (nothing can match)."""
    return any(lo is not None and hi is not None and lo > hi for lo, hi in (
        (p.ledger_lo, p.ledger_hi), (p.entry_lo, p.entry_hi))) or (
        p.time_lo_us is not None and p.time_hi_us is not None and p.time_lo_us >= p.time_hi_us) or (
        p.logs is not None and not p.logs) or (p.ledgers is not None and not p.ledgers)


