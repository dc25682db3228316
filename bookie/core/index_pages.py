"""The paged ledger index in memory: page geometry and a bounded cache of pages (pure, no I/O).

Mirrors BookKeeper's LedgerCacheImpl / IndexInMemoryPageManager: a ledger's index file is a run of
fixed-size pages (`pageSize` bytes) of entry slots, and at most `pageLimit` pages are held in memory.
A page is *dirty* from its first change until the driver reports that version written and fsynced
to the index file; only clean pages are evicted (least recently used first), so an evicted page can
always be read back from its file. When the cache is over its limit with nothing clean to evict, the
driver must flush (entry logs fsynced first, then the dirty pages) and evict again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

SLOT_SIZE = 24  # three little-endian int64 per entry: entry log id (0: absent), offset, size

Slots = npt.NDArray[np.int64]
PageKey = tuple[int, int]  # (ledger id, page number)


@dataclass(frozen=True)
class PageGeometry:
    """Which entries a page holds: page p has entries [p * n, (p + 1) * n) at byte p * n * SLOT_SIZE."""

    page_size: int = 8192

    @property
    def entries(self) -> int:
        return max(self.page_size // SLOT_SIZE, 1)

    @property
    def page_bytes(self) -> int:
        return self.entries * SLOT_SIZE

    def page_of(self, entry_id: int) -> int:
        return entry_id // self.entries

    def first_entry(self, page_no: int) -> int:
        return page_no * self.entries

    def pages_for(self, size_bytes: int) -> int:
        """Pages that may hold data in an index file of `size_bytes` (a trailing partial slot is ignored)."""
        slots = size_bytes // SLOT_SIZE
        return -(-slots // self.entries)

    def split(self, entry_ids: Slots) -> Iterator[tuple[int, Slots]]:
        """(page number, positions in `entry_ids` of the ids on that page) for each page touched."""
        pages = entry_ids // self.entries
        first, last = int(pages.min()), int(pages.max())
        if first == last:
            yield first, np.arange(len(entry_ids))
            return
        order = np.argsort(pages, kind="stable")
        sorted_pages = pages[order]
        bounds = np.flatnonzero(sorted_pages[1:] != sorted_pages[:-1]) + 1
        for part in np.split(order, bounds):
            yield int(pages[part[0]]), part


class Page:
    """One page of slots; `version` counts changes, `written` is the version known durable in the file."""

    __slots__ = ("slots", "version", "written")

    def __init__(self, slots: Slots) -> None:
        self.slots = slots
        self.version = 0
        self.written = 0

    @property
    def dirty(self) -> bool:
        return self.version != self.written


class PageCache:
    """At most `limit` pages while some are clean: clean pages in LRU order, dirty ones pinned."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the page limit must be at least 1")
        self.limit = limit
        self._clean: OrderedDict[PageKey, Page] = OrderedDict()
        self._dirty: dict[PageKey, Page] = {}
        self._by_ledger: dict[int, set[int]] = {}     # ledger id -> its cached page numbers (first_page)

    def __len__(self) -> int:
        return len(self._clean) + len(self._dirty)

    @property
    def over_limit(self) -> bool:
        return len(self) > self.limit

    @property
    def dirty_count(self) -> int:
        return len(self._dirty)

    def get(self, key: PageKey) -> Page | None:
        """The cached page (marked recently used), or None."""
        page = self._dirty.get(key)
        if page is not None:
            return page
        page = self._clean.get(key)
        if page is not None:
            self._clean.move_to_end(key)
        return page

    def peek(self, key: PageKey) -> Page | None:
        """The cached page without touching the LRU order (for scans)."""
        page = self._dirty.get(key)
        return page if page is not None else self._clean.get(key)

    def insert(self, key: PageKey, page: Page) -> None:
        """Add a page just read from its file (or a new empty one), making room for it first."""
        while len(self) >= self.limit and self._clean:
            self._forget(self._clean.popitem(last=False)[0])
        (self._dirty if page.dirty else self._clean)[key] = page
        self._by_ledger.setdefault(key[0], set()).add(key[1])

    def _forget(self, key: PageKey) -> None:
        pages = self._by_ledger.get(key[0])
        if pages is not None:
            pages.discard(key[1])
            if not pages:
                del self._by_ledger[key[0]]

    def changed(self, key: PageKey, page: Page) -> None:
        """The page's slots changed: it is dirty (pinned) until `written` is reported for this version."""
        page.version += 1
        self._clean.pop(key, None)
        self._dirty[key] = page
        self._by_ledger.setdefault(key[0], set()).add(key[1])

    def written(self, key: PageKey, page: Page, version: int) -> None:
        """`version` of the page is durable in its file; the page is clean unless it changed since."""
        page.written = max(page.written, version)
        if not page.dirty and self._dirty.get(key) is page:
            del self._dirty[key]
            self._clean[key] = page

    def evict(self) -> int:
        """Drop least recently used clean pages while over the limit; returns how many."""
        dropped = 0
        while len(self) > self.limit and self._clean:
            self._forget(self._clean.popitem(last=False)[0])
            dropped += 1
        return dropped

    def dirty_pages(self, ledger_id: int | None = None) -> list[tuple[PageKey, Page]]:
        """Dirty pages (of one ledger, or all), in (ledger, page) order."""
        items = [(k, p) for k, p in self._dirty.items() if ledger_id is None or k[0] == ledger_id]
        return sorted(items, key=lambda kp: kp[0])

    def first_page(self, ledger_id: int, page_no: int) -> int | None:
        """The lowest cached page number of the ledger from `page_no` on (None: none): a walk over the
        ledger's cached pages only."""
        found = [p for p in self._by_ledger.get(ledger_id, ()) if p >= page_no]
        return min(found) if found else None

    def dirty_ledgers(self) -> set[int]:
        return {k[0] for k in self._dirty}

    def drop_ledger(self, ledger_id: int) -> None:
        """Forget every page of a deleted ledger, dirty or not."""
        for table in (self._clean, self._dirty):
            for key in [k for k in table if k[0] == ledger_id]:
                del table[key]
        self._by_ledger.pop(ledger_id, None)
