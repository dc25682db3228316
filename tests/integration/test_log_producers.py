"""Many producers per log (issue 44 item 2) on real bookies and ZooKeeper: producers, a Spark-style
append and retries of a commit write one log at once, every record exactly once (R27: every change of a
log is one CAS); a producer killed with -9 loses nothing it acknowledged and its leftovers are swept."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from pathlib import Path

import pytest

from bkledger.client import BookKeeper
from bkledger.client.errors import NoSuchLedgerError
from bkledger.client.log.core import producers as pr
from bkledger.client.log.core.meta import Position
from bkledger.client.log.logs import JOB_KEY, LOG_KEY, delete_uncommitted, uncommitted_job_ledgers
from bkledger.client.log.producer import Commit, Written, commit_batch
from bkledger.spark_connector import envelope as env
from bkledger.spark_connector.log_commit import commit_ledgers
from tests.integration.zk_drop_proxy import DropProxy

ROOT = Path(__file__).resolve().parents[2]
PRODUCERS = 4
PER_PRODUCER = 400
SPARK_JOBS = 6
T0_MS = 1_700_000_000_000        # ms since the epoch


@pytest.fixture
def name() -> str:
    return f"prod-{uuid.uuid4().hex[:8]}"


def read_all(bk: BookKeeper, name: str) -> list[tuple[Position, bytes | None, bytes]]:
    """(position, key, value) of every record of the log, in order."""
    out = []
    with bk.open_log_reader(name) as reader:
        for record in reader.read(timeout=2.0):
            key, _, value = env.decode(record.payload)
            out.append((record.position, key, value))
    return out


def spark_job(bk: BookKeeper, name: str, job: int) -> int:
    """What a Spark append does: a CLOSED ledger written for the log (its key, enveloped records), committed
    in one CAS, re-homed if another commit overtook it."""
    password = bk.log_ledger_password(name)
    custom = {**env.custom_metadata(env.V1), JOB_KEY: f"spark-{job}".encode(), LOG_KEY: name.encode()}
    lh = bk.create_ledger(3, 2, 2, password=password, custom_metadata=custom)
    for i in range(50):
        lh.add_entry(env.encode(b"spark", None, b"spark-%d-%03d" % (job, i)))
    lh.close()
    assert commit_ledgers(bk, name, [lh.ledger_id], password=password, fence_live_writer=False)
    return lh.ledger_id


def test_four_producers_and_spark_appends_write_one_log_exactly_once(cluster, name: str):
    """R27: 4 producers (own clients, small batches) and Spark-style appends commit into one log at once,
    no writer fences another; every record is there once, at the position its future gave, and each
    producer's records in the order sent."""
    clients = [BookKeeper(cluster.metadata_service_uri) for _ in range(PRODUCERS + 1)]
    try:
        futures: dict[bytes, Future[Position]] = {}
        errors: list[BaseException] = []

        def produce(index: int) -> None:
            try:
                with clients[index].open_log_producer(name, f"p{index}", max_records=25, linger_ms=2) as producer:
                    for i in range(PER_PRODUCER):
                        value = b"p%d-%05d" % (index, i)
                        futures[value] = producer.send(value, key=b"p%d" % index, timestamp=1_700_000_000_000 + i)
            except BaseException as exc:
                errors.append(exc)

        def spark() -> None:
            try:
                for job in range(SPARK_JOBS):
                    spark_job(clients[PRODUCERS], name, job)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=produce, args=(i,)) for i in range(PRODUCERS)]
        threads.append(threading.Thread(target=spark))
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
            assert not t.is_alive()
        assert errors == []
        positions = {value: fut.result(0) for value, fut in futures.items()}
    finally:
        for c in clients:
            c.close()
    with BookKeeper(cluster.metadata_service_uri) as bk:
        records = read_all(bk, name)
        meta = bk.log_metadata(name)
    values = [value for _, _, value in records]
    assert len(values) == len(set(values)) == PRODUCERS * PER_PRODUCER + SPARK_JOBS * 50
    at = {value: position for position, _, value in records}
    assert all(at[value] == position for value, position in positions.items())
    for index in range(PRODUCERS):
        mine = [v for v in values if v.startswith(b"p%d-" % index)]
        assert mine == [b"p%d-%05d" % (index, i) for i in range(PER_PRODUCER)]
    assert set(pr.producers(meta)) == {f"p{i}" for i in range(PRODUCERS)}
    assert all(led.sealed for led in meta.ledgers)


def test_a_retried_commit_lands_once(bk: BookKeeper, name: str):
    """R27: a commit whose answer was lost is asked again after another producer's commit landed
    (what a ZooKeeper connection loss after the CAS leads to): the log lists the batch once, the retry
    returns the ledger it lists and deletes nothing of it."""
    password = bk.log_ledger_password(name)

    def ledger(*values: bytes) -> int:
        lh = bk.create_ledger(3, 2, 2, password=password, custom_metadata=env.custom_metadata(env.V1))
        for value in values:
            lh.add_entry(env.encode(None, None, value))
        lh.close()
        return lh.ledger_id

    first = ledger(b"a0", b"a1")
    assert commit_batch(bk, Commit(name, "pa", 0, password), first) == first
    other = ledger(b"b0")
    assert commit_batch(bk, Commit(name, "pb", 0, password), other) == other
    before = bk.log_metadata(name).ledger_ids
    retry_copy = ledger(b"a0", b"a1")                      # a retry that re-wrote its batch: still once
    assert commit_batch(bk, Commit(name, "pa", 0, password), first) == first
    assert commit_batch(bk, Commit(name, "pa", 0, password), retry_copy) == first
    assert bk.log_metadata(name).ledger_ids == before == [first, other]
    assert [v for _, _, v in read_all(bk, name)] == [b"a0", b"a1", b"b0"]
    assert bk.ledger_metadata(first).last_entry_id == 1     # the listed ledger was not deleted
    with pytest.raises(NoSuchLedgerError):
        bk.ledger_metadata(retry_copy)                      # the retry's unlisted ledger was


def test_an_overtaken_batch_is_rewritten_from_memory_once(bk: BookKeeper, name: str):
    """R27: a producer's ledger that another commit overtook (created before the ledger that committed
    first) is not read back from the bookies and copied: the producer writes the batch again from memory
    (`rewrite`), once, and the log lists that ledger above the other; the overtaken one is deleted."""
    password = bk.log_ledger_password(name)

    def written(value: bytes) -> Written:
        lh = bk.create_ledger(3, 2, 2, password=password, custom_metadata=env.custom_metadata(env.V1))
        lh.add_entry(env.encode(None, None, value))
        lh.close()
        md = lh.metadata
        return Written((lh.ledger_id, md.last_entry_id, md.length, md.ctime_ms), env.V1)

    mine = written(b"mine")
    other = written(b"other")
    assert commit_batch(bk, Commit(name, "pb", 0, password), other.ledger_id) == other.ledger_id
    rewrites: list[int] = []

    def rewrite() -> Written:
        again = written(b"mine")
        rewrites.append(again.ledger_id)
        return again

    listed = commit_batch(bk, Commit(name, "pa", 0, password), mine.ledger_id, 30.0, mine, rewrite)
    assert rewrites == [listed] and listed > other.ledger_id
    assert bk.log_metadata(name).ledger_ids == [other.ledger_id, listed]
    assert [v for _, _, v in read_all(bk, name)] == [b"other", b"mine"]
    with pytest.raises(NoSuchLedgerError):
        bk.ledger_metadata(mine.ledger_id)                  # the overtaken ledger is deleted


def test_commit_whose_answer_zookeeper_lost_lands_once(cluster, bk: BookKeeper, name: str):
    """R27: ZooKeeper applies a producer's commit, the reply is lost (the connection drops right after the
    CAS, through a proxy) and another producer commits before the client asks again: the client's retry
    finds its sequence recorded and the batch is in the log once."""
    port = int(re.search(r":(\d+)/", cluster.metadata_service_uri).group(1))  # type: ignore[union-attr]
    proxy = DropProxy(port)
    try:
        with BookKeeper(re.sub(r":\d+/", f":{proxy.port}/", cluster.metadata_service_uri, count=1)) as victim:
            password = victim.log_ledger_password(name)

            def ledger(client: BookKeeper, value: bytes) -> int:
                lh = client.create_ledger(3, 2, 2, password=password, custom_metadata=env.custom_metadata(env.V1))
                lh.add_entry(env.encode(None, None, value))
                lh.close()
                return lh.ledger_id

            mine = ledger(victim, b"mine")
            other = ledger(bk, b"other")
            landed: list[int] = []
            proxy.arm(lambda: landed.append(commit_batch(bk, Commit(name, "pb", 0, password), other)))
            assert commit_batch(victim, Commit(name, "pa", 0, password, "a"), mine) == mine
            assert proxy.dropped.is_set() and landed == [other]
    finally:
        proxy.close()
    meta = bk.log_metadata(name)
    assert meta.ledger_ids == [mine, other]
    assert [v for _, _, v in read_all(bk, name)] == [b"mine", b"other"]
    assert pr.producers(meta)["pa"].sequence == 0


def test_batches_follow_the_bounds(bk: BookKeeper, name: str):
    """R27: a batch is committed at max_records, at max_bytes, or linger_ms after its first record; each
    batch is one ledger, one CAS; records carry the key and timestamp sent (envelope v1)."""
    with bk.open_log_producer(name, max_records=10, max_bytes=10_000, linger_ms=60_000) as producer:
        futures = [producer.send(b"r%02d" % i, key=b"k", timestamp=1_700_000_000_000 + i) for i in range(25)]
        done = [f.result(30) for f in futures[:20]]           # two full batches commit without a flush
        assert not futures[20].done()                          # the third waits for its linger (60 s)
        producer.flush(30)
        big = [producer.send(b"x" * 4_000) for _ in range(3)]  # 3 x 4 KB: the bytes bound closes at 2
        producer.flush(30)
    assert {p.ledger_id for p in done[:10]} != {p.ledger_id for p in done[10:]}
    assert big[0].result(0).ledger_id != big[2].result(0).ledger_id
    assert [led.entries for led in bk.log_metadata(name).ledgers] == [10, 10, 5, 2, 1]
    with bk.open_log_producer(name, linger_ms=20) as producer:
        assert producer.send(b"alone").result(30).entry_id == 0   # committed by its linger, no flush
    records = read_all(bk, name)
    assert records[0][1] == b"k"
    with bk.open_log_reader(name) as reader:
        assert env.decode(next(reader.read(1)).payload)[1] == 1_700_000_000_000 * 1000


def test_restarted_producer_continues_its_sequence(bk: BookKeeper, name: str):
    """R27: a producer reopened under the same id continues after its last recorded sequence, so its new
    batches are not taken for duplicates."""
    with bk.open_log_producer(name, "svc") as producer:
        producer.send(b"one").result(30)
    with bk.open_log_producer(name, "svc") as producer:
        producer.send(b"two").result(30)
    assert [v for _, _, v in read_all(bk, name)] == [b"one", b"two"]
    assert pr.producers(bk.log_metadata(name))["svc"].sequence == 1


def test_two_producers_with_one_id_are_told_apart(bk: BookKeeper, name: str):
    """R27: two live producers given the same id: the one whose sequence the other committed fails with
    ProducerConflictError (its record is not silently taken for a duplicate); the other goes on."""
    first = bk.open_log_producer(name, "shared")
    second = bk.open_log_producer(name, "shared")
    try:
        assert first.send(b"first").result(30).entry_id == 0
        with pytest.raises(pr.ProducerConflictError):
            second.send(b"second").result(30)
        first.send(b"third").result(30)
    finally:
        first.close()
        second.close()
    assert [v for _, _, v in read_all(bk, name)] == [b"first", b"third"]
    assert uncommitted_job_ledgers(bk, 0.0, name) == []      # the refused batch's ledger was deleted


def test_killed_producer_loses_no_acknowledged_record_and_is_swept(cluster, bk: BookKeeper, name: str):
    """kill -9 of a producer process while it has a ledger written but not committed: every record it
    acknowledged is in the log, once; its uncommitted ledger is found by sweepjobs' query and deleted."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.integration.log_producer_proc",
                             cluster.metadata_service_uri, name, "victim"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []

    def collect() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while sum(line.startswith("ACK") for line in list(lines)) < 200:
            assert time.monotonic() < deadline and proc.poll() is None, "the producer acknowledged too little"
            time.sleep(0.05)
        leftover = _stop_with_unlisted_ledger(bk, name, proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    reader.join(30)
    acked = {int(line.split()[3]): Position(int(line.split()[1]), int(line.split()[2]))
             for line in lines if line.startswith("ACK")}
    records = read_all(bk, name)
    values = [value for _, _, value in records]
    assert len(values) == len(set(values))
    at = {value: position for position, _, value in records}
    assert all(at.get(b"rec-%08d" % seq) == position for seq, position in acked.items())
    found = uncommitted_job_ledgers(bk, 0.0, name)
    assert leftover <= {f.ledger_id for f in found}
    assert all(f.job == "producer:victim" for f in found)
    listed = bk.log_metadata(name).listed_ids
    assert set(delete_uncommitted(bk, found)) == {f.ledger_id for f in found}
    assert uncommitted_job_ledgers(bk, 0.0, name) == []
    assert bk.log_metadata(name).listed_ids == listed
    assert [v for _, _, v in read_all(bk, name)] == values


def _stop_with_unlisted_ledger(bk: BookKeeper, name: str, pid: int) -> set[int]:
    """SIGSTOP the producer at a moment it has a ledger the log does not list (SIGCONT and try again
    otherwise, bounded); the ids of those ledgers."""
    deadline = time.monotonic() + 60
    while True:
        os.kill(pid, signal.SIGSTOP)
        found = {f.ledger_id for f in uncommitted_job_ledgers(bk, 0.0, name)}
        if found:
            return found
        assert time.monotonic() < deadline, "never caught the producer between writing and committing"
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)


def test_producer_headers_are_written_with_envelope_2(bk: BookKeeper, name: str):
    """R27: a batch where a record has headers is one ledger of envelope v2 (its custom metadata and the
    log say so), its records without headers too; a batch without any stays v1. A log reader gives back
    key, timestamp and headers (a repeated key, a None value) as sent."""
    hdrs = [("trace", b"t-1"), ("trace", b"t-2"), ("none", None)]
    with bk.open_log_producer(name, max_records=3, linger_ms=60_000) as producer:
        futures = [producer.send(b"v0", key=b"k0", timestamp=T0_MS, headers=hdrs),
                   producer.send(b"v1", key=b"k1", timestamp=T0_MS + 1),
                   producer.send(b"v2", headers={"one": b"1"}),
                   producer.send(b"v3", key=b"k3", timestamp=T0_MS + 3)]
        producer.flush()
        positions = [f.result(30) for f in futures]
    meta = bk.log_metadata(name)
    assert meta.ledger_ids == [positions[0].ledger_id, positions[3].ledger_id]
    assert [led.envelope for led in meta.ledgers] == [env.V2, env.V1]
    assert [env.version_of(bk.ledger_metadata(i).custom_metadata) for i in meta.ledger_ids] == [env.V2, env.V1]
    with bk.open_log_reader(name) as reader:
        got = [(r.key, r.timestamp_us, r.headers, r.value) for r in reader.read(timeout=2.0)]
    assert got[0] == (b"k0", T0_MS * 1000, tuple(hdrs), b"v0")
    assert got[1] == (b"k1", (T0_MS + 1) * 1000, None, b"v1")
    assert got[2][2:] == ((("one", b"1"),), b"v2")
    assert got[3] == (b"k3", (T0_MS + 3) * 1000, None, b"v3")
