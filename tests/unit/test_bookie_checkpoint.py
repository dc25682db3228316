"""The bookie checkpoints early when half its index page cache is dirty (bookie.bookie, bookie.storage), so an
add rarely finds the cache full of dirty pages and has to flush it, fsyncs and all, on the add path.
A real journal and real ledger storage in a temporary directory; no server."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from bkledger.bookie import records_io
from bkledger.bookie.bookie import Bookie
from bkledger.bookie.config import BookieConfig
from bkledger.bookie.core.index_pages import PageGeometry
from bkledger.bookie.storage import LedgerStorage
from tests.integration.bookie_util import package

KEY = b"k" * 20
PAGE_SIZE, PAGE_LIMIT = 240, 8


def _entries_for_pages(pages: int) -> list[int]:
    return list(range(pages * PageGeometry(PAGE_SIZE).entries))


def test_storage_asks_for_a_checkpoint_from_half_its_page_limit_dirty(tmp_path: Path) -> None:
    asks: list[int] = []
    storage = LedgerStorage([tmp_path], page_size=PAGE_SIZE, page_limit=PAGE_LIMIT,
                            checkpoint_wanted=lambda: asks.append(1))
    try:
        per_page = PageGeometry(PAGE_SIZE).entries
        for page in range(PAGE_LIMIT // 2):
            ids = list(range(page * per_page, (page + 1) * per_page))
            data, sizes = package(3, ids)
            storage.add_batch(3, ids, sizes, data)
            assert len(asks) == (1 if page == PAGE_LIMIT // 2 - 1 else 0), (page, asks)
        storage.flush()
        ids = [PAGE_LIMIT * per_page]
        data, sizes = package(3, ids)
        storage.add_batch(3, ids, sizes, data)     # one dirty page after the flush: no ask
        assert len(asks) == 1
    finally:
        storage.close()


def test_a_half_dirty_page_cache_checkpoints_before_flush_interval(tmp_path: Path) -> None:
    """flushInterval is an hour; adds that dirty 5 of 8 pages (the cache never full) still move lastMark
    (R22: the LastLogMark that replay starts from) within seconds."""
    config = BookieConfig(journalDirectories=(str(tmp_path / "journal"),),
                          ledgerDirectories=(str(tmp_path / "ledgers"),), flushInterval=3_600_000,
                          pageSize=PAGE_SIZE, pageLimit=PAGE_LIMIT)
    bookie = Bookie(config)
    bookie.start()
    try:
        before = records_io.read_last_mark(config.ledger_dirs)
        done = threading.Event()
        ids = _entries_for_pages(PAGE_LIMIT // 2 + 1)
        data, sizes = package(5, ids)
        bookie.add_batch(5, KEY, True, ids, sizes, data, sync=True, done=lambda err: done.set())
        assert done.wait(30)
        deadline = time.monotonic() + 30
        while records_io.read_last_mark(config.ledger_dirs) <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert records_io.read_last_mark(config.ledger_dirs) > before
    finally:
        bookie.close()
