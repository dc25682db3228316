"""Transactions across logs and cursors (issue 44 item 4) on real bookies and ZooKeeper: appends to
several logs and a cursor's ack commit in ONE ZooKeeper multi-operation or not at all (R27), exactly once
across kill -9 of a consume-transform-produce process, an aborted or crashed transaction leaves nothing
visible and its ledgers are swept, and a commit whose answer ZooKeeper lost is decided once."""

from __future__ import annotations

import contextlib
import random
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkledger.client import BookKeeper
from bkledger.client.errors import InvalidOptionError, NoSuchLedgerError
from bkledger.client.log.core.meta import Position
from bkledger.client.log.core.transactions import CursorMovedBackError, Phase, TransactionStateError
from bkledger.client.log.cursors import read_cursor
from bkledger.client.log.logs import delete_uncommitted, uncommitted_job_ledgers
from bkledger.client.log.store import log_path
from bkledger.client.log.transaction import TransactionConflictError, TransactionOutcomeUnknownError, sweep_markers
from tests.integration.conftest import start_cluster
from tests.integration.zk_drop_proxy import DropProxy

ROOT = Path(__file__).resolve().parents[2]
SOURCE_RECORDS = 60
SEEDS = (1, 2, 3)
ROUNDS = 12


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator:
    made = start_cluster(tmp_path_factory.mktemp("transactions"), zookeeper, 3)
    try:
        yield made
    finally:
        made.down()


@pytest.fixture
def bk(cluster) -> Iterator[BookKeeper]:
    client = BookKeeper(cluster.metadata_service_uri)
    try:
        yield client
    finally:
        client.close()


def names(*what: str) -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [f"tx-{w}-{tag}" for w in what]


def values(bk: BookKeeper, name: str) -> list[bytes]:
    if name not in bk.list_logs():
        return []
    with bk.open_log_reader(name) as reader:
        return [r.value for r in reader.read(timeout=1.0)]


def source_log(bk: BookKeeper, name: str, count: int) -> Position:
    """A log of `count` bare values; the position after its last record."""
    with bk.open_log_writer(name) as writer:
        for i in range(count):
            last = writer.append(b"r%03d" % i)
    return Position(last.ledger_id, last.entry_id + 1)


def cursor_at(bk: BookKeeper, name: str, cursor: str) -> Position | None:
    got = read_cursor(bk.store, name, cursor)
    assert got is not None
    return got[0].position


def test_appends_and_ack_become_visible_together(bk: BookKeeper):
    """R27: records to two logs (key, timestamp, headers) and a cursor ack commit in one multi; the logs
    are created by it; positions are reported; the marker is gone after the commit."""
    a, b, c = names("a", "b", "c")
    end = source_log(bk, a, 3)
    with bk.open_log_reader(a, cursor="svc") as reader:
        batch = reader.read_batch(3, timeout=5.0)
        with bk.transaction("t-visible") as tx:
            for record in batch:
                tx.append(b, record.value, key=b"k", timestamp=1_700_000_000_000, headers={"h": b"v"})
            tx.append(c, b"summary")
            assert reader.position is not None
            tx.ack(a, "svc", reader.position)
            assert values(bk, b) == [] and cursor_at(bk, a, "svc") != end      # nothing before the commit
    assert values(bk, b) == [b"r000", b"r001", b"r002"] and values(bk, c) == [b"summary"]
    assert cursor_at(bk, a, "svc") == end
    with bk.open_log_reader(b) as reader:
        first = next(reader.read(1))
    assert (first.key, first.timestamp_us, first.headers) == (b"k", 1_700_000_000_000_000, (("h", b"v"),))
    assert first.position == tx.positions[b][0]
    assert not bk.store.exists(bk.store.layout.transaction("t-visible"))
    with pytest.raises(TransactionStateError):
        tx.append(b, b"late")


def test_a_transaction_of_acks_only_commits_them_together(bk: BookKeeper):
    """R27: acks of two cursors and no append: one multi of the cursor sets and the marker."""
    a, b = names("a", "b")
    end_a, end_b = source_log(bk, a, 2), source_log(bk, b, 3)
    for name in (a, b):
        bk.open_log_reader(name, cursor="svc").close()
    with bk.transaction() as tx:
        tx.ack(a, "svc", end_a)
        tx.ack(b, "svc", end_b)
    assert (cursor_at(bk, a, "svc"), cursor_at(bk, b, "svc")) == (end_a, end_b)
    assert not bk.store.exists(bk.store.layout.transaction(tx.transaction_id))


def test_an_aborted_or_crashed_transaction_leaves_nothing_and_is_swept(bk: BookKeeper):
    """R27: an exception in the block aborts: no record visible, the cursor unmoved, its ledgers deleted;
    a transaction whose process stopped before committing leaves only unlisted ledgers tagged as a job,
    which `sweepjobs` (uncommitted_job_ledgers) finds and deletes."""
    a, b, c = names("a", "b", "c")
    source_log(bk, a, 2)
    reader = bk.open_log_reader(a, cursor="svc")
    start = cursor_at(bk, a, "svc")
    batch = reader.read_batch(2, timeout=5.0)
    with pytest.raises(RuntimeError, match="boom"), bk.transaction() as tx:
        for record in batch:
            tx.append(b, record.value)
            tx.append(c, record.value)
        assert reader.position is not None
        tx.ack(a, "svc", reader.position)
        ledgers = [part.ledger_id for part in tx._parts.values()]
        raise RuntimeError("boom")
    assert values(bk, b) == [] and values(bk, c) == [] and cursor_at(bk, a, "svc") == start
    for ledger_id in ledgers:
        with pytest.raises(NoSuchLedgerError):
            bk.ledger_metadata(ledger_id)
    crashed = bk.transaction()
    crashed.append(b, b"never")
    crashed.append(c, b"never")                     # no commit, no abort: as if its process died here
    left = [part.ledger_id for part in crashed._parts.values()]
    found = [u for u in uncommitted_job_ledgers(bk, 0.0) if u.log in (b, c)]
    assert sorted(u.ledger_id for u in found) == sorted(left)
    assert {u.job for u in found} == {f"transaction:{crashed.transaction_id}"}
    assert sorted(delete_uncommitted(bk, found)) == sorted(left)
    assert values(bk, b) == [] and values(bk, c) == []
    reader.close()


def test_a_transaction_whose_concurrent_ledger_creation_half_fails_leaves_nothing(bk: BookKeeper):
    """R27: a transaction's ledgers are created at once, in the background, while the block appends; the
    creation for one log fails (its head znode holds no log) while the other's succeeds: nothing becomes
    visible, and the ledger that was created is deleted (none of the transaction's ledgers is left)."""
    bad, good = names("bad", "good")
    bk.store.create(log_path(bk.store, bad), b"\xffnot a log", makepath=True)
    with pytest.raises(Exception) as caught, bk.transaction() as tx:
        tx.append(bad, b"one")                      # the failing part first: the good one is cleaned after it
        for i in range(50):
            tx.append(good, b"r%02d" % i)
    assert not isinstance(caught.value, TransactionOutcomeUnknownError)
    assert tx.phase is Phase.ABORTED
    assert bk.store.get(log_path(bk.store, good)) is None or values(bk, good) == []
    job = f"transaction:{tx.transaction_id}"
    assert [u for u in uncommitted_job_ledgers(bk, 0.0) if u.job == job] == []
    assert not bk.store.exists(bk.store.layout.transaction(tx.transaction_id))


def test_markers_left_by_a_crash_at_commit_are_swept(bk: BookKeeper):
    """R27: a process that died right after its commit leaves the transaction's marker; `sweep_markers`
    (run by `sweepjobs --delete`) deletes markers older than asked, and a reused id is refused meanwhile."""
    with bk.transaction("t-left") as tx:
        tx.append(names("b")[0], b"x")
    path = bk.store.layout.transaction("t-left")
    bk.store.create(path, b'{"logs": [], "at_ms": 1}', makepath=True)     # as if deleted never
    with pytest.raises(InvalidOptionError, match="in use"):
        bk.transaction("t-left")
    assert "t-left" not in sweep_markers(bk, 10_000_000_000.0)
    assert "t-left" in sweep_markers(bk, 0.0)
    assert not bk.store.exists(path)


def test_cursor_moved_back_or_by_another_consumer_fails_the_transaction(bk: BookKeeper):
    """R27: an ack behind the cursor is refused (CursorMovedBackError); a cursor acknowledged by someone
    else after `tx.ack` (a zombie's transaction) fails the commit: nothing of it applied."""
    a, b = names("a", "b")
    end = source_log(bk, a, 4)
    with bk.open_log_reader(a, cursor="svc") as reader:
        reader.read_batch(4, timeout=5.0)
        reader.ack(end)
        with pytest.raises(CursorMovedBackError), bk.transaction() as tx:
            tx.append(b, b"x")
            tx.ack(a, "svc", Position(end.ledger_id, 1))
        zombie = bk.transaction()
        zombie.append(b, b"zombie")
        zombie.ack(a, "svc", end)
        assert reader.ack(Position(end.ledger_id, 2), backwards=True)     # another consumer's ack
        with pytest.raises(TransactionConflictError, match="someone else"):
            zombie.commit()
    assert values(bk, b) == []


def test_a_log_that_moved_meanwhile_is_rehomed(bk: BookKeeper):
    """R27: another commit lands on the log after this transaction's ledger was made (so that ledger is
    below the log's tail): the commit copies it above the tail and both land, whole, once."""
    (b,) = names("b")
    first = bk.transaction()
    first.append(b, b"first-1")
    first.append(b, b"first-2")
    with bk.transaction() as other:
        other.append(b, b"other")
    first.commit()
    assert values(bk, b) == [b"other", b"first-1", b"first-2"]
    assert first.positions[b][0].ledger_id == bk.log_metadata(b).ledger_ids[-1]


def test_commit_whose_answer_zookeeper_lost_is_decided_once(cluster, bk: BookKeeper):
    """R27: ZooKeeper applies the transaction's multi, the reply is lost (through a proxy) and another
    commit moves the log before the client asks again: the marker shows it applied; it lands once."""
    a, b = names("a", "b")
    end = source_log(bk, a, 2)
    bk.open_log_reader(a, cursor="svc").close()
    port = int(re.search(r":(\d+)/", cluster.metadata_service_uri).group(1))  # type: ignore[union-attr]
    proxy = DropProxy(port)

    def other_commit() -> None:
        with bk.transaction() as tx:
            tx.append(b, b"other")

    try:
        with BookKeeper(re.sub(r":\d+/", f":{proxy.port}/", cluster.metadata_service_uri, count=1)) as victim:
            tx = victim.transaction("t-lost")
            tx.append(b, b"mine")
            tx.ack(a, "svc", end)
            proxy.arm(other_commit)
            tx.commit()
            assert proxy.dropped.is_set()
    finally:
        proxy.close()
    assert values(bk, b) == [b"mine", b"other"]
    assert cursor_at(bk, a, "svc") == end
    assert not bk.store.exists(bk.store.layout.transaction("t-lost"))


def test_commit_whose_answer_is_lost_and_zookeeper_gone_keeps_its_ledgers(cluster, bk: BookKeeper):
    """R27: the multi is applied, its reply lost, and ZooKeeper cannot be reached again: the outcome is
    unknown, so TransactionOutcomeUnknownError, and the ledgers (which the log lists) are NOT deleted."""
    (b,) = names("b")
    port = int(re.search(r":(\d+)/", cluster.metadata_service_uri).group(1))  # type: ignore[union-attr]
    proxy = DropProxy(port)
    uri = re.sub(r":\d+/", f":{proxy.port}/", cluster.metadata_service_uri, count=1)
    victim = BookKeeper(uri, zkTimeout=2.0)
    try:
        tx = victim.transaction()
        tx.append(b, b"mine")

        def unreachable() -> None:                      # no reconnection possible after the lost reply
            proxy.server.shutdown(socket.SHUT_RDWR)     # (wakes the proxy's accept: close alone does not)
            proxy.close()

        proxy.arm(unreachable)
        with pytest.raises(TransactionOutcomeUnknownError, match="could not be asked"):
            tx.commit()
    finally:
        proxy.close()
        with contextlib.suppress(Exception):
            victim.close()
    assert values(bk, b) == [b"mine"]                  # applied, and its ledger still there


def run_until_killed(uri: str, logs: list[str], rng: random.Random, kill: bool) -> int:
    """Start the service, let it run a random while (or until idle), kill -9 it; COMMITs it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.integration.log_txn_proc", uri, *logs, "svc"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    commits = 0
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + (rng.uniform(0.3, 2.5) if kill else 90.0)
        started = False
        for line in proc.stdout:
            started = started or line.startswith("READY")
            commits += line.startswith("COMMIT")
            if line.startswith("IDLE") or (started and time.monotonic() >= deadline):
                break
    finally:
        proc.kill()
        proc.wait(30)
    return commits


@pytest.mark.parametrize("seed", SEEDS)
def test_consume_transform_produce_is_exactly_once_across_kill_9(cluster, bk: BookKeeper, seed: int):
    """R27: a service reads A with a cursor and, per batch, appends to B and C and acks A's cursor in one
    transaction; killed with -9 at random moments and restarted, B and C end up with every record of A
    exactly once, in order; what the killed ones left behind is only unlisted ledgers, which are swept."""
    rng = random.Random(seed)
    a, b, c = names("a", "b", "c")
    end = source_log(bk, a, SOURCE_RECORDS)
    for _ in range(ROUNDS):
        run_until_killed(cluster.metadata_service_uri, [a, b, c], rng, kill=True)
        if a in bk.list_logs() and read_cursor(bk.store, a, "svc") and cursor_at(bk, a, "svc") == end:
            break
    run_until_killed(cluster.metadata_service_uri, [a, b, c], rng, kill=False)    # finish (until idle)
    expected = [b"r%03d" % i for i in range(SOURCE_RECORDS)]
    assert values(bk, b) == [v + b"|b" for v in expected]
    assert values(bk, c) == [v + b"|c" for v in expected]
    assert cursor_at(bk, a, "svc") == end
    found = [u for u in uncommitted_job_ledgers(bk, 0.0) if u.log in (b, c)]
    assert all(u.job.startswith("transaction:") for u in found)
    delete_uncommitted(bk, found)
    assert values(bk, b) == [v + b"|b" for v in expected]
