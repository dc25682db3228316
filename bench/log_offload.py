"""log_offload: history as a lakehouse table (issue 42 item 7): the rows today's code supports.

A 3-bookie LocalCluster (journalSyncData=true, E=3 Qw=2 Qa=2) and one local SparkSession (local[2],
started before any client). Each run writes a log of its own with one LogWriter (1 KiB random values,
record envelope 1: key and timestamp columns as a producer's; rolled into 12 ledgers, so an offload takes
the 10 sealed ones it may: it leaves the last two), then:

- offload throughput: value bytes of the offloaded entries / seconds of `bk.offload_log` (read from the
  bookies, Parquet written, one Delta commit, one CAS), against the client's write rate of the same log
  (value bytes / seconds of the pipelined appends). Aim >= 0.5.
- Spark's Parquet scan of the log's table folder (`spark.read.parquet`; `_delta_log` is skipped as every
  `_` folder) against a plain Parquet file of the same rows that pyarrow wrote (`pq.write_table`, its
  defaults), both forced with the noop sink, warm (each read once before timing), then 3 of each taking
  turns (rows/s over the three). Aim >= 0.95.
- disk bytes per payload byte of the offloaded history: every file under the table folder (Parquet and
  `_delta_log`, allocated blocks) / value bytes of the entries offloaded. Aim <= 1.1. The history's
  footprint once the deletion lag has passed (the offloader then deletes the bookie copies; their space
  returns with the bookies' garbage collection, which this does not wait for).
- freshness: on a log NOT offloaded, with its LogWriter open and idle (its last append acknowledged), a
  `format("bkledger")` batch read's last row against the writer's last acknowledged entry (the LAC at
  planning): entries behind, aim 0. Each run appends more and reads again.
- `format("bkledger")` over offloaded history vs over bookies: the same log read whole before and after
  its offload (its sealed ledgers then read from the table's Parquet files, the last two from the bookies).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from bench.aims import Aim, aim_rows
from bench.cluster3 import fresh_cluster_session
from bench.core import MB, Context, KiB, MiB, Row

NAME = "log_offload"
RECORD = 1 * KiB
LEDGERS = 12                   # the writer rolls into this many; an offload takes all but the last two
CONF = {"journalSyncData": "true"}


@dataclasses.dataclass(frozen=True)
class Sizes:
    runs: int
    log_bytes: int             # value bytes written per run
    fresh_records: int         # records appended before each freshness read
    scans: int = 3             # timed scans (reads) of each, taking turns, per run

    @staticmethod
    def of(mode: str) -> Sizes:
        if mode == "tiny":
            return Sizes(1, 1 * MiB, 50, 1)       # the smoke test: the code runs, once
        if mode == "quick":
            return Sizes(3, 8 * MiB, 500)
        return Sizes(3, 64 * MiB, 2_000)


@dataclasses.dataclass
class OffloadRun:
    write_mb_s: float
    offload_mb_s: float
    table_dir: Path
    entries: int


def _disk_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def offload_once(bk: Any, log: str, store: Path, sizes: Sizes) -> OffloadRun:
    records = sizes.log_bytes // RECORD
    values = [os.urandom(RECORD) for _ in range(records)]
    with bk.open_log_writer(log, envelope=1, roll_entries=max(1, records // LEDGERS)) as writer:
        started = time.perf_counter()                       # appends and their rolls; not the open
        for future in [writer.append_async(v) for v in values]:
            future.result(120)
        write_s = time.perf_counter() - started
    started = time.perf_counter()
    done = bk.offload_log(log, str(store))
    offload_s = time.perf_counter() - started
    if not done.files or done.entries <= 0:
        raise RuntimeError(f"log {log}: the offload took nothing ({done.as_dict()})")
    return OffloadRun(records * RECORD / write_s / MB, done.entries * RECORD / offload_s / MB,
                      Path(done.table_uri), done.entries)


def _scan_seconds(spark: Any, path: Path, rows: int) -> float:
    df = spark.read.parquet(str(path))
    if df.count() != rows:
        raise RuntimeError(f"{path}: Spark reads {df.count()} rows, {rows} were offloaded")
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def scan_ratio(spark: Any, table_dir: Path, plain_dir: Path, rows: int, scans: int) -> tuple[float, float]:
    """(rows/s of the table folder, rows/s of a plain Parquet file of its rows), each read warm."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    table = ds.dataset(str(table_dir), format="parquet", exclude_invalid_files=False,
                       ignore_prefixes=["_", "."]).to_table()
    plain_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(plain_dir / "plain.parquet"))
    _scan_seconds(spark, table_dir, rows)                     # warm: JIT, page cache, the session's planner
    _scan_seconds(spark, plain_dir, rows)
    ours = plain = 0.0
    for _ in range(scans):                                    # taking turns: both from the same seconds
        ours += _scan_seconds(spark, table_dir, rows)
        plain += _scan_seconds(spark, plain_dir, rows)
    return scans * rows / ours, scans * rows / plain


def offload_rows(ctx: Context, bk: Any, spark: Any, sizes: Sizes) -> list[Row]:
    store = ctx.data_dir / "offload-store"
    throughput: list[tuple[float, float | None]] = []
    scans: list[tuple[float, float | None]] = []
    disk: list[tuple[float, float | None]] = []
    for run in range(1, sizes.runs + 1):
        got = offload_once(bk, f"offloaded-{run}", store, sizes)
        throughput.append((got.offload_mb_s, got.write_mb_s))
        scans.append(scan_ratio(spark, got.table_dir, ctx.data_dir / f"plain-parquet-{run}", got.entries,
                                sizes.scans))
        disk.append((_disk_bytes(got.table_dir) / (got.entries * RECORD), None))
    label = f"{sizes.log_bytes // MiB} MiB log of 1 KiB records"
    return [
        *aim_rows(NAME, f"offload ({label})", "MB/s", throughput, Aim(">=", 0.5),
                  "vs the client's write rate of the same log (one LogWriter, pipelined); value bytes"),
        *aim_rows(NAME, f"Spark Parquet scan of the offloaded table folder ({label})", "rows/s", scans,
                  Aim(">=", 0.95), "vs a plain Parquet file of the same rows written by pyarrow; noop sink, warm, "
                  f"{sizes.scans} scans of each taking turns"),
        *aim_rows(NAME, f"disk bytes per payload byte, the table's own ({label})", "B/B", disk,
                  Aim("<=", 1.1, on="value"), "files under the table folder (Parquet + _delta_log) / value bytes; "
                  "the history's footprint after the deletion lag (the offloader deletes the bookie copies "
                  "then)"),
    ]


def freshness_rows(bk: Any, spark: Any, uri: str, sizes: Sizes) -> list[Row]:
    value = os.urandom(RECORD)
    behind: list[tuple[float, float | None]] = []
    with bk.open_log_writer("fresh") as writer:
        for _ in range(sizes.runs):
            futures = [writer.append_async(value) for _ in range(sizes.fresh_records)]
            last = max(f.result(120) for f in futures)          # the writer's last acknowledged entry
            df = spark.read.format("bkledger").options(metadataServiceUri=uri, log="fresh").load()
            got = df.selectExpr("max(struct(ledger_id, entry_id)) as last").collect()[0]["last"]
            if got is None or got["ledger_id"] != last.ledger_id:
                raise RuntimeError(f"the read's last row {got} is not in the writer's ledger {last.ledger_id}")
            behind.append((float(last.entry_id - got["entry_id"]), None))
    return aim_rows(NAME, "freshness: format(\"bkledger\") last row vs the LAC at planning", "entries", behind,
                    Aim("<=", 0, on="value"), "log not offloaded, its LogWriter open and idle after its last "
                    "acknowledged append; entries behind that append")


def _bkledger_read_seconds(spark: Any, uri: str, log: str, rows: int) -> float:
    df = spark.read.format("bkledger").options(metadataServiceUri=uri, log=log).load()
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    if df.count() != rows:
        raise RuntimeError(f"log {log}: format(\"bkledger\") reads {df.count()} rows, {rows} were written")
    return seconds


def _read_rate(spark: Any, uri: str, log: str, rows: int, scans: int) -> float:
    """rows/s of `scans` timed format("bkledger") reads of the whole log, after one warm read."""
    _bkledger_read_seconds(spark, uri, log, rows)
    return scans * rows / sum(_bkledger_read_seconds(spark, uri, log, rows) for _ in range(scans))


def seam_read_rows(bk: Any, spark: Any, uri: str, store: Path, sizes: Sizes) -> list[Row]:
    """format("bkledger") over a log whose sealed history is offloaded vs the same log read from the bookies
    just before its offload: the same rows (the log does not change between the two), warm, `scans` timed reads
    of each. The issue sets no aim; ours: the files are no slower than the bookies (ratio >= 1)."""
    runs: list[tuple[float, float | None]] = []
    for run in range(1, sizes.runs + 1):
        log, records = f"seam-{run}", sizes.log_bytes // RECORD
        with bk.open_log_writer(log, envelope=1, roll_entries=max(1, records // LEDGERS)) as writer:
            for future in [writer.append_async(os.urandom(RECORD)) for _ in range(records)]:
                future.result(120)
        on_bookies = _read_rate(spark, uri, log, records, sizes.scans)
        bk.offload_log(log, str(store))
        runs.append((_read_rate(spark, uri, log, records, sizes.scans), on_bookies))
    label = f"{sizes.log_bytes // MiB} MiB log of 1 KiB records"
    return aim_rows(NAME, f'format("bkledger") over offloaded history vs over bookies ({label})', "rows/s", runs,
                    Aim(">=", 1.0), f"the same log read whole before and after its offload (all but the last two "
                    f"ledgers in the table); noop sink, warm, {sizes.scans} reads of each; no aim in the issue, ours: "
                    "the files are no slower than the bookies")


def run(ctx: Context) -> list[Row]:
    from bench.spark_batch import start_spark
    from bkledger.client import BookKeeper

    sizes = Sizes.of(ctx.settings.mode)
    spark = start_spark()                 # before any client: the JVM is forked without gRPC threads
    ctx.stack.callback(spark.stop)
    with fresh_cluster_session(ctx, "log-offload-cluster", conf=CONF) as session, \
            BookKeeper(session.uri) as bk:
        from bkledger.spark_connector.clients import drop_client

        try:
            rows = offload_rows(ctx, bk, spark, sizes)
            rows += freshness_rows(bk, spark, session.uri, sizes)
            rows += seam_read_rows(bk, spark, session.uri, ctx.data_dir / "offload-store", sizes)
        finally:      # the reads' clients (this process's shared one, Spark's workers'): gone before ZooKeeper
            drop_client(session.uri)
            spark.stop()
    return rows
