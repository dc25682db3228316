"""Logs made of ledgers on real bookies and a real ZooKeeper (R27-R30, R11-R12, oracle items 1-3).

One cluster of three bookies serves the whole module; every test uses its own log name.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from bkledger.bookie.cli import main as cli_main
from bkledger.client import BookKeeper
from bkledger.client.errors import DataLossError, LogFencedError, NoSuchLedgerError
from bkledger.client.log.core.meta import Position
from bkledger.client.log.logs import append_ledgers
from bkledger.client.log.reader import LogRecord

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def name() -> str:
    return f"log-{uuid.uuid4().hex[:8]}"


def read_all(bk: BookKeeper, name: str, **kwargs) -> list[LogRecord]:
    with bk.open_log_reader(name, **kwargs) as reader:
        return list(reader.read(timeout=0.5))


def check_oracle(records: list[LogRecord], acked: dict[bytes, Position]) -> None:
    """Every acknowledged append is readable at its position, exactly once; positions strictly increase."""
    positions = [r.position for r in records]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    payloads = [r.payload for r in records]
    assert len(set(payloads)) == len(payloads), "a record was read twice"
    where = {r.payload: r.position for r in records}
    missing = [p for p in acked if p not in where]
    assert not missing, f"acknowledged appends lost: {missing[:5]}"
    assert all(where[p] == pos for p, pos in acked.items())


def test_writer_reader_roundtrip_across_rolls_positions_ordered(bk: BookKeeper, name: str):
    """R28/R29: appends roll by count, bytes and on demand; positions are totally ordered across ledgers."""
    w = bk.open_log_writer(name, roll_entries=10, roll_bytes=2_000)
    acked = {}
    for i in range(45):
        payload = b"%04d" % i + b"x" * (300 if i >= 30 else 0)
        acked[payload] = w.append(payload)
    before = w.ledger_id
    assert w.roll() > before
    acked[b"last"] = w.append_async(b"last").result(10)
    w.close()
    meta = bk.log_metadata(name)
    ids = meta.ledger_ids
    assert ids == sorted(ids) and len(ids) >= 6
    assert all(led.sealed for led in meta.ledgers) and meta.entries == 46
    assert [led.first_position for led in meta.ledgers][:3] == [0, 10, 20]
    records = read_all(bk, name)
    check_oracle(records, acked)
    assert [r.payload for r in records] == list(acked)
    resumed = read_all(bk, name, start=records[20].position)
    assert [r.payload for r in resumed] == [r.payload for r in records[20:]]
    assert read_all(bk, name, start="latest") == []


def test_two_writers_race_one_wins_oracle_holds(cluster, name: str):
    """R28: two writers race for one log; one wins, the other fails with LogFencedError (at open or on
    append); every acknowledged append of either is readable, in order, exactly once."""
    barrier = threading.Barrier(2)
    outcome: dict[int, str] = {}
    acked: dict[bytes, Position] = {}
    lock = threading.Lock()

    def run(i: int) -> None:
        with BookKeeper(cluster.metadata_service_uri) as client:
            barrier.wait()
            try:
                w = client.open_log_writer(name, roll_entries=20)
                for n in range(120):
                    payload = f"w{i}-{n}".encode()
                    pos = w.append(payload)
                    with lock:
                        acked[payload] = pos
                    time.sleep(0.002)
                w.close()
                outcome[i] = "ok"
            except LogFencedError:
                outcome[i] = "fenced"

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcome.values()) == ["fenced", "ok"], outcome
    with BookKeeper(cluster.metadata_service_uri) as client:
        records = read_all(client, name)
        check_oracle(records, acked)
        winner = [i for i, o in outcome.items() if o == "ok"][0]
        assert sum(r.payload.startswith(f"w{winner}-".encode()) for r in records) == 120


def test_takeover_fences_previous_writer(bk: BookKeeper, name: str):
    """R28: a second writer takes over; the first one's appends fail with LogFencedError, nothing it had
    acknowledged is lost, and the second continues after it."""
    first = bk.open_log_writer(name)
    acked = {b"a%d" % i: first.append(b"a%d" % i) for i in range(20)}
    second = bk.open_log_writer(name)
    ids = bk.log_metadata(name).ledger_ids
    with pytest.raises(LogFencedError):
        first.roll()                                # its CAS finds a ledger it did not add
    assert bk.log_metadata(name).ledger_ids == ids and ids[-1] == second.ledger_id
    with pytest.raises(LogFencedError):
        first.append(b"too late")
    with pytest.raises(LogFencedError):
        first.append(b"still too late")
    first.close()                                   # only marks it closed: the ledger is the new writer's
    acked.update({b"b%d" % i: second.append(b"b%d" % i) for i in range(5)})
    second.close()
    records = read_all(bk, name)
    check_oracle(records, acked)
    assert b"too late" not in {r.payload for r in records}


def test_writer_killed_new_writer_recovers_tail(cluster, bk: BookKeeper, name: str):
    """R28 after a crash: a writer process is killed (-9) with appends in flight; a new writer fences and
    recovers the tail and continues; every acknowledged append survives, in order, exactly once."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.integration.log_writer_proc",
                             cluster.metadata_service_uri, name, "150"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    acked: dict[bytes, Position] = {}
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        while len(acked) < 400 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("ACK"):
                _, lid, eid, seq = line.split()
                acked[b"rec-%08d" % int(seq)] = Position(int(lid), int(eid))
        os.kill(proc.pid, signal.SIGKILL)
        rest, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    for line in rest.splitlines():
        if line.startswith("ACK"):
            _, lid, eid, seq = line.split()
            acked[b"rec-%08d" % int(seq)] = Position(int(lid), int(eid))
    assert len(acked) >= 400
    w = bk.open_log_writer(name)
    acked.update({b"new-%d" % i: w.append(b"new-%d" % i) for i in range(10)})
    w.close()
    records = read_all(bk, name)
    check_oracle(records, acked)
    seqs = [int(r.payload[4:]) for r in records if r.payload.startswith(b"rec-")]
    assert seqs == sorted(seqs), "the dead writer's records are out of order"
    assert [r.payload for r in records[-10:]] == [b"new-%d" % i for i in range(10)]
    assert len({r.ledger_id for r in records}) >= 4


def test_reader_tails_while_writer_rolls(bk: BookKeeper, name: str):
    """R11/R12/R29: a tailing reader sees every record in order while the writer rolls, never fencing it."""
    w = bk.open_log_writer(name, roll_entries=15)
    reader = bk.open_log_reader(name, start="earliest", poll_interval_s=0.05)
    late = bk.open_log_reader(name, start="latest")
    acked: list[bytes] = []
    confirmed: set[bytes] = set()                   # filled when the writer learns of the acknowledgement
    seen: list[LogRecord] = []
    beyond: list[LogRecord] = []

    def write() -> None:
        for i in range(120):
            payload = b"t%03d" % i
            fut = w.append_async(payload)
            fut.add_done_callback(functools.partial(_confirm, confirmed, payload))
            fut.result(10)
            acked.append(payload)
            if i % 10 == 0:
                time.sleep(0.01)

    def read() -> None:
        while len(seen) < 120:
            rec = reader.read_next(timeout=10)
            if rec is None:
                return
            if rec.payload not in confirmed:        # a reader never goes beyond the LAC (R11)
                beyond.append(rec)
            seen.append(rec)

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r.payload for r in seen] == acked and not beyond
    assert len({r.ledger_id for r in seen}) >= 8
    assert [r.payload for r in late.read(timeout=1)] == acked
    w.append(b"after")                              # the readers never fenced the writer
    assert _must(reader.read_next(timeout=5)).payload == b"after"
    batch = late.read_batch(max_records=10, timeout=5)
    assert [r.payload for r in batch] == [b"after"]
    w.close()


def test_idle_tailing_reader_waits_on_watches_not_zookeeper_polls(bk: BookKeeper, name: str, monkeypatch):
    """An idle reader at the tail re-reads metadata only when a watch fires (or every few seconds as a
    fallback), yet still follows the writer's close and roll at once."""
    w = bk.open_log_writer(name, roll_entries=1000)
    w.append(b"first")
    reader = bk.open_log_reader(name, start="earliest", poll_interval_s=0.05)
    assert _must(reader.read_next(timeout=5)).payload == b"first"
    reads: list[str] = []
    def counting(method: str):
        original = getattr(bk.store, method)

        def call(*args, **kwargs):
            reads.append(method)
            return original(*args, **kwargs)
        return call

    for method in ("read_ledger", "get"):
        monkeypatch.setattr(bk.store, method, counting(method))
    assert reader.read_next(timeout=1.5) is None            # ~30 long polls of 0.05 s
    assert len(reads) <= 2, reads                          # polling would re-read the metadata each time
    w.roll()
    w.append(b"second")
    assert _must(reader.read_next(timeout=5)).payload == b"second"
    w.close()
    reader.close()


def test_truncation_behind_reader_data_loss_or_skip(bk: BookKeeper, name: str):
    """R30: truncation drops whole ledgers (CAS, then delete); a reader that still needed them gets
    DataLossError, or skips to the earliest record with fail_on_data_loss=False."""
    w = bk.open_log_writer(name, roll_entries=10)
    positions = [w.append(b"d%02d" % i) for i in range(50)]
    ids = bk.log_metadata(name).ledger_ids
    strict = bk.open_log_reader(name)
    lenient = bk.open_log_reader(name, fail_on_data_loss=False)
    assert [_must(strict.read_next(5)).payload for _ in range(3)] == [b"d00", b"d01", b"d02"]
    assert _must(lenient.read_next(5)).payload == b"d00"
    dropped = bk.truncate_log(name, before=positions[20])
    assert dropped == ids[:2] and bk.log_metadata(name).ledger_ids == ids[2:]
    for lid in dropped:
        with pytest.raises(NoSuchLedgerError):
            bk.ledger_metadata(lid)
    with pytest.raises(DataLossError):
        while strict.read_next(5) is not None:
            pass
    rest = [r.payload for r in lenient.read(timeout=0.5)]
    assert rest == [b"d%02d" % i for i in range(1, 10)] + [b"d%02d" % i for i in range(20, 50)]
    with pytest.raises(DataLossError):
        bk.open_log_reader(name, start=positions[0])
    skipped = bk.open_log_reader(name, start=positions[0], fail_on_data_loss=False)
    assert _must(skipped.read_next(5)).position == positions[20]
    assert [r.payload for r in read_all(bk, name)][0] == b"d20"
    w.close()


def test_retention_by_size_and_age(bk: BookKeeper, name: str):
    """Retention removes whole old ledgers (never the current one) by size, and by age in the background."""
    w = bk.open_log_writer(name, roll_entries=5)
    for i in range(30):
        w.append(b"%04d" % i + b"r" * 996)
    ids = bk.log_metadata(name).ledger_ids
    assert len(ids) == 6
    bk.set_log_retention(name, max_bytes=12_000)
    assert bk.apply_log_retention(name) == ids[:2]
    assert bk.log_metadata(name).ledger_ids == ids[2:]
    with pytest.raises(NoSuchLedgerError):
        bk.ledger_metadata(ids[0])
    assert read_all(bk, name)[0].payload.startswith(b"0010")
    bk.set_log_retention(name, max_age_s=0.3)
    task = bk.start_log_retention(interval_s=0.1, names=[name])
    try:
        deadline = time.monotonic() + 10
        while bk.log_metadata(name).ledger_ids != ids[-1:] and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        task.stop()
    assert bk.log_metadata(name).ledger_ids == ids[-1:]
    assert w.append(b"still writing").ledger_id > ids[-1]          # the full ledger rolls first
    w.close()


def test_append_ledgers_with_commit_marker(bk: BookKeeper, name: str):
    """The Spark sink's commit: closed ledgers and the batch marker in one CAS; a replayed batch (other
    ledgers, the same marker) is not appended (False: its ledgers are the caller's to delete); the same
    call again (a retry after a lost answer) is True and appends nothing twice (the log lists its ledgers,
    which must never be deleted); ids must increase."""
    made = []
    for batch in range(3):
        lh = bk.create_ledger(3, 2, 2)
        for i in range(3):
            lh.add_entry(b"b%d-%d" % (batch, i))
        lh.close()
        made.append(lh.ledger_id)
    replay = made.pop(1)                                  # a replayed batch 0's ledger
    assert append_ledgers(bk, name, [made[0]], commit_marker=("query", 0)) is True
    assert append_ledgers(bk, name, [made[0]], commit_marker=("query", 0)) is True      # retried: once
    assert append_ledgers(bk, name, [replay], commit_marker=("query", 0)) is False      # replayed: none
    assert bk.append_ledgers(name, [made[1]], commit_marker=("query", 1)) is True
    meta = bk.log_metadata(name)
    assert meta.ledger_ids == made and meta.committed_batches == {"query": 1} and meta.entries == 6
    assert [r.payload for r in read_all(bk, name)] == [b"b0-0", b"b0-1", b"b0-2", b"b2-0", b"b2-1", b"b2-2"]


def test_cli_list_describe_tail(cluster, bk: BookKeeper, name: str, capsys):
    """`bkledger log list|describe|tail` against the cluster's metadata service URI."""
    w = bk.open_log_writer(name, roll_entries=4)
    for i in range(10):
        w.append(b"c%d" % i)
    w.close()
    uri = cluster.metadata_service_uri
    assert cli_main(["log", "list", "--uri", uri]) == 0
    assert name in capsys.readouterr().out.split()
    assert cli_main(["log", "describe", name, "--uri", uri]) == 0
    out = capsys.readouterr().out
    assert f"log                 {name}" in out and "entries             10" in out
    assert cli_main(["log", "tail", name, "--uri", uri, "--from", "earliest", "--max", "6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[1] for line in lines] == [f"c{i}" for i in range(6)]
    assert cli_main(["log", "describe", "no-such-log", "--uri", uri]) == 1
    assert "does not exist" in capsys.readouterr().err


def _must(record):
    assert record is not None, "no record arrived in time"
    return record


def _confirm(confirmed: set[bytes], payload: bytes, _future: object) -> None:
    confirmed.add(payload)
