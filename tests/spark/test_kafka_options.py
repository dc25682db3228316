"""Kafka-like reads through a real SparkSession and real bookies: several logs (`log` list, `logPattern`,
also picked up by a running stream), times (`startingTimestamp`, ...ByTimestamp, `endingTimestamp`),
filter pushdown with Spark's switch on and off, `minPartitions`, and bad values failing at planning."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from bkledger.client import BookKeeper
from bkledger.spark_connector import envelope as env
from bkledger.spark_connector.batch_reader import discover, read_schema
from bkledger.spark_connector.kafka_options import for_log
from bkledger.spark_connector.narrowing import first_at_or_after
from bkledger.spark_connector.read_options import parse_read_options
from bkledger.spark_connector.time_seek import TimeProbe

pytestmark = pytest.mark.spark

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
T0 = 1_700_000_000_000          # ms since the epoch


def fresh(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def add_ledger(bk: BookKeeper, log: str, times_ms: list[int] | None, count: int = 0) -> int:
    """A CLOSED ledger appended to `log`: one enveloped record per time (value = the time), or `count`
    bare records (no envelope: no timestamps)."""
    version = env.V1 if times_ms is not None else env.NONE
    lh = bk.create_ledger(3, 2, 2, custom_metadata=env.custom_metadata(version))
    payloads = [env.encode(b"k", t * 1000, b"%d" % t) for t in times_ms] if times_ms is not None else \
        [b"bare%d" % i for i in range(count)]
    for f in [lh.add_entry_async(p) for p in payloads]:
        f.result(60)
    lh.close()
    bk.append_ledgers(log, [lh.ledger_id])
    return lh.ledger_id


def reader(spark, uri: str, **options: str):
    r = spark.read.format("bkledger").option("metadataServiceUri", uri)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def rows(df) -> list[tuple[str, int, int, bytes]]:
    return [(r.log, r.ledger_id, r.entry_id, bytes(r.value))
            for r in df.select("log", "ledger_id", "entry_id", "value").collect()]


@pytest.fixture(scope="module")
def logs(bk: BookKeeper) -> dict[str, Any]:
    """Log A: 3 ledgers x 40 records, times T0 + 0..119 s; log B: a bare ledger, then 40 records at
    T0 + 200..239 s; log C (a name the pattern does not match)."""
    prefix = fresh("k")
    a, b, c = f"{prefix}-a", f"{prefix}-b", f"x{prefix}-c"
    ledgers_a = [add_ledger(bk, a, [T0 + (i * 40 + j) * 1000 for j in range(40)]) for i in range(3)]
    ledgers_b = [add_ledger(bk, b, None, count=5), add_ledger(bk, b, [T0 + (200 + j) * 1000 for j in range(40)])]
    add_ledger(bk, c, [T0])
    return {"prefix": prefix, "a": a, "b": b, "c": c, "ledgers_a": ledgers_a, "ledgers_b": ledgers_b}


def test_several_logs_by_list_and_pattern_with_positions_per_log(spark, cluster, logs) -> None:
    uri, a, b = cluster.metadata_service_uri, logs["a"], logs["b"]
    listed = rows(reader(spark, uri, log=f"{a},{b}"))
    assert {r[0] for r in listed} == {a, b} and len(listed) == 120 + 45
    assert sorted(listed) == sorted(rows(reader(spark, uri, logPattern=f"{logs['prefix']}-.*")))
    assert [r for r in listed if r[0] == a] == sorted(r for r in listed if r[0] == a)     # log order
    second = logs["ledgers_a"][1]
    started = rows(reader(spark, uri, log=f"{a},{b}", startingPositions=f'{{"{a}": {{"{second}": 10}}}}',
                          endingPositions=f'{{"{b}": {{"{logs["ledgers_b"][1]}": 3}}}}'))
    assert len([r for r in started if r[0] == a]) == 30 + 40 and len([r for r in started if r[0] == b]) == 5 + 3
    many = reader(spark, uri, log=f"{a},{b}", minPartitions="7")
    assert many.rdd.getNumPartitions() >= 7 and sorted(rows(many)) == sorted(listed)


def test_times_pick_the_first_record_at_or_after(spark, cluster, logs) -> None:
    uri, a, b = cluster.metadata_service_uri, logs["a"], logs["b"]
    got = rows(reader(spark, uri, log=f"{a},{b}", startingTimestamp=str(T0 + 55_500),
                      endingTimestamp=str(T0 + 210_000)))
    values = sorted(int(v) for _, _, _, v in got)
    # A: 56..119 s (the first at or after 55.5 s); B: its bare ledger counts as older than any time, 200..209
    assert values == [T0 + s * 1000 for s in [*range(56, 120), *range(200, 210)]]
    per_log = rows(reader(spark, uri, log=f"{a},{b}", startingPositionsByTimestamp=f'{{"{a}": {T0 + 80_000}}}',
                          endingPositionsByTimestamp=f'{{"{a}": {T0 + 81_000}, "{b}": {T0}}}'))
    # B ends at its first timed record: only the bare ledger (no timestamps: older than any time) is before it
    assert sorted((r[0], r[3]) for r in per_log) == [(a, b"%d" % (T0 + 80_000))] + [(b, b"bare%d" % i)
                                                                                   for i in range(5)]
    assert rows(reader(spark, uri, log=a, startingTimestamp=str(T0 + 10 ** 9))) == []


def test_a_spark_append_records_time_spans_that_reads_by_time_use(spark, cluster, bk) -> None:
    """Three appends of 40 rows (times T0 + 0..119 s; the very first row without a timestamp): the log
    records each ledger's span, reads by time are right, and the ledger is picked with no entry read."""
    uri, name = cluster.metadata_service_uri, fresh("span")
    for part in range(3):
        first = part * 40
        (spark.range(first, first + 40, 1, 1)
         .selectExpr("CAST(id AS STRING) AS value",
                     f"CASE WHEN id = 0 THEN NULL ELSE timestamp_millis({T0} + id * 1000) END AS timestamp")
         .write.format("bkledger").option("metadataServiceUri", uri).option("log", name).mode("append").save())
    ledgers = bk.log_metadata(name).ledgers
    assert [led.time_span for led in ledgers] == [((T0 + 1000) * 1000, (T0 + 39_000) * 1000),
                                                  ((T0 + 40_000) * 1000, (T0 + 79_000) * 1000),
                                                  ((T0 + 80_000) * 1000, (T0 + 119_000) * 1000)]
    got = rows(reader(spark, uri, log=name, startingTimestamp=str(T0 + 55_500), endingTimestamp=str(T0 + 90_000)))
    assert sorted(int(v) for _, _, _, v in got) == list(range(56, 90))
    before = rows(reader(spark, uri, log=name, endingTimestamp=str(T0 + 1000)))
    assert [v for _, _, _, v in before] == [b"0"]          # the row without a timestamp: older than any time
    opts = for_log(parse_read_options({"metadataServiceUri": uri, "log": name}), name)
    views = discover(bk, opts)
    probe = TimeProbe(bk, views, None)             # each ledger with its own password (the log's key)
    known = {v.ledger_id: v.time_span for v in views if v.time_span is not None}
    assert len(known) == 3
    found = first_at_or_after([(v.ledger_id, 0, v.last_entry_id + 1) for v in views], probe, (T0 + 55_500) * 1000,
                              known)
    assert found == (ledgers[1].ledger_id, 16) and probe.reads <= 7       # log2(40) + 1, in ledger 2 only


def test_filters_prune_with_pushdown_on_and_stay_correct_with_it_off(spark, cluster, logs) -> None:
    import datetime as dt

    from pyspark.sql import functions as F

    uri, a, b = cluster.metadata_service_uri, logs["a"], logs["b"]
    second = logs["ledgers_a"][1]
    since = dt.datetime.fromtimestamp((T0 + 100_000) / 1000, tz=dt.UTC)

    def query():
        df = reader(spark, uri, log=f"{a},{b}", maxEntriesPerPartition="20")
        return [
            df.where((F.col("log") == a) & (F.col("ledger_id") == second) & (F.col("entry_id") >= 5)
                     & (F.col("entry_id") < 12)),
            df.where(F.col("log").isin(b) & (F.col("entry_id") <= 2)),
            df.where(F.col("timestamp") >= F.lit(since)),
        ]

    spark.conf.set(PUSHDOWN, "false")
    try:
        off = [(rows(q), q.rdd.getNumPartitions()) for q in query()]
        spark.conf.set(PUSHDOWN, "true")
        on = [(rows(q), q.rdd.getNumPartitions()) for q in query()]
    finally:
        spark.conf.unset(PUSHDOWN)
    assert [sorted(r) for r, _ in on] == [sorted(r) for r, _ in off]
    assert [r[1:3] for r in on[0][0]] == [(second, e) for e in range(5, 12)]
    assert len(on[1][0]) == 3 + 3 and len(on[2][0]) == 20 + 40
    whole = reader(spark, uri, log=f"{a},{b}", maxEntriesPerPartition="20").rdd.getNumPartitions()
    assert [n for _, n in on] == [1, 1, 3] and all(n == whole > 3 for _, n in off)   # pruned only when pushed


def test_bad_values_fail_at_planning_naming_the_option(spark, cluster, logs) -> None:
    uri, a = cluster.metadata_service_uri, logs["a"]
    for options, named in [
        ({"logPattern": "k(["}, "logPattern"),
        ({"log": a, "logPattern": ".*"}, "logPattern"),
        ({"logPattern": f"{logs['prefix']}-.*", "startingPositionsByTimestamp": '{"nope": 1}'},
         "startingPositionsByTimestamp"),
        ({"log": a, "endingTimestamp": "yesterday"}, "endingTimestamp"),
        ({"log": a, "minPartitions": "-1"}, "minPartitions"),
    ]:
        with pytest.raises(Exception, match=f"bkledger option {named}"):
            reader(spark, uri, **options).collect()


def test_stream_of_a_pattern_picks_up_a_new_log(spark, cluster, bk, logs, tmp_path: Path) -> None:
    uri, prefix = cluster.metadata_service_uri, fresh("s")
    add_ledger(bk, f"{prefix}-1", [T0 + i for i in range(10)])
    df = (spark.readStream.format("bkledger").schema(read_schema(True)).option("metadataServiceUri", uri)
          .option("logPattern", f"{prefix}-.*").option("maxEntriesPerTrigger", "4")
          .option("startingPositionsByTimestamp", f'{{"{prefix}-1": {T0 + 4}}}').load())
    seen: list[tuple[str, bytes]] = []
    q = (df.writeStream.foreachBatch(lambda batch, _id: seen.extend(
        (r.log, bytes(r.value)) for r in batch.select("log", "value").collect()))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 6 and time.monotonic() < deadline:
            q.awaitTermination(0.2)
        add_ledger(bk, f"{prefix}-2", [T0 + 100 + i for i in range(3)])      # created after the start
        while len(seen) < 9 and time.monotonic() < deadline:
            q.awaitTermination(0.2)
        progress = q.lastProgress
        while (progress is None or f"{prefix}-2" not in str(progress["sources"][0]["endOffset"])) \
                and time.monotonic() < deadline:
            q.awaitTermination(0.2)
            progress = q.lastProgress
    finally:
        q.stop()
    assert seen == [(f"{prefix}-1", b"%d" % (T0 + i)) for i in range(4, 10)] + \
        [(f"{prefix}-2", b"%d" % (T0 + 100 + i)) for i in range(3)]
    assert progress is not None and f"{prefix}-2" in str(progress["sources"][0]["endOffset"])
