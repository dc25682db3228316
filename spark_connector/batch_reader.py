"""Batch read of a log (or of raw ledgers): schema discovery and planning on the driver, reads in tasks.

Mirrors a BookKeeper ReadHandle opened without recovery (R12: a reader never fences the writer):
planning reads the log's ledger list; small CLOSED ledgers are planned from what the log records of them
(entries, bytes), the others from their metadata (read concurrently): the LAC of an OPEN ledger (as it
is now) or the last entry id of a CLOSED one is the bound. `spark_connector.planning` cuts the pieces,
`spark_connector.coalesce` packs them into few partitions. Each task opens its ledgers without recovery
(many at once: `BookKeeper.open_ledgers`) and streams each entry range with `read_chunk`, one chunk read
ahead while the last is converted and shipped, yielding one Arrow RecordBatch per chunk
(`spark_connector.arrow_io`); the first chunks of the next pieces are in flight on the client loop
(`read_chunk_async`) and tiny pieces' rows are gathered into one batch (`TinyRows`).
Schema: `log, ledger_id, entry_id, value`, plus `key, timestamp` when any ledger carries the envelope, and
`headers` (Kafka's array<struct<key, value>>) with option includeHeaders.
A log's offloaded history (issue 42) is planned from the same read of its metadata, at the same positions,
as pieces naming rows of the Parquet files that snapshot lists (`spark_connector.seam`); tasks read those
row groups (`spark_connector.offloaded`), never the bookie copies.
A read may cover several logs (`spark_connector.kafka_options`): each is planned on its own (positions,
times resolved by `spark_connector.time_seek`, filters of `spark_connector.pushdown`) and their pieces
are packed together; `minPartitions` then splits the largest partitions (`spark_connector.narrowing`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gc
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from bkledger.client import (
    BadPasswordError,
    BookKeeper,
    DataLossError,
    LedgerHandle,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from bkledger.client.connector import Read, ReadChunk, chunks_ahead
from bkledger.client.log.core import envelope as env
from bkledger.client.log.core import meta as lm
from bkledger.spark_connector.arrow_io import chunk_to_batch, rows_to_batch
from bkledger.spark_connector.clients import planning_client, shared_client
from bkledger.spark_connector.coalesce import CoalescedPartition, coalesce
from bkledger.spark_connector.kafka_options import TimeBound, check_named_logs, for_log
from bkledger.spark_connector.narrowing import at_least, first_at_or_after, narrow, narrow_ids, spans_of
from bkledger.spark_connector.offloaded import OffloadedFiles, read_offloaded
from bkledger.spark_connector.options import BkLedgerOptionError, ReadOptions, SourceOptions
from bkledger.spark_connector.planning import (
    Bounds,
    LedgerPartition,
    LedgerView,
    plan_partitions,
    recorded_entry_bytes,
    resolve_bounds,
)
from bkledger.spark_connector.pushdown import Pushed, absorb, empty
from bkledger.spark_connector.seam import offloaded_views
from bkledger.spark_connector.spark_compat import FILTER_PUSHDOWN, Filter, arrow_schema
from bkledger.spark_connector.time_seek import TimeProbe

log = logging.getLogger("bkledger.spark")

COLUMNS: dict[str, DataType] = {
    "log": StringType(), "ledger_id": LongType(), "entry_id": LongType(), "value": BinaryType(),
    "key": BinaryType(), "timestamp": TimestampType(),
    "headers": ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
}
BASE_COLUMNS = ("log", "ledger_id", "entry_id", "value")
ENVELOPE_COLUMNS = ("key", "timestamp")
LAC_WAIT_S = 10.0
ENVELOPE_AT_READ = -1          # LedgerView.envelope of a ledger planned from the log's records alone
PLAN_THREADS = 16              # ledger metadata read at once while planning
OPEN_WINDOW = 2000             # ledgers of a coalesced partition opened together (BookKeeper.open_ledgers)
READ_GROUP = 256               # pieces of a coalesced partition whose first chunks are asked for together
MERGE_ROWS = 4096              # rows of tiny pieces shipped to Spark in one Arrow batch ...
MERGE_BYTES = 4 << 20          # ... or fewer once they hold this many payload bytes
ENVELOPE_BATCH = 1000
ENVELOPES_KEPT = 2_000_000     # ledgers' envelope versions kept per process (has_envelope), then forgotten
_ENVELOPES: dict[tuple[str, int], int] = {}     # (metadata service URI, ledger id) -> envelope version
_PREFETCH = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="bkledger-prefetch")   # per process


def read_schema(with_envelope: bool, headers: bool = False) -> StructType:
    """The columns of a read: `headers` (Kafka's, as array<struct<key, value>>) only when asked for
    (option includeHeaders)."""
    names = (*BASE_COLUMNS, *ENVELOPE_COLUMNS) if with_envelope else BASE_COLUMNS
    names = (*names, "headers") if headers else names
    return StructType([StructField(n, COLUMNS[n], nullable=True) for n in names])


def check_schema(schema: StructType) -> None:
    """A user-given read schema may name only the source's columns, with their types."""
    for field in schema.fields:
        expected = COLUMNS.get(field.name)
        if expected is None:
            raise BkLedgerOptionError("schema", f"column {field.name!r} is not a bkledger column; "
                                                f"columns are {', '.join(COLUMNS)}")
        if field.dataType.simpleString() != expected.simpleString():     # headers: nullability aside
            raise BkLedgerOptionError("schema", f"column {field.name!r} must be {expected.simpleString()}, "
                                                f"not {field.dataType.simpleString()}")


# ---- driver: what is there ---------------------------------------------------------------------
def ledger_view(bk: BookKeeper, ledger_id: int, source: SourceOptions) -> LedgerView:
    """The ledger's fragments, readable bound (LAC if OPEN: opened without recovery) and envelope."""
    md = bk.ledger_metadata(ledger_id)
    if source.password and md.password != source.password:      # none given: the ledger's own (the log's key)
        raise BadPasswordError(f"bkledger option password: wrong password for ledger {ledger_id}; give the "
                               "password the ledgers were written with")
    if source.digest_type is not None and md.digest_type.name.lower() != source.digest_type:
        raise BkLedgerOptionError("digestType", f"ledger {ledger_id} uses {md.digest_type.name.lower()}, "
                                                f"not {source.digest_type}")
    last = md.last_entry_id
    if not md.is_closed:
        rh = bk.open_ledger(ledger_id, source.password or None, recovery=False)
        md, last = rh.metadata, rh.last_entry_id
    return LedgerView(ledger_id, tuple(f.first_entry_id for f in md.fragments), last,
                      env.version_of(md.custom_metadata), md.is_closed, md.length if md.is_closed else None)


def recorded_view(led: lm.Located, opts: ReadOptions) -> LedgerView | None:
    """A CLOSED ledger as the log records it (entries, bytes, envelope version: no ZooKeeper read), when
    it fits one partition (then where its fragments begin does not matter) or was compacted into another
    (read there). None if planning must read its metadata."""
    envelope = led.envelope if led.envelope in env.SUPPORTED else ENVELOPE_AT_READ
    if led.compacted:
        return LedgerView(led.ledger_id, (0,), (led.entries or 0) - 1, envelope, True, led.size,
                          led.physical, led.base)
    if led.entries is None or led.entries > opts.max_entries_per_partition \
            or (led.size or 0) > opts.target_partition_bytes:
        return None
    return LedgerView(led.ledger_id, (0,), led.entries - 1, envelope, True, led.size)


def discover(bk: BookKeeper, opts: ReadOptions, meta: lm.LogMetadata | None = None) -> list[LedgerView]:
    """The ledgers to read, ascending: the log's (small CLOSED ones from the log's own records, the others
    from their metadata, read concurrently) or the `ledgers` option's. `meta`: the log's metadata, if the
    caller has just read it."""
    source = opts.source
    recorded: dict[int, LedgerView] = {}
    spans: dict[int, tuple[int, int, bool]] = {}
    if source.log is not None:
        if meta is None:
            meta = bk.log_metadata(source.log)
        located = lm.logical_ledgers(meta)                                  # positions' ledger ids
        ids = [led.ledger_id for led in located]
        recorded = {led.ledger_id: v for led in located if (v := recorded_view(led, opts)) is not None}
        recorded.update(offloaded_views(meta))        # read from the files this snapshot names
        spans = lm.time_spans(meta)
    else:
        ids = sorted(source.ledgers or ())
    wanted = [i for i in ids if i not in recorded]
    if ids and ids[0] in recorded and recorded[ids[0]].physical is None:
        wanted.insert(0, ids[0])                  # the password and digest type are checked on one at least
    read = _read_views(bk, wanted, opts)
    views = [v for i in ids if (v := read.get(i) or recorded.get(i)) is not None]
    return [dataclasses.replace(v, time_span=spans[v.ledger_id]) if v.ledger_id in spans else v for v in views]


def _read_views(bk: BookKeeper, ids: Sequence[int], opts: ReadOptions) -> dict[int, LedgerView]:
    def one(ledger_id: int) -> LedgerView | None:
        try:
            return ledger_view(bk, ledger_id, opts.source)
        except NoSuchLedgerError:
            where = f"log {opts.source.log!r} lists" if opts.source.log is not None else "option ledgers names"
            if opts.fail_on_data_loss:
                raise DataLossError(f"{where} ledger {ledger_id}, which does not exist (deleted?); set "
                                    "failOnDataLoss=false to read the others") from None
            log.warning("%s ledger %d, which does not exist; skipped (failOnDataLoss=false)", where, ledger_id)
            return None

    if len(ids) <= 1:
        found = [one(i) for i in ids]
    else:
        with concurrent.futures.ThreadPoolExecutor(min(PLAN_THREADS, len(ids))) as pool:
            found = list(pool.map(one, ids))
    return {v.ledger_id: v for v in found if v is not None}


def has_envelope(bk: BookKeeper, views: Sequence[LedgerView]) -> bool:
    """Whether any ledger carries the key/timestamp envelope (metadata of unread ones read concurrently,
    stopping at the first that does). What a ledger's metadata said is kept for the process's later reads
    (`_ENVELOPES`): a ledger's custom metadata never changes and its id is never reused, so a schema
    discovered again (each `load()`) reads only the ledgers added since."""
    if any(v.envelope > env.NONE for v in views):
        return True
    uri = bk.metadata_service_uri
    unknown = list(dict.fromkeys(v.physical or v.ledger_id for v in views if v.envelope == ENVELOPE_AT_READ))
    if any(_ENVELOPES.get((uri, i), env.NONE) != env.NONE for i in unknown):
        return True
    unread = [i for i in unknown if (uri, i) not in _ENVELOPES]
    if len(_ENVELOPES) + len(unread) > ENVELOPES_KEPT:
        _ENVELOPES.clear()
    for i in range(0, len(unread), ENVELOPE_BATCH):
        ids = unread[i:i + ENVELOPE_BATCH]
        versions = {ledger_id: env.version_of(md.custom_metadata)
                    for ledger_id, md in zip(ids, bk.store.read_ledgers(ids), strict=True) if md is not None}
        _ENVELOPES.update(((uri, ledger_id), version) for ledger_id, version in versions.items())
        if any(version != env.NONE for version in versions.values()):
            return True
    return False


def discover_schema(opts: ReadOptions) -> StructType:
    with gc_paused(), planning_client(opts.source.metadata_service_uri, opts.source.client_settings) as bk:
        if opts.logs is None:
            return read_schema(carries_envelope(bk, opts), opts.include_headers)
        return read_schema(any(carries_envelope(bk, for_log(opts, name)) for name in read_logs(bk, opts)),
                           opts.include_headers)


def carries_envelope(bk: BookKeeper, opts: ReadOptions) -> bool:
    """Whether any ledger of the read carries the key/timestamp envelope. A log that records a supported
    envelope version for every ledger answers from its own records (a 100,000-ledger log: 0.23 s, against
    0.49 s building every ledger's view); the first ledger's metadata is still read, as planning reads
    it, for its password and digest type. Otherwise the views and their metadata tell (`has_envelope`)."""
    meta = None if opts.source.log is None else bk.log_metadata(opts.source.log)
    if meta is not None and meta.ledgers:
        versions = {led.envelope for led in meta.ledgers}
        if versions <= set(env.SUPPORTED):
            if not meta.ledgers[0].replaced:          # a compacted first ledger's metadata is gone
                _read_views(bk, [meta.ledgers[0].ledger_id], opts)
            return any(version is not None and version > env.NONE for version in versions)
    return has_envelope(bk, discover(bk, opts, meta))


def coalesced(opts: ReadOptions, views: Sequence[LedgerView], pieces: Sequence[LedgerPartition]
              ) -> list[CoalescedPartition]:
    """Pieces packed into partitions of up to maxEntriesPerPartition / targetPartitionBytes (log order)."""
    return coalesce(pieces, recorded_entry_bytes(views), opts.max_entries_per_partition,
                    opts.target_partition_bytes)


def plan(opts: ReadOptions, pushed: Pushed | None = None) -> list[CoalescedPartition]:
    """The partitions of a read: each log's (or the raw ledgers') pieces within positions, times and the
    pushed filters, packed by `coalesce`, then split up to `minPartitions`. Python's cyclic garbage
    collector is held off meanwhile: planning a long log makes several objects per ledger and no cycles,
    and each collection the allocations set off would scan the whole heap (a third of the time of
    planning a 100k-ledger log, more in a process with a large heap)."""
    with gc_paused():
        return _plan(opts, pushed)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic cyclic garbage collection inside (it is switched back on after, if it was on)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _plan(opts: ReadOptions, pushed: Pushed | None) -> list[CoalescedPartition]:
    pushed = pushed or Pushed()
    if empty(pushed) or (opts.logs is None and pushed.logs is not None):
        return []               # contradicting filters, or a filter on `log`, which is null for raw ledgers
    views: list[LedgerView] = []
    pieces: list[LedgerPartition] = []
    with planning_client(opts.source.metadata_service_uri, opts.source.client_settings) as bk:
        if opts.logs is None:
            views = discover(bk, opts)
            bounds = resolve_bounds(None, views, opts.starting, opts.ending, opts.fail_on_data_loss)
            pieces = plan_partitions(None, views, narrow_ids(bounds, pushed), opts.max_entries_per_partition,
                                     opts.target_partition_bytes)
        for name in read_logs(bk, opts, pushed):
            one = for_log(opts, name)
            log_views = discover(bk, one)
            bounds = log_bounds(bk, one, log_views, pushed)
            pieces += plan_partitions(name, log_views, bounds, opts.max_entries_per_partition,
                                      opts.target_partition_bytes)
            views += log_views
    parts = coalesced(opts, views, pieces)
    return at_least(parts, opts.min_partitions) if opts.min_partitions else parts


def read_logs(bk: BookKeeper, opts: ReadOptions, pushed: Pushed | None = None) -> list[str]:
    """The logs a read covers now (a pattern is matched against the logs there are), as the `log`
    filter leaves them; per-log options naming other logs fail."""
    if opts.logs is None:
        return []
    names = opts.logs.resolve(bk.list_logs() if opts.logs.pattern is not None else ())
    for option, named in (("startingPositions", opts.starting_by_log), ("endingPositions", opts.ending_by_log),
                          ("startingPositionsByTimestamp", (opts.starting_time or TimeBound()).by_log),
                          ("endingPositionsByTimestamp", (opts.ending_time or TimeBound()).by_log)):
        check_named_logs(option, named, names)
    return [n for n in names if pushed is None or pushed.keeps_log(n)]


def log_bounds(bk: BookKeeper, opts: ReadOptions, views: Sequence[LedgerView], pushed: Pushed) -> Bounds:
    """[first, end) per ledger of one log (`opts` from `for_log`): positions, unless a time is given for
    that end (Kafka's precedence), cut by the pushed filters' ids and times."""
    name = opts.source.log
    assert name is not None
    start_ms = opts.starting_time.for_log(name) if opts.starting_time else None
    end_ms = opts.ending_time.for_log(name) if opts.ending_time else None
    bounds = resolve_bounds(name, views, "earliest" if start_ms is not None else opts.starting,
                            "latest" if end_ms is not None else opts.ending, opts.fail_on_data_loss)
    bounds = narrow_ids(bounds, pushed)
    lo_us = _bound(max, start_ms, pushed.time_lo_us)
    hi_us = _bound(min, end_ms, pushed.time_hi_us)
    if not bounds or (lo_us is None and hi_us is None):
        return bounds
    probe = TimeProbe(bk, views, opts.source.password or None, name)
    known = {v.ledger_id: v.time_span for v in views if v.time_span is not None}
    if lo_us is not None:
        at = first_at_or_after(spans_of(bounds), probe, lo_us, known)
        bounds = {} if at is None else narrow(bounds, at, None)
    if hi_us is not None and bounds:
        at = first_at_or_after(spans_of(bounds), probe, hi_us, known)
        bounds = bounds if at is None else narrow(bounds, None, at)
    log.info("log %r: time bounds [%s, %s) us resolved with %d entry reads (%d of %d ledgers with a recorded "
             "time span)", name, lo_us, hi_us, probe.reads, len(known), len(views))
    return bounds


def _bound(pick: Callable[[int, int], int], ms: int | None, us: int | None) -> int | None:
    candidates = [v for v in (None if ms is None else ms * 1000, us) if v is not None]
    return pick(*candidates) if len(candidates) == 2 else (candidates[0] if candidates else None)


# ---- tasks: reading --------------------------------------------------------------------------------
def prefetched_chunks(rh: LedgerHandle, first: int, last: int,
                      ahead: concurrent.futures.Future[ReadChunk] | None = None) -> Iterator[ReadChunk]:
    """Read chunks first..last in order, the next one always in flight while the caller converts and
    ships the current one (Arrow conversion, IPC to the JVM): reads overlap the rest of the task.
    `ahead`: the first chunk, already asked for (a coalesced partition reads its next pieces early)."""
    position = first
    try:
        while position <= last:
            chunk = ahead.result() if ahead is not None else rh.read_chunk(position, last)
            position = chunk.entry_ids[-1] + 1
            ahead = _PREFETCH.submit(rh.read_chunk, position, last) if position <= last else None
            yield chunk
    finally:
        if ahead is not None:
            ahead.cancel()



def read_partition(opts: ReadOptions, part: LedgerPartition, schema: pa.Schema,
                   opened: LedgerHandle | None = None,
                   first_chunk: concurrent.futures.Future[ReadChunk] | None = None) -> Iterator[pa.RecordBatch]:
    """Entries first..last of the partition's ledger as RecordBatches (one per read chunk); `first_chunk`:
    the read of its first chunk, already under way on `opened`."""
    source = opts.source
    bk = shared_client(source.metadata_service_uri, source.client_settings)
    try:
        rh = opened or bk.open_ledger(part.physical or part.ledger_id, source.password or None, recovery=False)
        if not rh.is_closed and rh.last_add_confirmed < part.last_entry_id:
            rh.wait_for_lac(part.last_entry_id - 1, LAC_WAIT_S)   # a bookie behind the one planning asked
            if rh.last_add_confirmed < part.last_entry_id:
                rh.refresh()
        base = part.base                            # a compacted ledger: its entries sit from `base` on
        envelope = part.envelope if part.envelope >= 0 else env.version_of(rh.metadata.custom_metadata)
        for chunk in prefetched_chunks(rh, base + part.first_entry_id, base + part.last_entry_id, first_chunk):
            ids = chunk.entry_ids if not base else [e - base for e in chunk.entry_ids]
            payloads = chunk.packed or chunk.payloads       # spans: no Python object per entry
            yield chunk_to_batch(schema, part.log, part.ledger_id, ids, payloads, envelope)
    except (NoSuchLedgerError, NoSuchEntryError) as exc:
        what = f"ledger {part.ledger_id} entries {part.first_entry_id}..{part.last_entry_id}"
        if opts.fail_on_data_loss:
            raise DataLossError(f"{what} are gone since planning ({exc}); set failOnDataLoss=false to skip "
                                "them") from exc
        log.warning("%s are gone since planning; skipped (failOnDataLoss=false)", what)


def read_any(opts: ReadOptions, partition: InputPartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """A task's rows: the pieces of a coalesced partition one after the other (log order), or one piece.
    The ledgers of many pieces are opened together (`BookKeeper.open_ledgers`: pipelined metadata reads,
    no bookie asked for a CLOSED ledger), their first chunks read ahead on the client loop, and the rows
    of tiny pieces are shipped in batches of at least MERGE_ROWS (one Arrow batch per one-entry ledger
    cost more than its read). Python's cyclic garbage collector is held off meanwhile (the worker runs one
    task at a time, and a partition is bounded by maxEntriesPerPartition and targetPartitionBytes): its
    collections, set off by the reads' short-lived objects, took 5-7% of a worker's CPU in a 550 MB read."""
    with gc_paused():
        yield from _read_any(opts, partition, schema)


def _read_any(opts: ReadOptions, partition: InputPartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    if isinstance(partition, LedgerPartition):
        yield from read_piece(opts, partition, schema)
    if not isinstance(partition, CoalescedPartition):
        return
    if len(partition.pieces) == 1:
        yield from read_piece(opts, partition.pieces[0], schema)
        return
    bk = shared_client(opts.source.metadata_service_uri, opts.source.client_settings)
    yield from merged(_read_pieces(opts, bk, partition.pieces, schema), MERGE_ROWS, MERGE_BYTES)


def read_piece(opts: ReadOptions, part: LedgerPartition, schema: pa.Schema,
               files: OffloadedFiles | None = None) -> Iterator[pa.RecordBatch]:
    """One piece: rows of an offloaded file (`spark_connector.offloaded`) or entries on bookies."""
    if part.offloaded is not None:
        yield from read_offloaded(files or OffloadedFiles(), part, schema, opts.fail_on_data_loss)
    else:
        yield from read_partition(opts, part, schema)


def _read_pieces(opts: ReadOptions, bk: BookKeeper, pieces: Sequence[LedgerPartition],
                 schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The pieces' rows in order. A piece whose first chunk held all of it (a tiny ledger) is gathered
    with its neighbours into one batch (`TinyRows`); the others stream through read_partition. Pieces of
    offloaded history read their files' row groups (no ledger opened for them)."""
    tiny = TinyRows(schema)
    files = OffloadedFiles()
    for start in range(0, len(pieces), OPEN_WINDOW):
        window = pieces[start:start + OPEN_WINDOW]
        handles: Mapping[int, LedgerHandle] = bk.open_ledgers(
            [p.physical or p.ledger_id for p in window if p.offloaded is None], opts.source.password or None,
            recovery=False) if any(p.offloaded is None for p in window) else {}
        # a ledger missing from `handles` is opened again by read_partition, which reports it as data loss
        for piece, first_chunk in zip(window, read_ahead(bk, window, handles), strict=True):
            if piece.offloaded is not None:
                yield from tiny.drain()
                yield from read_offloaded(files, piece, schema, opts.fail_on_data_loss)
                continue
            rh = handles.get(piece.physical or piece.ledger_id)
            chunk = whole_piece(piece, first_chunk)
            if rh is not None and chunk is not None:
                envelope = piece.envelope if piece.envelope >= 0 else env.version_of(rh.metadata.custom_metadata)
                yield from tiny.add(piece, chunk, envelope)
                continue
            yield from tiny.drain()
            yield from read_partition(opts, piece, schema, rh, first_chunk)
    yield from tiny.drain()


def whole_piece(piece: LedgerPartition, first_chunk: concurrent.futures.Future[ReadChunk] | None
                ) -> ReadChunk | None:
    """The piece's first chunk if it holds every entry of the piece; None otherwise, or if the read
    failed (read_partition then sees the same error and reports it as data loss, or raises)."""
    if first_chunk is None:
        return None
    try:
        chunk = first_chunk.result(LAC_WAIT_S * 12)
    except Exception:  # noqa: BLE001 (read_partition handles it)
        return None
    last = piece.base + piece.last_entry_id
    return chunk if chunk.entry_ids and chunk.entry_ids[-1] == last else None


class TinyRows:
    """Rows of consecutive tiny pieces of one log and envelope, shipped as one batch of MERGE_ROWS rows
    or MERGE_BYTES payload bytes (or when the log or envelope changes, or a larger piece comes): one
    Arrow batch per one-entry ledger cost more than its read."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.kind: tuple[str | None, int] | None = None
        self.ledgers: list[int] = []
        self.counts: list[int] = []
        self.entry_ids: list[int] = []
        self.payloads: list[memoryview | bytes] = []
        self.size = 0

    def add(self, piece: LedgerPartition, chunk: ReadChunk, envelope: int) -> Iterator[pa.RecordBatch]:
        if self.kind is not None and self.kind != (piece.log, envelope):
            yield from self.drain()
        self.kind = (piece.log, envelope)
        base = piece.base
        self.ledgers.append(piece.ledger_id)
        self.counts.append(len(chunk.entry_ids))
        self.entry_ids += chunk.entry_ids if not base else [e - base for e in chunk.entry_ids]
        self.payloads += chunk.payloads
        self.size += sum(map(len, chunk.payloads))
        if len(self.entry_ids) >= MERGE_ROWS or self.size >= MERGE_BYTES:
            yield from self.drain()

    def drain(self) -> Iterator[pa.RecordBatch]:
        if self.kind is None or not self.entry_ids:
            self.kind = None
            return
        ledger_ids = np.repeat(np.array(self.ledgers, dtype=np.int64), self.counts)
        batch = rows_to_batch(self.schema, self.kind[0], ledger_ids, self.entry_ids, self.payloads, self.kind[1])
        self.kind, self.ledgers, self.counts, self.entry_ids, self.payloads, self.size = None, [], [], [], [], 0
        yield batch


def read_ahead(bk: BookKeeper, pieces: Sequence[LedgerPartition], handles: Mapping[int, LedgerHandle]
               ) -> Iterator[concurrent.futures.Future[ReadChunk] | None]:
    """Each piece's first chunk, asked for ahead in groups of READ_GROUP pieces, the next group while the
    caller works through this one (`chunks_ahead`): `bk.read_chunks_async` reads a group's tiny ledgers
    many per bookie call (one round trip per tiny ledger would otherwise be most of the task). None for a
    ledger that is not closed (read_partition waits for its LAC first), or whose handle has a read ahead
    not yet handed over (a ledger in two pieces)."""
    busy: set[int] = set()
    groups = [pieces[i:i + READ_GROUP] for i in range(0, len(pieces), READ_GROUP)]

    def reads_of(number: int) -> list[Read | None]:
        out: list[Read | None] = []
        for piece in groups[number]:
            ledger = piece.physical or piece.ledger_id
            rh = None if piece.offloaded is not None else handles.get(ledger)
            if rh is None or not rh.is_closed or ledger in busy:
                out.append(None)
                continue
            busy.add(ledger)
            out.append((rh, piece.base + piece.first_entry_id, piece.base + piece.last_entry_id))
        return out

    ahead = chunks_ahead(bk.read_chunks_async, len(groups), reads_of)
    try:
        for piece, got in zip(pieces, ahead, strict=True):
            if got is not None:
                busy.discard(piece.physical or piece.ledger_id)
            yield got
    finally:
        ahead.close()                             # cancels what was asked for and not handed over


def merged(batches: Iterable[pa.RecordBatch], rows: int, size: int) -> Iterator[pa.RecordBatch]:
    """The batches in order, small consecutive ones joined until they hold `rows` rows or `size` bytes."""
    held: list[pa.RecordBatch] = []
    count = held_bytes = 0
    for batch in batches:
        if not held and (batch.num_rows >= rows or batch.nbytes >= size):
            yield batch
            continue
        held.append(batch)
        count += batch.num_rows
        held_bytes += batch.nbytes
        if count >= rows or held_bytes >= size:
            yield pa.concat_batches(held)
            held, count, held_bytes = [], 0, 0
    if held:
        yield held[0] if len(held) == 1 else pa.concat_batches(held)


class BkLedgerBatchReader(DataSourceReader):
    """Plans on the driver (partitions) and reads in tasks (read); holds only options and the schema."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        check_schema(schema)
        self.opts = opts
        self.schema = schema
        self.pushed: Pushed | None = None

    def partitions(self) -> list[InputPartition]:
        return list(plan(self.opts, self.pushed))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # a plain InputPartition(None), planned by Spark for an empty list, reads nothing
        yield from read_any(self.opts, partition, arrow_schema(self.schema))


class BkLedgerFilteringReader(BkLedgerBatchReader):
    """The batch reader that also takes Spark's filters (`spark_connector.pushdown`)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.pushed, rest = absorb(filters)
        return rest


_WORKER_MAINS = ("_main", "main")       # 4.2 (its `main` calls `_main`, found first), 4.1


def pushdown_enabled() -> bool:
    """Whether Spark plans this read with `spark.sql.python.filterPushdown.enabled`. Spark 4.2 asks for
    the reader in one of two workers: `data_source_pushdown_filters` (switch on, filters to push: it calls
    pushFilters) or `plan_data_source_read`, which reads the switch before it asks for the reader and
    fails the query (DATA_SOURCE_PUSHDOWN_DISABLED) if the reader defines pushFilters while it is off.
    The switch is not passed on, so it is read from that caller's frame; if not found, False (Spark
    then filters every row itself). Spark 4.1's workers are alike, their function named `main`."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name in _WORKER_MAINS and "data_source_pushdown_filters" in frame.f_code.co_filename:
            return True
        if frame.f_code.co_name in _WORKER_MAINS and "plan_data_source_read" in frame.f_code.co_filename:
            return bool(frame.f_locals.get("enable_pushdown", False))
        frame = frame.f_back                    # type: ignore[assignment]
    return False


def reader_for(opts: ReadOptions, schema: StructType) -> BkLedgerBatchReader:
    """What `BkLedgerDataSource.reader` returns: with pushFilters where Spark's switch allows it (and where
    Spark has filter pushdown at all: 4.1+)."""
    if FILTER_PUSHDOWN and pushdown_enabled():
        return BkLedgerFilteringReader(opts, schema)
    return BkLedgerBatchReader(opts, schema)
