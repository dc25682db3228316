"""The connector in real drivers: any thread, several sessions, a live LogWriter beside Spark appends,
concurrent appends to one log. Real local SparkSession, real ZooKeeper, real bookies.

Threads: before the fix, DataFrameWriter.save and DataStreamWriter.start from a thread other than the
main one failed with [DATA_SOURCE_NOT_FOUND] (the thread's JVM side had no active session, see
spark_connector.active_session); importing pyspark_bkledger in the driver fixes every entry point.
"""

from __future__ import annotations

import concurrent.futures
import threading
import uuid
from pathlib import Path

import pytest

import pyspark_bkledger  # noqa: F401 - what a threaded driver does once (see its docstring)
from bkledger.client import BookKeeper, LogFencedError, NoSuchLedgerError
from bkledger.client.log.logs import JOB_KEY, LOG_KEY
from bkledger.spark_connector.batch_reader import read_schema
from bkledger.spark_connector.batch_writer import sweep_tagged
from bkledger.spark_connector.log_commit import commit_ledgers
from tests.integration.bookie_util import wait_for

pytestmark = pytest.mark.spark
WAIT_S = 300


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def values_df(spark, start: int, end: int, partitions: int = 2):
    return spark.range(start, end, numPartitions=partitions).selectExpr(
        "cast(cast(id as string) as binary) as value")


def append(df, uri: str, log: str, **options: str) -> None:
    w = df.write.format("bkledger").option("metadataServiceUri", uri).option("log", log)
    for key, value in options.items():
        w = w.option(key, value)
    w.mode("append").save()


def read_values(spark, uri: str, log: str) -> list[int]:
    df = spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", log).load()
    return sorted(int(bytes(r.value)) for r in df.select("value").collect())


def in_thread(fn, *args):
    """Run fn in a fresh (non-main) thread and return its result (or raise its error)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result(WAIT_S)


def stream_copy(spark, uri: str, source: str, target: str, checkpoint: Path) -> None:
    """Streaming read of `source` into the streaming sink on `target`, Trigger.AvailableNow."""
    q = (spark.readStream.format("bkledger").schema(read_schema(False)).option("metadataServiceUri", uri)
         .option("log", source).load().select("value")
         .writeStream.format("bkledger").option("metadataServiceUri", uri).option("log", target)
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert q.awaitTermination(WAIT_S), "the streaming copy did not finish"
    assert q.exception() is None


def all_paths(spark, uri: str, log: str, checkpoint: Path) -> tuple[list[int], list[int]]:
    append(values_df(spark, 0, 300), uri, log)
    append(values_df(spark, 300, 400), uri, log)
    stream_copy(spark, uri, log, log + "-copy", checkpoint)
    return read_values(spark, uri, log), read_values(spark, uri, log + "-copy")


def test_batch_and_streaming_from_a_worker_thread(spark, cluster, tmp_path: Path) -> None:
    """Batch append and read, stream source and stream sink, all started from a non-main thread."""
    uri, log = cluster.metadata_service_uri, fresh("thread")
    assert threading.current_thread() is threading.main_thread()
    direct, copied = in_thread(all_paths, spark, uri, log, tmp_path / "ck")
    assert direct == list(range(400)) and copied == list(range(400))


def test_several_sessions_of_one_driver(spark, cluster, tmp_path: Path) -> None:
    """newSession() shares the SparkContext but not the session state; each works, also from threads."""
    uri = cluster.metadata_service_uri
    other = spark.newSession()
    logs = [fresh("s1"), fresh("s2")]
    got = in_thread(all_paths, other, uri, logs[1], tmp_path / "ck2")
    assert got == (list(range(400)), list(range(400)))
    append(values_df(spark, 0, 10), uri, logs[0])              # the first session, main thread, after that
    assert read_values(spark, uri, logs[0]) == list(range(10))
    assert read_values(other, uri, logs[0]) == list(range(10))


def test_spark_append_beside_a_live_log_writer(spark, cluster, bk: BookKeeper) -> None:
    """A Spark append must not silently fence the application's LogWriter: it fails fast naming the way
    out; with fenceLiveWriter=true it takes over and the writer's next append is fenced."""
    uri, log = cluster.metadata_service_uri, fresh("shared")
    writer = bk.open_log_writer(log)
    writer.append(b"-1")
    with pytest.raises(Exception, match="LiveLogWriterError") as err:
        append(values_df(spark, 0, 50), uri, log)
    assert "fenceLiveWriter=true" in str(err.value)
    second = writer.append(b"-2")
    assert second.ledger_id == writer.ledger_id                      # not fenced, still the writer
    tail = bk.open_ledger(second.ledger_id, None, recovery=False)          # a reader sees it once the idle writer's
    wait_for(lambda: tail.read_last_add_confirmed() >= second.entry_id, 10, "the explicit LAC")  # LAC says so
    assert read_values(spark, uri, log) == [-2, -1]                  # the refused job left nothing
    assert not [i for i in bk.list_ledgers() if i > writer.ledger_id
                and bk.ledger_metadata(i).custom_metadata.get(JOB_KEY)]

    append(values_df(spark, 0, 50), uri, log, fenceLiveWriter="true")
    with pytest.raises(LogFencedError):
        writer.append(b"-3")
    assert read_values(spark, uri, log) == [-2, -1, *range(50)]
    writer.close()

    writer = bk.open_log_writer(log)            # closed writers hold no lease: Spark appends go through
    writer.append(b"50")
    writer.close()
    append(values_df(spark, 51, 60), uri, log)
    assert read_values(spark, uri, log) == [-2, -1, *range(60)]


def test_concurrent_appends_to_one_log_from_threads(spark, cluster, bk: BookKeeper) -> None:
    """Jobs appending to one log at once (their ledgers interleave): each lands whole, exactly once."""
    uri, log = cluster.metadata_service_uri, fresh("together")
    jobs, rows = 4, 200
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(append, values_df(spark, j * rows, (j + 1) * rows, 3), uri, log)
                   for j in range(jobs)]
        for fut in futures:
            fut.result(WAIT_S)
    assert read_values(spark, uri, log) == list(range(jobs * rows))
    meta = bk.log_metadata(log)
    assert meta.entries == jobs * rows and meta.ledger_ids == sorted(meta.ledger_ids)
    listed = set(meta.ledger_ids)
    leftovers = [i for i in bk.list_ledgers()
                 if i not in listed and bk.ledger_metadata(i).custom_metadata.get(LOG_KEY) == log.encode()]
    assert leftovers == []                      # re-homed originals and losing copies were deleted


def test_commit_re_homes_ledgers_that_a_concurrent_commit_overtook(cluster, bk: BookKeeper) -> None:
    """Two jobs' ledgers interleave (A: 1st, 3rd; B: 2nd, 4th); A commits first, so B's first ledger is
    below the log's tail: B's commit copies it above the tail and lands whole, in order, exactly once."""
    log = fresh("overtaken")
    made = []
    for i in range(4):
        lh = bk.create_ledger(3, 2, 2, custom_metadata={LOG_KEY: log.encode(), JOB_KEY: b"AB"[i % 2:i % 2 + 1]})
        for k in range(3):
            lh.add_entry(b"%d-%d" % (i, k))
        lh.close()
        made.append(lh.ledger_id)
    a, b = made[0::2], made[1::2]
    assert commit_ledgers(bk, log, a, password=b"", fence_live_writer=False)
    assert commit_ledgers(bk, log, b, password=b"", fence_live_writer=False)
    meta = bk.log_metadata(log)
    assert meta.ledger_ids[:2] == a and meta.ledger_ids[2] == b[1] and meta.ledger_ids[3] > b[1]
    copy = bk.open_ledger(meta.ledger_ids[3], None, recovery=False)
    assert [e.payload for e in copy.read_entries(0, 2)] == [b"1-0", b"1-1", b"1-2"]
    assert copy.metadata.custom_metadata[JOB_KEY] == b"B"
    with pytest.raises(NoSuchLedgerError):                 # the overtaken original is gone
        bk.ledger_metadata(b[0])
    assert meta.entries == 12


class LogReadCounter:
    """The client, counting whole-log reads (a million-ledger log takes seconds to read)."""

    def __init__(self, bk: BookKeeper) -> None:
        self._bk, self.log_reads = bk, 0

    def log_metadata(self, name: str):
        self.log_reads += 1
        return self._bk.log_metadata(name)

    def __getattr__(self, attr: str):
        return getattr(self._bk, attr)


def test_sweep_reads_the_log_only_for_a_tagged_unlisted_ledger(cluster, bk: BookKeeper) -> None:
    """A commit's sweep reads the ledgers' tags first and the log only when one of them is this job's: the
    common commit (no failed task attempt) never reads the whole log; a listed ledger is never deleted."""
    log = fresh("sweep")
    made = {}
    for job in ("listed", "left", "other"):
        lh = bk.create_ledger(3, 2, 2, custom_metadata={LOG_KEY: log.encode(), JOB_KEY: job.encode()})
        lh.add_entry(job.encode())
        lh.close()
        made[job] = lh.ledger_id
    bk.append_ledgers(log, [made["listed"]])
    counter = LogReadCounter(bk)
    floor = made["listed"] - 1                 # only this test's ledgers are looked at
    assert sweep_tagged(counter, lambda job: job == b"nobody", set(), above=floor) == []  # type: ignore[arg-type]
    assert counter.log_reads == 0
    ours = (b"listed", b"left")
    assert sweep_tagged(counter, lambda job: job in ours, set(), above=floor) == [made["left"]]  # type: ignore[arg-type]
    assert counter.log_reads == 1
    with pytest.raises(NoSuchLedgerError):
        bk.ledger_metadata(made["left"])
    assert bk.ledger_metadata(made["listed"]) and bk.ledger_metadata(made["other"])
