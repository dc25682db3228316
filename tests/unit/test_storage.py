"""Ledger storage: entry logs + index + ledger state, flush/reopen, replay, corruption (R22)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from bkledger.bookie import index as idx
from bkledger.bookie.storage import LedgerStorage, StorageError


def entry(ledger_id: int, entry_id: int, lac: int = -1, payload: bytes | None = None) -> bytes:
    body = payload if payload is not None else f"payload-{ledger_id}-{entry_id}".encode() * 3
    return struct.pack(">qqqq", ledger_id, entry_id, lac, len(body)) + body


def batch(ledger_id: int, ids: list[int], lac: int = -1) -> tuple[list[int], list[int], bytes]:
    entries = [entry(ledger_id, e, lac) for e in ids]
    return ids, [len(e) for e in entries], b"".join(entries)


def add(st: LedgerStorage, ledger_id: int, ids: list[int], lac: int = -1) -> None:
    st.add_batch(ledger_id, *batch(ledger_id, ids, lac))


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "l0", tmp_path / "l1"]


def test_add_read_round_trip(dirs: list[Path]) -> None:
    st = LedgerStorage(dirs)
    add(st, 3, [0, 1, 2], lac=1)
    add(st, 4, [0])
    for e in range(3):
        assert st.read_entry(3, e) == entry(3, e, 1)
    assert st.read_entry(4, 0) == entry(4, 0)
    assert st.last_entry_id(3) == 2 and st.entry_ids(3) == [0, 1, 2]
    assert st.max_lac(3) == 1 and st.max_lac(4) == -1
    assert st.ledgers() == [3, 4] and st.has_ledger(3) and not st.has_ledger(5)
    st.close()


def test_missing_entries_are_none(dirs: list[Path]) -> None:
    st = LedgerStorage(dirs)
    assert st.read_entry(9, 0) is None
    add(st, 9, [0, 2])
    assert st.read_entry(9, 1) is None
    assert st.read_entry(9, 3) is None
    assert st.read_entry(9, 10**6) is None
    assert st.read_entry(9, -1) is None
    assert st.last_entry_id(10) == -1 and st.entry_ids(10) == []
    st.close()


def test_sparse_entry_ids_write_set_pattern(dirs: list[Path]) -> None:
    st = LedgerStorage(dirs)
    held = [e for e in range(100) if e % 3 != 2]  # E=3, Qw=2: this bookie misses every third entry
    for e in held:
        add(st, 1, [e])
    assert st.entry_ids(1) == held
    assert st.last_entry_id(1) == 100 - 1 - (1 if 99 % 3 == 2 else 0)
    got = [i for ids, _, _ in st.read_range(1, 0, 99, 1 << 20, 1000) for i in ids]
    assert got == held
    st.close()


def test_read_range_batching_and_order(dirs: list[Path]) -> None:
    st = LedgerStorage(dirs)
    add(st, 2, list(range(0, 50)))
    add(st, 7, [0, 1])  # interleaved in the same dir's log: entries 50.. are not adjacent to 49
    add(st, 2, list(range(50, 100)))
    size = len(entry(2, 0))
    batches = list(st.read_range(2, 10, 89, max_batch_bytes=size * 7 + 1, max_batch_entries=100))
    assert all(len(ids) <= 7 for ids, _, _ in batches)
    flat = [i for ids, _, _ in batches for i in ids]
    assert flat == list(range(10, 90))
    for ids, sizes, blob in batches:
        assert blob == b"".join(entry(2, i) for i in ids) and sum(sizes) == len(blob)
    by_count = list(st.read_range(2, 0, 1000, max_batch_bytes=1 << 30, max_batch_entries=30))
    assert [len(ids) for ids, _, _ in by_count] == [30, 30, 30, 10]
    huge = list(st.read_range(2, 0, 2, max_batch_bytes=1, max_batch_entries=10))
    assert [ids for ids, _, _ in huge] == [[0], [1], [2]]  # at least one entry per batch
    assert list(st.read_range(2, 200, 300, 100, 100)) == []
    assert list(st.read_range(99, 0, 3, 100, 100)) == []
    st.close()


def test_flush_and_reopen_keeps_everything(dirs: list[Path]) -> None:
    st = LedgerStorage(dirs)
    add(st, 1, [0, 1, 2], lac=1)
    add(st, 2, [0, 1, 3], lac=0)
    st.set_master_key(1, b"k1" * 10)
    st.set_fenced(1)
    st.set_explicit_lac(2, b"explicit")
    st.flush()
    add(st, 1, [3])
    st.flush()
    st.close()
    st = LedgerStorage(dirs)
    assert st.ledgers() == [1, 2]
    assert st.entry_ids(1) == [0, 1, 2, 3] and st.entry_ids(2) == [0, 1, 3]
    assert st.read_entry(1, 3) == entry(1, 3) and st.read_entry(2, 3) == entry(2, 3, 0)
    assert st.master_key(1) == b"k1" * 10 and st.master_key(2) is None
    assert st.is_fenced(1) and not st.is_fenced(2)
    assert st.explicit_lac(2) == b"explicit" and st.explicit_lac(1) is None
    assert st.max_lac(1) == 1 and st.max_lac(2) == 0
    assert st.last_entry_id(1) == 3
    st.close()


def test_reopen_without_flush_then_replay(dirs: list[Path]) -> None:
    st = LedgerStorage(dirs)
    add(st, 1, [0, 1])
    st.flush()
    add(st, 1, [2, 3], lac=2)
    st.set_fenced(1)
    st.close()  # no flush: the index of 2, 3 and the fenced flag are lost, as in a crash
    st = LedgerStorage(dirs)
    assert st.entry_ids(1) == [0, 1] and not st.is_fenced(1)
    add(st, 1, [0, 1])  # journal replay re-applies from the last mark: overlapping and idempotent
    add(st, 1, [2, 3], lac=2)
    st.set_fenced(1)
    st.set_fenced(1)
    assert st.entry_ids(1) == [0, 1, 2, 3] and st.is_fenced(1) and st.max_lac(1) == 2
    assert [st.read_entry(1, e) for e in range(4)] == [entry(1, e, -1 if e < 2 else 2) for e in range(4)]
    st.flush()
    st.close()
    st = LedgerStorage(dirs)
    assert st.entry_ids(1) == [0, 1, 2, 3] and st.is_fenced(1)
    st.close()


def _corrupt_slot(
    dirs: list[Path], ledger_id: int, entry_id: int, log_id: int, offset: int, size: int
) -> None:
    index_dir = dirs[ledger_id % len(dirs)] / "current" / "index"
    fd = os.open(idx.index_path(index_dir, ledger_id), os.O_WRONLY)
    os.pwrite(fd, np.array([log_id, offset, size], dtype="<i8").tobytes(), entry_id * idx.SLOT_SIZE)
    os.close(fd)


@pytest.mark.parametrize(
    "slot",
    [
        "other-entry",  # points at entry 0 instead of 1
        "past-eof",
        "no-such-log",
        "negative",
    ],
)
def test_corrupt_index_location_raises(dirs: list[Path], slot: str) -> None:
    st = LedgerStorage(dirs)
    add(st, 5, [0, 1, 2])
    st.flush()
    st.close()
    index_dir = dirs[1] / "current" / "index"
    slots = np.fromfile(idx.index_path(index_dir, 5), dtype="<i8").reshape(-1, 3)
    log_id, off0, size0 = (int(v) for v in slots[0])
    bad = {
        "other-entry": (log_id, off0, size0),
        "past-eof": (log_id, 1 << 30, size0),
        "no-such-log": (log_id + 100, off0, size0),
        "negative": (log_id, -5, size0),
    }[slot]
    _corrupt_slot(dirs, 5, 1, *bad)
    st = LedgerStorage(dirs)
    assert st.read_entry(5, 0) == entry(5, 0)
    with pytest.raises(StorageError):
        st.read_entry(5, 1)
    with pytest.raises(StorageError):
        list(st.read_range(5, 0, 2, 1 << 20, 100))
    st.close()


def test_entry_log_roll_at_small_limit(dirs: list[Path]) -> None:
    st = LedgerStorage(dirs, entry_log_size_limit=4096)
    for e in range(200):
        add(st, 4, [e])
    logs = sorted((dirs[0] / "current").glob("*.log"))
    assert len(logs) > 5
    assert all(p.stat().st_size <= 4096 for p in logs)
    batches = list(st.read_range(4, 0, 199, 1 << 20, 1000))
    assert [i for ids, _, _ in batches for i in ids] == list(range(200))
    assert b"".join(b for _, _, b in batches) == b"".join(entry(4, e) for e in range(200))
    st.flush()
    st.close()
    st = LedgerStorage(dirs, entry_log_size_limit=4096)
    assert st.read_entry(4, 199) == entry(4, 199)
    add(st, 4, [200])
    assert st.read_entry(4, 200) == entry(4, 200)
    st.close()


def test_delete_ledger(dirs: list[Path]) -> None:
    st = LedgerStorage(dirs)
    add(st, 1, [0])
    st.set_master_key(1, b"k")
    st.flush()
    st.delete_ledger(1)
    assert not st.has_ledger(1) and st.read_entry(1, 0) is None
    st.flush()
    st.close()
    st = LedgerStorage(dirs)
    assert st.ledgers() == []
    st.close()


def test_rejects_inconsistent_batch(dirs: list[Path]) -> None:
    st = LedgerStorage(dirs)
    with pytest.raises(ValueError):
        st.add_batch(1, [0, 1], [10, 10], b"x" * 15)
    with pytest.raises(ValueError):
        st.add_batch(1, [-1], [3], b"abc")
    st.close()


def test_read_range_one_pread_per_adjacent_run(dirs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs: two preads, straight into one buffer that holds the entries in order."""
    from bkledger.bookie.entrylog import EntryLogger

    st = LedgerStorage(dirs)
    add(st, 2, list(range(0, 50)))
    add(st, 8, [0])  # same dir: breaks adjacency between entry 49 and 50
    add(st, 2, list(range(50, 100)))
    calls: list[tuple[int, int, int]] = []
    real_read, real_into = EntryLogger.read, EntryLogger.read_into

    def counting(self: EntryLogger, log_id: int, offset: int, size: int) -> bytes:
        calls.append((log_id, offset, size))
        return real_read(self, log_id, offset, size)

    def counting_into(self: EntryLogger, log_id: int, offset: int, out: memoryview) -> None:
        calls.append((log_id, offset, len(out)))
        real_into(self, log_id, offset, out)

    monkeypatch.setattr(EntryLogger, "read", counting)
    monkeypatch.setattr(EntryLogger, "read_into", counting_into)
    (only,) = list(st.read_range(2, 0, 99, 1 << 30, 1000))
    assert only[0].tolist() == list(range(100)) and len(calls) == 2
    assert bytes(only[2]) == b"".join(entry(2, e) for e in range(100))
    (single,) = list(st.read_range(2, 0, 49, 1 << 30, 1000))       # one run: one pread, no copy after
    assert len(calls) == 3 and bytes(single[2]) == b"".join(entry(2, e) for e in range(50))
    st.close()


def test_concurrent_reads_while_adding(dirs: list[Path]) -> None:
    import threading

    st = LedgerStorage(dirs, entry_log_size_limit=64 * 1024)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                last = st.last_entry_id(6)
                if last >= 0:
                    assert st.read_entry(6, last) == entry(6, last)
                    ids = [i for b, _, _ in st.read_range(6, 0, last, 8192, 50) for i in b]
                    assert ids[: last + 1] == list(range(last + 1))
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    for b in range(100):
        add(st, 6, list(range(b * 10, b * 10 + 10)))
    stop.set()
    for t in readers:
        t.join()
    assert errors == []
    st.close()


def _state(st: LedgerStorage, ledger_ids: list[int]) -> tuple[object, ...]:
    return (tuple((lid, e, st.read_entry(lid, e)) for lid in ledger_ids for e in st.entry_ids(lid)),
            tuple((lid, st.last_entry_id(lid), st.max_lac(lid)) for lid in ledger_ids),
            tuple(sorted(t.items()) for t in st._live))   # live bytes per entry log, kept with the index


@pytest.mark.parametrize("page_size", [48, 8192])
def test_consecutive_and_ascending_batches_index_as_any_order_does(tmp_path: Path, page_size: int) -> None:
    """A batch of consecutive ids is written through slices of the index pages, one of ascending ids
    (every other id, as a bookie's share of a striped write set, Qw < E) through per-page scatters,
    across page boundaries too; the same entries in batches of descending ids take the general path. All three must
    give the same slots, reads, LAC and entry-log usage, also when entries are added again (replay)."""
    spans = [range(0, 40), range(35, 60)]
    ways = {"run": [list(r) for r in spans],
            "ascending": [list(r)[parity::2] for r in spans for parity in (0, 1)],
            "descending": [list(r)[::-1][parity::2] for r in spans for parity in (0, 1)]}
    stores = {way: LedgerStorage([tmp_path / way], page_size=page_size) for way in ways}
    for way, batches in ways.items():
        for ids in batches:
            add(stores[way], 7, ids, lac=3)
    states = {way: _state(st, [7]) for way, st in stores.items()}
    assert states["run"] == states["ascending"] == states["descending"]
    assert stores["run"].entry_ids(7) == list(range(60))
    for st in stores.values():
        st.close()


def test_stored_entries_reads_only_what_is_held(dirs: list[Path]) -> None:
    """The rewrite check's facts: the stored bytes of the held ids of a batch; nothing past the last entry."""
    st = LedgerStorage(dirs)
    add(st, 3, [0, 1, 2, 5])
    assert st.stored_entries(3, [6, 7]) == {}
    assert st.stored_entries(9, [0]) == {}
    assert st.stored_entries(3, [5, 3, 1, 9]) == {5: entry(3, 5), 1: entry(3, 1)}
    st.close()
