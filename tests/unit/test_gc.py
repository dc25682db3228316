"""Entry-log garbage collection and compaction in ledger storage, and the GC's scan-and-compare (seed 004)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from bkledger.bookie.config import BookieConfig
from bkledger.bookie.gc import GC_SHARE, GarbageCollector, next_round_wait
from bkledger.bookie.storage import LedgerStorage
from bkledger.client.errors import NoSuchLedgerError


def entry(ledger_id: int, entry_id: int, size: int = 2000) -> bytes:
    body = bytes([(ledger_id * 31 + entry_id) % 251]) * size
    return struct.pack(">qqqq", ledger_id, entry_id, -1, len(body)) + body


def add(st: LedgerStorage, ledger_id: int, ids: list[int]) -> None:
    entries = [entry(ledger_id, e) for e in ids]
    st.add_batch(ledger_id, ids, [len(e) for e in entries], b"".join(entries))


def log_files(root: Path) -> list[Path]:
    return sorted((root / "current").glob("*.log"))


def interleaved(tmp_path: Path) -> LedgerStorage:
    st = LedgerStorage([tmp_path / "l0"], entry_log_size_limit=64 * 1024)
    for e in range(100):                       # two ledgers interleaved over many small logs
        add(st, 1, [e])
        add(st, 2, [e])
    st.flush()
    return st


def test_compaction_moves_live_entries_and_frees_logs(tmp_path: Path) -> None:
    """R22: after compaction every live entry reads back identical, and the old logs are gone."""
    st = interleaved(tmp_path)
    before = log_files(tmp_path / "l0")
    assert len(before) > 3
    st.delete_ledger(1)
    usage = st.entry_log_usage()
    assert usage and all(0 < live < total for _, _, live, total in usage)
    for d, log_id, _, _ in usage:
        moved, _ = st.compact_entry_log(d, log_id)
        assert moved > 0
    freed = st.remove_dead_entry_logs([(d, log_id) for d, log_id, _, _ in usage])
    assert freed > 0
    after = log_files(tmp_path / "l0")
    assert not set(p.name for p in before[:-1]) & set(p.name for p in after)
    for e in range(100):
        assert st.read_entry(2, e) == entry(2, e)
        assert st.read_entry(1, e) is None
    st.close()
    reopened = LedgerStorage([tmp_path / "l0"], entry_log_size_limit=64 * 1024)
    assert [reopened.read_entry(2, e) for e in range(100)] == [entry(2, e) for e in range(100)]
    reopened.close()


def test_dead_logs_deleted_live_logs_kept(tmp_path: Path) -> None:
    st = LedgerStorage([tmp_path / "l0"], entry_log_size_limit=64 * 1024)
    for e in range(60):
        add(st, 1, [e])
    for e in range(60):
        add(st, 2, [e])
    st.flush()
    st.delete_ledger(1)
    dead = [(d, log_id) for d, log_id, live, _ in st.entry_log_usage() if live == 0]
    assert dead
    assert st.remove_dead_entry_logs(dead) > 0
    assert all(st.read_entry(2, e) == entry(2, e) for e in range(60))
    st.close()


class FakeStore:
    """Ledger 2 exists; the listing misses ledger 3 (created after it), which a re-check finds."""

    def __init__(self) -> None:
        self.existing = {2, 3}

    def list_ledgers(self) -> list[int]:
        return [2]

    def read_ledger(self, ledger_id: int) -> tuple[object, int]:
        if ledger_id not in self.existing:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist")
        return object(), 0


def test_scan_and_compare_rechecks_before_deleting(tmp_path: Path) -> None:
    st = interleaved(tmp_path)
    add(st, 3, [0])
    config = BookieConfig(gcWaitTime=0, majorCompactionInterval=0, minorCompactionInterval=0)
    gc = GarbageCollector(st, FakeStore(), config)  # type: ignore[arg-type]
    result = gc.run_once(force_major=True)
    assert result.ledgers_deleted == [1]
    assert st.ledgers() == [2, 3]
    assert result.bytes_freed > 0 and result.logs_compacted > 0
    assert all(st.read_entry(2, e) == entry(2, e) for e in range(100))
    st.close()


def test_gc_rounds_take_at_most_their_share_of_time() -> None:
    """A slow ledger listing (very many ledgers) spaces the next round out; a quick one keeps gcWaitTime."""
    assert next_round_wait(1.0, 0.01) == 1.0
    assert next_round_wait(1.0, 0.5) == pytest.approx(0.5 * 19)
    for last in (0.0, 0.2, 3.0):
        wait = next_round_wait(1.0, last)
        assert wait >= 1.0 and last / (last + wait) <= GC_SHARE + 1e-12


def _walked_live(st: LedgerStorage) -> dict[tuple[int, int], int]:
    """Live bytes per (dir, entry log) the slow way: every ledger's usage added up."""
    live: dict[tuple[int, int], int] = {}
    for led in st._ledgers.values():
        for log_id, (_, size) in led.usage.items():
            live[(led.dir_index, log_id)] = live.get((led.dir_index, log_id), 0) + size
    return live


def test_per_log_totals_follow_adds_overwrites_deletes_compaction_and_restart(tmp_path: Path) -> None:
    """entry_log_usage keeps per-log totals instead of walking every ledger under the storage lock; after
    every kind of change (and a reopen, which rebuilds them from the index) they equal the walk's."""
    dirs = [tmp_path / "l0", tmp_path / "l1"]
    st = LedgerStorage(dirs, entry_log_size_limit=16 * 1024)
    rng = random.Random(7)

    def check(storage: LedgerStorage) -> None:
        walked = _walked_live(storage)
        usage = storage.entry_log_usage()
        assert usage, "the test must span several entry logs"
        for d, log_id, live, _total in usage:
            assert live == walked.get((d, log_id), 0)

    for step in range(400):
        ledger_id = rng.randint(1, 12)
        first = rng.randint(0, 30)
        add(st, ledger_id, list(range(first, first + rng.randint(1, 5))))   # overlapping ids: overwrites
        if step % 50 == 49:
            st.delete_ledger(rng.randint(1, 12))
            check(st)
    st.flush()
    for d, log_id, live, total in st.entry_log_usage():
        if total and live / total < 0.5:
            st.compact_entry_log(d, log_id)
    check(st)
    st.close()
    reopened = LedgerStorage(dirs, entry_log_size_limit=16 * 1024)
    check(reopened)
    reopened.close()
