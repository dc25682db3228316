"""A Spark job run by test_spark_versions.py with the Python of a venv that holds another pyspark release.

    <venv>/bin/python tests/spark/spark_versions_driver.py <expected pyspark version> <work dir>

From that venv: `bkledger local up` (three bookies), then a batch append and a read, and a read with a
WHERE on entry_id and ledger_id (pushed down where the release can: the plan says what Spark still
filters); a streaming query log -> log with Trigger.AvailableNow, the same query again from its checkpoint
after more appends (exactly once: the copy has each record once), and a stream with maxEntriesPerTrigger,
refused before 4.2 with a BkLedgerOptionError. Prints one line `RESULT {json}`; any failed check raises
(exit status not 0).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ROWS, MORE = 200, 50
WAIT_S = 300


def cluster_up(bin_dir: Path, where: Path) -> str:
    up = subprocess.run([str(bin_dir / "bkledger"), "local", "up", "--bookies", "3", "--dir", str(where),
                         "--set", "autoRecoveryDaemonEnabled=false"], capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr[-3000:]
    return up.stdout.strip().splitlines()[-1]


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bkledger-spark-versions")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.python.authenticate.socketTimeout", "120s")
             .config("spark.sql.python.filterPushdown.enabled", "true")      # 4.1+; unknown to 4.0, harmless
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def append(spark: Any, uri: str, log: str, values: list[bytes]) -> None:
    df = spark.createDataFrame([(v,) for v in values], "value binary").repartition(2)
    df.write.format("bkledger").option("metadataServiceUri", uri).option("log", log).mode("append").save()


def read_values(spark: Any, uri: str, log: str) -> list[bytes]:
    rows = spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", log).load().collect()
    return sorted(bytes(r.value) for r in rows)


def spark_filter(df: Any) -> str:
    """The condition Spark still applies after the scan (its Filter node): the filters the reader took
    (pushFilters) are gone from it; the scan's own description does not list them before 4.2."""
    plan = str(df._jdf.queryExecution().executedPlan().toString())
    found = re.search(r"Filter (.*)", plan)
    return found.group(1).strip() if found else ""


def copy_stream(spark: Any, uri: str, checkpoint: Path, sink: str = "v_copy", **read_options: str) -> Any:
    """log v -> log `sink`, Trigger.AvailableNow, to the end; returns the finished query."""
    stream = spark.readStream.format("bkledger").option("metadataServiceUri", uri).option("log", "v")
    for key, value in read_options.items():
        stream = stream.option(key, value)
    query = (stream.load().select("value").writeStream.format("bkledger")
             .option("metadataServiceUri", uri).option("log", sink)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(WAIT_S), "the AvailableNow query did not finish"
    return query


def main(expected: str, work: Path) -> dict[str, Any]:
    import pyspark

    assert pyspark.__version__ == expected, (pyspark.__version__, expected)
    from bkledger.spark_connector import spark_compat

    out: dict[str, Any] = {"pyspark": pyspark.__version__, "filter_pushdown": spark_compat.FILTER_PUSHDOWN,
                           "admission_control": spark_compat.STREAM_ADMISSION_CONTROL}
    bin_dir = Path(sys.executable).parent
    cluster = work / "cluster"
    uri = cluster_up(bin_dir, cluster)
    started = time.monotonic()
    try:
        spark = session()
        values = [f"record {i}".encode() for i in range(ROWS)]
        append(spark, uri, "v", values)
        assert read_values(spark, uri, "v") == sorted(values)
        where = (spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", "v").load()
                 .where("entry_id < 10 AND ledger_id >= 0"))
        out["batch"] = {"appended": ROWS, "read": ROWS, "where_entry_id_lt_10": where.count(),
                        "spark_filter": spark_filter(where)}

        first = copy_stream(spark, uri, work / "checkpoint")
        assert read_values(spark, uri, "v_copy") == sorted(values)
        more = [f"more {i}".encode() for i in range(MORE)]
        append(spark, uri, "v", more)
        copy_stream(spark, uri, work / "checkpoint")                      # a restart from the checkpoint
        copied = read_values(spark, uri, "v_copy")
        assert copied == sorted(values + more), (len(copied), ROWS + MORE)
        out["stream"] = {"first_run_batches": len(first.recentProgress), "copied": len(copied)}
        out["read_limit"] = read_limit(spark, uri, work)
        spark.stop()
    finally:
        subprocess.run([str(bin_dir / "bkledger"), "local", "down", "--dir", str(cluster)], capture_output=True,
                       timeout=120)
    out["seconds"] = round(time.monotonic() - started, 1)
    return out


def read_limit(spark: Any, uri: str, work: Path) -> str:
    """maxEntriesPerTrigger: honoured on 4.2+ (batches of at most 100 entries), refused before."""
    from bkledger.spark_connector import spark_compat

    try:
        query = copy_stream(spark, uri, work / "checkpoint-limited", "v_limited", maxEntriesPerTrigger="100")
    except Exception as exc:                     # StreamingQueryException, with the Python error's text
        assert not spark_compat.STREAM_ADMISSION_CONTROL, exc
        text = str(exc)
        assert "bkledger option maxEntriesPerTrigger" in text and "pyspark >= 4.2.0" in text, text[-2000:]
        return "refused: " + text[text.index("bkledger option"):].splitlines()[0]
    assert spark_compat.STREAM_ADMISSION_CONTROL, "a read limit ran on a pyspark without admission control"
    rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert rows and max(rows) <= 100, rows
    return f"honoured: {rows}"


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], Path(sys.argv[2]))), flush=True)
