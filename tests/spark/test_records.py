"""Records like Kafka's between Python and Spark (issue 44 item 1), through a real SparkSession and real
bookies: Spark reads the key, timestamp and (option includeHeaders) headers of records a LogWriter wrote,
and reads by time (`startingTimestamp`, `endingTimestamp`) select them; a DataFrame's headers column is
written (envelope v2) and read back by Python and by Spark."""

from __future__ import annotations

import uuid

import pytest

from bkledger.client import BookKeeper
from bkledger.client.log.core import envelope as env

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000          # ms since the epoch
HEADERS_SQL = "array<struct<key:string,value:binary>>"


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def reader(spark, uri: str, **options: str):
    r = spark.read.format("bkledger").option("metadataServiceUri", uri)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def test_spark_reads_keys_timestamps_and_headers_of_python_records(spark, cluster, bk: BookKeeper) -> None:
    """60 records over 3 ledgers (times T0 + i s, a header on every third): the columns come back, only
    with includeHeaders is there a headers column, and a read by time picks exactly the records in it."""
    uri, name = cluster.metadata_service_uri, fresh("pyrec")
    with bk.open_log_writer(name, envelope=env.V2, roll_entries=20) as writer:
        futures = [writer.append_async(b"%d" % i, key=b"k%d" % (i % 4), timestamp=T0 + i * 1000,
                                       headers=[("i", b"%d" % i), ("none", None)] if i % 3 == 0 else None)
                   for i in range(60)]
        for fut in futures:
            fut.result(60)
    spans = [led.time_span for led in bk.log_metadata(name).ledgers]        # reads by time prune with them
    assert spans == [((T0 + i * 1000) * 1000, (T0 + (i + 19) * 1000) * 1000) for i in (0, 20, 40)]

    plain = reader(spark, uri, log=name)
    assert plain.columns == ["log", "ledger_id", "entry_id", "value", "key", "timestamp"]
    df = reader(spark, uri, log=name, includeHeaders="true")
    assert df.columns == [*plain.columns, "headers"]
    got = {int(r.value): r for r in df.selectExpr("CAST(value AS STRING) AS value", "key",
                                                  "unix_millis(timestamp) AS ms", "headers").collect()}
    assert sorted(got) == list(range(60))
    for i, r in got.items():
        assert (bytes(r.key), r.ms) == (b"k%d" % (i % 4), T0 + i * 1000)
        want = [("i", b"%d" % i), ("none", None)] if i % 3 == 0 else None
        assert (None if r.headers is None else [(h.key, h.value and bytes(h.value)) for h in r.headers]) == want

    timed = reader(spark, uri, log=name, startingTimestamp=str(T0 + 15_500), endingTimestamp=str(T0 + 40_000))
    assert sorted(int(r.value) for r in timed.selectExpr("CAST(value AS STRING) AS value").collect()) == \
        list(range(16, 40))


def test_a_headers_column_is_written_and_read_back(spark, cluster, bk: BookKeeper) -> None:
    """A DataFrame with a headers column is written with envelope v2 (Python decodes the headers); one
    without stays v1, readable by bkledger versions that do not know v2."""
    uri, name = cluster.metadata_service_uri, fresh("sparkhdr")
    df = spark.range(0, 6, 1, 2).selectExpr(
        "CAST(id AS STRING) AS value", "CAST(CONCAT('k', id) AS BINARY) AS key",
        f"CASE WHEN id % 2 = 0 THEN array(named_struct('key', 'n', 'value', CAST(CAST(id AS STRING) AS BINARY)), "
        f"named_struct('key', 'empty', 'value', CAST(NULL AS BINARY))) ELSE CAST(NULL AS {HEADERS_SQL}) END "
        "AS headers")
    df.write.format("bkledger").option("metadataServiceUri", uri).option("log", name).mode("append").save()
    spark.range(6, 8, 1, 1).selectExpr("CAST(id AS STRING) AS value").write.format("bkledger") \
        .option("metadataServiceUri", uri).option("log", name).option("envelope", "true").mode("append").save()

    versions = {led.ledger_id: led.envelope for led in bk.log_metadata(name).ledgers}
    assert sorted(v or 0 for v in versions.values()) == [env.V1, env.V2, env.V2]
    with bk.open_log_reader(name) as log_reader:
        recs = [env.decode_record(r.payload, versions[r.ledger_id] or 0)
                for r in log_reader.read(max_records=8, timeout=10)]
    by_value = {int(r.value): r for r in recs}
    assert sorted(by_value) == list(range(8))
    for i in range(6):
        want = (("n", b"%d" % i), ("empty", None)) if i % 2 == 0 else None
        assert (by_value[i].key, by_value[i].headers) == (b"k%d" % i, want)
    assert by_value[7].headers is None and by_value[7].key is None

    back = reader(spark, uri, log=name, includeHeaders="true").selectExpr(
        "CAST(value AS STRING) AS value", "headers").collect()
    headers = {int(r.value): None if r.headers is None else [(h.key, h.value and bytes(h.value)) for h in r.headers]
               for r in back}
    assert headers == {i: [("n", b"%d" % i), ("empty", None)] if i % 2 == 0 and i < 6 else None
                       for i in range(8)}
