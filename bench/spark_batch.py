"""spark_batch: the "bkledger" Spark data source's batch append and read, beside Parquet in the same session.

One local SparkSession (local[2]) and one DataFrame of N rows of random 100-1000 byte values (cached
before timing; N = 1M full, 100k --quick, 10k tiny). Timed, each on the same DataFrame: Parquet write,
Parquet read, bkledger append (to a 3-bookie LocalCluster with journalSyncData=true, E=3 Qw=2 Qa=2) and
bkledger read, then both reads once more ("again": Spark's Python planner and task processes, the JIT
and the page cache are warm then; the first bkledger read of a session starts Python processes that
Parquet never needs), and last a second bkledger append of the same rows ("append again": the first
append of a session starts Spark's Python worker daemon and its workers, which import pyarrow, pandas
and the client, and runs Spark's Arrow path cold; a long-running pipeline appends warm). Reads are
forced with the `noop` sink, so every column is materialized and nothing is written. Two more steps append
the same values with a key and a timestamp each (the record envelope) to a log of their own and read it
back, both warm, against the append again and read again without them. Throughput is value
bytes per second. Limits, all measured in this run: Parquet's figure for the same operation, and for the
append also the raw append + fdatasync rate of 256 KiB groups on the data dir's disk divided by the
write quorum (every byte is journaled Qw times on that one disk). Two rows say what that disk wrote
during the append: bytes per value byte (keys, headers, index and the entry logs included; at least 2 x
Qw) and that rate against the raw limit. Seven more rows put both against `spark_floor`: the same steps
through a data source that does nothing, in a fresh session of its own (what Spark's Python data source
API itself leaves of each limit on this machine, and how much of that bkledger reaches).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.core import MB, Context, Row
from bench.disk import DiskMeter, disk_rows, measure_fsync_limit
from bench.spark_floor import measure_in_fresh_process
from bkledger.bookie.local.cluster import LocalCluster

REPO = Path(__file__).resolve().parent.parent
SIZES = {"full": 1_000_000, "quick": 100_000, "tiny": 10_000}
GROUP = 256 * 1024
WRITE_QUORUM = 2
CONF = {"journalSyncData": "true"}
NAME = "spark_batch"


def start_spark() -> Any:
    """A local SparkSession whose Python workers run this interpreter and can import the repo."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bkledger-bench")
             .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "4g").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def make_frame(spark: Any, rows: int) -> tuple[Any, int]:
    """N rows of pseudo-random values of 100..1000 bytes (SHA-512 streams), cached; (df, value bytes)."""
    df = spark.range(0, rows, numPartitions=2).selectExpr(
        "substring(unhex(concat_ws('', transform(sequence(1, 16), i -> sha2(cast(id * 17 + i as string), 512)))),"
        " 1, 100 + cast(pmod(id * 7919, 901) as int)) as value")
    df = df.cache()
    total = df.selectExpr("sum(length(value)) as n").collect()[0]["n"]
    return df, int(total)


def timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def run(ctx: Context) -> list[Row]:
    rows = SIZES.get(ctx.settings.mode, SIZES["quick"])
    cluster = LocalCluster(ctx.data_dir / "spark-cluster")
    ctx.stack.callback(cluster.down)
    cluster.up(3, dict(CONF))
    uri = cluster.metadata_service_uri
    spark = start_spark()
    ctx.stack.callback(spark.stop)
    df, nbytes = make_frame(spark, rows)
    parquet = str(ctx.data_dir / "spark-parquet")
    bk_opts = {"metadataServiceUri": uri, "log": "bench", "writeQuorum": str(WRITE_QUORUM)}

    pq_write = timed(lambda: df.write.mode("overwrite").parquet(parquet))
    pq_read = timed(lambda: spark.read.parquet(parquet).write.format("noop").mode("overwrite").save())
    with DiskMeter(ctx.data_dir) as disk:
        bk_write = timed(lambda: df.write.format("bkledger").options(**bk_opts).mode("append").save())
    reader = spark.read.format("bkledger").options(metadataServiceUri=uri, log="bench")
    bk_read = timed(lambda: reader.load().write.format("noop").mode("overwrite").save())
    pq_again = timed(lambda: spark.read.parquet(parquet).write.format("noop").mode("overwrite").save())
    bk_again = timed(lambda: reader.load().write.format("noop").mode("overwrite").save())
    bk_write_again = timed(lambda: df.write.format("bkledger").options(**bk_opts).mode("append").save())
    keyed_write, keyed_read = keyed_steps(spark, df, uri)
    limit_mb, _ = ctx.fsync_limit(GROUP, measure_fsync_limit)
    floor = measure_in_fresh_process(rows, REPO)
    ctx.facts[NAME] = {"rows": rows, "value_bytes": nbytes, "seconds": {
        "parquet_write": pq_write, "parquet_read": pq_read, "bkledger_write": bk_write, "bkledger_read": bk_read,
        "parquet_read_again": pq_again, "bkledger_read_again": bk_again, "bkledger_write_again": bk_write_again,
        "bkledger_keyed_write": keyed_write, "bkledger_keyed_read": keyed_read},
        "no-op data source, fresh session (bench.spark_floor)": floor}

    def mb_s(seconds: float) -> float:
        return nbytes / seconds / MB

    label = f"{rows:,} rows, 100-1000 B values"
    return [
        Row(NAME, f"bkledger append ({label})", mb_s(bk_write), "MB/s", mb_s(pq_write),
            "Parquet write of the same cached DataFrame, same session"),
        Row(NAME, f"bkledger append ({label})", mb_s(bk_write), "MB/s", limit_mb / WRITE_QUORUM,
            f"append+fdatasync of 256 KiB groups on this disk / write quorum {WRITE_QUORUM} (journalSyncData=true)"),
        Row(NAME, f"bkledger read ({label})", mb_s(bk_read), "MB/s", mb_s(pq_read),
            "Parquet read of the same data (both forced with the noop sink), same session"),
        Row(NAME, f"bkledger read ({label})", rows / bk_read, "rows/s", rows / pq_read, "Parquet read, same data"),
        Row(NAME, f"bkledger read again ({label})", mb_s(bk_again), "MB/s", mb_s(pq_again),
            "Parquet read again, same data: both second reads, with Spark's Python processes and the JIT warm"),
        Row(NAME, f"bkledger append again ({label})", mb_s(bk_write_again), "MB/s", limit_mb / WRITE_QUORUM,
            "the same limit; the session's second append, after the reads: Spark's Python processes warm"),
        Row(NAME, f"bkledger append with key and timestamp ({label})", mb_s(keyed_write), "MB/s",
            mb_s(bk_write_again), "the append again without them (warm, value bytes only): the record envelope's cost"),
        Row(NAME, f"bkledger read with key and timestamp ({label})", mb_s(keyed_read), "MB/s", mb_s(bk_again),
            "the read again without them (warm, value bytes only): the record envelope's cost"),
        *disk_rows(NAME, f"bkledger append ({label})", disk, nbytes, bk_write, limit_mb, WRITE_QUORUM),
        *floor_rows(label, floor, mb_s, (bk_write, bk_read, bk_again, bk_write_again), limit_mb),
    ]


def keyed_steps(spark: Any, df: Any, uri: str) -> tuple[float, float]:
    """Seconds of a warm append of the same values with a 16-byte key and a timestamp each (so in the
    record envelope) to a log of their own, and of reading that log back."""
    keyed = df.selectExpr("substring(value, 1, 16) as key", "value",
                          "timestamp_seconds(1700000000 + length(value)) as timestamp").cache()
    keyed.count()
    opts = {"metadataServiceUri": uri, "log": "bench-keyed", "writeQuorum": str(WRITE_QUORUM)}
    write = timed(lambda: keyed.write.format("bkledger").options(**opts).mode("append").save())
    reader = spark.read.format("bkledger").options(metadataServiceUri=uri, log="bench-keyed")
    read = timed(lambda: reader.load().write.format("noop").mode("overwrite").save())
    keyed.unpersist()
    return write, read


def floor_rows(label: str, floor: dict[str, float], mb_s: Any, ours: tuple[float, float, float, float],
               limit_mb: float) -> list[Row]:
    """The no-op data source's steps against the same limits, and bkledger's against the no-op's."""
    bk_write, bk_read, bk_again, bk_write_again = ours
    noop = f"no-op Python data source, fresh session ({label})"
    return [
        Row(NAME, f"{noop}: append", mb_s(floor["noop_append"]), "MB/s", limit_mb / WRITE_QUORUM,
            f"append+fdatasync of 256 KiB groups / write quorum {WRITE_QUORUM}: what Spark leaves of that limit"),
        Row(NAME, f"{noop}: read", mb_s(floor["noop_read"]), "MB/s", mb_s(floor["parquet_read"]),
            "Parquet read of the same rows in that session"),
        Row(NAME, f"bkledger append against the no-op append ({label})", mb_s(bk_write), "MB/s",
            mb_s(floor["noop_append"]), "the no-op data source's append: Spark's own cost, nothing written"),
        Row(NAME, f"bkledger read against the no-op read ({label})", mb_s(bk_read), "MB/s",
            mb_s(floor["noop_read"]), "the no-op data source's read: batches built in memory, nothing read"),
        Row(NAME, f"bkledger read again against the no-op read again ({label})", mb_s(bk_again), "MB/s",
            mb_s(floor["noop_read_again"]), "both second reads"),
        Row(NAME, f"{noop}: append again", mb_s(floor["noop_append_again"]), "MB/s", limit_mb / WRITE_QUORUM,
            f"append+fdatasync of 256 KiB groups / write quorum {WRITE_QUORUM}: the session's second append"),
        Row(NAME, f"bkledger append again against the no-op append again ({label})", mb_s(bk_write_again), "MB/s",
            mb_s(floor["noop_append_again"]), "both second appends"),
    ]
