"""Ledger storage: where journaled entries live for reading, and the per-ledger state beside them.

Mirrors BookKeeper's InterleavedLedgerStorage / SingleDirectoryDbLedgerStorage: entries of all ledgers
of one ledger directory go to shared entry logs (`bookie.entrylog`), an index maps (ledger, entry) to
(log, offset, size) (`bookie.index`), and per-ledger state (master key, fenced, explicit LAC, max
piggy-backed LAC) sits next to it. A ledger is pinned to directory `ledger_id % len(dirs)`.
The index lives in its files; at most `page_limit` pages of it are in memory (`PageCache`, as
BookKeeper's LedgerCache with `pageSize` / `pageLimit`), so memory does not grow with the data held.
Nothing here is durable until `flush()` (the checkpoint); until then the journal is the durability and
replay re-applies every record, so every mutator is idempotent. Index pages reach their files only in
`flush()`, after the entry logs are fsynced, so an index file never names entry-log bytes that are not
durable (a full cache of dirty pages flushes early, without moving lastMark: that is the caller's).
A read answers None only for an entry the storage really does not hold; anything it cannot vouch for
raises `StorageError` (R22).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bkledger.bookie.core.index_pages import Page, PageCache, PageGeometry, PageKey, Slots
from bkledger.bookie.core.records import add_batch_data_offset, add_batch_parts, be64_at, native_vector
from bkledger.bookie.entrylog import EntryLogger, StorageError
from bkledger.bookie.files import fsync_dir
from bkledger.bookie.index import (
    SCAN_SLOTS,
    LedgerIndex,
    empty_slots,
    index_path,
    load_index_dir,
    next_data_slot,
    read_slots,
    remove_ledger_files,
    write_meta,
    write_pages,
)
from bkledger.wire.gather import gather_entries
from bkledger.wire.native import NATIVE

__all__ = ["DEFAULT_PAGE_LIMIT", "DEFAULT_PAGE_SIZE", "LedgerStorage", "StorageError"]

DEFAULT_PAGE_SIZE = 8192   # bytes per index page (BookKeeper's pageSize)
DEFAULT_PAGE_LIMIT = 1024  # index pages held in memory (BookKeeper's pageLimit): 8 MiB of slots
READ_WINDOW_PAGES = 64     # a range read looks up this many index pages at a time

_ENTRY_HEADER = struct.Struct(">qq")  # ledger id, entry id at the start of a packaged entry
_LAC_AT = 16  # piggy-backed LAC: big-endian int64 at bytes 16..24 of a packaged entry

IntVector = Sequence[int] | npt.NDArray[Any]
Batch = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], bytes | bytearray]   # entry ids, sizes, the entries
ViewBatch = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], memoryview]      # ... the entries a view of a buffer


def _starts(sizes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Offset of each entry inside a blob of the entries back to back."""
    starts = np.zeros(len(sizes), dtype=np.int64)
    sizes[:-1].cumsum(out=starts[1:])       # the method: np.cumsum is a Python wrapper around it
    return starts


def residue_keep(ids: npt.NDArray[np.int64], residues: tuple[int, int]) -> npt.NDArray[np.bool_] | None:
    """Which of `ids` a striped reader asked for: those whose id % modulus is a bit of mask, for
    `residues` = (modulus, mask); None when it asked for all (modulus 0)."""
    modulus, mask = residues
    if not 0 < modulus <= 64:
        return None
    return ((np.uint64(mask) >> (ids % modulus).astype(np.uint64)) & np.uint64(1)).astype(bool)


def batch_end(sent_bytes: npt.NDArray[np.int64], sent_count: npt.NDArray[np.int64], start: int,
              max_bytes: int, max_entries: int) -> int:
    """Where a batch starting at `start` ends (exclusive), given the running totals of the bytes and the
    entries that will be sent: at most max_bytes and max_entries of them, and at least one entry."""
    bytes_before = int(sent_bytes[start - 1]) if start else 0
    count_before = int(sent_count[start - 1]) if start else 0
    by_bytes = int(np.searchsorted(sent_bytes, bytes_before + max_bytes, side="right"))
    by_count = int(np.searchsorted(sent_count, count_before + max_entries, side="right"))
    return max(min(by_bytes, by_count), start + 1)


def _header_fields(blob: bytes | bytearray | memoryview, starts: npt.NDArray[np.int64], at: int, count: int = 1
                   ) -> npt.NDArray[np.int64]:
    """The `count` big-endian int64s at `start + at` of each entry, shaped (entries,) for one field and
    (entries, count) for more."""
    if count == 1:
        return be64_at(blob, starts + at)
    return np.stack([be64_at(blob, starts + at + 8 * i) for i in range(count)], axis=1)


def _max_piggyback_lac(data: bytes | memoryview, sizes: npt.NDArray[np.int64]) -> int:
    starts = _starts(sizes)[sizes >= _LAC_AT + 8]
    if len(starts) == 0:
        return -1
    return int(_header_fields(data, starts, _LAC_AT).max())


def _check_headers(
    ledger_id: int | npt.NDArray[np.int64], ids: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64],
    blob: bytes | bytearray
) -> None:
    """Every entry read must start with its own (ledger id, entry id): else the location is corrupt.
    `ledger_id`: the entries' ledger, or each entry's."""
    starts = _starts(sizes)
    whole = sizes >= 16
    if not whole.all():
        raise StorageError(f"ledger {_named(ledger_id, 0)}: stored entry shorter than its header")
    header = _header_fields(blob, starts, 0, 2)           # (ledger id, entry id) of each entry
    bad = (header[:, 0] != ledger_id) | (header[:, 1] != ids)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        raise StorageError(f"ledger {_named(ledger_id, at)} entry {int(ids[at])}: location points at another entry")


def _named(ledger_id: int | npt.NDArray[np.int64], at: int) -> int:
    return ledger_id if isinstance(ledger_id, int) else int(ledger_id[at])


@dataclasses.dataclass(frozen=True)
class _Found:
    """A range's entries found in the index, to be read (`LedgerStorage.first_batches`)."""

    ledger_id: int
    dir_index: int
    ids: npt.NDArray[np.int64]
    slots: npt.NDArray[np.int64]
    size: int


def _read_together(found: Sequence[_Found | None], logger: EntryLogger) -> list[ViewBatch | None] | None:
    """The entries of every held range read in one pass (`LedgerStorage._read_runs`) and checked to be
    the entries the index names; each range's batch is a view of the one buffer. None if a check fails."""
    held = [part for part in found if part is not None]
    slots = np.concatenate([part.slots for part in held])
    sizes = slots[:, 2]
    try:
        blob = LedgerStorage._read_runs(logger, slots)
        _check_headers(np.repeat(np.array([p.ledger_id for p in held], dtype=np.int64), [len(p.ids) for p in held]),
                       np.concatenate([part.ids for part in held]), sizes, blob)
    except (StorageError, OSError):
        return None
    view = memoryview(blob)
    out: list[ViewBatch | None] = []
    at = 0
    for part in found:
        if part is None:
            out.append(None)
            continue
        out.append((part.ids, part.slots[:, 2], view[at:at + part.size]))
        at += part.size
    return out


class LedgerStorage:
    """Entry logs + index + ledger state over one or more ledger directories."""

    def __init__(
        self, ledger_dirs: Sequence[Path], *, entry_log_size_limit: int = 1 << 30,
        page_size: int = DEFAULT_PAGE_SIZE, page_limit: int = DEFAULT_PAGE_LIMIT, direct_io: bool = True,
        checkpoint_wanted: Callable[[], None] | None = None,
    ) -> None:
        """`checkpoint_wanted`: called (from an add, with no lock held) while half the page limit or more is
        dirty, so the owner checkpoints before the cache is full and an add has to flush it synchronously."""
        if not ledger_dirs:
            raise ValueError("at least one ledger directory is needed")
        self._currents = [Path(d) / "current" for d in ledger_dirs]
        self._index_dirs = [c / "index" for c in self._currents]
        for index_dir in self._index_dirs:
            index_dir.mkdir(parents=True, exist_ok=True)
        self._logs = [EntryLogger(c, entry_log_size_limit, direct_io) for c in self._currents]
        self._geometry = PageGeometry(page_size)
        self._pages = PageCache(page_limit)
        self._checkpoint_wanted = checkpoint_wanted
        self._ledgers: dict[int, LedgerIndex] = {}
        self._live: list[dict[int, int]] = [{} for _ in self._index_dirs]   # per dir: entry log -> live bytes
        for i, index_dir in enumerate(self._index_dirs):
            self._ledgers.update(load_index_dir(index_dir, i, self._geometry))
        for led in self._ledgers.values():
            led.attach(self._live[led.dir_index])
        self._lock = threading.Lock()  # in-memory state (short holds; readers take it too)
        self._write_lock = threading.RLock()  # adds, delete, a flush's snapshot: one at a time
        self._flush_lock = threading.Lock()   # one flush at a time (taken with the write lock held)
        self._closed = False

    # ---- state ---------------------------------------------------------------------------------

    def _get_or_create(self, ledger_id: int) -> LedgerIndex:
        """Called with self._lock held."""
        led = self._ledgers.get(ledger_id)
        if led is None:
            led = LedgerIndex(ledger_id, ledger_id % len(self._logs))
            led.attach(self._live[led.dir_index])
            led.meta_dirty = True
            self._ledgers[ledger_id] = led
        return led

    def set_master_key(self, ledger_id: int, key: bytes) -> None:
        with self._lock:
            led = self._get_or_create(ledger_id)
            if led.master_key != key:
                led.master_key, led.meta_dirty = bytes(key), True

    def master_key(self, ledger_id: int) -> bytes | None:
        with self._lock:
            led = self._ledgers.get(ledger_id)
            return None if led is None else led.master_key

    def set_fenced(self, ledger_id: int) -> None:
        with self._lock:
            led = self._get_or_create(ledger_id)
            if not led.fenced:
                led.fenced, led.meta_dirty = True, True

    def is_fenced(self, ledger_id: int) -> bool:
        with self._lock:
            led = self._ledgers.get(ledger_id)
            return led is not None and led.fenced

    def set_explicit_lac(self, ledger_id: int, body: bytes) -> None:
        with self._lock:
            led = self._get_or_create(ledger_id)
            if led.explicit_lac != body:
                led.explicit_lac, led.meta_dirty = bytes(body), True

    def explicit_lac(self, ledger_id: int) -> bytes | None:
        with self._lock:
            led = self._ledgers.get(ledger_id)
            return None if led is None else led.explicit_lac

    def max_lac(self, ledger_id: int) -> int:
        with self._lock:
            led = self._ledgers.get(ledger_id)
            return -1 if led is None else led.max_lac

    def has_ledger(self, ledger_id: int) -> bool:
        with self._lock:
            return ledger_id in self._ledgers

    def ledgers(self) -> list[int]:
        with self._lock:
            return sorted(self._ledgers)

    def last_entry_id(self, ledger_id: int) -> int:
        with self._lock:
            led = self._ledgers.get(ledger_id)
            return -1 if led is None else led.last_entry

    def entry_ids(self, ledger_id: int) -> list[int]:
        with self._lock:
            led = self._ledgers.get(ledger_id)
        if led is None:
            return []
        out: list[int] = []
        for first, slots in self._scan(led):
            out.extend((np.flatnonzero(slots[:, 0]) + first).tolist())
        return out

    # ---- index pages (the helpers named *_locked are called with self._lock held) ---------------

    def _index_file(self, led: LedgerIndex) -> Path:
        return index_path(self._index_dirs[led.dir_index], led.ledger_id)

    def _page_locked(self, led: LedgerIndex, page_no: int) -> Page:
        """The page from the cache, else read from the index file (or new and empty past its end)."""
        key = (led.ledger_id, page_no)
        page = self._pages.get(key)
        if page is None:
            n = self._geometry.entries
            if page_no < led.file_pages:
                page = Page(read_slots(self._index_file(led), page_no * n, n))
            else:
                page = Page(empty_slots(n))
            self._pages.insert(key, page)
        return page

    def _slots_locked(self, led: LedgerIndex, ids: Slots) -> Slots:
        """The current slots of `ids` (any order; ids past the last entry are absent)."""
        out = empty_slots(len(ids))
        inside = np.flatnonzero((ids >= 0) & (ids <= led.last_entry))
        if len(inside) == 0:
            return out
        for page_no, sel in self._geometry.split(ids[inside]):
            rows = inside[sel]
            page = self._page_locked(led, page_no)
            out[rows] = page.slots[ids[rows] - self._geometry.first_entry(page_no)]
        return out

    def _put_locked(
        self, led: LedgerIndex, ids: Slots, log_id: int, offsets: Slots, sizes: Slots
    ) -> None:
        """Point the slots of `ids` at (log_id, offsets, sizes), keeping the per-log usage right."""
        if len(ids) and bool(np.logical_and.reduce(ids[1:] > ids[:-1])):
            self._put_ascending_locked(led, ids, log_id, offsets, sizes)
            return
        for page_no, sel in self._geometry.split(ids):
            page = self._page_locked(led, page_no)
            rows = ids[sel] - self._geometry.first_entry(page_no)
            distinct = np.unique(rows)
            led.count(page.slots[distinct], -1)
            page.slots[rows, 0] = log_id
            page.slots[rows, 1] = offsets[sel]
            page.slots[rows, 2] = sizes[sel]
            led.count(page.slots[distinct], 1)
            self._pages.changed((led.ledger_id, page_no), page)
        led.last_entry = max(led.last_entry, int(ids.max()))

    def _put_record_locked(self, led: LedgerIndex, ids: Slots, log_id: int, offset: int, sizes: Slots) -> None:
        """_put_locked for a record's entries, back to back from `offset` in entry log `log_id`. Where
        wire._native was built (and ids and sizes are contiguous vectors), each page's share is one native
        call (`fill_slots`; 8-10 us for 90 entries, a new page now and then included, against 38-39 us)
        while the ids ascend and name no stored entry; what is left after the first page where they do not
        goes through _put_locked, which keeps the per-log usage right."""
        done, end = 0, offset
        if NATIVE is not None and native_vector(ids) and native_vector(sizes):
            entries = self._geometry.entries
            while done < len(ids):
                page_no = int(ids[done]) // entries
                page = self._page_locked(led, page_no)
                filled = NATIVE.fill_slots(page.slots, page_no * entries, ids, sizes, done, log_id, end)
                if filled is None:
                    break
                done, end = filled
                self._pages.changed((led.ledger_id, page_no), page)
                led.last_entry = max(led.last_entry, int(ids[done - 1]))    # a page's share ascends
            if done:
                led.count_log(log_id, done, end - offset)
        if done < len(ids):
            rest = sizes[done:]
            self._put_locked(led, ids[done:], log_id, _starts(rest) + end, rest)

    def _put_ascending_locked(self, led: LedgerIndex, ids: Slots, log_id: int, offsets: Slots, sizes: Slots) -> None:
        """_put_locked for strictly ascending ids (a writer's batch, or a bookie's share of a striped one when
        Qw < E): each page's ids are a slice of them and distinct, so no sort and no unique per page, and
        where they are consecutive the page is written through a slice, not a scatter."""
        geo = self._geometry
        pages = ids // geo.entries
        cuts = (np.flatnonzero(pages[1:] != pages[:-1]) + 1).tolist()
        for lo, hi in zip([0, *cuts], [*cuts, len(ids)], strict=True):
            page_no = int(pages[lo])
            page = self._page_locked(led, page_no)
            base = geo.first_entry(page_no)
            a, b = int(ids[lo]) - base, int(ids[hi - 1]) - base
            rows = slice(a, b + 1) if b - a == hi - lo - 1 else ids[lo:hi] - base
            slots = page.slots
            if np.logical_or.reduce(slots[rows, 0] != 0):
                led.count(slots[rows], -1)     # entries stored before (a replay, a recovery's write-back)
            slots[rows, 0] = log_id
            slots[rows, 1] = offsets[lo:hi]
            slots[rows, 2] = sizes[lo:hi]
            self._pages.changed((led.ledger_id, page_no), page)
        led.count_log(log_id, len(ids), int(np.add.reduce(sizes)))
        led.last_entry = max(led.last_entry, int(ids[-1]))

    def _held_locked(self, led: LedgerIndex, first: int, last: int) -> tuple[Slots, Slots]:
        """(entry ids, their slots) of the held entries in [first, last] (a bounded window), a copy."""
        first, last = max(first, 0), min(last, led.last_entry)
        if last < first:
            return np.zeros(0, dtype=np.int64), empty_slots(0)
        geo = self._geometry
        parts = [self._page_locked(led, p).slots for p in range(geo.page_of(first), geo.page_of(last) + 1)]
        base = geo.first_entry(geo.page_of(first))
        window = (parts[0] if len(parts) == 1 else np.concatenate(parts))[first - base : last - base + 1]
        rel = np.flatnonzero(window[:, 0])
        return rel.astype(np.int64) + first, window[rel].copy()

    def _scan(self, led: LedgerIndex) -> Iterator[tuple[int, Slots]]:
        """(first entry id, slots) chunks over the whole ledger, read from the file with the cached pages laid
        over it, without filling the cache. Each chunk is consistent; chunks are taken one lock hold at a time.
        """
        geo = self._geometry
        step = max(SCAN_SLOTS // geo.entries, 1)
        start = 0
        while True:
            with self._lock:
                gone = self._ledgers.get(led.ledger_id) is not led
                if not gone and led.last_entry >= 0:
                    start = self._next_page_locked(led, start)      # over holes: time follows the data held
                if gone or led.last_entry < 0 or start > geo.page_of(led.last_entry):
                    return
                count = step
                slots = (read_slots(self._index_file(led), geo.first_entry(start), count * geo.entries)
                         if start < led.file_pages else empty_slots(count * geo.entries))
                for i in range(count):
                    page = self._pages.peek((led.ledger_id, start + i))
                    if page is not None:
                        slots[i * geo.entries : (i + 1) * geo.entries] = page.slots
            yield geo.first_entry(start), slots
            start += count

    def _next_page_locked(self, led: LedgerIndex, page_no: int) -> int:
        """The first page from `page_no` on that may hold an entry: cached, or with data in the index file
        (SEEK_DATA); past the last entry's page when there is none. Index files are sparse, so an entry id far
        beyond the others leaves a hole that no scan or range read walks through."""
        cached = self._pages.first_page(led.ledger_id, page_no)
        in_file = None
        if page_no < led.file_pages:
            slot = next_data_slot(self._index_file(led), self._geometry.first_entry(page_no))
            in_file = None if slot is None else self._geometry.page_of(slot)
        found = [p for p in (cached, in_file) if p is not None]
        return min(found) if found else self._geometry.page_of(max(led.last_entry, 0)) + 1

    def _make_room(self) -> None:
        """Called with the write lock: when the cache is over its limit with every page dirty, flush. That
        flush holds up every add for its fsyncs, so from half the limit dirty on, a checkpoint is asked for."""
        with self._lock:
            self._pages.evict()
            over = self._pages.over_limit
            wanted = self._pages.dirty_count * 2 >= self._pages.limit
        if wanted and self._checkpoint_wanted is not None:
            self._checkpoint_wanted()
        if not over:
            return
        self.flush()
        with self._lock:
            self._pages.evict()

    # ---- writes --------------------------------------------------------------------------------

    def add_batch(
        self, ledger_id: int, entry_ids: IntVector, sizes: IntVector, data: bytes | memoryview,
        record: Sequence[bytes | memoryview] | None = None, max_lac: int | None = None,
    ) -> None:
        """Append a batch of packaged entries to the ledger's entry log and index them.

        Idempotent: re-adding an entry (journal replay) points its slot at the new copy. `record`: the
        batch's ADD_BATCH record (`add_batch_parts`) when the caller has encoded it already (for the journal).
        `max_lac`: the largest piggy-backed LAC of the entries when the caller has read it already.
        """
        ids = np.asarray(entry_ids, dtype=np.int64).reshape(-1)
        szs = np.asarray(sizes, dtype=np.int64).reshape(-1)
        if len(ids) and int(np.minimum.reduce(ids)) < 0:
            raise ValueError(f"ledger {ledger_id}: negative entry id")
        if record is None:
            record = add_batch_parts(ledger_id, ids, szs, data)  # also checks sizes against data
        lac = _max_piggyback_lac(data, szs) if max_lac is None else max_lac
        with self._write_lock:
            self._check_open()
            with self._lock:
                led = self._get_or_create(ledger_id)
            if len(ids) == 0:
                return
            log_id, record_offset = self._logs[led.dir_index].append(record)
            with self._lock:
                self._put_record_locked(led, ids, log_id, record_offset + add_batch_data_offset(len(ids)), szs)
                if lac > led.max_lac:
                    led.max_lac, led.meta_dirty = lac, True
            self._make_room()

    def delete_ledger(self, ledger_id: int) -> None:
        """Forget the ledger: its index and meta go now, its entry-log space later (GC)."""
        with self._write_lock:
            with self._lock:
                led = self._ledgers.pop(ledger_id, None)
                self._pages.drop_ledger(ledger_id)
                if led is not None:
                    led.detach()
            if led is not None:
                remove_ledger_files(self._index_dirs[led.dir_index], ledger_id)

    def flush(self) -> None:
        """Checkpoint: fsync the entry logs, then write and fsync the dirty index pages and meta files.

        What is flushed is decided under the write lock (the dirty pages and metas, each page at its
        version); the fsyncs and page writes run after it is released, so adds go on meanwhile (a caller
        that holds the write lock, like _make_room, keeps it throughout). Pages snapshotted name only data
        appended before the snapshot, which the entry-log fsync that follows makes durable first. Flushes
        are serialized: a page written by an older flush after a newer one would be marked clean wrongly."""
        with self._write_lock:
            self._check_open()
            self._flush_lock.acquire()
            try:
                with self._lock:
                    metas = [(led, led.meta_version, led.encode_meta()) for led in self._ledgers.values()
                             if led.meta_dirty]
                    by_ledger: dict[int, list[PageKey]] = {}
                    for key, _ in self._pages.dirty_pages():
                        by_ledger.setdefault(key[0], []).append(key)
            except BaseException:
                self._flush_lock.release()
                raise
        try:
            self._flush_snapshot(metas, by_ledger)
        finally:
            self._flush_lock.release()

    def _flush_snapshot(self, metas: list[tuple[LedgerIndex, int, bytes]], by_ledger: dict[int, list[PageKey]]
                        ) -> None:
        """A meta (like a page) is clean only once its version is written and its directory fsynced: a flush
        that fails anywhere, with any exception, leaves every change it did not make durable dirty (a fence
        of one ledger outlives a failing index write of another, R15)."""
        for logger in self._logs:
            logger.flush()
        touched: set[int] = set()
        for ledger_id, keys in by_ledger.items():
            touched |= self._write_pages(ledger_id, keys)
        for led, _, meta in metas:
            write_meta(self._index_dirs[led.dir_index], led.ledger_id, meta)
            touched.add(led.dir_index)
        for i in touched:
            fsync_dir(self._index_dirs[i])
        with self._lock:
            for led, version, _ in metas:
                led.meta_durable(version)

    def _write_pages(self, ledger_id: int, keys: list[PageKey]) -> set[int]:
        """Write one ledger's dirty pages and fsync its index file; they become clean (evictable) only then."""
        with self._lock:
            led = self._ledgers.get(ledger_id)
            if led is None:
                return set()
            work = []
            for key in keys:
                page = self._pages.peek(key)
                if page is not None and page.dirty:
                    work.append((key, page, page.version, page.slots.astype("<i8").tobytes()))
            path = self._index_file(led)
        if not work:
            return set()
        write_pages(path, self._geometry.page_bytes, [(key[1], raw) for key, _, _, raw in work])
        with self._lock:
            led.file_pages = max(led.file_pages, max(key[1] for key, _, _, _ in work) + 1)
            for key, page, version, _ in work:
                self._pages.written(key, page, version)
        return {led.dir_index}

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError("ledger storage is closed")

    def close(self) -> None:
        """Close the entry logs (fsynced). Unflushed index state is rebuilt by journal replay."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            for logger in self._logs:
                logger.close()

    # ---- reads ---------------------------------------------------------------------------------

    def _location(self, ledger_id: int, entry_id: int) -> tuple[int, tuple[int, int, int] | None]:
        with self._lock:
            led = self._ledgers.get(ledger_id)
            if led is None:
                return -1, None
            if entry_id < 0 or entry_id > led.last_entry:
                return led.dir_index, None
            page = self._page_locked(led, self._geometry.page_of(entry_id))
            row = entry_id - self._geometry.first_entry(self._geometry.page_of(entry_id))
            log_id, offset, size = (int(v) for v in page.slots[row])
        return led.dir_index, (None if log_id == 0 else (log_id, offset, size))

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The packaged entry, None if not held, StorageError if it cannot be read back intact.

        A read that raced a compaction (the entry moved and its old log was removed) is retried once at the
        entry's new location.
        """
        dir_index, loc = self._location(ledger_id, entry_id)
        for attempt in range(2):
            if loc is None:
                return None
            log_id, offset, size = loc
            try:
                data = self._logs[dir_index].read(log_id, offset, size)
                one = np.array([entry_id], dtype=np.int64)
                _check_headers(ledger_id, one, np.array([size], dtype=np.int64), data)
                return data
            except StorageError:
                dir_index, moved = self._location(ledger_id, entry_id)
                if attempt or moved == loc:
                    raise
                loc = moved
        return None

    def stored_entries(self, ledger_id: int, entry_ids: IntVector) -> dict[int, bytes]:
        """The packaged entries stored for those of `entry_ids` this storage holds (entry id -> bytes), for
        the check that records are not rewritten. Costs one comparison when every id is past the ledger's
        last entry (a writer's next entries); otherwise reads only the entries held."""
        ids = np.asarray(entry_ids, dtype=np.int64).reshape(-1)
        with self._lock:
            led = self._ledgers.get(ledger_id)
            if led is None or not len(ids) or int(np.minimum.reduce(ids)) > led.last_entry:
                return {}
            slots = self._slots_locked(led, ids)
            logger = self._logs[led.dir_index]
        held = np.flatnonzero(slots[:, 0])
        if not len(held):
            return {}
        order = held[np.argsort(ids[held], kind="stable")]
        held_ids, held_slots = ids[order], slots[order]
        blob = self._read_checked(ledger_id, logger, held_ids, held_slots)
        ends = np.cumsum(held_slots[:, 2]).tolist()
        starts = [0, *ends[:-1]]
        return {int(e): bytes(blob[a:b]) for e, a, b in zip(held_ids.tolist(), starts, ends, strict=True)}

    def read_range(
        self, ledger_id: int, first: int, last: int, max_batch_bytes: int, max_batch_entries: int,
        residues: tuple[int, int] = (0, 0),
    ) -> Iterator[Batch]:
        """The held entries in [first, last], in order, as (entry ids, sizes, blob) batches; with
        `residues` (modulus, mask; modulus 0: all), only those whose id % modulus is a bit of mask.

        The index is looked up a window of pages at a time, as the batches are taken. The limits count
        what is sent: with residues, a batch spans the entries left out too (read with the kept ones in
        one pread per run, then dropped), so that each message still carries about max_batch_bytes.
        """
        limits = max(max_batch_bytes, 1), max(max_batch_entries, 1)
        return self._range_batches(ledger_id, max(first, 0), last, limits, residues)

    def _range_batches(self, ledger_id: int, first: int, last: int, limits: tuple[int, int],
                       residues: tuple[int, int]) -> Iterator[Batch]:
        window = READ_WINDOW_PAGES * self._geometry.entries
        pos, skip = first, True
        while pos <= last:
            end = min(last, pos + window - 1)
            with self._lock:
                led = self._ledgers.get(ledger_id)
                if skip and led is not None and pos <= led.last_entry:     # after an empty window: over the hole
                    pos = max(pos, self._geometry.first_entry(self._next_page_locked(led, self._geometry.page_of(pos))))
                    end = min(last, pos + window - 1)
                if led is None or pos > min(led.last_entry, last):
                    return
                ids, slots = self._held_locked(led, pos, end)
                logger = self._logs[led.dir_index]
            skip = not len(ids)
            keep = residue_keep(ids, residues)
            if keep is None or keep.any():
                yield from self._batches(ledger_id, logger, ids, slots, limits, keep)
            pos = end + 1

    def first_batches(self, ranges: Sequence[tuple[int, int, int, int]], max_batch_bytes: int
                      ) -> list[ViewBatch | None] | None:
        """For a reader of many small ledgers (ReadRanges): the first batch `read_range(ledger, first, last,
        max_batch_bytes, max_entries)` gives of each (ledger, first, last, max_entries), None where the
        ledger holds none of the range (or is not here), read together: the index under one lock hold,
        the entries of all of them in one pass of preads, their headers checked at once. It answers a
        prefix of `ranges`, ending with the range that brings the total to max_batch_bytes. None when they
        cannot be read together (ledgers in several directories, a header check failed: a compaction may
        have moved an entry); the caller then reads them one by one (`read_range` looks again)."""
        limit = max(max_batch_bytes, 1)
        found: list[_Found | None] = []
        dirs: set[int] = set()
        total = 0
        with self._lock:
            for ledger_id, first, last, max_entries in ranges:
                part = self._first_held_locked(ledger_id, max(first, 0), last, limit, max(max_entries, 1))
                found.append(part)
                if part is not None:
                    dirs.add(part.dir_index)
                    total += part.size
                    if total >= limit:
                        break
            logger = self._logs[next(iter(dirs))] if len(dirs) == 1 else None
        if not dirs:
            return [None] * len(found)
        if logger is None:
            return None
        return _read_together(found, logger)

    def _first_held_locked(self, ledger_id: int, first: int, last: int, max_bytes: int, max_entries: int
                           ) -> _Found | None:
        """What `_range_batches`' first batch would read of the range, or None if it holds nothing."""
        led = self._ledgers.get(ledger_id)
        if led is None or first > min(last, led.last_entry):
            return None
        ids, slots = self._held_locked(led, first, min(last, first + READ_WINDOW_PAGES * self._geometry.entries - 1))
        if not len(ids):
            return None
        if len(ids) > 1:
            end = batch_end(np.cumsum(slots[:, 2]), np.arange(1, len(ids) + 1, dtype=np.int64), 0, max_bytes,
                            max_entries)
            ids, slots = ids[:end], slots[:end]
        return _Found(ledger_id, led.dir_index, ids, slots, int(slots[:, 2].sum()))

    def _batches(
        self, ledger_id: int, logger: EntryLogger, ids: npt.NDArray[np.int64], slots: npt.NDArray[np.int64],
        limits: tuple[int, int], keep: npt.NDArray[np.bool_] | None,
    ) -> Iterator[Batch]:
        """The batches of one window of held entries; with `keep`, only the kept entries are sent."""
        sizes = slots[:, 2]
        sent_bytes = np.cumsum(sizes if keep is None else np.where(keep, sizes, 0))
        sent_count = np.arange(1, len(ids) + 1, dtype=np.int64) if keep is None else np.cumsum(keep, dtype=np.int64)
        i = 0
        while i < len(ids):
            j = batch_end(sent_bytes, sent_count, i, *limits)
            blob = self._read_checked(ledger_id, logger, ids[i:j], slots[i:j])
            if keep is None:
                yield ids[i:j], sizes[i:j], blob
            elif (kept := keep[i:j]).any():
                offsets = np.concatenate(([0], np.cumsum(sizes[i:j])))
                yield ids[i:j][kept], sizes[i:j][kept], gather_entries(blob, offsets, kept)
            i = j

    def _read_checked(self, ledger_id: int, logger: EntryLogger, ids: npt.NDArray[np.int64],
                      slots: npt.NDArray[np.int64]) -> bytes | bytearray:
        """The entries at `slots`, back to back, each checked to be the entry of `ids` it should be."""
        try:
            blob = self._read_runs(logger, slots)
            _check_headers(ledger_id, ids, slots[:, 2], blob)
        except StorageError:
            moved = self._current_slots(ledger_id, ids)   # raced a compaction? read the new places
            if moved is None or np.array_equal(moved, slots):
                raise
            blob = self._read_runs(logger, moved)
            _check_headers(ledger_id, ids, moved[:, 2], blob)
        return blob

    def _current_slots(self, ledger_id: int, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64] | None:
        with self._lock:
            led = self._ledgers.get(ledger_id)
            if led is None:
                return None
            slots = self._slots_locked(led, ids)
        return None if (slots[:, 0] == 0).any() else slots

    # ---- garbage collection and compaction ----------------------------------------------------

    def directory_stats(self) -> list[tuple[Path, int, int, int]]:
        """(ledger dir, entry-log bytes on disk, index bytes on disk, bytes appended since start) per
        directory (metrics and the admin API; stats the files, so not for hot paths)."""
        out = []
        for current, index_dir, logger in zip(self._currents, self._index_dirs, self._logs, strict=True):
            logs = sum(logger.size(log_id) for log_id in logger.log_ids())
            index = 0
            with contextlib.suppress(FileNotFoundError), os.scandir(index_dir) as it:
                index = sum(e.stat().st_size for e in it if e.is_file())
            out.append((current.parent, logs, index, logger.bytes_written))
        return out

    def entry_log_write_failures(self) -> list[tuple[Path, int]]:
        """(ledger dir, entry-log block writes that failed since start) per directory (metrics)."""
        return [(current.parent, logger.write_failures) for current, logger in zip(self._currents, self._logs,
                                                                                   strict=True)]

    def entry_log_usage(self) -> list[tuple[int, int, int, int]]:
        """(dir index, log id, live bytes, total bytes) of every entry log except the active ones.

        Live bytes come from the per-log totals kept with the per-ledger usage of the index (no index
        scan, no walk over the ledgers); they only steer compaction: what is removed is decided on the
        index itself (`remove_dead_entry_logs`).
        """
        with self._lock:
            live = {(d, log_id): size for d, totals in enumerate(self._live) for log_id, size in totals.items()}
        out = []
        for d, logger in enumerate(self._logs):
            active = logger.active_id
            for log_id in logger.log_ids():
                if log_id != active:
                    out.append((d, log_id, live.get((d, log_id), 0), logger.size(log_id)))
        return out

    def compact_entry_log(self, dir_index: int, log_id: int, chunk_bytes: int = 4 << 20) -> tuple[int, int]:
        """Copy the live entries of a (non-active) log to the active log and repoint the index.

        An index slot is repointed only if it still names the old copy (an entry re-added meanwhile keeps
        its newer location). The old log stays until `remove_dead_entry_logs`. Returns (entries, bytes).
        """
        logger = self._logs[dir_index]
        if log_id == logger.active_id:
            return 0, 0
        with self._lock:
            ledgers = [led for led in self._ledgers.values() if led.dir_index == dir_index and log_id in led.usage]
        moved_entries = moved_bytes = 0
        for led in ledgers:
            for first, slots in self._scan(led):
                rel = np.flatnonzero(slots[:, 0] == log_id)
                if len(rel):
                    n, size = self._move(led, logger, rel.astype(np.int64) + first, slots[rel], chunk_bytes)
                    moved_entries += n
                    moved_bytes += size
        return moved_entries, moved_bytes

    def _move(
        self, led: LedgerIndex, logger: EntryLogger, ids: Slots, slots: Slots, chunk_bytes: int
    ) -> tuple[int, int]:
        """Copy these entries (still named by `slots`) to the active log, a chunk at a time."""
        moved_entries = moved_bytes = 0
        i = 0
        while i < len(ids):
            cum = np.cumsum(slots[i:, 2])
            j = i + max(int(np.searchsorted(cum, chunk_bytes, side="right")), 1)
            part_ids, part_slots = ids[i:j], slots[i:j]
            sizes = part_slots[:, 2]
            blob = self._read_runs(logger, part_slots)
            _check_headers(led.ledger_id, part_ids, sizes, blob)
            record = add_batch_parts(led.ledger_id, part_ids, sizes, memoryview(blob))
            offsets = _starts(sizes) + add_batch_data_offset(len(part_ids))
            with self._write_lock:
                self._check_open()
                new_log, record_offset = logger.append(record)
                with self._lock:
                    if self._ledgers.get(led.ledger_id) is led:
                        same = (self._slots_locked(led, part_ids) == part_slots).all(axis=1)
                        keep = part_ids[same]
                        if len(keep):
                            self._put_locked(led, keep, new_log, (offsets + record_offset)[same], sizes[same])
                self._make_room()
            moved_entries += len(part_ids)
            moved_bytes += int(sizes.sum())
            i = j
        return moved_entries, moved_bytes

    def remove_dead_entry_logs(self, candidates: Sequence[tuple[int, int]]) -> int:
        """Delete the given logs that no index slot names any more; returns the bytes freed.

        The index is checkpointed (entry logs fsynced, dirty pages written) first, so the index on disk never
        points into a removed log; then every index file is scanned for the candidates (the usage counts are
        not trusted with a deletion). Adds wait for none of the removals.
        """
        if not candidates:
            return 0
        with self._write_lock:
            self.flush()
            named = self._named_logs({(d, log_id) for d, log_id in candidates})
            dead = [(d, log_id) for d, log_id in candidates
                    if (d, log_id) not in named and log_id != self._logs[d].active_id]
        # outside the write lock (a removal takes a while, see files.remove_gradually): no slot names a dead
        # log, and new entries only ever go to the active log, so none can come to name it meanwhile
        return sum(self._logs[d].remove(log_id) for d, log_id in dead)

    def _named_logs(self, wanted: set[tuple[int, int]]) -> set[tuple[int, int]]:
        """Which of `wanted` (dir index, log id) some index slot names (called with the write lock)."""
        with self._lock:
            ledgers = list(self._ledgers.values())
        named: set[tuple[int, int]] = set()
        for led in ledgers:
            ids = np.array(sorted(log_id for d, log_id in wanted - named if d == led.dir_index), dtype=np.int64)
            if len(ids) == 0:
                continue
            for _, slots in self._scan(led):
                hit = np.unique(slots[:, 0][np.isin(slots[:, 0], ids)])
                named.update((led.dir_index, int(log_id)) for log_id in hit.tolist())
        return named

    @staticmethod
    def _read_runs(logger: EntryLogger, slots: npt.NDArray[np.int64]) -> bytes | bytearray:
        """Read the entries of `slots` with one pread per run of entries adjacent in one log; several runs
        are read straight into one buffer (joining them afterwards copied every byte once more: half of a
        bookie's storage thread in a range read)."""
        log_ids, offsets, sizes = slots[:, 0], slots[:, 1], slots[:, 2]
        apart = (log_ids[1:] != log_ids[:-1]) | (offsets[1:] != offsets[:-1] + sizes[:-1])
        breaks = np.flatnonzero(apart) + 1
        if not len(breaks):
            return logger.read(int(log_ids[0]), int(offsets[0]), int(offsets[-1] + sizes[-1] - offsets[0]))
        bounds = [0, *breaks.tolist(), len(slots)]
        out = bytearray(int(sizes.sum()))
        view = memoryview(out)
        at = 0
        for a, b in zip(bounds[:-1], bounds[1:], strict=False):
            length = int(offsets[b - 1] + sizes[b - 1] - offsets[a])
            logger.read_into(int(log_ids[a]), int(offsets[a]), view[at:at + length])
            at += length
        return out
