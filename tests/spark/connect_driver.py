"""A Spark Connect driver run as its own process by test_connect.py (a process holds one kind of session).

    python -m tests.spark.connect_driver <metadataServiceUri> <log>

Starts the Connect server shipped in the pyspark wheel with `SparkSession.builder.remote("local[2]")`
(SPARK_TESTING=1 in the environment makes it bind an ephemeral port, which the client then asks the JVM
for), appends through format("bkledger") from the main thread and from a worker thread, reads everything
back, and prints one JSON line with what it saw.
"""

from __future__ import annotations

import json
import sys
import threading


def main(uri: str, log: str) -> None:
    from pyspark.sql import SparkSession

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
    out["thread_errors"] = errors
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
