"""Stream a bkledger log into a Delta table.

    python examples/stream_to_delta.py [--table DIR] [--rows N] [--use-delta-spark]

Starts a local cluster, appends generated orders to the log "orders", then streams the log into a
Delta table with Trigger.AvailableNow and checks the table with `deltalake` (delta-rs).

Two ways to write Delta:
* delta-spark (`writeStream.format("delta")`) needs the Delta jars in the JVM. The delta-spark wheel
  ships none; Spark downloads them from Maven at session start, which is impossible offline. So this
  path is taken only if a delta-spark jar is already on this machine (found in the Spark jars folder,
  the Ivy cache or $BKLEDGER_DELTA_JARS), or with `--use-delta-spark`, which sets spark.jars.packages and
  lets Spark try to download (needs network).
* Otherwise (the default here) `foreachBatch` hands each micro-batch as Arrow to
  `deltalake.write_deltalake(mode="append")`, made idempotent per batch id with a Delta app transaction
  (txn app id + version = batch id, as Spark's own Delta sink does): a replayed batch is skipped.
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bkledger.bookie.local.cluster import LocalCluster

try:
    from examples.pipeline import generate_orders
except ImportError:             # run as a script: examples/ itself is on sys.path
    from pipeline import generate_orders  # type: ignore[no-redef]

APP_ID = "bkledger-stream-to-delta"


def local_delta_jars() -> list[str]:
    """delta-spark jars already on this machine (no network)."""
    import pyspark

    spark_jars = Path(pyspark.__file__).parent / "jars"
    patterns = [str(spark_jars / "delta-spark*.jar"),
                str(Path.home() / ".ivy2*" / "jars" / "io.delta_delta-spark*.jar")]
    extra = os.environ.get("BKLEDGER_DELTA_JARS")
    if extra:
        patterns.append(str(Path(extra) / "*.jar"))
    return sorted({j for pattern in patterns for j in glob.glob(pattern)})


def make_session(delta: str) -> Any:
    """A quiet local session; `delta` is "jars" (local delta-spark jars), "packages" (download) or "none"."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("bkledger-to-delta")
               .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.session.timeZone", "UTC"))
    if delta != "none":
        builder = (builder.config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                   .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
        if delta == "jars":
            builder = builder.config("spark.jars", ",".join(local_delta_jars()))
        else:
            from delta import configure_spark_with_delta_pip

            builder = configure_spark_with_delta_pip(builder)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def orders_stream(spark: Any, uri: str, log: str) -> Any:
    from bkledger.spark_connector.batch_reader import read_schema

    return (spark.readStream.format("bkledger").schema(read_schema(True)).option("metadataServiceUri", uri)
            .option("log", log).option("maxEntriesPerTrigger", "2000").load()
            .selectExpr("ledger_id", "entry_id", "cast(key as string) as order_key", "timestamp",
                        "cast(value as string) as order_json"))


class DeltaBatchWriter:
    """foreachBatch target: appends a micro-batch with delta-rs, once per batch id (Delta txn action)."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.skipped: list[int] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

        if DeltaTable.is_deltatable(self.table):
            done = DeltaTable(self.table).transaction_version(APP_ID)
            if done is not None and done >= batch_id:
                self.skipped.append(batch_id)
                return
        data = df.toArrow()
        if data.num_rows == 0 and DeltaTable.is_deltatable(self.table):
            return
        write_deltalake(self.table, data, mode="append",
                        commit_properties=CommitProperties(app_transactions=[Transaction(APP_ID, batch_id)]))


def stream_to_delta(spark: Any, uri: str, log: str, table: str, checkpoint: str, delta_spark: bool) -> None:
    writer = orders_stream(spark, uri, log).writeStream.option("checkpointLocation", checkpoint)
    if delta_spark:
        query = writer.format("delta").outputMode("append").trigger(availableNow=True).start(table)
    else:
        query = writer.foreachBatch(DeltaBatchWriter(table)).trigger(availableNow=True).start()
    if not query.awaitTermination(150):
        query.stop()
        raise TimeoutError("the streaming query did not finish within 150 s")
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")


def main(rows: int = 10_000, table: str | None = None, use_delta_spark: bool = False,
         spark: Any = None) -> dict[str, Any]:
    """Run the example; returns what the Delta table holds. With `spark` given (tests) it is left running."""
    from deltalake import DeltaTable

    logging.basicConfig(level=logging.ERROR)
    jars = local_delta_jars()
    mode = "jars" if jars else ("packages" if use_delta_spark else "none")
    print(f"delta-spark: {'local jars ' + str(jars) if jars else 'no local jars'}; writing Delta with "
          f"{'delta-spark' if mode != 'none' else 'deltalake (delta-rs) from foreachBatch'}", flush=True)
    own_session = spark is None
    with tempfile.TemporaryDirectory(prefix="bkledger-delta-") as tmp:
        table = table or str(Path(tmp) / "orders_delta")
        cluster = LocalCluster(Path(tmp) / "cluster")
        try:
            cluster.up(3)
            if spark is None:
                spark = make_session(mode)
            uri = cluster.metadata_service_uri
            (generate_orders(spark, rows).write.format("bkledger").option("metadataServiceUri", uri)
             .option("log", "orders").mode("append").save())
            started = time.monotonic()
            stream_to_delta(spark, uri, "orders", table, str(Path(tmp) / "checkpoint"), mode != "none")
            dt = DeltaTable(table)
            data = dt.to_pyarrow_table()
            print(f"Delta table {table}: version {dt.version()}, {data.num_rows} rows, columns "
                  f"{data.column_names}, streamed in {time.monotonic() - started:.1f} s")
            return {"rows": data.num_rows, "version": dt.version(), "table": table,
                    "distinct": len(set(zip(data.column("ledger_id").to_pylist(),
                                            data.column("entry_id").to_pylist(), strict=True)))}
        finally:
            if own_session and spark is not None:
                spark.stop()
            cluster.down()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--table", help="Delta table directory (default: a temporary one)")
    parser.add_argument("--use-delta-spark", action="store_true",
                        help="use delta-spark even without local jars (Spark downloads them: needs network)")
    args = parser.parse_args()
    main(args.rows, args.table, args.use_delta_spark)
