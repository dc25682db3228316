"""spark_floor: what Spark's Python data source API costs on this machine with nothing behind it.

`spark_batch` compares the "bkledger" source with the fsync limit and with Parquet. Part of any Python
data source's time is Spark's own: the planner and worker processes it starts in a fresh session, the
JVM turning rows into Arrow batches (and back), the Arrow IPC to the Python workers. This module
measures that part alone, with a data source that does nothing: its writer drops every batch it is
given, its reader yields batches built in memory with bkledger's read columns (log, ledger_id, entry_id,
value; values of the same 100-1000 byte sizes, 4,096 rows a batch, two partitions). It runs as its own
process with a fresh local SparkSession and the same DataFrame, in `spark_batch`'s order (Parquet write
and read, the no-op append, the no-op read, both reads again, the no-op append again), so each no-op
figure is as cold or warm as the bkledger figure it stands beside. Prints one JSON line of seconds:
`python -m bench.spark_floor ROWS`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from bkledger.spark_connector.batch_reader import read_schema

NAME = "bkledger_bench_noop"
BATCH_ROWS = 4096
PARTITIONS = 2
MAX_VALUE = 1000
TIMEOUT_S = 900.0


def value_sizes(first_id: int, count: int) -> np.ndarray:
    """The sizes `spark_batch.make_frame` gives rows first_id .. first_id + count - 1."""
    ids = np.arange(first_id, first_id + count, dtype=np.int64)
    return 100 + (ids * 7919) % 901


def noop_batch(first_id: int, count: int, pool: bytes) -> pa.RecordBatch:
    """`count` rows of bkledger's read columns, values cut from `pool` (no Python object per row)."""
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(value_sizes(first_id, count), out=offsets[1:])
    values = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(pool)])
    ids = np.arange(first_id, first_id + count, dtype=np.int64)
    return pa.RecordBatch.from_arrays([pa.repeat("bench", count), pa.array(np.zeros(count, dtype=np.int64)),
                                      pa.array(ids), values], names=["log", "ledger_id", "entry_id", "value"])


class NoopWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()


class NoopReader(DataSourceReader):
    def __init__(self, rows: int) -> None:
        self.rows = rows

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part = int(partition.value)
        first, end = self.rows * part // PARTITIONS, self.rows * (part + 1) // PARTITIONS
        pool = np.random.default_rng(part).integers(0, 256, BATCH_ROWS * MAX_VALUE, dtype=np.uint8).tobytes()
        for start in range(first, end, BATCH_ROWS):
            yield noop_batch(start, min(BATCH_ROWS, end - start), pool)


class NoopDataSource(DataSource):
    """Option rows: how many rows a read yields."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return read_schema(with_envelope=False)

    def writer(self, schema: Any, overwrite: bool) -> NoopWriter:
        return NoopWriter()

    def reader(self, schema: Any) -> NoopReader:
        return NoopReader(int(self.options["rows"]))


def timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def measure(rows: int) -> dict[str, float]:
    """Seconds of each step, in `spark_batch`'s order, in this process's own fresh SparkSession."""
    from bench.spark_batch import make_frame, start_spark

    spark = start_spark()
    try:
        spark.dataSource.register(NoopDataSource)
        df, _ = make_frame(spark, rows)
        with tempfile.TemporaryDirectory(prefix="spark-floor-") as tmp:
            parquet = str(Path(tmp) / "parquet")

            def pq_read() -> None:
                spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()

            def noop_read() -> None:
                spark.read.format(NAME).option("rows", rows).load().write.format("noop").mode("overwrite").save()

            out = {"parquet_write": timed(lambda: df.write.mode("overwrite").parquet(parquet)),
                   "parquet_read": timed(pq_read),
                   "noop_append": timed(lambda: df.write.format(NAME).mode("append").save()),
                   "noop_read": timed(noop_read)}
            out["parquet_read_again"] = timed(pq_read)
            out["noop_read_again"] = timed(noop_read)
            out["noop_append_again"] = timed(lambda: df.write.format(NAME).mode("append").save())
            return out
    finally:
        spark.stop()


def measure_in_fresh_process(rows: int, cwd: Path) -> dict[str, float]:
    """`measure` in a new Python process (so a new JVM: nothing warm from the caller's session)."""
    done = subprocess.run([sys.executable, "-m", "bench.spark_floor", str(rows)], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"bench.spark_floor exited {done.returncode}: {done.stderr[-2000:]}")
    return {k: float(v) for k, v in json.loads(lines[-1]).items()}


if __name__ == "__main__":
    print(json.dumps(measure(int(sys.argv[1]))), flush=True)
