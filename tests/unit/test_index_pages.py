"""The paged ledger index: page geometry, the bounded page cache (pure), and ledger storage over it.

Small pages (10 entries) and a cache of a few pages make every path evict: entries must read back after
eviction, after reopening, after compaction moved them, and the cache must never hold more than its limit
once an add returns.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from bkledger.bookie import index as idx
from bkledger.bookie.core.index_pages import SLOT_SIZE, Page, PageCache, PageGeometry
from bkledger.bookie.storage import LedgerStorage

PAGE_SIZE = 10 * SLOT_SIZE  # 10 entries per page
LIMIT = 3


def entry(ledger_id: int, entry_id: int, size: int = 300) -> bytes:
    body = bytes([(ledger_id * 31 + entry_id) % 251]) * size
    return struct.pack(">qqqq", ledger_id, entry_id, -1, len(body)) + body


def add(st: LedgerStorage, ledger_id: int, ids: list[int]) -> None:
    entries = [entry(ledger_id, e) for e in ids]
    st.add_batch(ledger_id, ids, [len(e) for e in entries], b"".join(entries))


def paged(root: Path, entry_log_size_limit: int = 1 << 30) -> LedgerStorage:
    return LedgerStorage([root / "l0", root / "l1"], page_size=PAGE_SIZE, page_limit=LIMIT,
                         entry_log_size_limit=entry_log_size_limit)


def cached(st: LedgerStorage) -> int:
    return len(st._pages)


# ---- pure -----------------------------------------------------------------------------------------


def test_geometry_splits_ids_by_page() -> None:
    geo = PageGeometry(PAGE_SIZE)
    assert geo.entries == 10 and geo.page_bytes == PAGE_SIZE
    assert geo.page_of(9) == 0 and geo.page_of(10) == 1 and geo.first_entry(3) == 30
    assert geo.pages_for(0) == 0 and geo.pages_for(SLOT_SIZE) == 1 and geo.pages_for(10 * SLOT_SIZE + 5) == 1
    assert geo.pages_for(11 * SLOT_SIZE) == 2
    ids = np.array([25, 3, 11, 4, 29], dtype=np.int64)
    parts = {page: ids[sel].tolist() for page, sel in geo.split(ids)}
    assert parts == {0: [3, 4], 1: [11], 2: [25, 29]}
    assert PageGeometry(8192).entries == 341


def _page() -> Page:
    return Page(np.zeros((10, 3), dtype=np.int64))


def test_cache_evicts_least_recently_used_clean_pages_only() -> None:
    cache = PageCache(2)
    a, b, c = _page(), _page(), _page()
    cache.insert((1, 0), a)
    cache.insert((1, 1), b)
    cache.changed((1, 0), a)                  # dirty: pinned
    cache.insert((1, 2), c)                   # evicts b, the only clean page
    assert cache.peek((1, 1)) is None and cache.get((1, 0)) is a and len(cache) == 2
    d = _page()
    cache.changed((1, 2), c)
    cache.insert((1, 3), d)                   # nothing clean to make room with: over the limit
    assert cache.over_limit and cache.dirty_count == 2
    cache.written((1, 0), a, a.version)       # a is clean now, and more recently used than d
    assert cache.evict() == 1 and not cache.over_limit
    assert cache.peek((1, 3)) is None and cache.peek((1, 0)) is a and not a.dirty


def test_a_page_changed_while_being_written_stays_dirty() -> None:
    cache = PageCache(1)
    page = _page()
    cache.insert((5, 0), page)
    cache.changed((5, 0), page)
    taken = page.version                      # the flush copies this version ...
    cache.changed((5, 0), page)               # ... and the page changes before it is reported written
    cache.written((5, 0), page, taken)
    assert page.dirty and cache.dirty_pages() == [((5, 0), page)]
    cache.drop_ledger(5)
    assert len(cache) == 0


# ---- storage over the paged index -----------------------------------------------------------------


def test_evicted_pages_read_back(tmp_path: Path) -> None:
    st = paged(tmp_path)
    for e in range(0, 200, 7):                # 3 ledgers interleaved, batches crossing page bounds
        for ledger_id in (1, 2, 3):
            add(st, ledger_id, list(range(e, min(e + 7, 200))))
            assert cached(st) <= LIMIT
    st.flush()
    for ledger_id in (1, 2, 3):
        assert [st.read_entry(ledger_id, e) for e in range(200)] == [entry(ledger_id, e) for e in range(200)]
        assert cached(st) <= LIMIT
        got = [i for ids, _, _ in st.read_range(ledger_id, 0, 10**9, 4096, 50) for i in ids]
        assert got == list(range(200))
        assert st.entry_ids(ledger_id) == list(range(200)) and st.last_entry_id(ledger_id) == 199
    assert st.read_entry(1, 200) is None and st.read_entry(4, 0) is None
    st.close()


def test_a_cache_full_of_dirty_pages_is_flushed_before_it_grows(tmp_path: Path) -> None:
    """No checkpoint at all: the adds themselves write pages out (entry logs fsynced first)."""
    st = paged(tmp_path)
    for e in range(100):
        add(st, 1, [e])
        assert cached(st) <= LIMIT
    index_file = idx.index_path(tmp_path / "l1" / "current" / "index", 1)
    assert index_file.stat().st_size >= 7 * PAGE_SIZE  # pages 0..6 at least went out early
    assert [st.read_entry(1, e) for e in range(100)] == [entry(1, e) for e in range(100)]
    st.close()


def test_restart_reads_every_entry_and_rebuilds_the_log_usage(tmp_path: Path) -> None:
    st = paged(tmp_path, entry_log_size_limit=16 * 1024)
    for e in range(150):
        add(st, 1, [e])
        if e % 3:
            add(st, 2, [e])
    add(st, 1, [5, 6])                        # re-added (as replay does): the usage counts them once
    st.set_fenced(2)
    st.flush()
    usage = st.entry_log_usage()
    assert usage and all(0 < live <= total for _, _, live, total in usage)
    st.close()
    again = paged(tmp_path, entry_log_size_limit=16 * 1024)
    reopened = {(d, log_id): live for d, log_id, live, _ in again.entry_log_usage()}
    assert {(d, log_id): live for d, log_id, live, _ in usage}.items() <= reopened.items()
    assert again.last_entry_id(1) == 149 and again.last_entry_id(2) == 149 and again.is_fenced(2)
    assert [again.read_entry(1, e) for e in range(150)] == [entry(1, e) for e in range(150)]
    assert again.entry_ids(2) == [e for e in range(150) if e % 3]
    assert again.read_entry(2, 3) is None
    again.close()


def test_unflushed_pages_are_rebuilt_by_replaying_the_adds(tmp_path: Path) -> None:
    """What a kill -9 leaves: some pages written early, the rest lost; re-adding (journal replay) fixes all."""
    st = paged(tmp_path)
    for e in range(60):
        add(st, 1, [e])
    st.close()                                # no flush: dirty pages are dropped
    again = paged(tmp_path)
    for e in range(60):                       # the journal replays every add since lastMark (none moved)
        add(again, 1, [e])
    assert [again.read_entry(1, e) for e in range(60)] == [entry(1, e) for e in range(60)]
    assert again.entry_ids(1) == list(range(60))
    again.close()


def test_index_file_format_is_unchanged(tmp_path: Path) -> None:
    """The index file is still 24-byte little-endian slots at entry_id * 24: old bookie directories load."""
    st = paged(tmp_path)
    add(st, 1, [0, 1, 13])
    st.flush()
    st.close()
    raw = idx.index_path(tmp_path / "l1" / "current" / "index", 1).read_bytes()
    slots = np.frombuffer(raw, dtype="<i8").reshape(-1, 3)
    assert slots[0][0] == slots[1][0] == slots[13][0] == 1
    assert slots[1][1] == slots[0][1] + slots[0][2] and slots[13][2] == len(entry(1, 13))
    assert not slots[2:13].any() and not slots[14:].any()


def test_compaction_with_evicted_pages(tmp_path: Path) -> None:
    st = LedgerStorage([tmp_path / "l0"], entry_log_size_limit=32 * 1024, page_size=PAGE_SIZE, page_limit=LIMIT)
    for e in range(150):                      # two ledgers interleaved over many small logs
        add(st, 1, [e])
        add(st, 2, [e])
    st.flush()
    st.delete_ledger(1)
    usage = st.entry_log_usage()
    assert usage and all(0 < live < total for _, _, live, total in usage)
    moved = sum(st.compact_entry_log(d, log_id)[0] for d, log_id, _, _ in usage)
    assert moved >= 100 and cached(st) <= LIMIT
    assert st.remove_dead_entry_logs([(d, log_id) for d, log_id, _, _ in usage]) > 0
    assert all(st.read_entry(2, e) == entry(2, e) for e in range(150))
    st.close()                                # compaction is not journaled: its repointing must be on disk
    again = LedgerStorage([tmp_path / "l0"], entry_log_size_limit=32 * 1024, page_size=PAGE_SIZE, page_limit=LIMIT)
    assert [again.read_entry(2, e) for e in range(150)] == [entry(2, e) for e in range(150)]
    assert sum(live for _, _, live, _ in again.entry_log_usage()) == sum(len(entry(2, e)) for e in range(150))
    again.close()


def test_a_named_log_is_never_removed(tmp_path: Path) -> None:
    """Removal trusts the index files, not the usage counts: a log still named by an evicted page stays."""
    st = LedgerStorage([tmp_path / "l0"], entry_log_size_limit=32 * 1024, page_size=PAGE_SIZE, page_limit=LIMIT)
    for e in range(150):
        add(st, 1, [e])
    st.flush()
    every = [(d, log_id) for d, log_id, _, _ in st.entry_log_usage()]
    assert st.remove_dead_entry_logs(every) == 0
    assert [st.read_entry(1, e) for e in range(150)] == [entry(1, e) for e in range(150)]
    st.close()


@pytest.mark.parametrize("limit", [1, 2])
def test_tiny_caches_still_answer(tmp_path: Path, limit: int) -> None:
    st = LedgerStorage([tmp_path / "l0"], page_size=PAGE_SIZE, page_limit=limit)
    add(st, 1, list(range(45)))               # one batch over five pages
    assert [st.read_entry(1, e) for e in range(45)] == [entry(1, e) for e in range(45)]
    st.close()
