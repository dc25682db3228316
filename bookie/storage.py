"""Ledger storage: where journaled entries live for reading, and the per-ledger state beside them.

Mirrors BookKeeper's InterleavedLedgerStorage / SingleDirectoryDbLedgerStorage: entries of all ledgers
of one ledger directory go to shared entry logs (`bookie.entrylog`), an index maps (ledger, entry) to
(log, offset, size) (`bookie.index`), and per-ledger state (master key, fenced, explicit LAC, max
piggy-backed LAC) sits next to it. A ledger is pinned to directory `ledger_id % len(dirs)`.
Nothing here is durable until `flush()` (the checkpoint); until then the journal is the durability and
replay re-applies every record, so every mutator is idempotent. A read answers None only for an entry
the storage really does not hold; anything it cannot vouch for raises `StorageError` (R22).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bookie.core.records import add_batch_data_offset, encode_add_batch
from bookie.entrylog import EntryLogger, StorageError
from bookie.files import fsync_dir
from bookie.index import LedgerIndex, load_index_dir, remove_ledger_files, write_meta, write_slots

__all__ = ["LedgerStorage", "StorageError"]

_ENTRY_HEADER = struct.Struct(">qq")  # ledger id, entry id at the start of a packaged entry
_LAC_AT = 16  # piggy-backed LAC: big-endian int64 at bytes 16..24 of a packaged entry

IntVector = Sequence[int] | npt.NDArray[Any]
Batch = tuple[list[int], list[int], bytes]


def _starts(sizes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Offset of each entry inside a blob of the entries back to back."""
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return starts


def _header_fields(blob: bytes | memoryview, starts: npt.NDArray[np.int64], at: int) -> npt.NDArray[np.int64]:
    """The big-endian int64 at `start + at` of each entry (vectorised gather)."""
    u8 = np.frombuffer(blob, dtype=np.uint8)
    gathered = u8[starts[:, None] + np.arange(at, at + 8)]
    return gathered.copy().view(">i8").reshape(-1).astype(np.int64)


def _max_piggyback_lac(data: bytes | memoryview, sizes: npt.NDArray[np.int64]) -> int:
    starts = _starts(sizes)[sizes >= _LAC_AT + 8]
    if len(starts) == 0:
        return -1
    return int(_header_fields(data, starts, _LAC_AT).max())


def _check_headers(
    ledger_id: int, ids: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64], blob: bytes
) -> None:
    """Every entry read must start with its own (ledger id, entry id): else the location is corrupt."""
    starts = _starts(sizes)
    whole = sizes >= 16
    if not whole.all():
        raise StorageError(f"ledger {ledger_id}: stored entry shorter than its header")
    bad = (_header_fields(blob, starts, 0) != ledger_id) | (_header_fields(blob, starts, 8) != ids)
    if bad.any():
        first = int(ids[np.flatnonzero(bad)[0]])
        raise StorageError(f"ledger {ledger_id} entry {first}: location points at another entry")


class LedgerStorage:
    """Entry logs + index + ledger state over one or more ledger directories."""

    def __init__(self, ledger_dirs: Sequence[Path], *, entry_log_size_limit: int = 1 << 30) -> None:
        if not ledger_dirs:
            raise ValueError("at least one ledger directory is needed")
        self._currents = [Path(d) / "current" for d in ledger_dirs]
        self._index_dirs = [c / "index" for c in self._currents]
        for index_dir in self._index_dirs:
            index_dir.mkdir(parents=True, exist_ok=True)
        self._logs = [EntryLogger(c, entry_log_size_limit) for c in self._currents]
        self._ledgers: dict[int, LedgerIndex] = {}
        for i, index_dir in enumerate(self._index_dirs):
            self._ledgers.update(load_index_dir(index_dir, i))
        self._lock = threading.Lock()  # in-memory state (short holds; readers take it too)
        self._write_lock = threading.RLock()  # adds, flush, delete: one at a time
        self._closed = False

    # ---- state ---------------------------------------------------------------------------------

    def _get_or_create(self, ledger_id: int) -> LedgerIndex:
        """Called with self._lock held."""
        led = self._ledgers.get(ledger_id)
        if led is None:
            led = LedgerIndex(ledger_id, ledger_id % len(self._logs))
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
            ids, _ = led.present(0, led.last_entry)
        return [int(i) for i in ids.tolist()]

    # ---- writes --------------------------------------------------------------------------------

    def add_batch(
        self, ledger_id: int, entry_ids: IntVector, sizes: IntVector, data: bytes | memoryview
    ) -> None:
        """Append a batch of packaged entries to the ledger's entry log and index them.

        Idempotent: re-adding an entry (journal replay) points its slot at the new copy.
        """
        ids = np.asarray(entry_ids, dtype=np.int64).reshape(-1)
        szs = np.asarray(sizes, dtype=np.int64).reshape(-1)
        if len(ids) and int(ids.min()) < 0:
            raise ValueError(f"ledger {ledger_id}: negative entry id")
        record = encode_add_batch(ledger_id, ids, szs, data)  # also checks sizes against data
        lac = _max_piggyback_lac(data, szs)
        offsets = _starts(szs) + add_batch_data_offset(len(ids))
        with self._write_lock:
            self._check_open()
            with self._lock:
                led = self._get_or_create(ledger_id)
            if len(ids) == 0:
                return
            log_id, record_offset = self._logs[led.dir_index].append(record)
            with self._lock:
                led.put(ids, log_id, offsets + record_offset, szs)
                if lac > led.max_lac:
                    led.max_lac, led.meta_dirty = lac, True

    def delete_ledger(self, ledger_id: int) -> None:
        """Forget the ledger: its index and meta go now, its entry-log space later (GC)."""
        with self._write_lock:
            with self._lock:
                led = self._ledgers.pop(ledger_id, None)
            if led is not None:
                remove_ledger_files(self._index_dirs[led.dir_index], ledger_id)

    def flush(self) -> None:
        """Checkpoint: fsync the entry logs, then write and fsync dirty index slots and meta files."""
        with self._write_lock:
            self._check_open()
            for logger in self._logs:
                logger.flush()
            with self._lock:
                work = [(led, led.take_dirty(), led.encode_meta() if led.meta_dirty else None)
                        for led in self._ledgers.values() if led.dirty_lo >= 0 or led.meta_dirty]
                for led, _, _ in work:
                    led.meta_dirty = False
            touched: set[int] = set()
            try:
                for led, slots, meta in work:
                    self._write_ledger(led, slots, meta)
                    touched.add(led.dir_index)
            except OSError:
                self._redirty(work)
                raise
            for i in touched:
                fsync_dir(self._index_dirs[i])

    def _write_ledger(self, led: LedgerIndex, slots: tuple[int, bytes] | None, meta: bytes | None) -> None:
        index_dir = self._index_dirs[led.dir_index]
        if slots is not None:
            write_slots(index_dir, led.ledger_id, slots[0], slots[1])
        if meta is not None:
            write_meta(index_dir, led.ledger_id, meta)

    def _redirty(self, work: list[tuple[LedgerIndex, tuple[int, bytes] | None, bytes | None]]) -> None:
        """A failed flush leaves everything it took dirty again (rewriting is harmless)."""
        with self._lock:
            for led, slots, meta in work:
                if slots is not None:
                    led.mark_dirty(slots[0], slots[0] + len(slots[1]) // 24)
                if meta is not None:
                    led.meta_dirty = True

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
            return led.dir_index, led.location(entry_id)

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

    def read_range(
        self, ledger_id: int, first: int, last: int, max_batch_bytes: int, max_batch_entries: int
    ) -> Iterator[Batch]:
        """The held entries in [first, last], in order, as (entry ids, sizes, blob) batches."""
        with self._lock:
            led = self._ledgers.get(ledger_id)
            if led is None:
                return iter(())
            ids, slots = led.present(first, last)
            logger = self._logs[led.dir_index]
        limits = max(max_batch_bytes, 1), max(max_batch_entries, 1)
        return self._batches(ledger_id, logger, ids, slots, *limits)

    def _batches(
        self, ledger_id: int, logger: EntryLogger, ids: npt.NDArray[np.int64], slots: npt.NDArray[np.int64],
        max_bytes: int, max_entries: int,
    ) -> Iterator[Batch]:
        sizes = slots[:, 2]
        cum = np.cumsum(sizes)
        i = 0
        while i < len(ids):
            before = int(cum[i - 1]) if i else 0
            j = int(np.searchsorted(cum, before + max_bytes, side="right"))
            j = max(min(j, i + max_entries, len(ids)), i + 1)
            try:
                blob = self._read_runs(logger, slots[i:j])
                _check_headers(ledger_id, ids[i:j], sizes[i:j], blob)
            except StorageError:
                moved = self._current_slots(ledger_id, ids[i:j])   # raced a compaction? read the new places
                if moved is None or np.array_equal(moved, slots[i:j]):
                    raise
                blob = self._read_runs(logger, moved)
                _check_headers(ledger_id, ids[i:j], moved[:, 2], blob)
            yield [int(v) for v in ids[i:j].tolist()], [int(v) for v in sizes[i:j].tolist()], blob
            i = j

    def _current_slots(self, ledger_id: int, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64] | None:
        with self._lock:
            led = self._ledgers.get(ledger_id)
            if led is None or int(ids.max()) >= len(led.locs):
                return None
            slots = led.locs[ids].copy()
        return None if (slots[:, 0] == 0).any() else slots

    # ---- garbage collection and compaction ----------------------------------------------------

    def entry_log_usage(self) -> list[tuple[int, int, int, int]]:
        """(dir index, log id, live bytes, total bytes) of every entry log except the active ones."""
        live: dict[tuple[int, int], int] = {}
        with self._lock:
            for led in self._ledgers.values():
                held = led.locs[led.locs[:, 0] != 0]
                if len(held) == 0:
                    continue
                log_ids, inverse = np.unique(held[:, 0], return_inverse=True)
                sums = np.bincount(inverse, weights=held[:, 2].astype(np.float64))
                for log_id, total in zip(log_ids.tolist(), sums.tolist(), strict=True):
                    key = (led.dir_index, int(log_id))
                    live[key] = live.get(key, 0) + int(total)
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
            work = []
            for led in self._ledgers.values():
                if led.dir_index != dir_index:
                    continue
                ids = np.flatnonzero(led.locs[:, 0] == log_id).astype(np.int64)
                if len(ids):
                    work.append((led, ids, led.locs[ids].copy()))
        moved_entries = moved_bytes = 0
        for led, ids, slots in work:
            i = 0
            while i < len(ids):
                cum = np.cumsum(slots[i:, 2])
                j = i + max(int(np.searchsorted(cum, chunk_bytes, side="right")), 1)
                part_ids, part_slots = ids[i:j], slots[i:j]
                sizes = part_slots[:, 2]
                blob = self._read_runs(logger, part_slots)
                _check_headers(led.ledger_id, part_ids, sizes, blob)
                record = encode_add_batch(led.ledger_id, part_ids, sizes, blob)
                offsets = _starts(sizes) + add_batch_data_offset(len(part_ids))
                with self._write_lock:
                    self._check_open()
                    new_log, record_offset = logger.append(record)
                    with self._lock:
                        if self._ledgers.get(led.ledger_id) is led:
                            same = (led.locs[part_ids] == part_slots).all(axis=1)
                            keep = part_ids[same]
                            if len(keep):
                                led.put(keep, new_log, (offsets + record_offset)[same], sizes[same])
                moved_entries += len(part_ids)
                moved_bytes += int(sizes.sum())
                i = j
        return moved_entries, moved_bytes

    def remove_dead_entry_logs(self, candidates: Sequence[tuple[int, int]]) -> int:
        """Delete the given logs that no index slot names any more; returns the bytes freed.

        The index is checkpointed (entry logs fsynced, dirty slots written) first, so the index on disk never
        points into a removed log.
        """
        if not candidates:
            return 0
        freed = 0
        with self._write_lock:
            self.flush()
            with self._lock:
                named = set()
                for led in self._ledgers.values():
                    for log_id in np.unique(led.locs[:, 0]).tolist():
                        named.add((led.dir_index, int(log_id)))
            for dir_index, log_id in candidates:
                if (dir_index, log_id) in named or log_id == self._logs[dir_index].active_id:
                    continue
                freed += self._logs[dir_index].remove(log_id)
        return freed

    @staticmethod
    def _read_runs(logger: EntryLogger, slots: npt.NDArray[np.int64]) -> bytes:
        """Read the entries of `slots` with one pread per run of entries adjacent in one log."""
        log_ids, offsets, sizes = slots[:, 0], slots[:, 1], slots[:, 2]
        apart = (log_ids[1:] != log_ids[:-1]) | (offsets[1:] != offsets[:-1] + sizes[:-1])
        breaks = np.flatnonzero(apart) + 1
        bounds = [0, *breaks.tolist(), len(slots)]
        parts = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=False):
            length = int(offsets[b - 1] + sizes[b - 1] - offsets[a])
            parts.append(logger.read(int(log_ids[a]), int(offsets[a]), length))
        return parts[0] if len(parts) == 1 else b"".join(parts)
