"""Batch read and append through a real local SparkSession, real ZooKeeper and real bookies."""

from __future__ import annotations

import threading
import time
import uuid

import pyarrow as pa
import pytest

from bkledger.client import LogNotFoundError
from bkledger.spark_connector.batch_writer import JOB_KEY
from bkledger.spark_connector.datasource import BkLedgerDataSource

pytestmark = pytest.mark.spark


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def reader(spark, uri: str, **options: str):
    r = spark.read.format("bkledger").option("metadataServiceUri", uri)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def append(df, uri: str, log: str, **options: str) -> None:
    w = df.write.format("bkledger").option("metadataServiceUri", uri).option("log", log)
    for key, value in options.items():
        w = w.option(key, value)
    w.mode("append").save()


def to_arrow(df) -> pa.Table:
    return df.toArrow()


def test_round_trip_100k_rows_across_ledgers(spark, cluster, bk) -> None:
    uri, log = cluster.metadata_service_uri, fresh("orders")
    rows = 100_000
    df = spark.range(0, rows, numPartitions=4).selectExpr(
        "cast(cast(id as string) as binary) as value",
        "case when id % 10 = 0 then null else cast(concat('k', id) as binary) end as key",
        "timestamp_micros(id) as timestamp")
    started = time.monotonic()
    append(df, uri, log)
    meta = bk.log_metadata(log)
    assert len(meta.ledgers) == 4 and meta.entries == rows
    assert meta.ledger_ids == sorted(meta.ledger_ids)

    out = reader(spark, uri, log=log)
    assert out.columns == ["log", "ledger_id", "entry_id", "value", "key", "timestamp"]
    assert out.rdd.getNumPartitions() == 1          # 4 ledgers of 25,000 small entries: coalesced into one task
    assert reader(spark, uri, log=log, maxEntriesPerPartition="25000").rdd.getNumPartitions() == 4
    table = to_arrow(out)
    assert table.num_rows == rows
    ids = [int(v) for v in table.column("value").to_pylist()]
    assert sorted(ids) == list(range(rows))
    # each task's rows are one ledger, in the task's order: a contiguous, ascending run of ids
    by_ledger: dict[int, list[tuple[int, int]]] = {}
    for lid, eid, value in zip(table.column("ledger_id").to_pylist(), table.column("entry_id").to_pylist(), ids,
                               strict=True):
        by_ledger.setdefault(lid, []).append((eid, value))
    assert sorted(by_ledger) == meta.ledger_ids
    for pairs in by_ledger.values():
        pairs.sort()
        assert [e for e, _ in pairs] == list(range(len(pairs)))
        values = [v for _, v in pairs]
        assert values == list(range(values[0], values[0] + len(values)))
    sample = table.slice(0, 1000).to_pylist()
    for row in sample:
        i = int(row["value"])
        assert row["log"] == log
        assert row["key"] == (None if i % 10 == 0 else f"k{i}".encode())
        assert row["timestamp"].timestamp() * 1_000_000 == pytest.approx(i)
    print(f"round trip of {rows} rows: {time.monotonic() - started:.1f} s")

    # partitions follow ledgers/fragments and maxEntriesPerPartition; positions narrow the read
    assert reader(spark, uri, log=log, maxEntriesPerPartition="10000").rdd.getNumPartitions() == 4 * 3
    first, last = meta.ledger_ids[1], meta.ledger_ids[2]
    narrowed = reader(spark, uri, log=log, startingPositions=f'{{"{log}": {{"{first}": 100}}}}',
                      endingPositions=f'{{"{last}": 50}}')
    counts = {r["ledger_id"]: r["count"] for r in narrowed.groupBy("ledger_id").count().collect()}
    assert counts == {first: meta.ledgers[1].entries - 100, last: 50}


def test_plain_values_and_raw_ledgers(spark, cluster, bk) -> None:
    uri, log = cluster.metadata_service_uri, fresh("plain")
    append(spark.range(0, 50, numPartitions=2).selectExpr("concat('v', id) as value"), uri, log,
           compression="lz4", ensembleSize="2", writeQuorum="2", ackQuorum="1")
    out = reader(spark, uri, log=log)
    assert out.columns == ["log", "ledger_id", "entry_id", "value"]          # no envelope: no key/timestamp
    assert sorted(bytes(r.value).decode() for r in out.collect()) == sorted(f"v{i}" for i in range(50))
    ids = bk.log_metadata(log).ledger_ids
    raw = reader(spark, uri, ledgers=",".join(map(str, ids)))
    assert raw.count() == 50 and {r.log for r in raw.select("log").collect()} == {None}
    spark.dataSource.register(BkLedgerDataSource)                           # explicit registration works too
    assert reader(spark, uri, log=log).count() == 50


def test_read_while_a_log_writer_keeps_appending(spark, cluster, bk) -> None:
    uri, log = cluster.metadata_service_uri, fresh("live")
    writer = bk.open_log_writer(log, roll_entries=400)
    for i in range(1000):
        writer.append(f"{i}".encode())
    stop = threading.Event()
    appended = [1000]
    errors: list[BaseException] = []

    def keep_appending() -> None:
        try:
            while not stop.is_set():
                writer.append(f"{appended[0]}".encode())
                appended[0] += 1
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    thread = threading.Thread(target=keep_appending, daemon=True)
    thread.start()
    try:
        values = sorted(int(r.value) for r in reader(spark, uri, log=log).select("value").collect())
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    assert len(values) >= 1000 and values == list(range(len(values)))   # a prefix of the log, no gaps
    after = appended[0]
    writer.append(b"after")                                                # the writer was never fenced
    assert after > len(values) or after == len(values)
    writer.close()
    assert reader(spark, uri, log=log).count() == after + 1


def test_failed_job_appends_nothing_and_leaves_no_ledgers(spark, cluster, bk) -> None:
    from pyspark.sql.functions import col, udf

    uri, log = cluster.metadata_service_uri, fresh("failing")
    append(spark.range(0, 100, numPartitions=1).selectExpr("cast(id as string) as value"), uri, log)
    before_log = bk.log_metadata(log)
    before_ledgers = set(bk.list_ledgers())

    @udf("binary")
    def explode(i):  # no type hints: the return type is given to udf()
        if i == 3500:
            raise ValueError("boom on one partition")
        return str(i).encode()

    df = spark.range(0, 4000, numPartitions=4).select(explode(col("id")).alias("value"))
    with pytest.raises(Exception, match="boom on one partition"):
        append(df, uri, log)
    deadline = time.monotonic() + 10
    while set(bk.list_ledgers()) != before_ledgers and time.monotonic() < deadline:
        time.sleep(0.2)                     # a cancelled task may still be deleting its ledger
    assert bk.log_metadata(log).ledgers == before_log.ledgers
    assert set(bk.list_ledgers()) == before_ledgers
    assert reader(spark, uri, log=log).count() == 100


def test_job_ledgers_are_tagged_and_empty_partitions_write_nothing(spark, cluster, bk) -> None:
    uri, log = cluster.metadata_service_uri, fresh("sparse")
    df = spark.range(0, 3, numPartitions=6).selectExpr("cast(id as string) as value")   # 3 of 6 tasks empty
    append(df, uri, log)
    meta = bk.log_metadata(log)
    assert len(meta.ledgers) == 3 and meta.entries == 3
    assert all(JOB_KEY in bk.ledger_metadata(i).custom_metadata for i in meta.ledger_ids)
    from bkledger.client.log.core.meta import log_password

    assert (key := log_password(meta))      # issue 41: the job's ledgers carry the log's own key
    assert {bk.ledger_metadata(i).password for i in meta.ledger_ids} == {key}


def test_data_loss_of_a_listed_ledger(spark, cluster, bk) -> None:
    uri = cluster.metadata_service_uri
    lh = bk.create_ledger(3, 2, 2)
    for i in range(10):
        lh.add_entry(f"{i}".encode())
    lh.close()
    gone = bk.create_ledger(3, 2, 2)
    gone.close()
    bk.delete_ledger(gone.ledger_id)
    ledgers = f"{lh.ledger_id},{gone.ledger_id}"
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, uri, ledgers=ledgers).count()
    assert reader(spark, uri, ledgers=ledgers, failOnDataLoss="false").count() == 10


BAD_READS = [
    ({"log": "x"}, "metadataServiceUri"),
    ({"metadataServiceUri": "URI"}, "log"),
    ({"metadataServiceUri": "URI", "log": "x", "ledgers": "1"}, "log or ledgers"),
    ({"metadataServiceUri": "URI", "log": "x", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"metadataServiceUri": "URI", "log": "x", "startingPositions": "{nope"}, "startingPositions"),
    ({"metadataServiceUri": "URI", "log": "x", "maxEntriesPerPartition": "0"}, "maxEntriesPerPartition"),
    ({"metadataServiceUri": "URI", "log": "x", "startingOffsets": "earliest"}, "startingoffsets"),
    ({"metadataServiceUri": "URI", "ledgers": "1,a"}, "ledgers"),
    ({"metadataServiceUri": "URI", "log": "x", "digestType": "md5"}, "digestType"),
]


@pytest.mark.parametrize(("options", "named"), BAD_READS)
def test_bad_read_options_fail_at_planning(spark, cluster, options, named) -> None:
    uri = cluster.metadata_service_uri
    r = spark.read.format("bkledger")
    for key, value in options.items():
        r = r.option(key, value.replace("URI", uri))
    with pytest.raises(Exception, match=named):
        r.load()


def test_latest_start_is_refused_for_batch_reads(spark, cluster, bk) -> None:
    """Like Kafka: a batch read cannot start at "latest" (a stream can); the query fails when planned."""
    log = fresh("latest")
    w = bk.open_log_writer(log)
    w.append(b"x")
    w.close()
    with pytest.raises(Exception, match="startingPositions"):
        reader(spark, cluster.metadata_service_uri, log=log, startingPositions="latest").count()


def test_missing_log_fails_at_planning(spark, cluster) -> None:
    with pytest.raises(Exception, match=LogNotFoundError.__name__):
        reader(spark, cluster.metadata_service_uri, log=fresh("missing"))


def test_bad_writes_fail_at_planning(spark, cluster, bk) -> None:
    uri, log = cluster.metadata_service_uri, fresh("badwrite")
    good = spark.range(3).selectExpr("cast(id as string) as value")
    cases = [
        (lambda: good.write.format("bkledger").option("metadataServiceUri", uri).option("log", log)
         .mode("overwrite").save(), "append-only"),
        (lambda: append(spark.range(3).selectExpr("id as value"), uri, log), "value"),
        (lambda: append(good.selectExpr("value", "1 as key"), uri, log), "key"),
        (lambda: append(good.selectExpr("value", "value as other"), uri, log), "other"),
        (lambda: append(good, uri, log, writeQuorum="4"), "writeQuorum"),
        (lambda: append(good, uri, log, compression="zstd"), "compression"),
        (lambda: good.write.format("bkledger").option("metadataServiceUri", uri).option("ledgers", "1")
         .mode("append").save(), "ledgers"),
    ]
    for run, named in cases:
        with pytest.raises(Exception, match=named):
            run()
    with pytest.raises(LogNotFoundError):
        bk.log_metadata(log)


def test_many_one_entry_ledgers_read_in_few_partitions_in_order(spark, cluster, bk) -> None:
    """300 one-entry ledgers (what streaming micro-batches leave): planned from the log's own records into
    one partition by default, a few with maxEntriesPerPartition, rows in log order either way."""
    from bkledger.client.log.logs import append_ledgers

    uri, log = cluster.metadata_service_uri, fresh("tiny")
    ids = []
    for i in range(300):
        lh = bk.create_ledger(2, 2, 2)
        lh.add_entry(b"r%03d" % i)
        lh.close()
        ids.append(lh.ledger_id)
    for start in range(0, 300, 100):
        assert append_ledgers(bk, log, ids[start:start + 100])
    default = reader(spark, uri, log=log)
    assert default.rdd.getNumPartitions() == 1
    rows = default.collect()
    assert [bytes(r.value) for r in rows] == [b"r%03d" % i for i in range(300)]
    assert [(r.ledger_id, r.entry_id) for r in rows] == [(lid, 0) for lid in ids]
    capped = reader(spark, uri, log=log, maxEntriesPerPartition="64")
    assert capped.rdd.getNumPartitions() == 5
    assert [bytes(r.value) for r in capped.collect()] == [b"r%03d" % i for i in range(300)]
    assert reader(spark, uri, log=log, targetPartitionBytes="400").rdd.getNumPartitions() == 300 // 100
    bk.delete_ledger(ids[150])        # gone after the log listed it: the task reports data loss, or skips it
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, uri, log=log).count()
    kept = reader(spark, uri, log=log, failOnDataLoss="false").collect()
    assert [bytes(r.value) for r in kept] == [b"r%03d" % i for i in range(300) if i != 150]


def one_entry_ledger(bk, custom: dict[str, bytes]) -> int:
    lh = bk.create_ledger(2, 2, 2, custom_metadata=custom)
    lh.add_entry(b"x")
    lh.close()
    return lh.ledger_id


def metadata_reads(monkeypatch) -> list[int]:
    """The ledger ids whose metadata `MetadataStore.read_ledgers` is asked for from now on, in order."""
    from bkledger.client.meta.store import MetadataStore

    read: list[int] = []
    real = MetadataStore.read_ledgers

    def counting(store: MetadataStore, ledger_ids: list[int]) -> list:
        read.extend(ledger_ids)
        return real(store, ledger_ids)

    monkeypatch.setattr(MetadataStore, "read_ledgers", counting)
    return read


def test_schema_discovery_reads_each_ledgers_metadata_once_per_process(cluster, bk, monkeypatch) -> None:
    """A log of bare ledgers whose envelope versions the log does not record (written before it did): the
    first discovery reads every ledger's metadata (none carries the record envelope), a second reads none,
    and a ledger with the envelope appended since is found by reading it alone: the schema gains `key`
    and `timestamp`."""
    from bkledger.client.log.core import meta as lm
    from bkledger.client.log.logs import append_ledgers
    from bkledger.spark_connector import envelope as env
    from bkledger.spark_connector.batch_reader import discover_schema
    from bkledger.spark_connector.read_options import parse_read_options

    uri, log = cluster.metadata_service_uri, fresh("schema")
    monkeypatch.setattr(lm, "recorded_envelope", lambda custom: None)      # as an older writer did
    bare = [one_entry_ledger(bk, {}) for _ in range(40)]
    assert append_ledgers(bk, log, bare)
    read = metadata_reads(monkeypatch)
    opts = parse_read_options({"metadataServiceUri": uri, "log": log})
    assert discover_schema(opts).fieldNames() == ["log", "ledger_id", "entry_id", "value"]
    assert sorted(read) == bare[1:]           # the first one's metadata is read to check the password anyway
    assert discover_schema(opts).fieldNames() == ["log", "ledger_id", "entry_id", "value"] and len(read) == 39
    keyed = one_entry_ledger(bk, env.custom_metadata(1))
    assert append_ledgers(bk, log, [keyed])
    assert discover_schema(opts).fieldNames() == ["log", "ledger_id", "entry_id", "value", "key", "timestamp"]
    assert read[39:] == [keyed]


def test_schema_discovery_of_a_log_that_records_envelopes_reads_no_ledgers_metadata(
        cluster, bk, monkeypatch) -> None:
    """Ledgers appended by a job and by a LogWriter, and ledgers of an older log that compaction copied:
    the log records each one's envelope version, so discovering the schema reads no ledger's metadata
    through the batch path (the first ledger's is read alone, to check the password) and finds the
    envelope from the records alone."""
    from bkledger.client.log import logs
    from bkledger.client.log.compaction import compact_log
    from bkledger.spark_connector import batch_reader
    from bkledger.spark_connector import envelope as env
    from bkledger.spark_connector.batch_reader import discover_schema
    from bkledger.spark_connector.read_options import parse_read_options

    uri, log = cluster.metadata_service_uri, fresh("recorded")
    with monkeypatch.context() as older:
        older.setattr(logs.lm, "recorded_envelope", lambda custom: None)
        assert logs.append_ledgers(bk, log, [one_entry_ledger(bk, {}) for _ in range(30)])
    assert {led.envelope for led in bk.log_metadata(log).ledgers} == {None}
    with bk.open_log_writer(log) as writer:
        writer.append(b"y")
    assert logs.append_ledgers(bk, log, [one_entry_ledger(bk, {})])   # with the writer's: the tail compaction keeps
    assert compact_log(bk, log, grace_s=0).replaced == 30
    assert logs.append_ledgers(bk, log, [one_entry_ledger(bk, env.custom_metadata(1))])
    recorded = [led.envelope for led in bk.log_metadata(log).ledgers]
    assert None not in recorded and recorded[-1] == 1 and set(recorded[:-1]) == {0}
    read = metadata_reads(monkeypatch)

    def no_views(*args: object) -> None:
        raise AssertionError("the log's records tell the schema: no ledger views are built")

    monkeypatch.setattr(batch_reader, "discover", no_views)
    opts = parse_read_options({"metadataServiceUri": uri, "log": log})
    assert discover_schema(opts).fieldNames() == ["log", "ledger_id", "entry_id", "value", "key", "timestamp"]
    assert read == []


def test_schema_discovery_from_the_logs_records_still_checks_the_password(cluster, bk) -> None:
    """The envelope versions come from the log's records, but the first ledger's metadata is read all the
    same: a wrong password fails at `load()` with the typed error, as it does without recorded versions."""
    from bkledger.client.errors import BadPasswordError
    from bkledger.client.log import logs
    from bkledger.spark_connector.batch_reader import discover_schema
    from bkledger.spark_connector.read_options import parse_read_options

    uri, log = cluster.metadata_service_uri, fresh("recorded-pw")
    assert logs.append_ledgers(bk, log, [one_entry_ledger(bk, {}) for _ in range(3)])
    assert {led.envelope for led in bk.log_metadata(log).ledgers} == {0}
    assert discover_schema(parse_read_options({"metadataServiceUri": uri, "log": log})).fieldNames() == [
        "log", "ledger_id", "entry_id", "value"]
    with pytest.raises(BadPasswordError, match="wrong password"):
        discover_schema(parse_read_options({"metadataServiceUri": uri, "log": log, "password": "not-it"}))
