"""Spark reads of a log whose history is offloaded to its Delta table (issue 42 items 3 and 4), on real
bookies, ZooKeeper and Spark: format("bkledger") batch and streaming reads across the seam (positions,
times, checkpoints held from before the offload), reads planned before an offload or a file removal,
`read_log`, and the table read by other engines (deltalake, Spark's Parquet reader, Polars/DuckDB where
installed, delta-spark where its jars can be fetched), each compared with format("bkledger")."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from bkledger.client import BookKeeper
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import offload as ol
from bkledger.spark_connector import read_log
from bkledger.spark_connector.batch_reader import plan, read_any, read_schema
from bkledger.spark_connector.history import file_uri
from bkledger.spark_connector.offloaded import OffloadedFileGoneError
from bkledger.spark_connector.pushdown import Pushed
from bkledger.spark_connector.read_options import parse_read_options
from bkledger.spark_connector.spark_compat import arrow_schema
from tests.spark.test_stream_cursor import cursor_row
from tests.spark.test_streaming import Collector, fill, stream

pytestmark = pytest.mark.spark

T0_MS = 1_764_000_000_000
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
Row = tuple[int, int, bytes | None, int | None, bytes]      # ledger_id, entry_id, key, timestamp us, value


def write(bk: BookKeeper, name: str, count: int, per_ledger: int) -> list[Row]:
    """Records with the envelope (a null key every third), one second apart; what a read must return."""
    out: list[Row] = []
    with bk.open_log_writer(name, roll_entries=per_ledger, envelope=1) as w:
        for i in range(count):
            key = None if i % 3 == 0 else b"k%d" % (i % 7)
            at = w.append(b"value-%05d" % i, key=key, timestamp=T0_MS + i * 1000)
            out.append((at.ledger_id, at.entry_id, key, (T0_MS + i * 1000) * 1000, b"value-%05d" % i))
    return out


def micros(at: dt.datetime | None) -> int | None:
    return None if at is None else (at - EPOCH) // dt.timedelta(microseconds=1)


def rows_of(df: Any) -> list[Row]:
    from pyspark.sql import functions as F

    got = df.select("ledger_id", "entry_id", "key", F.unix_micros("timestamp").alias("ts"), "value").collect()
    return sorted((r.ledger_id, r.entry_id, None if r.key is None else bytes(r.key), r.ts, bytes(r.value))
                  for r in got)


def batch(spark: Any, uri: str, log: str, **options: str) -> Any:
    return spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", log).options(**options).load()


def offloaded_bookie_ledgers(meta: lm.LogMetadata) -> list[int]:
    return [r[0] for led in meta.ledgers if led.offloaded is not None for r in led.replaced]


@pytest.fixture(scope="module")
def history(cluster, bk, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, list[Row]]]:
    """A log of 60 records in 12 ledgers, the first 10 offloaded (the last 2 stay: KEEP_TAIL) and their
    bookie copies deleted, so its history is the table's alone. (name, table root, the records)."""
    name = f"seam-{uuid.uuid4().hex[:8]}"
    records = write(bk, name, 60, 5)
    store = str(tmp_path_factory.mktemp("offload-store"))
    done = bk.offload_log(name, store)
    assert done.entries == 50
    bk.delete_ledgers(offloaded_bookie_ledgers(bk.log_metadata(name)))
    yield name, f"{store}/{ol.table_dir(name)}", records


def test_batch_reads_across_the_seam_and_every_engine_reads_the_history(spark, cluster, bk, history) -> None:
    """format("bkledger") returns every record at its position with its key and timestamp from the files
    and the bookies; startingPositions/endingPositions inside the history and startingTimestamp (probed in
    the files) select the same records as before offload; read_log (Spark's Parquet scan + the tail) gives
    the same rows and columns; deltalake and Spark's Parquet reader read exactly the offloaded records."""
    uri, (name, root, records) = cluster.metadata_service_uri, history
    whole = batch(spark, uri, name)
    assert whole.columns == ["log", "ledger_id", "entry_id", "value", "key", "timestamp"]
    assert rows_of(whole) == records
    (lid, eid, *_), (end_lid, end_eid, *_) = records[12], records[55]
    narrowed = batch(spark, uri, name, startingPositions=f'{{"{name}": {{"{lid}": {eid}}}}}',
                     endingPositions=f'{{"{name}": {{"{end_lid}": {end_eid}}}}}')
    assert rows_of(narrowed) == records[12:55]
    assert rows_of(batch(spark, uri, name, startingTimestamp=str(T0_MS + 20_500))) == records[21:]
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")     # filters on ids and times pushed
    try:
        since = dt.datetime.fromtimestamp((T0_MS + 30_000) / 1000, dt.UTC)
        pushed = whole.where((F.col("ledger_id") >= lid) & (F.col("timestamp") >= since))
        assert rows_of(pushed) == [r for r in records if r[0] >= lid and (r[3] or 0) >= (T0_MS + 30_000) * 1000]
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")

    fast = read_log(spark, name, metadataServiceUri=uri)
    assert fast.columns == whole.columns and fast.schema == whole.schema
    assert rows_of(fast) == records
    assert sorted(r.log for r in fast.select("log").distinct().collect()) == [name]

    from deltalake import DeltaTable

    table = DeltaTable(root).to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(root, pafs.LocalFileSystem()))
    got = table.to_table().to_pylist()        # a SubTreeFileSystem: no abort at exit (reference/wave3.md E)
    assert sorted((r["ledger_id"], r["entry_id"], r["key"], micros(r["timestamp"]), r["value"])
                  for r in got) == records[:50]
    meta = bk.log_metadata(name)
    files = [file_uri(ol.state(meta).uri or "", name, led.offloaded[0]) for led in meta.ledgers if led.offloaded]
    assert rows_of(spark.read.parquet(*files)) == records[:50]


def test_polars_or_duckdb_read_the_history(history) -> None:
    """Polars (read_delta) or DuckDB (a scan of deltalake's dataset) read the offloaded records."""
    name, root, records = history
    try:
        import polars as pl
    except ImportError:
        pl = None
    try:
        import duckdb
    except ImportError:
        duckdb = None
    if pl is None and duckdb is None:
        pytest.skip("neither polars nor duckdb is installed in .venv (not a dependency of bkledger: pip install "
                    "polars or duckdb to run this check)")
    expected = [(a, b, c, e) for a, b, c, _, e in records[:50]]
    if pl is not None:
        frame = pl.read_delta(root).select("ledger_id", "entry_id", "key", "value")
        assert sorted(frame.iter_rows()) == expected
    if duckdb is not None:
        from deltalake import DeltaTable

        dataset = DeltaTable(root).to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(root, pafs.LocalFileSystem()))
        con = duckdb.connect()
        con.register("history", dataset)
        got = con.sql("select ledger_id, entry_id, key, value from history").fetchall()
        assert sorted(got) == expected


def test_spark_delta_reader_reads_the_history(spark, history) -> None:
    """spark.read.format("delta") where delta-spark's jars are on the session's classpath."""
    name, root, records = history
    try:
        spark._jvm.java.lang.Class.forName("io.delta.sql.DeltaSparkSessionExtension")
    except Exception:  # noqa: BLE001 (Py4JJavaError: ClassNotFoundException)
        pytest.skip("delta-spark's jars are not on the classpath and cannot be fetched here (no Maven): a "
                    "session needs spark.jars.packages=io.delta:delta-spark_4.2_2.13:4.4.1, spark.sql.extensions="
                    "io.delta.sql.DeltaSparkSessionExtension, spark.sql.catalog.spark_catalog="
                    "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    assert rows_of(spark.read.format("delta").load(root)) == records[:50]


def test_a_read_planned_before_an_offload_or_a_removal_reads_its_snapshot(cluster, bk, tmp_path: Path) -> None:
    """Partitions planned before an offload read the same records after it commits (the bookie copies stay
    until the deletion lag); partitions planned on the offloaded files read them after the bookie copies
    are gone; pushed time filters cut the files' rows (timestamps probed in their row groups); a file
    removed after planning is OffloadedFileGoneError, never fewer rows."""
    uri, name = cluster.metadata_service_uri, f"snap-{uuid.uuid4().hex[:8]}"
    records = write(bk, name, 30, 5)
    opts = parse_read_options({"metadataServiceUri": uri, "log": name})
    schema = arrow_schema(read_schema(True))

    def read(parts: list[Any]) -> list[Row]:
        rows = [r for part in parts for b in read_any(opts, part, schema) for r in b.to_pylist()]
        return sorted((r["ledger_id"], r["entry_id"], r["key"], micros(r["timestamp"]), r["value"]) for r in rows)

    before = plan(opts)
    bk.offload_log(name, str(tmp_path / "store"))
    assert read(before) == records
    on_files = plan(opts)
    assert any(p.offloaded for part in on_files for p in part.pieces)
    bk.delete_ledgers(offloaded_bookie_ledgers(bk.log_metadata(name)))
    assert read(on_files) == records
    timed = plan(opts, Pushed(time_lo_us=(T0_MS + 7_500) * 1000, time_hi_us=(T0_MS + 12_500) * 1000))
    assert [(p.ledger_id, p.first_entry_id, p.last_entry_id) for part in timed for p in part.pieces] == \
        [(records[8][0], records[8][1], records[9][1]), (records[10][0], records[10][1], records[12][1])]
    meta = bk.log_metadata(name)
    first = next(led.offloaded[0] for led in meta.ledgers if led.offloaded is not None)
    Path(tmp_path / "store" / ol.table_dir(name) / first).unlink()
    with pytest.raises(OffloadedFileGoneError, match="planned before it was removed"):
        read(on_files)


class OffloadingCollector(Collector):
    """Collects each micro-batch; after the first, offloads the log and deletes the offloaded bookie
    copies (the next batches must read the files)."""

    def __init__(self, bk: BookKeeper, name: str, store: str) -> None:
        super().__init__()
        self.bk, self.name, self.store = bk, name, store

    def __call__(self, df: Any, batch_id: int) -> None:
        super().__call__(df, batch_id)
        if batch_id == 0:
            self.bk.offload_log(self.name, self.store)
            self.bk.delete_ledgers(offloaded_bookie_ledgers(self.bk.log_metadata(self.name)))


def test_streaming_query_goes_on_across_an_offload_and_resumes_its_checkpoint(spark, cluster, bk,
                                                                              tmp_path: Path) -> None:
    """A query reads a log 25 records per micro-batch; after its first batch the log is offloaded (bookie
    copies deleted): it reads every record exactly once, in order. Its checkpoint (offsets written before
    the offload) resumes after more writes and a second offload with exactly the new records; a fresh
    query sees every record at the same positions, one started at a position inside the history reads
    from there; the query's cursor (option cursor) is acknowledged across the seam."""
    uri, name = cluster.metadata_service_uri, f"seam-stream-{uuid.uuid4().hex[:8]}"
    checkpoint, store = str(tmp_path / "ck"), str(tmp_path / "store")
    fill(bk, name, 0, 60, roll_entries=5)

    def run(sink: Collector, where: str = checkpoint, **options: str) -> Collector:
        q = (stream(spark, uri, name, maxEntriesPerTrigger="25", **options).writeStream.foreachBatch(sink)
             .option("checkpointLocation", where).trigger(availableNow=True).start())
        assert q.awaitTermination(180), "Trigger.AvailableNow did not end"
        return sink

    first = run(OffloadingCollector(bk, name, store), cursor="etl")
    assert [v for _, _, v in first.rows] == [b"%d" % i for i in range(60)]
    assert len(first.batches) == 3
    # batches 0 and 1 committed (the last batch of AvailableNow is not): the cursor, acknowledged to a
    # position of the offloaded history, stands at record 50
    assert cursor_row(bk, name, "etl").get("lag_entries") == 10
    fill(bk, name, 60, 20, roll_entries=5)
    bk.offload_log(name)
    bk.delete_ledgers(offloaded_bookie_ledgers(bk.log_metadata(name)))
    second = run(Collector())
    assert [v for _, _, v in second.rows] == [b"%d" % i for i in range(60, 80)]
    everything = run(Collector(), str(tmp_path / "fresh"))
    assert everything.rows == first.rows + second.rows
    lid, eid, _ = everything.rows[33]
    later = run(Collector(), str(tmp_path / "later"), startingPositions=f'{{"{name}": {{"{lid}": {eid}}}}}')
    assert later.rows == everything.rows[33:]
