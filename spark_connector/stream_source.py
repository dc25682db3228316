"""The Structured Streaming source of the "bkledger" data source: a log read as an unbounded table.

Mirrors Kafka's micro-batch source and a Pulsar non-durable cursor on top of BookKeeper's ledgers:

* Offsets are one position per log, plain JSON: `{"orders": {"ledger": 12, "entry": 40}}` means "the
  next record to read is entry 40 of ledger 12" (an exclusive end, an inclusive start). A log with no
  ledger yet is at `{"ledger": -1, "entry": 0}`. Spark persists these dicts verbatim in the checkpoint.
  A stream reads the logs of option `log` (a comma list) or every log `logPattern` matches, looked up
  again at each trigger: a log that appears later starts at its earliest record (Kafka's
  subscribePattern); the driver keeps a `spark_connector.stream_cursor.LogCursor` per log.
* `latestOffset(start, limit)` looks at the log (its ledger list in ZooKeeper; open ledgers are opened
  without recovery, so the writer is never fenced) and returns how far a batch may go: up to the LAC of
  the first ledger that is still OPEN, never past it, and never into a later ledger before the earlier
  one is CLOSED. Admission control: `maxEntriesPerTrigger` (ReadMaxRows) and `maxBytesPerTrigger`
  (ReadMaxBytes, counted with each ledger's average entry size), shared over the logs in proportion to
  what each has waiting. No new entry in any log: it returns `start` as is.
* `partitions(start, end)` is deterministic for any range Spark logged: every ledger strictly between
  the two positions is CLOSED (latestOffset never moves past an OPEN one), so the range is fixed. Data
  truncated from the log meanwhile is data loss: DataLossError, or skipped with `failOnDataLoss=false`.
* `Trigger.AvailableNow`: `prepareForTriggerAvailableNow` records where the log ends now; no batch goes
  past it. `reportLatestOffset` gives the uncapped end (shown as `latestOffset` in query progress: lag).
* Tasks read with the batch reader (`spark_connector.batch_reader`), so both return the same rows.

* `cursor` (issue 44 item 3): a cursor held by the cluster on every log the stream reads, created when the
  query first plans a batch (holding the whole log until its first acknowledgement) and acknowledged in
  `commit(end)` with each committed batch's end, so retention keeps what the query has not processed and
  `bkledger log cursors` shows its lag. Spark calls `commit` for batch N-1 while planning batch N (never for
  the last batch of Trigger.AvailableNow), so the cursor may be one batch behind; the checkpoint stays the
  query's own position (the cursor does not choose where a query starts).

Options (streaming only, besides the batch ones of `spark_connector.options`): `startingPositions`
("earliest" default, "latest", or JSON: `{"orders": {"ledger": 12, "entry": 0}}` or the batch form
`{"orders": {"12": 0}}`), `maxEntriesPerTrigger`, `maxBytesPerTrigger`, `failOnDataLoss`, `cursor`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from bkledger.spark_connector.batch_reader import check_schema, coalesced, read_any
from bkledger.spark_connector.kafka_options import LogChoice, check_named_logs, for_log
from bkledger.spark_connector.narrowing import at_least
from bkledger.spark_connector.options import (
    EARLIEST,
    BkLedgerOptionError,
    ReadOptions,
    _lowered,
    _position_map,
    option_json,
    parse_int,
)
from bkledger.spark_connector.planning import LedgerPartition, LedgerView
from bkledger.spark_connector.read_options import parse_read_options
from bkledger.spark_connector.spark_compat import (  # PySpark's (4.2+); stand-ins before (LegacyStreamReader)
    ADMISSION_CONTROL_SINCE,
    STREAM_ADMISSION_CONTROL,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
    arrow_schema,
    needs_newer_spark,
)
from bkledger.spark_connector.stream_cursor import LogCursor
from bkledger.spark_connector.stream_positions import (
    BEFORE_ANY,
    Pos,
    Segment,
    advance,
    entries_between,
    offset_of,
    pos_of,
    readable_end,
    share,
)

if TYPE_CHECKING:
    from bkledger.client import BookKeeper

log = logging.getLogger("bkledger.spark.stream")

STREAM_READ = ("maxEntriesPerTrigger", "maxBytesPerTrigger")
STREAM_CURSOR = "cursor"


def parse_starting_by_log(raw: str | None, choice: LogChoice) -> tuple[str, dict[str, Pos]]:
    """`startingPositions` of a stream: ("earliest" or "latest", {}) or ("earliest", a position per log
    named in the JSON; each as this source's offset form or the batch form). Logs not named (and logs a
    pattern picks up later) start at the earliest record."""
    if raw is None or raw.strip().lower() in ("earliest", "latest"):
        return (raw or "earliest").strip().lower(), {}
    example = f"{{\"{(choice.names or ('orders',))[0]}\": {{\"ledger\": 12, \"entry\": 0}}}}"
    try:
        parsed = option_json("startingPositions", raw)
    except json.JSONDecodeError:
        raise BkLedgerOptionError("startingPositions", f"must be earliest, latest or JSON like {example}; "
                                  f"got {raw!r}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise BkLedgerOptionError("startingPositions", f"must be a JSON object like {example}; got {raw!r}")
    if not all(isinstance(v, dict) for v in parsed.values()):
        if len(choice.names) != 1:
            raise BkLedgerOptionError("startingPositions", f"a stream of several logs takes positions keyed "
                                                           f"by log, e.g. {example}")
        parsed = {choice.names[0]: parsed}
    out: dict[str, Pos] = {}
    for name, value in parsed.items():
        if "ledger" in value:
            out[name] = pos_of(name, {name: value})
            continue
        per_ledger = _position_map(value, "startingPositions", name, "earliest")
        ledger = min(per_ledger)
        out[name] = Pos(ledger, max(0, per_ledger[ledger]) if per_ledger[ledger] != EARLIEST else 0)
    if choice.pattern is None:
        check_named_logs("startingPositions", out, choice.names)
    return "earliest", out


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    read: ReadOptions
    starting: str                      # "earliest" or "latest": logs without a position of their own
    starting_at: Mapping[str, Pos]     # per log, from startingPositions JSON
    max_entries_per_trigger: int | None
    max_bytes_per_trigger: int | None
    cursor: str | None = None          # a cursor held by the cluster, acknowledged at each commit

    @property
    def choice(self) -> LogChoice:
        assert self.read.logs is not None
        return self.read.logs


def parse_stream_options(options: Mapping[str, str]) -> StreamOptions:
    """Batch read options plus the streaming ones; BkLedgerOptionError on any problem."""
    opts = _lowered(options)
    batch_view = {k: v for k, v in opts.items() if k not in ("startingpositions", "endingpositions")}
    for name in ("endingPositions", "endingTimestamp", "endingPositionsByTimestamp"):
        if name.lower() in opts:
            raise BkLedgerOptionError(name, "is for batch reads; a stream has no end "
                                      "(use Trigger.AvailableNow to stop at the data present at start)")
    read = parse_read_options(batch_view, extra_known=(*STREAM_READ, STREAM_CURSOR))
    if read.logs is None:
        raise BkLedgerOptionError("ledgers", "a stream reads logs: give option log or logPattern instead of "
                                             "ledgers")
    max_entries = parse_int(opts, "maxEntriesPerTrigger", 0) or None
    max_bytes = parse_int(opts, "maxBytesPerTrigger", 0) or None
    starting, starting_at = parse_starting_by_log(opts.get("startingpositions"), read.logs)
    return StreamOptions(read, starting, starting_at, max_entries, max_bytes, parse_cursor(opts.get("cursor")))


def parse_cursor(raw: str | None) -> str | None:
    """Option `cursor`: a cursor name (checked like a log name), or None."""
    if raw is None:
        return None
    from bkledger.client.errors import InvalidLogNameError
    from bkledger.client.log.core.cursors import check_cursor_name

    try:
        return check_cursor_name(raw)
    except InvalidLogNameError as exc:
        raise BkLedgerOptionError(STREAM_CURSOR, str(exc)) from None


def discovery_options(options: Mapping[str, str]) -> ReadOptions:
    """Read options for schema discovery that also accept a stream's options (which a batch read rejects):
    `DataSource.schema()` can use this for both, since the schema does not depend on positions."""
    lowered = _lowered(options)
    read = parse_read_options({k: v for k, v in lowered.items() if k not in _STREAM_ONLY})
    if read.logs is not None and "startingpositions" in lowered:
        parse_starting_by_log(lowered["startingpositions"], read.logs)    # a malformed value fails here
    return read


_STREAM_ONLY = {"startingpositions", "endingpositions", STREAM_CURSOR, *(name.lower() for name in STREAM_READ)}


# ---- the reader -----------------------------------------------------------------------------------
class BkLedgerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader of one or more logs (a list, or every log a pattern matches, looked up again at
    each trigger). The driver-side instance keeps a client and a `LogCursor` per log (with caches of
    CLOSED ledgers); neither is pickled, so the copies Spark sends to tasks stay small."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        check_schema(schema)
        self.schema = schema
        self.opts = parse_stream_options(options)
        self._bk: BookKeeper | None = None
        self._cursors: dict[str, LogCursor] = {}
        self._cap: dict[str, Pos] | None = None
        self._latest: dict[str, Pos] = {}
        self._held: set[str] = set()         # logs whose cursor (option cursor) exists

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_bk=None, _cursors={})
        return state

    # ---- client and logs (driver) ----
    @property
    def bk(self) -> BookKeeper:
        if self._bk is None:
            from bkledger.spark_connector.clients import open_client

            source = self.opts.read.source
            self._bk = open_client(source.metadata_service_uri, source.client_settings)
        return self._bk

    def _client(self) -> BookKeeper:
        return self.bk

    def cursor(self, name: str) -> LogCursor:
        if name not in self._cursors:
            self._cursors[name] = LogCursor(name, for_log(self.opts.read, name), self._client)
        return self._cursors[name]

    def _names(self) -> list[str]:
        """The logs this stream reads now (a pattern is matched against the logs there are now)."""
        choice = self.opts.choice
        return choice.resolve(self.bk.list_logs() if choice.pattern is not None else ())

    # ---- Spark's API ----
    def initialOffset(self) -> dict[str, Any]:
        starting_time = self.opts.read.starting_time
        out: dict[str, Any] = {}
        for name in self._names():
            time_ms = starting_time.for_log(name) if starting_time is not None else None
            pos = self.cursor(name).initial(self.opts.starting, self.opts.starting_at.get(name), time_ms)
            out.update(offset_of(name, pos))
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_entries_per_trigger is not None:
            return ReadMaxRows(self.opts.max_entries_per_trigger)
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def _budgets(self, limit: ReadLimit) -> tuple[int | None, int | None]:
        max_entries = self.opts.max_entries_per_trigger if not isinstance(limit, ReadAllAvailable) else None
        max_bytes = self.opts.max_bytes_per_trigger if not isinstance(limit, ReadAllAvailable) else None
        if isinstance(limit, ReadMaxRows):
            max_entries = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        return max_entries, max_bytes

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Per log: up to where it can be read now (capped by Trigger.AvailableNow), the budgets of the
        read limit shared over the logs in proportion to what each has. A log a pattern matches for the
        first time starts at its earliest record (Kafka: new topics of subscribePattern)."""
        names = sorted(set(self._names()) | set(start))
        self._hold(names)
        plans: dict[str, tuple[Pos, Pos, list[Segment]]] = {}
        for name in names:
            cursor = self.cursor(name)
            first = pos_of(name, start) if name in start else BEFORE_ANY
            ids = cursor.ledger_ids(first.ledger if first.ledger >= 0 else None)
            begin = cursor.checked_start(first, ids)
            segments = cursor.segments(begin.ledger, ids)
            end = readable_end(segments, begin)
            self._latest[name] = end
            if self._cap is not None and self._cap.get(name, BEFORE_ANY) < end:
                end = max(self._cap.get(name, BEFORE_ANY), begin)
            plans[name] = (begin, end, segments)
        max_entries, max_bytes = self._budgets(limit)
        if max_entries is not None or max_bytes is not None:
            plans = self._admit(plans, max_entries, max_bytes)
        out: dict[str, Any] = {}
        moved = False
        for name, (begin, end, segments) in plans.items():
            if entries_between(segments, begin, end) > 0:
                moved = True
            if name in start or end > BEFORE_ANY:
                out.update(offset_of(name, end))
        return out if moved else start

    def _admit(self, plans: dict[str, tuple[Pos, Pos, list[Segment]]], max_entries: int | None,
               max_bytes: int | None) -> dict[str, tuple[Pos, Pos, list[Segment]]]:
        """Each log's end within its share of the entry and byte budgets."""
        available = {name: entries_between(seg, b, e) for name, (b, e, seg) in plans.items()}
        avgs = {name: self.cursor(name).avg_bytes(seg) if max_bytes is not None and available[name] else {}
                for name, (_, _, seg) in plans.items()}
        sizes = {name: int(sum(avg.values()) / max(1, len(avg)) * available[name]) for name, avg in avgs.items()}
        entry_shares, byte_shares = share(max_entries, available), share(max_bytes, sizes)
        out = {}
        for name, (begin, end, segments) in plans.items():
            entries, size = entry_shares[name], byte_shares[name]
            if available[name] and (entries is not None or size is not None):
                end = advance(segments, begin, end, None if entries is None else int(entries),
                              None if size is None else int(size), avgs[name])
            out[name] = (begin, end, segments)
        return out

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if not self._latest:
            return None
        out: dict[str, Any] = {}
        for name, pos in sorted(self._latest.items()):
            out.update(offset_of(name, pos))
        return out

    def prepareForTriggerAvailableNow(self) -> None:
        self._cap = {name: self.cursor(name).end_now() for name in self._names()}
        log.info("Trigger.AvailableNow reads up to %s", self._cap)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        views: list[LedgerView] = []
        pieces: list[LedgerPartition] = []
        for name in sorted(end):
            begin = pos_of(name, start) if name in start else BEFORE_ANY
            log_views, log_pieces = self.cursor(name).pieces(begin, pos_of(name, end))
            views += log_views
            pieces += log_pieces
        parts = coalesced(self.opts.read, views, pieces)
        return at_least(parts, self.opts.read.min_partitions) if self.opts.read.min_partitions else parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Runs in a task: the partition's entries as Arrow batches, exactly as a batch read returns them."""
        yield from read_any(self.opts.read, partition, arrow_schema(self.schema))

    def _hold(self, names: Sequence[str]) -> None:
        """Create the stream's cursor on logs that do not have it yet (option cursor)."""
        cursor = self.opts.cursor
        if cursor is None:
            return
        from bkledger.client.connector import create_cursor
        from bkledger.client.errors import LogNotFoundError

        for name in names:
            if name not in self._held:
                with contextlib.suppress(LogNotFoundError):     # not there yet: at a later trigger
                    create_cursor(self.bk.store, name, cursor)
                    self._held.add(name)

    def commit(self, end: dict[str, Any]) -> None:
        """The position lives in Spark's checkpoint; this runs a batch late, maybe never for the last batch
        (spark.md 1.5), so nothing correctness-critical depends on it. With option `cursor`, acknowledge
        `end` to the cursor of each log (forward only): retention keeps the rest, its lag is visible."""
        if self.opts.cursor is not None:
            from bkledger.spark_connector.stream_commit import ack_batch_end

            ack_batch_end(self.bk, self.opts.cursor, {name: pos_of(name, end) for name in end},
                          self.opts.read.fail_on_data_loss)

    def stop(self) -> None:
        if self._bk is not None:
            self._bk.close()
            self._bk = None


class LegacyStreamReader(BkLedgerStreamReader):
    """The reader on Spark before 4.2, whose stream readers have `latestOffset()` with neither the batch's start
    nor a read limit, and no Trigger.AvailableNow of their own (Spark's wrapper asks for the latest offset once
    and runs batches up to it). The start is the end this reader last gave Spark (the initial offset, the end
    of a batch it planned or an offset it returned); after a restart before any of those, the log's earliest
    position, from which the readable end is the same (it never passes an OPEN ledger, and a CLOSED ledger
    never opens again). Read limits (maxEntriesPerTrigger, maxBytesPerTrigger) are refused: they need the
    start Spark keeps in its checkpoint, which Spark before 4.2 does not pass."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        for name, value in zip(STREAM_READ, (self.opts.max_entries_per_trigger, self.opts.max_bytes_per_trigger),
                               strict=True):
            if value is not None:
                raise BkLedgerOptionError(name, needs_newer_spark("a read limit per trigger", ADMISSION_CONTROL_SINCE)
                                          + " (Spark before 4.2 gives a Python stream reader no read limit)")
        self._last_end: dict[str, Any] = {}

    def initialOffset(self) -> dict[str, Any]:
        self._last_end = super().initialOffset()
        return self._last_end

    def latestOffset(self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None) -> dict[str, Any]:
        self._last_end = super().latestOffset(self._last_end if start is None else start, ReadAllAvailable())
        return self._last_end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._last_end = dict(end)
        return super().partitions(start, end)


def stream_reader(options: Mapping[str, str], schema: StructType) -> DataSourceStreamReader:
    """What `BkLedgerDataSource.streamReader` returns (`LegacyStreamReader` on Spark before 4.2)."""
    if not STREAM_ADMISSION_CONTROL:
        return LegacyStreamReader(options, schema)
    return BkLedgerStreamReader(options, schema)
