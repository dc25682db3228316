"""The Structured Streaming sink of the "bkledger" data source: exactly-once appends to a log.

Mirrors the batch append (`spark_connector.batch_writer`: each task writes and closes its own ledger)
plus the idempotent commit Spark asks of a streaming sink (`StreamingWrite`: "commit may be called
multiple times for the same epoch"). The driver's `commit(messages, batchId)` calls
`client.log.logs.append_ledgers` with `commit_marker=(sink id, batchId)`: ONE compare-and-swap of the log
znode appends the batch's ledgers AND records the batch id. If that batch (or a later one) of this sink
is already recorded, nothing is appended; the replay's freshly written ledgers (those not in the log)
are deleted. So a batch replayed after a crash, or committed twice, lands in the log exactly once.
`abort` deletes the batch's ledgers unless they are in the log already (a commit whose CAS landed but
whose reply was lost must not lose its data). A driver that dies between its tasks and the commit
calls nothing: its tasks' ledgers are tagged `<sink tag>#<run>`, and every commit of the same sink
deletes the ones the log does not list (`sweep_dead_runs`), reading only the ledgers above the floor
its commits record in ZooKeeper (`sink_floor`).

Sink identity (Spark gives the Python writer no query id): option `sinkId` if set, else the query id
Spark keeps in `<checkpointLocation>/metadata` (readable when the checkpoint is on a local or mounted
file system), else a hash of the checkpoint location. It is stable across restarts of the query, so
the marker recorded in the log stays valid. Options: those of a batch append, plus `checkpointLocation`
(or `sinkId`). `queryName` is accepted and ignored.

Per-row destinations (column log, no option log): a micro-batch's ledgers for all its logs and the
batch marker in each of those logs go in ONE ZooKeeper transaction that checks every log's head
version (`log_commit.commit_to_logs`). The replay check is part of it: if any of the logs records
the batch (or a later one) of this sink, the batch landed everywhere and nothing is appended.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from bkledger.client import BookKeeper
from bkledger.spark_connector.batch_writer import (
    BkLedgerBatchWriter,
    LedgerCommitMessage,
    ListedLedgers,
    ledgers_by_log,
    plan_layout,
    sweep_tagged,
    time_spans_of,
)
from bkledger.spark_connector.clients import planning_client
from bkledger.spark_connector.log_commit import commit_to_logs
from bkledger.spark_connector.options import BkLedgerOptionError, WriteOptions, _lowered, parse_write_options
from bkledger.spark_connector.sink_floor import NONE, record_sink_floor, sink_floor
from bkledger.spark_connector.spark_compat import StreamArrowWriterBase

log = logging.getLogger("bkledger.spark.stream")

STREAM_WRITE = ("checkpointLocation", "queryName", "sinkId")


def spark_query_id(checkpoint: str) -> str | None:
    """The query id Spark wrote to `<checkpoint>/metadata`, if the checkpoint is on a local path."""
    parsed = urlparse(checkpoint)
    if parsed.scheme not in ("", "file"):
        return None
    path = Path(parsed.path if parsed.scheme == "file" else checkpoint) / "metadata"
    try:
        first = path.read_text(encoding="utf-8").splitlines()[0]
        value = json.loads(first).get("id")
    except (OSError, IndexError, ValueError, AttributeError):
        return None
    return str(value) if value else None


def sink_identity(options: Mapping[str, str]) -> str:
    """The stable name under which this sink's committed batch ids are recorded in the log."""
    opts = _lowered(options)
    sink_id = opts.get("sinkid", "").strip()
    if sink_id:
        return f"sink:{sink_id}"
    checkpoint = opts.get("checkpointlocation", "").strip()
    if not checkpoint:
        raise BkLedgerOptionError("sinkId", "the exactly-once sink needs a stable identity: set "
                                  "option checkpointLocation (or sinkId) on writeStream")
    query_id = spark_query_id(checkpoint)
    if query_id is not None:
        return f"query:{query_id}"
    return _checkpoint_name(checkpoint)


def _checkpoint_name(checkpoint: str) -> str:
    if urlparse(checkpoint).scheme in ("", "file"):
        checkpoint = str(Path(urlparse(checkpoint).path or checkpoint).resolve())
    return "checkpoint:" + hashlib.sha256(checkpoint.encode("utf-8")).hexdigest()[:24]


def sink_tag(options: Mapping[str, str]) -> str:
    """A name for this sink known when the query starts and stable across its restarts: the prefix of
    its tasks' job ids (`<tag>#<run>`), so a restarted query finds what a dead run left behind."""
    opts = _lowered(options)
    sink_id = opts.get("sinkid", "").strip()
    return f"sink:{sink_id}" if sink_id else _checkpoint_name(opts.get("checkpointlocation", "").strip())


def sweep_dead_runs(bk: BookKeeper, tag: str, keep: set[int], above: int = -1) -> list[int]:
    """Delete ledgers this sink's tasks wrote that their log does not list and `keep` does not name
    (ids above `above`: the sink's recorded floor, `sink_floor`).

    Called by the driver right after a commit (or abort) has settled its batch: micro-batches run one at
    a time, so no task of this sink is writing a ledger that may still be committed; what remains is
    what a dead run left (its driver died between the tasks and the commit; Spark replays that batch)
    or a failed task attempt. A ledger its log lists is never touched."""
    prefix = f"{tag}#".encode()
    gone = sweep_tagged(bk, lambda job: job.startswith(prefix), keep, above=above)
    if gone:
        log.info("deleted ledgers %s that %s wrote but never committed", gone, tag)
    return gone


def delete_unlisted(bk: BookKeeper, by_log: Mapping[str, Sequence[int]]) -> list[int]:
    """Delete the ledgers of `by_log` that their log does not list; returns them."""
    listed = ListedLedgers(bk)
    gone = [i for name, ids in by_log.items() for i in ids if not listed.has(name, i)]
    bk.delete_ledgers(gone)
    return gone


class BkLedgerStreamWriter(StreamArrowWriterBase):
    """Tasks write ledgers with the batch writer; the driver commits each micro-batch exactly once. Its base
    is PySpark's DataSourceStreamArrowWriter (4.1+), on 4.0 DataSourceArrowWriter (`spark_compat`)."""

    def __init__(self, opts: WriteOptions, tasks: BkLedgerBatchWriter, options: Mapping[str, str]) -> None:
        self.opts = opts
        self.tasks = tasks
        self.options = dict(options)
        self._identity: str | None = None

    @property
    def where(self) -> str:
        return repr(self.opts.source.log) if self.opts.source.log is not None else "the logs of column log"

    @property
    def identity(self) -> str:
        """Computed at the first commit (driver), when Spark has written the checkpoint metadata."""
        if self._identity is None:
            self._identity = sink_identity(self.options)
        return self._identity

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgerCommitMessage:
        """Runs in a task: one new ledger with the task's rows, CLOSED, not yet in the log."""
        return self.tasks.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        by_log = ledgers_by_log(messages, self.opts.source.log)
        src = self.opts.source
        with planning_client(src.metadata_service_uri, src.client_settings) as bk:
            appended = bool(by_log) and commit_to_logs(
                bk, by_log, commit_marker=(self.identity, batchId), password=src.password,
                fence_live_writer=self.opts.fence_live_writer, time_spans=time_spans_of(messages))
            if appended:
                log.info("batch %d of %s appended ledgers %s in one transaction", batchId, self.identity, by_log)
            elif by_log:
                gone = delete_unlisted(bk, by_log)
                log.warning("%s: batch %d of %s was committed before; discarded its replayed ledgers %s",
                            self.where, batchId, self.identity, gone)
            self._sweep(bk, keep={i for ids in by_log.values() for i in ids})

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        with planning_client(self.opts.source.metadata_service_uri, self.opts.source.client_settings) as bk:
            gone = delete_unlisted(bk, ledgers_by_log(messages, self.opts.source.log))
            log.warning("%s: batch %d of %s aborted; deleted its ledgers %s", self.where, batchId,
                        self.identity, gone)
            self._sweep(bk, keep=set())

    def _sweep(self, bk: BookKeeper, keep: set[int]) -> None:
        """Delete the ledgers this sink's tasks wrote that their log does not list and `keep` does not
        name (failed task attempts; runs that died before their commit), reading only those above the
        sink's floor, then record the next floor (`sink_floor`). Spark makes a new writer for every
        commit, so nothing of an earlier commit is kept in this object."""
        tag = sink_tag(self.options)
        try:
            floor = sink_floor(bk, tag)
            watermark = bk.ledger_id_watermark()     # before the listing: ledgers created later are above it
            sweep_dead_runs(bk, tag, keep, above=floor.floor)
            record_sink_floor(bk, tag, floor.advanced(watermark))
        except Exception as exc:  # cleanup is best effort: the logs are already right
            log.warning("sweeping the ledgers %s left failed: %s", self.identity, exc)


def stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> BkLedgerStreamWriter:
    """What `BkLedgerDataSource.streamWriter` returns. Output modes: append (and update/complete, whose
    rows are appended as they come: a log has no upsert)."""
    opts = parse_write_options(options, extra_known=STREAM_WRITE)
    sink_identity_check(options)
    layout = plan_layout(schema, opts.envelope, opts.source.log)
    # no ledger id floor of its own: Spark makes a writer per commit, and the sink sweeps above the floor
    # its commits record (`sink_floor`); a watermark read here was a ZooKeeper round trip per batch
    tasks = BkLedgerBatchWriter(opts, layout, f"{sink_tag(options)}#{uuid.uuid4().hex}", NONE)
    return BkLedgerStreamWriter(opts, tasks, options)


def sink_identity_check(options: Mapping[str, str]) -> None:
    """Fail at query start (not at the first commit) if no identity can be had."""
    opts = _lowered(options)
    if not opts.get("sinkid", "").strip() and not opts.get("checkpointlocation", "").strip():
        raise BkLedgerOptionError("sinkId", "the exactly-once sink needs a stable identity: set option "
                                  "checkpointLocation (or sinkId) on writeStream")
