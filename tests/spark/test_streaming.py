"""Structured Streaming through a real local SparkSession, real ZooKeeper and real bookies.

Source: resume from a checkpoint with no loss or duplicate, admission control (maxEntriesPerTrigger),
Trigger.AvailableNow ends, tailing a log while its writer appends and rolls. Sink: a micro-batch that
fails between its ledgers being written and its commit (before or after the CAS) is replayed from the
same checkpoint, and every input record is in the output log exactly once.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from bkledger.client import BookKeeper
from bkledger.spark_connector import envelope
from bkledger.spark_connector.batch_reader import read_schema
from bkledger.spark_connector.stream_positions import (
    Pos,
    Segment,
    advance,
    entries_between,
    offset_of,
    parse_starting,
    pos_of,
    readable_end,
)

pytestmark = pytest.mark.spark


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def fill(bk: BookKeeper, log: str, start: int, count: int, roll_entries: int = 100) -> None:
    with bk.open_log_writer(log, roll_entries=roll_entries) as w:
        futures = [w.append_async(b"%d" % i) for i in range(start, start + count)]
        for f in futures:
            f.result(60)


def read_log_values(bk: BookKeeper, log: str) -> list[bytes]:
    """Every record's value, in log order (decoding the envelope where a ledger has one)."""
    out: list[bytes] = []
    for ledger_id in bk.log_metadata(log).ledger_ids:
        rh = bk.open_ledger(ledger_id, None, recovery=False)   # the log's own key
        version = envelope.version_of(rh.metadata.custom_metadata)
        if rh.last_entry_id < 0:
            continue
        for e in rh.read_entries(0, rh.last_entry_id):
            out.append(envelope.decode(e.payload)[2] if version else e.payload)
    return out


def stream(spark, uri: str, log: str, **options: str):
    # explicit schema: DataSource.schema() (batch side) may reject streaming-only options
    r = (spark.readStream.format("bkledger").schema(read_schema(False)).option("metadataServiceUri", uri)
         .option("log", log))
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


class Collector:
    """foreachBatch target: runs in this (driver) process; keeps each batch's rows."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[int, int, bytes]]] = {}
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        picked = df.select("ledger_id", "entry_id", "value").collect()
        rows = [(r.ledger_id, r.entry_id, bytes(r.value)) for r in picked]
        with self.lock:
            self.batches[batch_id] = rows

    @property
    def rows(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return [row for b in sorted(self.batches) for row in self.batches[b]]


# ---- pure offset arithmetic ------------------------------------------------------------------------
SEGS = [Segment(10, 100, True, 10_000), Segment(11, 50, True, 50_000), Segment(12, 30, False)]


def test_offset_arithmetic() -> None:
    assert readable_end(SEGS, Pos(10, 0)) == Pos(12, 30)
    assert readable_end([*SEGS[:2], Segment(12, 30, False), Segment(13, 5, False)], Pos(11, 7)) == Pos(12, 30)
    assert entries_between(SEGS, Pos(10, 90), Pos(12, 3)) == 10 + 50 + 3
    avg = {10: 100.0, 11: 1000.0, 12: 1000.0}
    assert advance(SEGS, Pos(10, 0), Pos(12, 30), 40, None, avg) == Pos(10, 40)
    assert advance(SEGS, Pos(10, 90), Pos(12, 30), 40, None, avg) == Pos(11, 30)
    assert advance(SEGS, Pos(10, 100), Pos(12, 30), 1000, None, avg) == Pos(12, 30)
    assert advance(SEGS, Pos(10, 95), Pos(12, 30), None, 5500, avg) == Pos(11, 5)   # 5 x 100 B + 5 x 1000 B
    assert advance(SEGS, Pos(11, 0), Pos(12, 30), None, 10, avg) == Pos(11, 1)     # at least one entry
    assert pos_of("o", offset_of("o", Pos(12, 40))) == Pos(12, 40)
    assert parse_starting('{"o": {"ledger": 3, "entry": 9}}', "o") == Pos(3, 9)
    assert parse_starting('{"o": {"7": 2}}', "o") == Pos(7, 2)
    assert parse_starting(None, "o") == "earliest" and parse_starting("LATEST", "o") == "latest"


# ---- source ------------------------------------------------------------------------------------------
def test_resume_admission_control_and_available_now(spark, cluster, bk, tmp_path: Path) -> None:
    uri, log = cluster.metadata_service_uri, fresh("src")
    fill(bk, log, 0, 250)                                        # 3 ledgers (roll every 100)
    checkpoint = str(tmp_path / "ck")

    def run() -> Collector:
        sink = Collector()
        q = (stream(spark, uri, log, maxEntriesPerTrigger="40").writeStream.foreachBatch(sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        assert q.awaitTermination(90), "Trigger.AvailableNow did not end"
        assert q.exception() is None
        return sink

    started = time.monotonic()
    first = run()
    sizes = [len(first.batches[b]) for b in sorted(first.batches)]
    assert max(sizes) <= 40 and sum(sizes) == 250, sizes
    assert [v for _, _, v in first.rows] == [b"%d" % i for i in range(250)]

    fill(bk, log, 250, 60)                                       # a new writer: fences, new ledger
    second = run()                                               # same checkpoint: only the new records
    assert [v for _, _, v in second.rows] == [b"%d" % i for i in range(250, 310)]
    assert all(len(rows) <= 40 for rows in second.batches.values())
    assert min(second.batches) > max(first.batches)
    print(f"resume + admission control: {time.monotonic() - started:.1f} s")


def test_tails_a_log_while_its_writer_appends_and_rolls(spark, cluster, bk, tmp_path: Path) -> None:
    uri, log = cluster.metadata_service_uri, fresh("tail")
    total = 600
    writer = bk.open_log_writer(log, roll_entries=150)
    sink = Collector()
    q = (stream(spark, uri, log, startingPositions="earliest").writeStream.foreachBatch(sink)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="500 milliseconds").start())
    try:
        for i in range(total):                                   # ~4 ledgers, appended while the query runs
            writer.append(b"%d" % i)
            if i % 50 == 49:
                time.sleep(0.3)
        deadline = time.monotonic() + 60
        while len(sink.rows) < total and time.monotonic() < deadline:
            assert q.exception() is None
            time.sleep(0.3)
        writer.append(b"%d" % total)                             # the writer was never fenced by the reader
    finally:
        q.stop()
        writer.close()
    rows = sink.rows
    values = [v for _, _, v in rows]
    assert values[:total] == [b"%d" % i for i in range(total)]
    assert len({(lid, eid) for lid, eid, _ in rows}) == len(rows)
    assert len({lid for lid, _, _ in rows}) >= 4 and len(sink.batches) >= 2


def test_latest_start_skips_existing_records(spark, cluster, bk, tmp_path: Path) -> None:
    uri, log = cluster.metadata_service_uri, fresh("latest")
    fill(bk, log, 0, 30)
    reader = stream(spark, uri, log, startingPositions="latest")
    sink = Collector()
    q = (reader.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="300 milliseconds").start())
    try:
        deadline = time.monotonic() + 30
        while q.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.2)
        fill(bk, log, 30, 10)
        while len(sink.rows) < 10 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        q.stop()
    assert [v for _, _, v in sink.rows] == [b"%d" % i for i in range(30, 40)]


# ---- sink: exactly once across a failure between writing the ledgers and the commit -----------------
def crashing_source(crash_batch: int, when: str) -> type:
    """A data source that behaves like bkledger, except that its sink's commit of `crash_batch` fails
    as if the driver died there (no abort runs): before its CAS ("before": the ledgers are written,
    the log does not list them) or after it ("after": the CAS landed, the reply is lost). Defined
    inside a function, so Spark pickles it by value into its Python workers."""
    from bkledger.spark_connector.datasource import BkLedgerDataSource
    from bkledger.spark_connector.stream_sink import BkLedgerStreamWriter, stream_writer

    class CrashingWriter(BkLedgerStreamWriter):
        def commit(self, messages, batchId) -> None:
            if batchId == crash_batch and when == "after":
                super().commit(messages, batchId)
            if batchId == crash_batch:
                raise RuntimeError(f"injected crash in the commit of batch {batchId} ({when} the CAS)")
            super().commit(messages, batchId)

        def abort(self, messages, batchId) -> None:
            if batchId != crash_batch:            # a driver that died in the commit runs no abort either
                super().abort(messages, batchId)

    class CrashingSource(BkLedgerDataSource):
        @classmethod
        def name(cls) -> str:
            return "bkledger_crash"

        def streamWriter(self, schema, overwrite):
            inner = stream_writer(self.options, schema, overwrite)
            writer = CrashingWriter(inner.opts, inner.tasks, inner.options)
            return writer

    return CrashingSource


def sink_ledgers_not_listed(bk, log_name: str, older: set[int]) -> list[int]:
    """Ledgers written for this log by a sink's tasks (tagged with the job id) that the log does not list;
    `older`, the cluster's ledgers from before the log was made (the session's other tests'), are not read."""
    from bkledger.spark_connector.batch_writer import JOB_KEY, LOG_KEY

    listed = set(bk.log_metadata(log_name).ledger_ids)
    tags = {i: bk.ledger_metadata(i).custom_metadata for i in bk.list_ledgers() if i not in listed | older}
    return [i for i, tag in tags.items() if tag.get(LOG_KEY) == log_name.encode() and b"#" in tag.get(JOB_KEY, b"")]


@pytest.mark.parametrize("when", ["before", "after"])
def test_sink_exactly_once_across_a_failed_commit(spark, cluster, bk, tmp_path: Path, when: str) -> None:
    uri, src, dst = cluster.metadata_service_uri, fresh("in"), fresh("out")
    older = set(bk.list_ledgers())
    fill(bk, src, 0, 200)
    checkpoint = str(tmp_path / "ck")
    spark.dataSource.register(crashing_source(1, when))

    def start(fmt: str):
        df = stream(spark, uri, src, maxEntriesPerTrigger="50").selectExpr("value")
        return (df.writeStream.format(fmt).option("metadataServiceUri", uri).option("log", dst)
                .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())

    started = time.monotonic()
    q = start("bkledger_crash")
    with pytest.raises(Exception, match="injected crash"):
        q.awaitTermination(90)
    listed = bk.log_metadata(dst)
    assert len(read_log_values(bk, dst)) == (50 if when == "before" else 100)   # batch 0 (+ batch 1 if after)
    ledgers_before = set(bk.list_ledgers())
    orphans = sink_ledgers_not_listed(bk, dst, older)            # what a driver dead before its CAS leaves behind
    assert bool(orphans) == (when == "before"), orphans

    q = start("bkledger")                                          # restart from the same checkpoint
    assert q.awaitTermination(90)
    assert q.exception() is None
    values = read_log_values(bk, dst)
    assert sorted(values, key=int) == [b"%d" % i for i in range(200)], "every record exactly once"
    meta = bk.log_metadata(dst)
    (sink_id, last_batch), = meta.committed_batches.items()
    assert sink_id.startswith("query:") and last_batch == 3
    leftovers = set(bk.list_ledgers()) - ledgers_before - set(meta.ledger_ids)
    assert not leftovers, f"replayed ledgers not deleted: {leftovers}"
    assert not sink_ledgers_not_listed(bk, dst, older), "the dead run's uncommitted ledgers were not swept at restart"
    assert set(listed.ledger_ids) <= set(meta.ledger_ids)
    print(f"exactly-once ({when}): {time.monotonic() - started:.1f} s")


def test_sink_commit_is_idempotent(cluster, bk) -> None:
    """The same batch committed twice (Spark may do that) appends once and keeps its ledgers."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from bkledger.spark_connector.batch_writer import LedgerCommitMessage
    from bkledger.spark_connector.stream_sink import BkLedgerStreamWriter, stream_writer

    uri, dst = cluster.metadata_service_uri, fresh("idem")
    schema = StructType([StructField("value", BinaryType())])
    writer = stream_writer({"metadataServiceUri": uri, "log": dst, "sinkId": "t1"}, schema, False)
    assert isinstance(writer, BkLedgerStreamWriter)
    lh = bk.create_ledger(3, 2, 2)
    lh.add_entry(b"x")
    lh.close()
    message = LedgerCommitMessage(lh.ledger_id, 0, 1, 1)
    writer.commit([message], 0)
    writer.commit([message], 0)
    meta = bk.log_metadata(dst)
    assert meta.ledger_ids == [lh.ledger_id] and meta.committed_batches == {"sink:t1": 0}
    assert bk.ledger_metadata(lh.ledger_id).last_entry_id == 0    # still there
    writer.abort([message], 0)                                     # listed: abort keeps it
    assert bk.ledger_metadata(lh.ledger_id).last_entry_id == 0


def test_sink_commits_sweep_above_a_floor_that_lags_one_commit(cluster, bk) -> None:
    """Every commit (Spark makes a new writer for each) deletes the ledgers this sink's dead runs and failed
    task attempts left (tagged `<sink tag>#<run>`, not in the log), reading only the ledgers above the
    floor in ZooKeeper; the floor it records is the watermark the commit before it took."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from bkledger.spark_connector.batch_writer import JOB_KEY, LOG_KEY, LedgerCommitMessage
    from bkledger.spark_connector.sink_floor import SinkFloor, record_sink_floor, sink_floor
    from bkledger.spark_connector.stream_sink import stream_writer

    uri, dst, tag = cluster.metadata_service_uri, fresh("floor"), "sink:floor-test"
    schema = StructType([StructField("value", BinaryType())])

    def ledger(job: str) -> int:
        lh = bk.create_ledger(3, 2, 2, custom_metadata={JOB_KEY: job.encode(), LOG_KEY: dst.encode()})
        lh.add_entry(b"x")
        lh.close()
        return lh.ledger_id

    def commit(batch_id: int, ledger_id: int) -> SinkFloor:
        writer = stream_writer({"metadataServiceUri": uri, "log": dst, "sinkId": "floor-test"}, schema, False)
        writer.commit([LedgerCommitMessage(ledger_id, 0, 1, 1)], batch_id)
        return sink_floor(bk, tag)

    def alive(ledger_id: int) -> bool:
        return ledger_id in bk.list_ledgers()

    dead_run, other_sink = ledger(f"{tag}#dead"), ledger("sink:other#run")
    assert sink_floor(bk, tag) == SinkFloor()
    floors, kept, failed = [], [], []
    for batch_id in range(3):
        kept.append(ledger(f"{tag}#run"))
        failed.append(ledger(f"{tag}#run"))                 # a failed attempt's: in no commit message
        floors.append(commit(batch_id, kept[-1]))
        assert not alive(failed[-1]) and alive(kept[-1])
        assert floors[-1].next > failed[-1]                  # the watermark is taken before the sweep
        assert floors[-1].floor == (floors[-2].next if batch_id else -1)
    assert not alive(dead_run) and alive(other_sink)
    assert bk.log_metadata(dst).ledger_ids == kept

    hidden = ledger(f"{tag}#dead")
    record_sink_floor(bk, tag, SinkFloor(hidden, hidden))   # a floor above it: the sweep does not read it
    kept.append(ledger(f"{tag}#run"))
    assert commit(3, kept[-1]).floor == hidden and alive(hidden)
    record_sink_floor(bk, tag, SinkFloor())
    kept.append(ledger(f"{tag}#run"))
    commit(4, kept[-1])
    assert not alive(hidden) and alive(other_sink)
    assert bk.log_metadata(dst).ledger_ids == kept
