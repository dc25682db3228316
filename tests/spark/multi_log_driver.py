"""A Spark driver run as its own process by test_multi_log_writes.py, to be killed between its tasks and
its commit transaction.

    python -m tests.spark.multi_log_driver <metadataServiceUri> <ready file> <log> [<log> ...]

Appends rows spread over the given logs (column log) through a data source that is format("bkledger")
except that its driver-side commit first writes `<ready file>` (the job's ledgers per log, as JSON: the
tasks are done, the transaction not yet sent) and then waits for the test to kill this process. The
commit runs in a Python worker of the JVM, not in this process: it waits only while this process lives
and then exits without committing, as it would have died with its driver.
"""

from __future__ import annotations

import json
import os
import sys
import time

PAUSE_S = 300.0


def main(uri: str, ready: str, logs: list[str]) -> None:
    from pyspark.sql import SparkSession

    from bkledger.spark_connector.batch_writer import BkLedgerBatchWriter, ledgers_by_log
    from bkledger.spark_connector.datasource import BkLedgerDataSource

    driver_pid = os.getpid()

    class PausedWriter(BkLedgerBatchWriter):
        def commit(self, messages) -> None:
            by_log = ledgers_by_log(messages, self.opts.source.log)
            with open(ready + ".tmp", "w", encoding="utf-8") as f:
                json.dump({"ledgers": by_log, "commit_pid": os.getpid()}, f)
            os.replace(ready + ".tmp", ready)
            deadline = time.monotonic() + PAUSE_S
            while os.path.exists(f"/proc/{driver_pid}") and time.monotonic() < deadline:
                time.sleep(0.05)
            os._exit(3)                    # the driver is gone: so is its commit

    class PausedSource(BkLedgerDataSource):
        @classmethod
        def name(cls) -> str:
            return "bkledger_paused"

        def writer(self, schema, overwrite):
            inner = super().writer(schema, overwrite)
            assert isinstance(inner, BkLedgerBatchWriter)
            return PausedWriter(inner.opts, inner.layout, inner.job_id, inner.floor)

    spark = (SparkSession.builder.master("local[2]").appName("bkledger-killed-driver")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.pyspark.python", sys.executable)
             .config("spark.pyspark.driver.python", sys.executable).getOrCreate())
    spark.dataSource.register(PausedSource)
    names = ", ".join(f"'{n}'" for n in logs)
    df = spark.range(0, 300, numPartitions=2).selectExpr(
        "cast(cast(id as string) as binary) as value",
        f"element_at(array({names}), cast(id % {len(logs)} as int) + 1) as log")
    df.write.format("bkledger_paused").option("metadataServiceUri", uri).mode("append").save()
    print("the commit returned: the test should have killed this driver", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
