"""Batch append to a log (or to the log each row names): each task writes its own new ledger per
destination log; the driver appends them all in ONE ZooKeeper transaction.

Mirrors a BookKeeper writer per ledger (one writer per ledger, R1-R10) and the "ledgers to logs"
recipe: a task creates a ledger (tagged in its custom metadata with the job id and the envelope
version), adds its rows with one `add_entries` bulk per Arrow batch (a bounded number of rows in
flight), closes it and returns its ledger id. The driver's `commit` appends the job's ledgers to the log with
`client.log.logs.append_ledgers` in one compare-and-swap, in ledger-id order (a log's ledger ids strictly
increase); `abort` deletes them. A task that fails deletes its own ledger before raising, and commit /
abort sweep ledgers of this job that no message names (killed or losing task attempts), found by the
job tag among the ledgers created since planning. Nothing half-written is ever listed in the log.

Destinations (as Kafka's sink with its `topic` option and column): option `log` sends every row to that
log; without it, the string column `log` names each row's log (a null there fails the task, naming the
row by partition and row index). A task keeps one ledger per destination log (its custom metadata
`bkledger.log` names the log), and the driver's commit appends to all the destination logs in one
multi-operation transaction that checks each log's head version (`log_commit.commit_to_logs`): readers
see the job in every log or in none.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, DataType, StringType, StructType, TimestampType

from bkledger.client import (
    BookKeeper,
    InvalidOptionError,
    InvalidQuorumError,
    LedgerHandle,
    LogNotFoundError,
    NotEnoughBookiesError,
)
from bkledger.client.connector import JOB_KEY, LOG_KEY, log_ledger_password
from bkledger.client.errors import InvalidLogNameError
from bkledger.client.log.core import envelope as env
from bkledger.client.log.core.envelope import I64, U8
from bkledger.client.log.core.names import check_log_name
from bkledger.spark_connector.arrow_io import byte_parts, header_parts, timestamp_parts, timestamp_range, widened
from bkledger.spark_connector.clients import planning_client, shared_client
from bkledger.spark_connector.log_commit import commit_to_logs
from bkledger.spark_connector.options import BkLedgerOptionError, WriteOptions
from bkledger.spark_connector.write_checks import check_write_plan, in_spark_terms

log = logging.getLogger("bkledger.spark")

IGNORED_COLUMNS = ("log", "ledger_id", "entry_id")     # a read DataFrame can be appended as it is
ADD_TIMEOUT_S = 120.0
KILLED_TASK_GRACE_S = 6.0       # > spark.python.task.killTimeout (2 s), with room for a loaded machine
SWEEP_INTERVAL_S = 1.0


@dataclasses.dataclass(frozen=True)
class WriteLayout:
    """Which input columns go where, decided from the DataFrame's schema at planning time."""

    value: str = "value"
    key: str | None = None
    timestamp: str | None = None
    envelope: int = env.NONE
    route: bool = False                 # each row's log comes from column log (no option log given)
    headers: str | None = None          # Kafka's headers column: array<struct<key: string, value: binary>>


@dataclasses.dataclass
class LedgerCommitMessage(WriterCommitMessage):
    """What a task wrote: its ledger for option log's log (None if it had no rows), partition, entry and
    byte counts; with per-row destinations, `routed` (log, ledger id) pairs instead. `spans`: (ledger id,
    min, max) timestamp in microseconds of each ledger's records that have one (the log records them for
    reads by time)."""

    ledger_id: int | None
    partition_id: int
    entries: int = 0
    bytes: int = 0
    routed: tuple[tuple[str, int], ...] = ()
    spans: tuple[tuple[int, int, int], ...] = ()


def plan_layout(schema: StructType, envelope_mode: str, log_option: str | None = "") -> WriteLayout:
    """Check the DataFrame's columns (BkLedgerOptionError naming the column) and pick the envelope and
    the destination: option log if given (`log_option`, "" when not asked), else column log."""
    fields = {f.name: f.dataType for f in schema.fields}
    route = log_option is None
    if route and "log" not in fields:
        raise BkLedgerOptionError("log", "is required: give option log, or a string column log naming each "
                                         f"row's destination log; the DataFrame has {list(fields)}")
    if route and fields["log"] != StringType():
        raise BkLedgerOptionError("log", f"column log must be a string (the destination log's name), not "
                                         f"{fields['log'].simpleString()}; or give option log")
    binary_like = (BinaryType(), StringType())
    if "value" not in fields:
        raise BkLedgerOptionError("value", "the DataFrame needs a value column (binary or string); "
                                           f"it has {list(fields)}")
    for name in ("value", "key"):
        if name in fields and fields[name] not in binary_like:
            raise BkLedgerOptionError(name, f"column {name} must be binary or string, "
                                            f"not {fields[name].simpleString()}")
    if "timestamp" in fields and fields["timestamp"] != TimestampType():
        raise BkLedgerOptionError("timestamp", "column timestamp must be of type timestamp, not "
                                               f"{fields['timestamp'].simpleString()}")
    if "headers" in fields and not _is_headers_type(fields["headers"]):
        raise BkLedgerOptionError("headers", "column headers must be array<struct<key: string, value: binary>> "
                                             f"(as Kafka's), not {fields['headers'].simpleString()}")
    extra = sorted(set(fields) - {"value", "key", "timestamp", "headers", *IGNORED_COLUMNS})
    if extra:
        raise BkLedgerOptionError("schema", f"columns {extra} cannot be written; a bkledger record has value, "
                                            "key, timestamp and headers (drop or rename the others)")
    key = "key" if "key" in fields else None
    ts = "timestamp" if "timestamp" in fields else None
    headers = "headers" if "headers" in fields else None
    if envelope_mode == "false" and (key or ts or headers):
        raise BkLedgerOptionError("envelope", "is false but the DataFrame has key/timestamp/headers columns, "
                                              "which only the envelope can carry")
    use = envelope_mode == "true" or (envelope_mode == "auto" and (key or ts or headers) is not None)
    version = env.V2 if headers else env.V1 if use else env.NONE     # v1 without headers: older readers read it
    return WriteLayout("value", key, ts, version, route, headers)


def _is_headers_type(data_type: DataType) -> bool:
    """array<struct<key: string, value: binary>> (nullability aside), the type of Kafka's headers column."""
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    return [(f.name, f.dataType) for f in data_type.elementType.fields] == [("key", StringType()),
                                                                               ("value", BinaryType())]


def encode_batch(batch: pa.RecordBatch, layout: WriteLayout) -> tuple[U8, I64]:
    """The entries of a batch, back to back, and their n + 1 offsets."""
    data, offsets, valid = byte_parts(batch.column(layout.value))
    if not bool(valid.all()):
        raise ValueError("bkledger: column value has nulls; every record needs a value")
    if layout.envelope == env.NONE:
        return data, offsets
    keys = byte_parts(batch.column(layout.key)) if layout.key is not None else None
    times = timestamp_parts(batch.column(layout.timestamp)) if layout.timestamp is not None else None
    headers = header_parts(batch.column(layout.headers)) if layout.headers is not None else None
    return env.encode_bulk((data, offsets), keys, times, headers, layout.envelope)


def _partition_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else -1


def _discard(bk: BookKeeper, lh: LedgerHandle | None) -> None:
    if lh is None:
        return
    with contextlib.suppress(Exception):
        lh.close()
    with contextlib.suppress(Exception):
        bk.delete_ledger(lh.ledger_id)


class BkLedgerBatchWriter(DataSourceArrowWriter):
    """Holds options, the column layout, the job id and the ledger id floor seen at planning."""

    def __init__(self, opts: WriteOptions, layout: WriteLayout, job_id: str, floor: int) -> None:
        self.opts = opts
        self.layout = layout
        self.job_id = job_id
        self.floor = floor

    # ---- tasks ---------------------------------------------------------------------------------------
    def _create(self, bk: BookKeeper, partition_id: int, log_name: str) -> LedgerHandle:
        o, src = self.opts, self.opts.source
        custom = {**env.custom_metadata(self.layout.envelope), JOB_KEY: self.job_id.encode(),
                  LOG_KEY: log_name.encode(), "bkledger.partition": str(partition_id).encode()}
        try:
            return bk.create_ledger(o.ensemble_size, o.write_quorum, o.ack_quorum, digest_type=src.digest_type
                                    or "crc32c", password=log_ledger_password(bk, log_name, src.password),
                                    custom_metadata=custom, compression=o.compression)   # the log's key
        except (NotEnoughBookiesError, InvalidQuorumError) as exc:
            raise in_spark_terms(exc) from exc

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgerCommitMessage:
        partition_id = _partition_id()
        bk = shared_client(self.opts.source.metadata_service_uri, self.opts.source.client_settings)
        ledgers: dict[str, LedgerHandle] = {}          # destination log -> this task's ledger for it
        spans: dict[str, tuple[int, int] | None] = {}  # destination log -> its records' time span so far
        pending: collections.deque[tuple[concurrent.futures.Future[int], int]] = collections.deque()
        entries = nbytes = rows = 0
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                for log_name, part in self._split(batch, partition_id, rows):
                    data, offsets = encode_batch(part, self.layout)
                    if log_name not in ledgers:
                        ledgers[log_name] = self._create(bk, partition_id, log_name)
                    self._add_all(ledgers[log_name], data, offsets, pending)
                    nbytes += int(offsets[-1])
                    spans[log_name] = widened(spans.get(log_name), self._span(part))
                rows += batch.num_rows
            entries = rows
            while pending:
                pending.popleft()[0].result(ADD_TIMEOUT_S)
            for lh in ledgers.values():
                lh.close()
        except BaseException:
            for lh in ledgers.values():
                _discard(bk, lh)
            raise
        known = tuple(sorted((lh.ledger_id, *span) for name, lh in ledgers.items()
                             if (span := spans.get(name)) is not None))
        if not self.layout.route:
            only = next(iter(ledgers.values()), None)
            return LedgerCommitMessage(only.ledger_id if only is not None else None, partition_id, entries, nbytes,
                                       spans=known)
        routed = tuple(sorted((name, lh.ledger_id) for name, lh in ledgers.items()))
        return LedgerCommitMessage(None, partition_id, entries, nbytes, routed, known)

    def _span(self, part: pa.RecordBatch) -> tuple[int, int] | None:
        """The (min, max) record timestamp of rows about to be written with the envelope, else None."""
        if self.layout.envelope == env.NONE or self.layout.timestamp is None:
            return None
        return timestamp_range(part.column(self.layout.timestamp))

    def _split(self, batch: pa.RecordBatch, partition_id: int, first_row: int) -> list[tuple[str, pa.RecordBatch]]:
        """The batch's rows by destination log, in their order (option log: all of them to it)."""
        if not self.layout.route:
            assert self.opts.source.log is not None
            return [(self.opts.source.log, batch)]
        return split_by_log(batch, partition_id, first_row)

    def _add_all(self, lh: LedgerHandle, data: U8, offsets: I64,
                 pending: collections.deque[tuple[concurrent.futures.Future[int], int]]) -> None:
        """One bulk add per Arrow batch (no Python object per row); waits for the oldest bulks while more
        than maxInFlight rows are in flight (always keeping this one going)."""
        buffer = np.ascontiguousarray(data) if len(data) else b""
        # read in place, not copied: the Arrow batch is not changed and is held until this bulk is done
        pending.append((lh.add_entries(buffer, offsets, copy=False), len(offsets) - 1))
        in_flight = sum(count for _, count in pending)
        while len(pending) > 1 and in_flight > self.opts.max_in_flight:
            future, count = pending.popleft()
            future.result(ADD_TIMEOUT_S)
            in_flight -= count

    # ---- driver ----------------------------------------------------------------------------------------
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        by_log = ledgers_by_log(messages, self.opts.source.log)
        src = self.opts.source
        with planning_client(src.metadata_service_uri, src.client_settings) as bk:
            wanted = {name: ids for name, ids in by_log.items() if ids}
            if wanted:
                commit_to_logs(bk, wanted, password=src.password, fence_live_writer=self.opts.fence_live_writer,
                               time_spans=time_spans_of(messages))
            log.info("appended ledgers %s in one transaction (job %s)", wanted, self.job_id)
            self._sweep(bk, keep={i for ids in by_log.values() for i in ids})

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        src = self.opts.source
        with planning_client(src.metadata_service_uri, src.client_settings) as bk:
            listed = ListedLedgers(bk)
            by_log = ledgers_by_log(messages, src.log)
            # a commit whose transaction did land keeps its ledgers
            keep = {i for name, ids in by_log.items() for i in ids if listed.has(name, i)}
            bk.delete_ledgers(i for ids in by_log.values() for i in ids if i not in keep)
            self._sweep(bk, keep=keep)
            if any(m is None for m in messages):
                self._sweep_killed(bk, keep)

    def _sweep_killed(self, bk: BookKeeper, keep: set[int]) -> None:
        """Tasks without a message failed or were killed, and Spark calls abort while killed ones may still
        run: one can create its ledger after the sweep above (seen on a loaded machine). Spark destroys a
        Python worker that outlives its task's kill by spark.python.task.killTimeout (2 s); sweep again
        until a grace period beyond that has passed, so a late ledger is deleted too."""
        deadline = time.monotonic() + KILLED_TASK_GRACE_S
        while time.monotonic() < deadline:
            time.sleep(SWEEP_INTERVAL_S)       # nothing to await: the killed task's process is Spark's
            self._sweep(bk, keep)

    def _sweep(self, bk: BookKeeper, keep: set[int]) -> None:
        """Delete this job's ledgers that no commit message named (killed or losing task attempts) and
        their log does not list (copies a commit made of overtaken ledgers carry the job's tag too)."""
        try:
            gone = sweep_tagged(bk, lambda job: job == self.job_id.encode(), keep, above=self.floor)
            if gone:
                log.info("deleted ledgers %s left by failed tasks of job %s", gone, self.job_id)
        except Exception as exc:  # cleanup is best effort: the logs are already right
            log.warning("sweeping the ledgers of job %s failed: %s", self.job_id, exc)


class ListedLedgers:
    """The ledger ids each log lists (as a ledger or as one a compacted ledger replaced), read once per log
    and only when asked (a missing log lists none): listing a long log reads every segment (seconds at a
    million ledgers), which a commit must not pay when no task attempt failed."""

    def __init__(self, bk: BookKeeper) -> None:
        self._bk = bk
        self._seen: dict[str, set[int]] = {}

    def has(self, log_name: str, ledger_id: int) -> bool:
        if log_name not in self._seen:
            try:
                self._seen[log_name] = set(self._bk.log_metadata(log_name).listed_ids)
            except (LogNotFoundError, InvalidOptionError):
                self._seen[log_name] = set()
        return ledger_id in self._seen[log_name]


def sweep_tagged(bk: BookKeeper, ours: Callable[[bytes], bool], keep: set[int], above: int = -1) -> list[int]:
    """Delete the ledgers (ids above `above`, not in `keep`) whose job tag `ours` accepts and that the log
    they were written for (their `bkledger.log` tag) does not list; the ids deleted."""
    listed = ListedLedgers(bk)
    unlisted = []
    for ledger_id, md in bk.store.ledgers_with_metadata(above=above):     # pipelined reads
        target = md.custom_metadata.get(LOG_KEY)
        if ledger_id in keep or target is None or not ours(md.custom_metadata.get(JOB_KEY, b"")):
            continue
        if not listed.has(target.decode(errors="replace"), ledger_id):
            unlisted.append(ledger_id)
    return bk.delete_ledgers(unlisted)          # one deleted meanwhile (another sweep) is left out


def split_by_log(batch: pa.RecordBatch, partition_id: int, first_row: int) -> list[tuple[str, pa.RecordBatch]]:
    """The rows of `batch` grouped by column log, each group in row order. ValueError naming the row's
    position (partition, row index within the task) if a log is null."""
    column = batch.column("log")
    if column.null_count:
        row = first_row + int(np.argmax(~pc.is_valid(column).to_numpy(zero_copy_only=False)))
        raise ValueError(f"bkledger: column log is null in row {row} of partition {partition_id}: every row "
                         "needs a destination log (or give option log to send all rows to one log)")
    names = pc.unique(column).to_pylist()
    for name in names:         # before a ledger is written for it (a new log's length: at commit)
        try:
            check_log_name(name, new=False)
        except InvalidLogNameError as exc:
            raise InvalidLogNameError(f"bkledger: column log in partition {partition_id}: {exc}", name=exc.name,
                                      reason=exc.reason, char=exc.char, index=exc.index) from None
    if len(names) == 1:
        return [(str(names[0]), batch)]
    return [(str(name), batch.filter(pc.equal(column, name))) for name in names]


def ledgers_by_log(messages: Iterable[WriterCommitMessage | None], default_log: str | None) -> dict[str, list[int]]:
    """The job's ledgers per destination log (sorted); `default_log` (option log) is always present."""
    out: dict[str, list[int]] = {} if default_log is None else {default_log: []}
    for m in messages:
        if not isinstance(m, LedgerCommitMessage):
            continue
        if m.ledger_id is not None and default_log is not None:
            out[default_log].append(m.ledger_id)
        for name, ledger_id in m.routed:
            out.setdefault(name, []).append(ledger_id)
    return {name: sorted(ids) for name, ids in out.items()}


def time_spans_of(messages: Iterable[WriterCommitMessage | None]) -> dict[int, tuple[int, int]]:
    """The record time span (min, max us) of each ledger whose task knew it."""
    return {ledger_id: (low, high) for m in messages if isinstance(m, LedgerCommitMessage)
            for ledger_id, low, high in m.spans}


def ledger_ids(messages: Iterable[WriterCommitMessage | None]) -> list[int]:
    """Every ledger the messages name, whatever its log."""
    ours = [m for m in messages if isinstance(m, LedgerCommitMessage)]
    return sorted([i for m in ours for _, i in m.routed] + [m.ledger_id for m in ours if m.ledger_id is not None])


def plan_writer(opts: WriteOptions, schema: StructType, overwrite: bool) -> BkLedgerBatchWriter:
    """Driver, at planning: refuse overwrite, check the columns, note the job id and ledger id floor."""
    if overwrite:
        raise BkLedgerOptionError("mode", "overwrite is not supported: a bkledger log is append-only; use "
                                          "mode(\"append\") (or truncate the log with the client first)")
    layout = plan_layout(schema, opts.envelope, opts.source.log)
    with planning_client(opts.source.metadata_service_uri, opts.source.client_settings) as bk:
        check_write_plan(bk, opts)           # log name, cluster, ensembleSize: errors before any task runs
        floor = bk.ledger_id_watermark()     # the job's ledgers are above it (an abort sweeps only those)
    return BkLedgerBatchWriter(opts, layout, uuid.uuid4().hex, floor)
