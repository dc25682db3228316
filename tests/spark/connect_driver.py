"""A Spark Connect driver run as its own process by test_connect.py (a process holds one kind of session).

    python -m tests.spark.connect_driver <metadataServiceUri> <log> <checkpoint dir>

Starts the Connect server shipped in the pyspark wheel with `SparkSession.builder.remote("local[2]")`
(SPARK_TESTING=1 in the environment makes it bind an ephemeral port, which the client then asks the JVM
for), appends through format("bkledger") from the main thread and from a worker thread, reads everything
back, streams the log into `<log>-copy` (the streaming source and the exactly-once sink, Trigger.AvailableNow)
from a worker thread, reads the copy, and prints one JSON line with what it saw.
"""

from __future__ import annotations

import json
import sys
import threading


def main(uri: str, log: str, checkpoint: str) -> None:
    from pyspark.sql import SparkSession

    from bkledger.spark_connector.batch_reader import read_schema

    spark = (SparkSession.builder.remote("local[2]")
             .config("spark.connect.grpc.binding.address", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    out: dict[str, object] = {"session": type(spark).__module__}

    def append(start: int, end: int) -> None:
        df = spark.range(start, end, numPartitions=2).selectExpr("cast(cast(id as string) as binary) as value")
        (df.write.format("bkledger").option("metadataServiceUri", uri).option("log", log)
         .mode("append").save())

    append(0, 100)
    errors: list[str] = []

    def from_thread() -> None:
        try:
            append(100, 150)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            errors.append(repr(exc)[:500])

    thread = threading.Thread(target=from_thread)
    thread.start()
    thread.join(300)
    rows = (spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", log).load()
            .select("value").collect())
    out["values"] = sorted(int(bytes(r.value)) for r in rows)

    def stream_copy() -> None:
        try:
            q = (spark.readStream.format("bkledger").schema(read_schema(False)).option("metadataServiceUri", uri)
                 .option("log", log).load().select("value")
                 .writeStream.format("bkledger").option("metadataServiceUri", uri).option("log", f"{log}-copy")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
            if not q.awaitTermination(300):
                errors.append("the streaming copy did not finish within 300 s")
        except Exception as exc:  # noqa: BLE001 - reported to the test
            errors.append(repr(exc)[:500])

    thread = threading.Thread(target=stream_copy)
    thread.start()
    thread.join(330)
    copied = (spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", f"{log}-copy").load()
              .select("value").collect())
    out["streamed"] = sorted(int(bytes(r.value)) for r in copied)
    out["thread_errors"] = errors
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
