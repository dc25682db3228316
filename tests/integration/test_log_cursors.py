"""Cursors held by the cluster (issue 44 item 3) on a real cluster: a reader resumes from its cursor,
retention and truncation keep what a cursor has not acknowledged, the quota sacrifices a slow cursor
loudly (CursorLostError, a metric), and `bkledger log cursors` shows the lag."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from bkledger.client import (
    BookKeeper,
    CursorLostError,
    CursorNotFoundError,
    DataLossError,
    LogNotFoundError,
    Position,
)
from bkledger.client.errors import InvalidLogNameError, InvalidOptionError, InvalidPositionError
from bkledger.client.log.core import stored as st
from bkledger.client.log.reader import LogRecord
from tests.integration.conftest import start_cluster

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "bkledger.bookie.cli"]
RECORD = 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator:
    made = start_cluster(tmp_path_factory.mktemp("cursors"), zookeeper, 3)
    try:
        yield made
    finally:
        made.down()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def bk(cluster, registry) -> Iterator[BookKeeper]:
    client = BookKeeper(cluster.metadata_service_uri, metrics_registry=registry)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def name() -> str:
    return f"cur-{uuid.uuid4().hex[:8]}"


def fill(bk: BookKeeper, name: str, count: int = 30, roll: int = 5) -> list[Position]:
    """`count` records of RECORD bytes, a ledger every `roll` records; the writer is closed (all sealed)."""
    with bk.open_log_writer(name, roll_entries=roll) as w:
        return [w.append(b"%04d" % i + b"r" * (RECORD - 4)) for i in range(count)]


def take(reader, n: int) -> list[LogRecord]:
    out = []
    for _ in range(n):
        rec = reader.read_next(5)
        assert rec is not None
        out.append(rec)
    return out


def test_ack_reopen_resume(bk: BookKeeper, name: str, registry: CollectorRegistry):
    """A reader on cursor "billing" resumes where the last ack left it, not where the last reader was;
    a new cursor starts at `start`; acks never move back unless asked; one past what was read is refused."""
    positions = fill(bk, name, 12)
    with bk.open_log_reader(name, cursor="billing") as reader:
        got = take(reader, 7)
        assert reader.ack(got[4].position) is True        # records 0-3 processed: 4 is the next
        assert reader.ack(got[2].position) is False       # behind: ignored
        with pytest.raises(InvalidPositionError):
            reader.ack(positions[10])                      # not read yet
    with bk.open_log_reader(name, cursor="billing") as reader:
        assert reader.position == positions[4]
        assert [r.position for r in take(reader, 3)] == positions[4:7]
        assert reader.ack(positions[1], backwards=True) is True
    with bk.open_log_reader(name, cursor="billing") as reader:
        assert reader.read_next(5).position == positions[1]        # type: ignore[union-attr]
    with bk.open_log_reader(name, "latest", cursor="late") as reader:   # a new cursor: from `start`
        assert reader.position == Position(positions[-1].ledger_id, positions[-1].entry_id + 1)
    listed = {c["cursor"]: c for c in bk.list_cursors(name)["cursors"]}
    assert listed["billing"]["position"] == str(positions[1]) and listed["billing"]["lag_entries"] == 11
    assert listed["late"]["lag_entries"] == 0
    assert registry.get_sample_value("bkledger_log_cursor_lag_entries", {"log": name, "cursor": "billing"}) == 11
    assert (registry.get_sample_value("bkledger_log_cursor_acks_total", {"log": name, "cursor": "billing"}) or 0) >= 2
    bk.delete_cursor(name, "late")
    assert [c["cursor"] for c in bk.list_cursors(name)["cursors"]] == ["billing"]
    with pytest.raises(CursorNotFoundError):
        bk.delete_cursor(name, "late")
    with pytest.raises(InvalidLogNameError, match="cursor name"):
        bk.open_log_reader(name, cursor="a/b")
    with pytest.raises(LogNotFoundError):
        bk.open_log_reader(name + "-none", cursor="billing")
    assert not bk.store.exists(bk.store.layout.log_cursors(name + "-none"))
    with bk.open_log_reader(name) as plain, pytest.raises(InvalidOptionError, match="no cursor"):
        plain.ack()
    bk.delete_log(name)                                   # its cursors go with it
    assert not bk.store.exists(bk.store.layout.log_cursors(name))


def test_backwards_ack_lag_counts_ledgers_before_the_loaded_part(bk: BookKeeper, name: str, registry: CollectorRegistry,
                                                                  monkeypatch: pytest.MonkeyPatch):
    """A reader holds the log from the segment it started in on; its backwards ack to a position before
    that segment exports the lag from that position, not from the start of what the reader loaded."""
    monkeypatch.setattr(st, "SEGMENT_LEDGERS", 2)     # 6 ledgers of 5 records: 3 segments
    positions = fill(bk, name, 30)
    with bk.open_log_reader(name, positions[25], cursor="replay") as reader:
        assert take(reader, 1)[0].position == positions[25]
        assert reader.ack(positions[1], backwards=True) is True
    assert registry.get_sample_value("bkledger_log_cursor_lag_entries", {"log": name, "cursor": "replay"}) == 29
    assert {c["cursor"]: c["lag_entries"] for c in bk.list_cursors(name)["cursors"]} == {"replay": 29}


def test_retention_and_truncation_held_back_by_a_cursor(bk: BookKeeper, name: str):
    """R30: retention by size would drop 4 of 6 ledgers, truncation 5: both stop at the ledger holding the
    cursor's next record, and go on once the cursor acknowledges further."""
    positions = fill(bk, name, 30)
    ids = bk.log_metadata(name).ledger_ids
    reader = bk.open_log_reader(name, cursor="slow")
    take(reader, 7)
    reader.ack()                                           # next: record 7, in ledger ids[1]
    bk.set_log_retention(name, max_bytes=2 * 5 * RECORD)
    assert bk.apply_log_retention(name) == ids[:1]
    assert bk.log_metadata(name).ledger_ids == ids[1:]
    assert bk.truncate_log(name, positions[25]) == []
    take(reader, 8)
    reader.ack()                                           # next: record 15, in ledger ids[3]
    assert bk.truncate_log(name, positions[25]) == ids[1:3]
    assert reader.read_next(5).payload.startswith(b"0015")    # type: ignore[union-attr]
    bk.delete_cursor(name, "slow")
    assert bk.apply_log_retention(name) == ids[3:4]
    reader.close()


def test_quota_exceeded_cursor_lost(bk: BookKeeper, name: str, registry: CollectorRegistry):
    """A cursor more than cursor_max_lag_bytes behind no longer holds retention: the ledgers go, its
    consumer's next read and ack raise CursorLostError naming them, a metric counts it; reopening raises
    too, unless fail_on_data_loss=False (then it goes on from the earliest record)."""
    fill(bk, name, 30)
    ids = bk.log_metadata(name).ledger_ids
    reader = bk.open_log_reader(name, cursor="lagging")
    take(reader, 2)
    reader.ack()
    keeper = bk.open_log_reader(name, cursor="keeper", start=Position(ids[2], 0))   # within quota
    bk.set_log_retention(name, max_bytes=5 * RECORD, cursor_max_lag_bytes=25 * RECORD)
    assert bk.apply_log_retention(name) == ids[:2]
    with pytest.raises(CursorLostError) as info:
        reader.read_next(5)
    assert info.value.ledgers == tuple(ids[:2]) and info.value.cursor == "lagging"
    assert str(ids[0]) in str(info.value)
    with pytest.raises(CursorLostError):
        reader.ack()
    assert registry.get_sample_value("bkledger_log_cursor_lost_total", {"log": name, "cursor": "lagging"}) == 1
    reader.close()
    with pytest.raises(DataLossError):                     # CursorLostError is a DataLossError
        bk.open_log_reader(name, cursor="lagging")
    with bk.open_log_reader(name, cursor="lagging", fail_on_data_loss=False) as again:
        assert again.read_next(5).payload.startswith(b"0010")    # type: ignore[union-attr]
        assert again.ack() is True
    assert bk.list_cursors(name)["cursor_max_lag_bytes"] == 25 * RECORD
    keeper.close()


def test_cli_cursors(cluster, bk: BookKeeper, name: str):
    """`bkledger log cursors NAME [--json]` shows each cursor's position and lag; `log retention
    --cursor-max-lag` sets the quota."""
    positions = fill(bk, name, 10)
    with bk.open_log_reader(name, cursor="billing") as reader:
        take(reader, 4)
        reader.ack()
    uri = ["--uri", cluster.metadata_service_uri]
    done = subprocess.run([*CLI, "log", "retention", name, "--cursor-max-lag", "1m", *uri], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([*CLI, "log", "cursors", name, "--json", *uri], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["cursor_max_lag_bytes"] == 1 << 20
    (row,) = data["cursors"]
    assert row["cursor"] == "billing" and row["position"] == str(positions[4]) and row["lag_entries"] == 6
    assert row["lag_bytes"] == 6 * RECORD and row["lost"] is None
    done = subprocess.run([*CLI, "log", "cursors", name, *uri], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "billing" in done.stdout and "1048576" in done.stdout, done.stdout
    done = subprocess.run([*CLI, "log", "cursors", "no-such-log-x", *uri], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "no-such-log-x" in done.stderr


def test_cursor_created_while_retention_decides_is_respected(bk: BookKeeper, name: str, monkeypatch):
    """The race the parent znode's version closes: a cursor is created (holding the whole log) after
    retention read the cursors and before it commits. The commit checks the parent's version in the same
    transaction, fails, and the retry sees the new cursor: nothing is deleted."""
    from bkledger.client.log import cursors

    fill(bk, name, 15)
    ids = bk.log_metadata(name).ledger_ids
    bk.set_log_retention(name, max_bytes=1)
    real = cursors.read_cursors
    raced: list[str] = []

    def read_then_race(store, log_name):
        got = real(store, log_name)
        if not raced:
            raced.append(cursors.create_cursor(store, log_name, "latecomer").name)
        return got

    monkeypatch.setattr(cursors, "read_cursors", read_then_race)
    assert bk.apply_log_retention(name) == []
    assert raced == ["latecomer"] and bk.log_metadata(name).ledger_ids == ids


def test_garbage_cursor_znode_blocks_retention_loudly(bk: BookKeeper, name: str):
    """A cursor znode that does not hold a cursor: retention deletes nothing and says which znode (a
    MetadataFormatError, which the retention task logs and survives); opening that cursor says it too."""
    from bkledger.client.meta.errors import MetadataFormatError

    fill(bk, name, 15)
    ids = bk.log_metadata(name).ledger_ids
    bk.open_log_reader(name, cursor="c").close()
    bk.store.cas(bk.store.layout.log_cursor(name, "c"), b"\xffgarbage", -1)
    bk.set_log_retention(name, max_bytes=1)
    with pytest.raises(MetadataFormatError, match="does not hold a cursor"):
        bk.apply_log_retention(name)
    assert bk.log_metadata(name).ledger_ids == ids
    with pytest.raises(MetadataFormatError, match="/c"):
        bk.open_log_reader(name, cursor="c")
    task = bk.start_log_retention(interval_s=0.05, names=[name])
    try:
        deadline = time.monotonic() + 10
        while task.runs < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert task.runs >= 2 and task.deleted == []
    finally:
        task.stop()


CONSUMER = """
import sys
from bkledger.client import BookKeeper
bk = BookKeeper(sys.argv[1])
reader = bk.open_log_reader(sys.argv[2], cursor="worker")
while sys.stdin.readline():                       # one record per line the test sends
    rec = reader.read_next(30)
    reader.ack()
    print(reader.position, flush=True)
"""


def test_consumer_killed_resumes_from_its_last_ack(cluster, bk: BookKeeper, name: str):
    """A consumer process that acknowledged 30 records (one ack each) is killed with SIGKILL: a new reader on
    the cursor resumes right after the 30th record (an ack that returned is stored in ZooKeeper), and a
    second consumer continues from there."""
    positions = fill(bk, name, 100, roll=20)
    after = [str(Position(p.ledger_id, p.entry_id + 1)) for p in positions]
    proc = subprocess.Popen([sys.executable, "-c", CONSUMER, cluster.metadata_service_uri, name],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        acked = []
        for _ in range(30):
            proc.stdin.write("next\n")
            proc.stdin.flush()
            acked.append(proc.stdout.readline().strip())
        proc.kill()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert acked == after[:30]
    with bk.open_log_reader(name, cursor="worker") as reader:
        assert reader.read_next(5).position == positions[30]      # type: ignore[union-attr]


def test_ack_as_one_transaction_operation(bk: BookKeeper, name: str):
    """`ack_op` (for transactions across logs and cursors): one versioned set of the cursor's znode; run
    in a multi-operation transaction it acknowledges; replayed after the cursor moved it fails whole."""
    from bkledger.client.errors import MetadataVersionError
    from bkledger.client.log.cursors import ack_op

    positions = fill(bk, name, 10)
    bk.open_log_reader(name, cursor="tx").close()
    op = ack_op(bk.store, name, "tx", positions[6])
    bk.store.multi([op])
    assert bk.list_cursors(name)["cursors"][0]["position"] == str(positions[6])
    with pytest.raises(MetadataVersionError):
        bk.store.multi([op])
    with pytest.raises(InvalidPositionError):
        ack_op(bk.store, name, "tx", positions[2])
    with pytest.raises(CursorNotFoundError):
        ack_op(bk.store, name, "nobody", positions[2])
