"""The Structured Streaming source of the "bkledger" data source: a log read as an unbounded table.

Mirrors Kafka's micro-batch source and a Pulsar non-durable cursor on top of BookKeeper's ledgers:

* Offsets are one position per log, plain JSON: `{"orders": {"ledger": 12, "entry": 40}}` means "the
  next record to read is entry 40 of ledger 12" (an exclusive end, an inclusive start). A log with no
  ledger yet is at `{"ledger": -1, "entry": 0}`. Spark persists these dicts verbatim in the checkpoint.
* `latestOffset(start, limit)` looks at the log (its ledger list in ZooKeeper; open ledgers are opened
  without recovery, so the writer is never fenced) and returns how far a batch may go: up to the LAC of
  the first ledger that is still OPEN, never past it, and never into a later ledger before the earlier
  one is CLOSED. Admission control: `maxEntriesPerTrigger` (ReadMaxRows) and `maxBytesPerTrigger`
  (ReadMaxBytes, counted with each ledger's average entry size). No new entry: it returns `start` as is.
* `partitions(start, end)` is deterministic for any range Spark logged: every ledger strictly between
  the two positions is CLOSED (latestOffset never moves past an OPEN one), so the range is fixed. Data
  truncated from the log meanwhile is data loss: DataLossError, or skipped with `failOnDataLoss=false`.
* `Trigger.AvailableNow`: `prepareForTriggerAvailableNow` records where the log ends now; no batch goes
  past it. `reportLatestOffset` gives the uncapped end (shown as `latestOffset` in query progress: lag).
* Tasks read with the batch reader (`spark_connector.batch_reader`), so both return the same rows.

Options (streaming only, besides the batch ones of `spark_connector.options`): `startingPositions`
("earliest" default, "latest", or JSON: `{"orders": {"ledger": 12, "entry": 0}}` or the batch form
`{"orders": {"12": 0}}`), `maxEntriesPerTrigger`, `maxBytesPerTrigger`, `failOnDataLoss`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from client import DataLossError
from client.log.core.meta import logical_ledgers
from spark_connector.batch_reader import check_schema, coalesced, ledger_view, read_any, recorded_view
from spark_connector.options import (
    EARLIEST,
    BkLedgerOptionError,
    ReadOptions,
    _lowered,
    _position_map,
    parse_int,
    parse_read_options,
)
from spark_connector.planning import LedgerView, plan_partitions

if TYPE_CHECKING:
    from client import BookKeeper

log = logging.getLogger("bkledger.spark.stream")

STREAM_READ = ("maxEntriesPerTrigger", "maxBytesPerTrigger")
SAMPLE_ENTRIES = 32          # entries read to estimate the entry size of an OPEN ledger with no sealed sibling


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
            or not isinstance(entry, int) or ledger < -1 or entry < 0:
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
        parsed = json.loads(text)
    except json.JSONDecodeError:
        raise BkLedgerOptionError("startingPositions", f"must be earliest, latest or JSON like "
                                  f"{{\"{log_name}\": {{\"ledger\": 12, \"entry\": 0}}}}; got {raw!r}") from None
    if isinstance(parsed, dict) and isinstance(parsed.get(log_name), dict) and "ledger" in parsed[log_name]:
        return pos_of(log_name, parsed)
    per_ledger = _position_map(parsed, "startingPositions", log_name, "earliest")
    ledger = min(per_ledger)
    return Pos(ledger, max(0, per_ledger[ledger]) if per_ledger[ledger] != EARLIEST else 0)


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    read: ReadOptions
    starting: str | Pos
    max_entries_per_trigger: int | None
    max_bytes_per_trigger: int | None

    @property
    def log(self) -> str:
        assert self.read.source.log is not None
        return self.read.source.log


def parse_stream_options(options: Mapping[str, str]) -> StreamOptions:
    """Batch read options plus the streaming ones; BkLedgerOptionError on any problem."""
    opts = _lowered(options)
    batch_view = {k: v for k, v in opts.items() if k not in ("startingpositions", "endingpositions")}
    if "endingpositions" in opts:
        raise BkLedgerOptionError("endingPositions", "is for batch reads; a stream has no end "
                                  "(use Trigger.AvailableNow to stop at the data present at start)")
    read = parse_read_options(batch_view, extra_known=STREAM_READ)
    if read.source.log is None:
        raise BkLedgerOptionError("ledgers", "a stream reads a log: give option log instead of ledgers")
    max_entries = parse_int(opts, "maxEntriesPerTrigger", 0) or None
    max_bytes = parse_int(opts, "maxBytesPerTrigger", 0) or None
    return StreamOptions(read, parse_starting(opts.get("startingpositions"), read.source.log), max_entries,
                         max_bytes)


def discovery_options(options: Mapping[str, str]) -> ReadOptions:
    """Read options for schema discovery that also accept a stream's options (which a batch read rejects):
    `DataSource.schema()` can use this for both, since the schema does not depend on positions."""
    lowered = _lowered(options)
    read = parse_read_options({k: v for k, v in lowered.items() if k not in _STREAM_ONLY})
    if read.source.log is not None and "startingpositions" in lowered:
        parse_starting(lowered["startingpositions"], read.source.log)    # a malformed value fails here
    return read


_STREAM_ONLY = {"startingpositions", "endingpositions", *(name.lower() for name in STREAM_READ)}


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


# ---- the reader -----------------------------------------------------------------------------------
class BkLedgerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader of one log. The driver-side instance keeps a client and a cache of CLOSED
    ledgers (immutable); neither is pickled, so the copies Spark sends to tasks stay small."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        check_schema(schema)
        self.schema = schema
        self.opts = parse_stream_options(options)
        self._bk: BookKeeper | None = None
        self._closed_views: dict[int, LedgerView] = {}
        self._closed_sizes: dict[int, int] = {}
        self._sampled: dict[int, float] = {}
        self._cap: Pos | None = None
        self._latest: Pos | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_bk=None, _closed_views={}, _closed_sizes={}, _sampled={})
        return state

    # ---- client and views (driver) ----
    @property
    def bk(self) -> BookKeeper:
        if self._bk is None:
            from spark_connector.clients import open_client

            source = self.opts.read.source
            self._bk = open_client(source.metadata_service_uri, source.client_settings)
        return self._bk

    def _ledger_ids(self, from_ledger: int | None = None) -> list[int]:
        """The log's (logical) ledger ids: all, or from `from_ledger`'s segment on (all if the log begins
        after it, so a truncated start is still seen as one): a trigger does not read a long log whole."""
        from client import LogNotFoundError

        try:
            meta = self.bk.log_metadata(self.opts.log, from_ledger=from_ledger)
        except LogNotFoundError:
            return []
        located = logical_ledgers(meta)            # positions' ledger ids (compaction keeps them)
        for led in located:                        # small CLOSED ledgers: the log's records are enough
            cached = self._closed_views.get(led.ledger_id)
            moved = cached is not None and led.compacted and cached.physical != led.physical
            if (cached is None or moved) and (view := recorded_view(led, self.opts.read)):
                self._closed_views[led.ledger_id] = view
                self._closed_sizes[led.ledger_id] = view.size or 0
        return [led.ledger_id for led in located]

    def _view(self, ledger_id: int) -> LedgerView:
        """The ledger as planning sees it (batch_reader.ledger_view); CLOSED ones are cached (immutable)."""
        cached = self._closed_views.get(ledger_id)
        if cached is not None:
            return cached
        view = ledger_view(self.bk, ledger_id, self.opts.read.source)
        if view.closed:
            self._closed_views[ledger_id] = view
            self._closed_sizes[ledger_id] = view.size or 0
        return view

    def _segments(self, from_ledger: int) -> list[Segment]:
        """The log's ledgers at or after `from_ledger`, as readable now."""
        meta_ids = self._ledger_ids(from_ledger if from_ledger >= 0 else None)
        out = []
        for ledger_id in meta_ids:
            if ledger_id < from_ledger:
                continue
            view = self._view(ledger_id)
            out.append(Segment(ledger_id, view.last_entry_id + 1, view.closed, self._closed_sizes.get(ledger_id)))
        return out

    def _avg_bytes(self, segments: Sequence[Segment]) -> dict[int, float]:
        known = [s.avg_entry_bytes for s in segments if s.avg_entry_bytes is not None]
        fallback = sum(known) / len(known) if known else None
        out: dict[int, float] = {}
        for seg in segments:
            avg = seg.avg_entry_bytes if seg.avg_entry_bytes is not None else fallback
            if avg is None:
                avg = self._sample(seg)
            out[seg.ledger_id] = avg
        return out

    def _sample(self, seg: Segment) -> float:
        """Average size of the first entries of an OPEN ledger (read once; used only for maxBytes)."""
        if seg.ledger_id not in self._sampled and seg.end > 0:
            rh = self.bk.open_ledger(seg.ledger_id, self.opts.read.source.password, recovery=False)
            chunk = rh.read_chunk(0, min(seg.end, SAMPLE_ENTRIES) - 1)
            self._sampled[seg.ledger_id] = sum(len(p) for p in chunk.payloads) / max(1, len(chunk.payloads))
        return self._sampled.get(seg.ledger_id, 1.0)

    def _checked_start(self, start: Pos, ids: Sequence[int]) -> Pos:
        """`start`, or, if its ledger is gone from the log (truncated), DataLossError or the log's
        earliest position (failOnDataLoss=false)."""
        if start.ledger == -1 or start.ledger in ids:
            return start
        if ids and start.ledger < ids[0]:
            what = f"ledger {start.ledger} was truncated from log {self.opts.log!r} (first ledger now {ids[0]})"
        else:
            what = f"ledger {start.ledger} is not in log {self.opts.log!r} (ledgers {list(ids)[:5]}...)"
        if self.opts.read.fail_on_data_loss:
            raise DataLossError(f"{what}; set failOnDataLoss=false to continue from the earliest record, or "
                                "start a new query (new checkpoint)")
        log.warning("%s; continuing from the earliest record", what)
        return Pos(ids[0], 0) if ids else BEFORE_ANY

    # ---- Spark's API ----
    def initialOffset(self) -> dict[str, Any]:
        starting = self.opts.starting
        if isinstance(starting, Pos):
            return offset_of(self.opts.log, starting)
        ids = self._ledger_ids()
        if not ids:
            return offset_of(self.opts.log, BEFORE_ANY)
        if starting == "earliest":
            return offset_of(self.opts.log, Pos(ids[0], 0))
        return offset_of(self.opts.log, readable_end(self._segments(ids[0]), Pos(ids[0], 0)))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_entries_per_trigger is not None:
            return ReadMaxRows(self.opts.max_entries_per_trigger)
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = pos_of(self.opts.log, start)
        ids = self._ledger_ids(begin.ledger if begin.ledger >= 0 else None)
        checked = self._checked_start(begin, ids)
        segments = self._segments(checked.ledger)
        end = readable_end(segments, checked)
        self._latest = end
        if self._cap is not None and self._cap < end:
            end = max(self._cap, checked)
        max_entries = self.opts.max_entries_per_trigger if not isinstance(limit, ReadAllAvailable) else None
        max_bytes = self.opts.max_bytes_per_trigger if not isinstance(limit, ReadAllAvailable) else None
        if isinstance(limit, ReadMaxRows):
            max_entries = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        if max_entries is not None or max_bytes is not None:
            avg = self._avg_bytes(segments) if max_bytes is not None else {}
            end = advance(segments, checked, end, max_entries, max_bytes, avg)
        if entries_between(segments, checked, end) == 0:
            return start
        return offset_of(self.opts.log, end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else offset_of(self.opts.log, self._latest)

    def prepareForTriggerAvailableNow(self) -> None:
        ids = self._ledger_ids()
        self._cap = readable_end(self._segments(ids[0]), Pos(ids[0], 0)) if ids else BEFORE_ANY
        log.info("log %r: Trigger.AvailableNow reads up to %s", self.opts.log, self._cap)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = pos_of(self.opts.log, start), pos_of(self.opts.log, end)
        if stop <= begin:
            return []
        ids = self._ledger_ids(begin.ledger if begin.ledger >= 0 else None)
        begin = self._checked_start(begin, ids)
        if stop.ledger not in ids:
            begin = self._checked_start(stop, ids)       # the whole range is gone
            return []
        wanted = [i for i in ids if begin.ledger <= i <= stop.ledger]
        views = [self._view(i) for i in wanted]
        segments = [Segment(v.ledger_id, v.last_entry_id + 1, v.closed) for v in views]
        for seg in segments[:-1]:
            if not seg.closed:
                raise AssertionError(f"ledger {seg.ledger_id} of log {self.opts.log!r} is still OPEN but a "
                                     f"batch ends after it ({stop}): offsets not made by this source?")
        bounds = ranges(segments, begin, stop)
        pieces = plan_partitions(self.opts.log, views, bounds, self.opts.read.max_entries_per_partition)
        return coalesced(self.opts.read, views, pieces)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Runs in a task: the partition's entries as Arrow batches, exactly as a batch read returns them."""
        from pyspark.sql.pandas.types import to_arrow_schema

        yield from read_any(self.opts.read, partition, to_arrow_schema(self.schema, timezone="UTC"))

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the position lives in Spark's checkpoint; runs a batch late, maybe never for the
        last batch (spark.md 1.5), so nothing correctness-critical may depend on it."""

    def stop(self) -> None:
        if self._bk is not None:
            self._bk.close()
            self._bk = None


def stream_reader(options: Mapping[str, str], schema: StructType) -> DataSourceStreamReader:
    """What `BkLedgerDataSource.streamReader` returns."""
    return BkLedgerStreamReader(options, schema)
