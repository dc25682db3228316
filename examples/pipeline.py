"""The bkledger demo pipeline: batch append, an exactly-once streaming aggregate, and a batch read.

    python examples/pipeline.py            # (make demo) no arguments; about a minute

1. Starts a local cluster of its own (ZooKeeper + 3 bookies under a temporary directory).
2. Batch: appends generated orders (key, event timestamp, JSON value) to the log "orders" with
   `df.write.format("bkledger")`: each Spark task writes its own ledger, one CAS appends them all.
3. Streaming: reads "orders" with `spark.readStream.format("bkledger")` (Trigger.AvailableNow,
   maxEntriesPerTrigger) and writes a per-minute aggregate (orders, amount) into the log
   "orders_per_minute" through the exactly-once sink (ledgers + batch id in one CAS per micro-batch).
   Event time with a watermark: a minute is written once, when the watermark passes its end.
4. Batch read of both logs: row counts, a few aggregate rows, and a fingerprint of "orders" (rows,
   positions and a hash of each row) read from the bookies.
5. Tiered history: gives "orders" an offload policy (offload the sealed ledgers, delete the bookie copies
   at once: deletion lag 0) and runs one round of the offloader daemon (`bkledger offloader --once`): all
   but the log's last two ledgers go to its Delta table under the cluster's folder (`<cluster>/offload`),
   their bookie copies are deleted.
6. Reads "orders" across the seam (offloaded history from the table's Parquet files, the rest from the
   bookies) with `format("bkledger")` and with `spark_connector.read_log`, checks both return the same
   rows at the same positions as before the offload (and the orders generated), and reads the table with
   `deltalake`.
7. Per log its ledgers on bookies (fragments, bookies) and its offloaded files. Stops Spark and the
   cluster whatever happens.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper
from bkledger.client.connector import table_store
from bkledger.client.log.core import offload as ol

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROWS = 50_000
ORDERS, PER_MINUTE = "orders", "orders_per_minute"
START_US = 1_767_225_600_000_000          # 2026-01-01T00:00:00Z
ORDER_EVERY_US = 120_000                  # one order each 120 ms of event time: 500 per minute
READ = ("ledger_id", "entry_id", "key", "timestamp", "value")     # a row's position and content
CONTENT = ("key", "timestamp", "value")
SAME = ("rows", "positions", "hash", "content")                    # what a read across the seam keeps


def banner(text: str) -> None:
    print(f"\n=== {text} " + "=" * max(0, 70 - len(text)), flush=True)


def make_session(app: str = "bkledger-demo") -> Any:
    """A quiet local SparkSession whose Python workers run this interpreter, with format("bkledger")."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    from bkledger.spark_connector.datasource import BkLedgerDataSource

    spark = (SparkSession.builder.master("local[2]").appName(app)
             .config("spark.pyspark.python", sys.executable)
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    if "bkledger" not in _registered(spark):      # auto-registration (pyspark_bkledger) did not see us
        spark.dataSource.register(BkLedgerDataSource)
    return spark


def _registered(spark: Any) -> set[str]:
    try:
        jvm_names = spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists("bkledger")
    except Exception:      # an internal API: if it is not there, register explicitly
        return set()
    return {"bkledger"} if jvm_names else set()


def generate_orders(spark: Any, rows: int) -> Any:
    """Orders in event-time order: key = order id, timestamp, value = JSON {order_id, customer, amount}."""
    return spark.range(0, rows, numPartitions=4).selectExpr(
        "cast(concat('order-', id) as binary) as key",
        f"timestamp_micros({START_US} + id * {ORDER_EVERY_US}) as timestamp",
        "cast(to_json(named_struct('order_id', id, 'customer', concat('c', id % 97), "
        "'amount', round(5 + (id * 7919 % 10000) / 100.0, 2))) as binary) as value")


def batch_append(spark: Any, uri: str, rows: int) -> float:
    started = time.monotonic()
    (generate_orders(spark, rows).write.format("bkledger").option("metadataServiceUri", uri)
     .option("log", ORDERS).mode("append").save())
    return time.monotonic() - started


def stream_per_minute(spark: Any, uri: str, checkpoint: str, max_per_trigger: int) -> tuple[int, float]:
    """The streaming query; returns (micro-batches, seconds)."""
    from bkledger.spark_connector.batch_reader import read_schema

    started = time.monotonic()
    orders = (spark.readStream.format("bkledger").schema(read_schema(True))
              .option("metadataServiceUri", uri).option("log", ORDERS)
              .option("maxEntriesPerTrigger", str(max_per_trigger)).load())
    from pyspark.sql import functions as f

    minute = "date_format(window.start, \"yyyy-MM-dd'T'HH:mm'Z'\")"
    per_minute = (orders
                  .selectExpr("timestamp", "cast(get_json_object(cast(value as string), '$.amount') as double) amount")
                  .withWatermark("timestamp", "0 seconds")
                  .groupBy(f.window("timestamp", "1 minute"))
                  .agg(f.count("*").alias("orders"), f.round(f.sum("amount"), 2).alias("amount"))
                  .selectExpr("window.start as timestamp", f"cast({minute} as binary) as key",
                              f"cast(to_json(named_struct('minute', {minute}, 'orders', orders, 'amount', amount)) "
                              "as binary) as value"))
    query = (per_minute.writeStream.format("bkledger").outputMode("append")
             .option("metadataServiceUri", uri).option("log", PER_MINUTE)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    if not query.awaitTermination(150):
        query.stop()
        raise TimeoutError("the streaming query did not finish within 150 s")
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    batches = len(query.recentProgress)
    return batches, time.monotonic() - started


def describe(bk: BookKeeper, name: str) -> str:
    """The log's ledgers on bookies (their fragments and bookies) and its files offloaded to its table."""
    meta = bk.log_metadata(name)
    on_bookies = [led for led in meta.ledgers if led.offloaded is None]
    offloaded = [led for led in meta.ledgers if led.offloaded is not None]
    fragments = 0
    bookies: set[str] = set()
    for led in on_bookies:
        md = bk.ledger_metadata(led.ledger_id)
        fragments += len(md.fragments)
        bookies |= md.all_bookies()
    table = f" offloaded: {sum(led.entries or 0 for led in offloaded)} entries in {len(offloaded)} files" \
        if offloaded else ""
    return (f"{name:<18} ledgers on bookies={len(on_bookies):<3} fragments={fragments:<3} entries={meta.entries} "
            f"bytes={meta.size} bookies={sorted(bookies)}{table} committed_batches={dict(meta.committed_batches)}")


def fingerprint(df: Any, table_ids: Collection[int] = ()) -> dict[str, int]:
    """Rows, distinct positions, the sum of a 64-bit hash of each row (position, key, timestamp, value) and
    of its content only (key, timestamp, value: comparable with the orders generated, which have no
    position): two reads with equal fingerprints returned the same rows at the same positions, up to a hash
    collision. `from_table`: the rows of the ledgers `table_ids` (those offloaded). One Spark job."""
    from pyspark.sql import functions as f

    def hash_sum(*columns: str) -> Any:
        return f.sum(f.xxhash64(*columns).cast("decimal(38,0)"))      # a sum of bigints would overflow

    read = "ledger_id" in df.columns
    got = df.agg(f.count("*").alias("rows"),
                 (f.countDistinct("ledger_id", "entry_id") if read else f.count("*")).alias("positions"),
                 (hash_sum(*READ) if read else f.lit(0)).alias("hash"), hash_sum(*CONTENT).alias("content"),
                 f.sum((f.col("ledger_id").isin(list(table_ids)) if table_ids else f.lit(False)).cast("int"))
                 .alias("from_table")).first()
    return {key: int(got[key] or 0) for key in ("rows", "positions", "hash", "content", "from_table")}


def batch_read(spark: Any, uri: str, rows: int) -> dict[str, Any]:
    def load(name: str) -> Any:
        return spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", name).load()

    orders = load(ORDERS)
    order_count = orders.count()
    minutes = [json.loads(bytes(r.value)) for r in load(PER_MINUTE).select("value").collect()]
    minutes.sort(key=lambda m: m["minute"])
    print(f"log {ORDERS!r}: {order_count} rows; first rows:")
    (orders.orderBy("ledger_id", "entry_id").limit(3)     # sorted: no early stop of the Python reader
     .selectExpr("ledger_id", "entry_id", "cast(key as string) key", "timestamp", "cast(value as string) value")
     .show(truncate=False))
    print(f"log {PER_MINUTE!r}: {len(minutes)} rows (one per closed minute); first and last:")
    for m in [*minutes[:3], *minutes[-2:]]:
        print(f"  {m['minute']}  orders={m['orders']:<5} amount={m['amount']}")
    counted = sum(m["orders"] for m in minutes)
    per_full_minute = 60_000_000 // ORDER_EVERY_US
    print(f"the closed minutes hold {counted} of {rows} orders; the rest are in minutes the watermark has not "
          "passed yet (they are written once later orders move it on)")
    if len({m["minute"] for m in minutes}) != len(minutes) or any(m["orders"] != per_full_minute for m in minutes):
        raise AssertionError(f"every closed minute should appear once with {per_full_minute} orders")
    before = fingerprint(orders)
    print(f"fingerprint of {ORDERS!r} read from the bookies: {before['rows']} rows at {before['positions']} "
          f"positions, row hash sum {before['hash']}")
    return {"orders": order_count, "minutes": len(minutes), "orders_in_minutes": counted, "fingerprint": before}


def offload_history(bk: BookKeeper, cluster_dir: Path) -> dict[str, Any]:
    """The offload policy of ORDERS (every sealed ledger but the log's last two, bookie copies deleted at
    once) and one round of the offloader daemon, run as a user runs it; what went to the table."""
    if len(bk.log_metadata(ORDERS).ledgers) <= ol.KEEP_TAIL:
        raise AssertionError(f"{ORDERS!r} needs more than {ol.KEEP_TAIL} ledgers to offload some (the batch "
                             "append writes one per Spark task)")
    bk.set_log_offload(ORDERS, after_bytes=0, deletion_lag_seconds=0)
    print(f"bk.set_log_offload({ORDERS!r}, after_bytes=0, deletion_lag_seconds=0): the offloader takes every "
          f"sealed ledger but the log's last {ol.KEEP_TAIL} and deletes their bookie copies at once")
    argv = ["offloader", "--once", "--dir", str(cluster_dir), "--logs", ORDERS]
    print("$ bkledger " + " ".join(argv), flush=True)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", *argv], capture_output=True, text=True,
                          timeout=180, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the offloader failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    meta = bk.log_metadata(ORDERS)
    records = [led for led in meta.ledgers if led.offloaded is not None]
    ids = [old for led in records for old, *_ in led.replaced]
    still = sorted(set(ids) & set(bk.list_ledgers()))
    if not records or still:
        raise AssertionError(f"expected offloaded ledgers with their bookie copies deleted: offloaded {ids}, "
                             f"still on the bookies {still}")
    uri = ol.state(meta).uri
    assert uri is not None
    table = table_store(uri, ORDERS).uri
    entries = sum(led.entries or 0 for led in records)
    print(f"in {time.monotonic() - started:.1f} s, {len(ids)} of {len(meta.logical_ids)} ledgers ({entries} "
          f"entries) went to {len(records)} Parquet file(s) of the Delta table {table}; their bookie copies are "
          f"deleted (deletion lag 0); the last {len(meta.ledgers) - len(records)} ledgers stay on the bookies")
    return {"table": table, "ledger_ids": ids, "entries": entries, "files": len(records)}


def read_across_seam(spark: Any, uri: str, rows: int, before: dict[str, int], offloaded: dict[str, Any]) -> int:
    """Read ORDERS across the seam with format("bkledger") and read_log: the same rows at the same positions
    as before the offload, the orders generated; then the table with deltalake. The table's row count."""
    from deltalake import DeltaTable

    from bkledger.spark_connector import read_log

    ids = offloaded["ledger_ids"]
    reads = {'format("bkledger")': spark.read.format("bkledger").option("metadataServiceUri", uri)
             .option("log", ORDERS).load(),
             "read_log": read_log(spark, ORDERS, metadataServiceUri=uri)}
    written = fingerprint(generate_orders(spark, rows))
    for how, df in reads.items():
        started = time.monotonic()
        got = fingerprint(df, ids)
        if ({k: got[k] for k in SAME} != {k: before[k] for k in SAME} or got["content"] != written["content"]
                or got["rows"] != rows or got["from_table"] != offloaded["entries"]):
            raise AssertionError(f"{how} across the seam: {got}; before the offload {before}, the orders "
                                 f"written {written}, offloaded {offloaded['entries']}")
        print(f"{how}: {got['rows']} rows in {time.monotonic() - started:.1f} s, {got['from_table']} from the "
              f"table's Parquet files and {got['rows'] - got['from_table']} from the bookies: the read crossed the "
              "seam; the same rows at the same positions as before the offload, and the orders written")
    table = DeltaTable(offloaded["table"])
    count = table.to_pyarrow_dataset().count_rows()
    print(f"deltalake reads the table as any engine would: {count} rows, {len(table.file_uris())} file(s), "
          f"version {table.version()}, columns {table.schema().to_arrow().names}")
    if count != offloaded["entries"]:
        raise AssertionError(f"the table holds {count} rows, the log offloaded {offloaded['entries']}")
    return count


def run(spark: Any, uri: str, workdir: Path, rows: int) -> dict[str, Any]:
    banner(f"1. batch append of {rows} generated orders to log {ORDERS!r}")
    print(f"appended in {batch_append(spark, uri, rows):.1f} s")

    banner(f"2. streaming {ORDERS!r} -> per-minute aggregate -> log {PER_MINUTE!r} (exactly once)")
    batches, seconds = stream_per_minute(spark, uri, str(workdir / "checkpoint"), max(1000, rows // 4))
    print(f"Trigger.AvailableNow finished: {batches} micro-batches in {seconds:.1f} s")

    banner("3. batch read of both logs")
    result = batch_read(spark, uri, rows)

    banner(f"4. tiered history: offload the sealed ledgers of {ORDERS!r} to a Delta table")
    with BookKeeper(uri) as bk:
        offloaded = offload_history(bk, workdir / "cluster")

    banner(f"5. one read of {ORDERS!r} across the seam (table + bookies)")
    result["table_rows"] = read_across_seam(spark, uri, rows, result["fingerprint"], offloaded)
    result["offloaded"] = offloaded

    banner("6. the logs on the cluster")
    with BookKeeper(uri) as bk:
        for name in (ORDERS, PER_MINUTE):
            print(describe(bk, name))
    return result


def main(rows: int = DEFAULT_ROWS, spark: Any = None) -> dict[str, Any]:
    """Run the whole demo; with `spark` given (tests) that session is used and left running."""
    logging.basicConfig(level=logging.ERROR)
    started = time.monotonic()
    own_session = spark is None
    with tempfile.TemporaryDirectory(prefix="bkledger-demo-") as tmp:
        workdir = Path(tmp)
        cluster = LocalCluster(workdir / "cluster")
        try:
            banner("0. local cluster: ZooKeeper + 3 bookies")
            cluster.up(3)
            print(f"metadataServiceUri = {cluster.metadata_service_uri}")
            if spark is None:
                spark = make_session()
            result = run(spark, cluster.metadata_service_uri, workdir, rows)
        finally:
            if own_session and spark is not None:
                spark.stop()
            cluster.down()
            print("cluster stopped", flush=True)
    banner(f"done in {time.monotonic() - started:.1f} s")
    return result


if __name__ == "__main__":
    main()
