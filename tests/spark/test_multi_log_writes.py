"""Per-row destinations: a DataFrame's column log names each row's log (option log overrides it, as Kafka's
topic option overrides the topic column), and one ZooKeeper transaction commits a job, or a micro-batch
with its markers, to all its logs. Real local SparkSession, real ZooKeeper, real bookies; the killed
driver is a real process (tests/spark/multi_log_driver.py) killed with SIGKILL.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from bkledger.client import BookKeeper
from bkledger.client.log.logs import JOB_KEY, LOG_KEY, delete_uncommitted, uncommitted_job_ledgers
from bkledger.spark_connector.batch_reader import read_schema
from bkledger.spark_connector.log_commit import commit_to_logs

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[2]
WAIT_S = 120


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def routed_df(spark, logs: list[str], start: int, end: int, partitions: int = 2):
    """Rows start..end-1; row i goes to logs[i % len(logs)]."""
    names = ", ".join(f"'{n}'" for n in logs)
    return spark.range(start, end, numPartitions=partitions).selectExpr(
        "cast(cast(id as string) as binary) as value",
        f"element_at(array({names}), cast(id % {len(logs)} as int) + 1) as log")


def append(df, uri: str, **options: str) -> None:
    w = df.write.format("bkledger").option("metadataServiceUri", uri)
    for key, value in options.items():
        w = w.option(key, value)
    w.mode("append").save()


def holds_records(bk: BookKeeper, log: str) -> bool:
    """Whether any of a job's records is visible in `log`. A job's tasks make a missing log (empty) to give it
    its own key before they write ledgers for it (issue 41: no public default key), so a failed job may
    leave an empty log behind, but never a ledger or a record of its own."""
    return log in bk.list_logs() and bool(bk.log_metadata(log).ledger_ids)


def values(bk: BookKeeper, log: str) -> list[int]:
    out = []
    for ledger_id in bk.log_metadata(log).ledger_ids:
        rh = bk.open_ledger(ledger_id, None, recovery=False)   # the log's own key
        if rh.last_entry_id >= 0:
            out += [int(e.payload) for e in rh.read_entries(0, rh.last_entry_id)]
    return out


def head_zxids(uri: str, bk: BookKeeper, logs: list[str]) -> set[int]:
    """The transaction id that last changed each log's head znode."""
    zk = KazooClient(hosts=uri.removeprefix("zk://").split("/")[0])
    zk.start(timeout=30)
    try:
        return {zk.get(bk.store._abs(bk.store.layout.log(n)))[1].mzxid for n in logs}
    finally:
        zk.stop()
        zk.close()


def job_ledgers(bk: BookKeeper, log: str) -> list[int]:
    """Ledgers tagged as written by a job for `log` that the log does not list."""
    listed = set(bk.log_metadata(log).ledger_ids) if log in bk.list_logs() else set()
    out = []
    for ledger_id in bk.list_ledgers():
        custom = bk.ledger_metadata(ledger_id).custom_metadata
        if custom.get(LOG_KEY) == log.encode() and JOB_KEY in custom and ledger_id not in listed:
            out.append(ledger_id)
    return out


# ---- batch append ------------------------------------------------------------------------------------
def test_rows_go_to_the_log_their_column_names_in_one_transaction(spark, cluster, bk: BookKeeper) -> None:
    uri = cluster.metadata_service_uri
    old, new1, new2 = fresh("old"), fresh("new1"), fresh("new2")
    with bk.open_log_writer(old) as w:                                   # an existing log with 3 records
        for i in (1000, 1001, 1002):
            w.append(b"%d" % i)
    append(routed_df(spark, [old, new1, new2], 0, 600), uri)
    got = values(bk, old)
    assert got[:3] == [1000, 1001, 1002] and sorted(got[3:]) == list(range(0, 600, 3))
    for offset, name in ((1, new1), (2, new2)):
        assert sorted(values(bk, name)) == list(range(offset, 600, 3))
        meta = bk.log_metadata(name)
        assert len(meta.ledgers) == 2                                    # one ledger per task and log
        assert {bk.ledger_metadata(i).custom_metadata[LOG_KEY] for i in meta.ledger_ids} == {name.encode()}
    assert len(head_zxids(uri, bk, [old, new1, new2])) == 1, "the three logs changed in ONE transaction"
    assert not job_ledgers(bk, old) + job_ledgers(bk, new1) + job_ledgers(bk, new2)


def test_log_option_overrides_the_column(spark, cluster, bk: BookKeeper) -> None:
    uri, target, ignored = cluster.metadata_service_uri, fresh("target"), fresh("ignored")
    append(routed_df(spark, [ignored, ignored + "-2"], 0, 100), uri, log=target)
    assert sorted(values(bk, target)) == list(range(100))
    assert not holds_records(bk, ignored) and not holds_records(bk, ignored + "-2")


def test_null_log_fails_naming_the_row_and_leaves_nothing(spark, cluster, bk: BookKeeper) -> None:
    uri, a, b = cluster.metadata_service_uri, fresh("a"), fresh("b")
    before = set(bk.list_ledgers())
    df = spark.range(0, 200, numPartitions=2).selectExpr(
        "cast(cast(id as string) as binary) as value", f"CASE WHEN id = 150 THEN NULL WHEN id % 2 = 0 "
        f"THEN '{a}' ELSE '{b}' END as log")
    with pytest.raises(Exception, match=r"column log is null in row 50 of partition 1"):
        append(df, uri)
    assert not holds_records(bk, a) and not holds_records(bk, b)         # the other task's ledgers: not listed
    deadline = time.monotonic() + 30
    while set(bk.list_ledgers()) - before and time.monotonic() < deadline:
        time.sleep(0.2)                                                    # abort deletes; bounded wait
    assert not set(bk.list_ledgers()) - before

    with pytest.raises(Exception, match="'/' at index 3 is not allowed"):   # fails in its task, aborted
        append(routed_df(spark, [a, "bad/name"], 0, 10), uri)
    assert not holds_records(bk, a) and not job_ledgers(bk, a) and not job_ledgers(bk, "bad/name")

    no_dest = spark.range(0, 3).selectExpr("cast(cast(id as string) as binary) as value")
    with pytest.raises(Exception, match="bkledger option log: is required"):
        append(no_dest, uri)
    with pytest.raises(Exception, match="column log must be a string"):
        append(no_dest.selectExpr("value", "1 as log"), uri)


def test_commit_re_homes_overtaken_ledgers_in_every_log(cluster, bk: BookKeeper) -> None:
    """Two jobs write to logs A and B with interleaved ledger ids; the later job commits first, so the
    earlier job's ledgers are below both tails: its commit copies them above and lands in both at once."""
    a, b = fresh("ra"), fresh("rb")
    made = []
    for i, (name, job) in enumerate([(a, b"1"), (b, b"1"), (a, b"2"), (b, b"2")]):
        lh = bk.create_ledger(3, 2, 2, custom_metadata={LOG_KEY: name.encode(), JOB_KEY: job})
        lh.add_entry(b"%d" % i)
        lh.close()
        made.append(lh.ledger_id)
    assert commit_to_logs(bk, {a: [made[2]], b: [made[3]]}, password=b"", fence_live_writer=False)
    assert commit_to_logs(bk, {a: [made[0]], b: [made[1]]}, password=b"", fence_live_writer=False)
    assert values(bk, a) == [2, 0] and values(bk, b) == [3, 1]
    for name in (a, b):
        ids = bk.log_metadata(name).ledger_ids
        assert ids == sorted(ids) and ids[1] > max(made)
    assert len(head_zxids(cluster.metadata_service_uri, bk, [a, b])) == 1


def test_concurrent_commits_to_the_same_new_logs_all_land_whole(cluster, bk: BookKeeper) -> None:
    """Jobs committing at once to the same two logs, which none of them finds existing: one creates
    them, the others lose the race (a created head, a moved version, a ledger overtaken) and retry
    their whole transaction; every job lands in both logs, once, in one transaction each."""
    a, b = fresh("ca"), fresh("cb")
    jobs = []
    for j in range(4):
        ids = {}
        for name in (a, b):
            lh = bk.create_ledger(3, 2, 2, custom_metadata={LOG_KEY: name.encode(), JOB_KEY: b"%d" % j})
            lh.add_entry(b"%d" % j)
            lh.close()
            ids[name] = [lh.ledger_id]
        jobs.append(ids)
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        done = [pool.submit(commit_to_logs, bk, ids, password=b"", fence_live_writer=False) for ids in jobs]
        assert all(f.result(WAIT_S) for f in done)
    assert sorted(values(bk, a)) == sorted(values(bk, b)) == [0, 1, 2, 3]
    assert values(bk, a) == values(bk, b), "two logs committed in different job orders"
    assert not job_ledgers(bk, a) and not job_ledgers(bk, b)


# ---- a driver killed between its tasks and its transaction ---------------------------------------
def test_driver_killed_before_the_transaction_leaves_nothing_in_any_log(cluster, bk: BookKeeper,
                                                                         tmp_path: Path) -> None:
    uri, logs = cluster.metadata_service_uri, [fresh("k1"), fresh("k2")]
    ready = tmp_path / "ready.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.Popen([sys.executable, "-m", "tests.spark.multi_log_driver", uri, str(ready), *logs],
                            cwd=REPO, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + WAIT_S
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), f"the driver never reached its commit: {proc.poll()}"
        os.killpg(proc.pid, signal.SIGKILL)                    # the driver, its JVM and their children
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    written = json.loads(ready.read_text())
    commit_pid = written["commit_pid"]
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{commit_pid}") and time.monotonic() < deadline:
        time.sleep(0.05)                                       # the commit worker follows its driver
    assert not os.path.exists(f"/proc/{commit_pid}")

    assert sorted(written["ledgers"]) == sorted(logs)
    assert not any(holds_records(bk, log) for log in logs), "a log's records (or part of the job) became visible"
    left = {name: sorted(job_ledgers(bk, name)) for name in logs}
    assert left == {name: sorted(ids) for name, ids in written["ledgers"].items()}
    found = uncommitted_job_ledgers(bk, older_than_s=0.0)      # what `bkledger shell sweepjobs` finds
    ours = sorted(f.ledger_id for f in found if f.log in logs)
    assert ours == sorted(i for ids in left.values() for i in ids)
    delete_uncommitted(bk, [f for f in found if f.log in logs])
    assert not job_ledgers(bk, logs[0]) and not job_ledgers(bk, logs[1])


# ---- the exactly-once sink across several logs ---------------------------------------------------
def crashing_sink(crash_batch: int, when: str) -> type:
    """format("bkledger_crash_multi"): bkledger whose sink commit of `crash_batch` fails as if the driver
    died (no abort) before its transaction ("before": the ledgers are written, no log lists them) or
    after it ("after": the transaction landed, the reply is lost): Spark replays that batch."""
    from bkledger.spark_connector.datasource import BkLedgerDataSource
    from bkledger.spark_connector.stream_sink import BkLedgerStreamWriter, stream_writer

    class CrashingWriter(BkLedgerStreamWriter):
        def commit(self, messages, batchId) -> None:
            if batchId != crash_batch or when == "after":
                super().commit(messages, batchId)
            if batchId == crash_batch:
                raise RuntimeError(f"injected crash {when} the transaction of batch {batchId}")

        def abort(self, messages, batchId) -> None:
            if batchId != crash_batch:
                super().abort(messages, batchId)

    class CrashingSource(BkLedgerDataSource):
        @classmethod
        def name(cls) -> str:
            return "bkledger_crash_multi"

        def streamWriter(self, schema, overwrite):
            inner = stream_writer(self.options, schema, overwrite)
            return CrashingWriter(inner.opts, inner.tasks, inner.options)

    return CrashingSource


@pytest.mark.parametrize("when", ["before", "after"])
def test_replayed_micro_batch_lands_once_in_each_log(spark, cluster, bk: BookKeeper, tmp_path: Path,
                                                     when: str) -> None:
    uri, src, even, odd = cluster.metadata_service_uri, fresh("src"), fresh("even"), fresh("odd")
    with bk.open_log_writer(src, roll_entries=100) as w:
        for f in [w.append_async(b"%d" % i) for i in range(200)]:
            f.result(60)
    checkpoint = str(tmp_path / "ck")
    spark.dataSource.register(crashing_sink(0, when))

    def start(fmt: str):
        df = (spark.readStream.format("bkledger").schema(read_schema(False)).option("metadataServiceUri", uri)
              .option("log", src).option("maxEntriesPerTrigger", "100").load()
              .selectExpr("value", f"CASE WHEN cast(cast(value as string) as int) % 2 = 0 THEN '{even}' "
                                   f"ELSE '{odd}' END as log"))
        return (df.writeStream.format(fmt).option("metadataServiceUri", uri)
                .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())

    q = start("bkledger_crash_multi")
    with pytest.raises(Exception, match="injected crash"):
        q.awaitTermination(WAIT_S)
    if when == "after":
        assert sorted(values(bk, even)) == list(range(0, 100, 2))        # batch 0, in both logs
        assert sorted(values(bk, odd)) == list(range(1, 100, 2))
        assert bk.log_metadata(even).committed_batches == bk.log_metadata(odd).committed_batches
        assert len(head_zxids(uri, bk, [even, odd])) == 1
    else:
        assert not holds_records(bk, even) and not holds_records(bk, odd)  # nothing visible anywhere
        assert job_ledgers(bk, even) and job_ledgers(bk, odd)            # the dead run's ledgers

    q = start("bkledger")                                                 # replays batch 0, then batch 1
    assert q.awaitTermination(WAIT_S)
    assert q.exception() is None
    assert sorted(values(bk, even)) == list(range(0, 200, 2)), "each record once in its log"
    assert sorted(values(bk, odd)) == list(range(1, 200, 2))
    (sink, last), = bk.log_metadata(even).committed_batches.items()
    assert last == 1 and bk.log_metadata(odd).committed_batches == {sink: 1}
    assert not job_ledgers(bk, even) and not job_ledgers(bk, odd), "the replay's ledgers were not deleted"
