"""Compaction of a log on real bookies and a real ZooKeeper: same records at the same positions after it,
positions held before it still work, and it races a live writer, a reader and a sink's commits safely."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid

import pytest

from bkledger.bookie.cli import main as cli_main
from bkledger.client import BookKeeper
from bkledger.client.errors import BKError, LogNotFoundError, LogUpdateConflictError, NoSuchLedgerError
from bkledger.client.log import compaction
from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core.meta import Position
from bkledger.client.log.logs import append_ledgers
from bkledger.client.log.reader import LogRecord
from bkledger.client.log.store import log_path, now_ms
from tests.integration.test_progress import ctrl_c_after

pytestmark = pytest.mark.integration


@pytest.fixture
def name() -> str:
    return f"log-{uuid.uuid4().hex[:8]}"


def read_all(bk: BookKeeper, name: str, start: object = "earliest") -> list[LogRecord]:
    with bk.open_log_reader(name, start) as reader:  # type: ignore[arg-type]
        return list(reader.read(timeout=0.5))


def write_small_ledgers(bk: BookKeeper, name: str, ledgers: int, per_ledger: int) -> list[Position]:
    with bk.open_log_writer(name, roll_entries=per_ledger) as w:
        return [w.append(b"rec-%04d" % i) for i in range(ledgers * per_ledger)]


def test_positions_work_across_a_compaction(bk, name, cluster, capsys):
    """Same records at the same positions; a Position taken before compaction starts a reader at the same
    record after it; truncate_log(before=...) with an old position; the CLI verb does the same."""
    positions = write_small_ledgers(bk, name, 12, 3)
    before = [(r.position, r.payload) for r in read_all(bk, name)]
    assert [p for p, _ in before] == positions
    done = bk.compact_log(name, target_bytes=1 << 20, min_ledgers=2, grace_s=0)
    meta = bk.log_metadata(name)
    ledgers = [p.ledger_id for p in positions[::3]]
    assert done.replaced == 10 and len(meta.ledgers) == 3                    # the last two are left alone
    assert meta.logical_ids == ledgers and meta.ledger_ids[1:] == ledgers[-2:]
    assert sorted(done.deleted) == ledgers[:10]                               # grace 0: deleted at once
    assert [(r.position, r.payload) for r in read_all(bk, name)] == before
    assert [(r.position, r.payload) for r in read_all(bk, name, positions[20])] == before[20:]
    assert bk.truncate_log(name, before=positions[20]) == []              # inside the compacted ledger: kept
    assert [(r.position, r.payload) for r in read_all(bk, name, positions[4])] == before[4:]
    more = write_small_ledgers(bk, name, 3, 2)
    assert cli_main(["log", "compact", name, "--uri", cluster.metadata_service_uri, "--min-ledgers", "2",
                     "--grace-s", "0"]) == 0
    assert "compacted 4 ledgers into 1" in capsys.readouterr().out
    everything = read_all(bk, name)
    assert [r.payload for r in everything] == [p for _, p in before] + [b"rec-%04d" % i for i in range(6)]
    assert [r.position for r in everything] == positions + more
    listed = bk.log_metadata(name).ledger_ids
    assert len(listed) == 3 and listed[2] == more[4].ledger_id
    assert bk.truncate_log(name, before=more[4]) == listed[:2]
    assert [r.position for r in read_all(bk, name)] == more[4:]


def test_compaction_races_a_writer_and_a_reader(bk, name, cluster):
    """A writer rolls every 3 records and a reader tails while compaction runs again and again (grace
    0.2 s, so old ledgers vanish under the reader): nothing lost, nothing twice, order kept."""
    acked: list[tuple[Position, bytes]] = []
    got: list[LogRecord] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with BookKeeper(cluster.metadata_service_uri) as client, \
                    client.open_log_writer(name, roll_entries=3) as w:
                i = 0
                while not stop.is_set() or i < 60:
                    payload = b"w-%05d" % i
                    acked.append((w.append(payload), payload))
                    i += 1
        except BaseException as exc:          # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            written.set()

    written = threading.Event()
    writer = threading.Thread(target=write)
    writer.start()
    deadline = time.monotonic() + 30
    while not acked and time.monotonic() < deadline:
        time.sleep(0.01)

    def read() -> None:
        try:
            with BookKeeper(cluster.metadata_service_uri) as client, \
                    client.open_log_reader(name, "earliest", poll_interval_s=0.05) as r:
                while not (written.is_set() and len(got) >= len(acked)) and time.monotonic() < deadline + 60:
                    rec = r.read_next(timeout=0.2)
                    if rec is not None:
                        got.append(rec)
        except BaseException as exc:          # noqa: BLE001
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    compactions = 0
    try:
        while compactions < 6 and time.monotonic() < deadline:
            try:
                done = bk.compact_log(name, target_bytes=1 << 20, min_ledgers=2, grace_s=0.2)
                compactions += bool(done.compacted)
            except LogUpdateConflictError:
                pass
            time.sleep(0.05)
    finally:
        stop.set()
        writer.join(60)
        reader.join(90)
    assert not errors, errors
    assert compactions >= 2
    assert [(r.position, r.payload) for r in got] == acked
    assert [(r.position, r.payload) for r in read_all(bk, name)] == acked


def test_compaction_races_sink_commits(bk, name):
    """append_ledgers with batch markers (a streaming sink's commit) while compaction runs: each commit
    lands once, markers survive, order is the commit order."""
    stop = threading.Event()
    committed: list[bytes] = []
    errors: list[BaseException] = []

    def sink() -> None:
        try:
            for batch in range(25):
                lh = bk.create_ledger(2, 2, 2)
                payload = b"batch-%03d" % batch
                lh.add_entry(payload)
                lh.close()
                assert append_ledgers(bk, name, [lh.ledger_id], commit_marker=("query", batch))
                assert not append_ledgers(bk, name, [], commit_marker=("query", batch))     # replay: no-op
                committed.append(payload)
        except BaseException as exc:          # noqa: BLE001
            errors.append(exc)
        finally:
            stop.set()

    thread = threading.Thread(target=sink)
    thread.start()
    swaps = 0
    while not stop.is_set():
        try:
            swaps += len(bk.compact_log(name, target_bytes=1 << 20, min_ledgers=2, grace_s=0).compacted)
        except (LogUpdateConflictError, LogNotFoundError):      # raced / the first commit not there yet
            time.sleep(0.01)
    thread.join(60)
    swaps += len(bk.compact_log(name, target_bytes=1 << 20, min_ledgers=2, grace_s=0).compacted)
    assert not errors, errors
    assert swaps >= 1
    meta = bk.log_metadata(name)
    assert meta.committed_batches == {"query": 24} and len(meta.ledgers) <= 3
    assert [r.payload for r in read_all(bk, name)] == committed


def compact_cmd(uri: str, name: str, *argv: str) -> list[str]:
    return [sys.executable, "-m", "bkledger.bookie.cli", "log", "compact", name, "--uri", uri, "--grace-s", "0", *argv]


PROGRESS_ENV = {**os.environ, "BKLEDGER_PROGRESS_INTERVAL": "0"}


def test_compact_reports_progress_lines_and_json(bk, name, cluster):
    """Like `shell recover`: not on a terminal, a line with the totals, one per run, a last 'done' line;
    with --json nothing on stderr and the result as JSON."""
    uri = cluster.metadata_service_uri
    write_small_ledgers(bk, name, 10, 3)                  # 8 ledgers of 24 bytes compactable, runs of 2
    loud = subprocess.run(compact_cmd(uri, name, "--target-bytes", "50", "--min-ledgers", "2"),
                          capture_output=True, text=True, timeout=120, env=PROGRESS_ENV)
    assert loud.returncode == 0, loud.stderr
    lines = [line for line in loud.stderr.splitlines() if line.startswith("compact: ")]
    assert re.fullmatch(r"compact: 8 ledgers, ~192 B", lines[0]), lines
    assert [re.match(r"compact: (\d)/8 ledgers, ", line).group(1) for line in lines[1:-1]] == ["2", "4", "6", "8"]
    assert re.match(r"compact: 8/8 ledgers, .*\(done after \d+s\)$", lines[-1]), lines
    assert "compacted 8 ledgers into 4" in loud.stdout
    write_small_ledgers(bk, name, 4, 3)
    quiet = subprocess.run(compact_cmd(uri, name, "--min-ledgers", "2", "--json"), capture_output=True, text=True,
                           timeout=120, env=PROGRESS_ENV)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    result = json.loads(quiet.stdout)
    assert result["replaced"] == 8 and len(result["compacted"]) == 1 and result["stopped"] is False
    assert len(result["deleted"]) == 8 and result["compacted"][0]["ledger_id"] == bk.log_metadata(name).ledger_ids[0]


def test_ctrl_c_stops_compact_between_runs_and_a_rerun_finishes(bk, name, cluster):
    """SIGINT during `log compact`: what was copied is swapped in, the rest untouched, exit 130; the log
    reads back the same; a second run compacts what was left."""
    uri = cluster.metadata_service_uri
    positions = write_small_ledgers(bk, name, 62, 3)
    before = [(r.position, r.payload) for r in read_all(bk, name)]
    status, out, err = ctrl_c_after(compact_cmd(uri, name, "--target-bytes", "50", "--min-ledgers", "2"),
                                    PROGRESS_ENV, r"^compact: 2/60 ledgers")
    assert status == 130, (out, err)
    assert "Ctrl-C: stopping after the step in hand" in err and "compact interrupted (Ctrl-C)" in out
    done = int(re.search(r"compacted (\d+) ledgers into", out).group(1))
    assert 2 <= done < 60 and len(bk.log_metadata(name).ledgers) == 62 - done // 2
    assert [(r.position, r.payload) for r in read_all(bk, name)] == before
    again = subprocess.run(compact_cmd(uri, name, "--target-bytes", "50", "--min-ledgers", "2", "--json"),
                           capture_output=True, text=True, timeout=120, env=PROGRESS_ENV)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["replaced"] == 60 - done
    assert len(bk.log_metadata(name).ledgers) == 32
    assert [(r.position, r.payload) for r in read_all(bk, name, positions[7])] == before[7:]


def test_swaps_are_bounded_and_replaced_ledgers_wait_in_child_znodes(bk, name, monkeypatch):
    """A compaction swaps SWAP_LEDGERS replaced ledgers per transaction, each with a child znode naming
    them (the head names only the znodes, so it stays small however much was replaced); once the grace
    period ended the next run deletes the ledgers and the znodes."""
    monkeypatch.setattr(compaction, "SWAP_LEDGERS", 4)
    write_small_ledgers(bk, name, 14, 3)
    before = [(r.position, r.payload) for r in read_all(bk, name)]
    old = bk.log_metadata(name).ledger_ids[:12]
    done = bk.compact_log(name, target_bytes=50, min_ledgers=2, grace_s=600)
    assert done.replaced == 12 and done.deleted == []
    path = log_path(bk.store, name)
    znodes = [c for c in bk.store.children(path) if c.startswith(compaction.PENDING_PREFIX)]
    assert len(znodes) == 3                                          # 6 runs of 2, swapped 4 ledgers at a time
    assert sorted(i for z in znodes for i in cp.decode_pending(bk.store.get(f"{path}/{z}")[0])) == old
    assert sorted(w for _, w in cp.pending(bk.log_metadata(name))) == sorted(znodes)
    assert all(bk.ledger_metadata(i) for i in old)                   # still there for readers mid-way
    assert [(r.position, r.payload) for r in read_all(bk, name)] == before
    monkeypatch.setattr(compaction, "now_ms", lambda: now_ms() + 601_000)
    assert sorted(compaction.delete_due(bk, name)) == old
    assert not [c for c in bk.store.children(path) if c.startswith(compaction.PENDING_PREFIX)]
    assert cp.pending(bk.log_metadata(name)) == []
    assert [(r.position, r.payload) for r in read_all(bk, name)] == before
    for ledger_id in old:
        with pytest.raises(NoSuchLedgerError):
            bk.ledger_metadata(ledger_id)


def test_delete_log_deletes_the_replaced_ledgers_still_in_their_grace_period(bk, name):
    """delete_log removes every ledger of the log, also a compacted ledger that a second compaction replaced
    and that waits for its grace period in a `pending-*` znode: the log lists it nowhere else (it was
    left behind for good before)."""
    seen: set[int] = set()
    for _ in range(2):
        write_small_ledgers(bk, name, 6, 2)
        seen |= set(bk.log_metadata(name).ledger_ids)
        assert bk.compact_log(name, target_bytes=1 << 20, min_ledgers=2, grace_s=600).replaced >= 2
        seen |= set(bk.log_metadata(name).ledger_ids)
    bk.delete_log(name)
    for ledger_id in sorted(seen):
        with pytest.raises(NoSuchLedgerError):
            bk.ledger_metadata(ledger_id)


def test_background_compaction_runs_on_its_schedule(bk, name):
    """start_log_compaction, like start_log_retention: a daemon thread compacting the named logs every
    interval; the log reads back the same; stop() ends it."""
    write_small_ledgers(bk, name, 8, 3)
    before = [(r.position, r.payload) for r in read_all(bk, name)]
    task = bk.start_log_compaction(interval_s=0.1, names=[name], min_ledgers=2, grace_s=0)
    try:
        deadline = time.monotonic() + 30
        while len(bk.log_metadata(name).ledgers) > 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        task.stop()
    assert len(bk.log_metadata(name).ledgers) == 3 and task.runs >= 1
    assert any(r.replaced == 6 for r in task.results)
    assert [(r.position, r.payload) for r in read_all(bk, name)] == before


def test_a_failed_compaction_leaves_no_copies_behind(bk, name):
    """The second run cannot be read (its ledgers have another password than the one given): compaction
    fails with the error, the copy of the first run (made, not yet swapped) is deleted, the log is as it
    was. (Without a password, each ledger is opened with its own: issue 41's key per log.)"""
    ids = []
    for password in (b"other", b"other", b"other", b"", b"", b"", b"other", b"other"):
        lh = bk.create_ledger(3, 2, 2, password=password)
        lh.add_entry(b"x-%d" % len(ids))
        lh.close()
        ids.append(lh.ledger_id)
    append_ledgers(bk, name, ids)
    existing = set(bk.list_ledgers())
    with pytest.raises(BKError):
        bk.compact_log(name, min_ledgers=2, grace_s=0, password=b"other")
    assert set(bk.list_ledgers()) == existing
    assert bk.log_metadata(name).ledger_ids == ids and cp.pending(bk.log_metadata(name)) == []
