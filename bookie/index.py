"""Per-ledger entry index files and ledger state (master key, fenced, explicit LAC, max piggy-backed LAC).

Mirrors BookKeeper's `FileInfo` index files (InterleavedLedgerStorage) and `LedgerMetadataIndex`
(DbLedgerStorage). On disk, `current/index/<hex ledger id>.idx` is a sparse file of 24-byte little-endian
slots indexed by entry id, slot = (entry log id, byte offset of the packaged entry, size), all zero when
the entry is absent; `<hex ledger id>.meta` holds the ledger state, replaced atomically. In memory a
ledger keeps only its state, its last entry id and how many slots and bytes of each entry log it names;
the slots themselves are paged in and out through `bookie.core.index_pages.PageCache` by the storage.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bkledger.bookie.core.index_pages import SLOT_SIZE, PageGeometry, Slots
from bkledger.bookie.core.records import crc32c
from bkledger.bookie.entrylog import StorageError
from bkledger.bookie.files import fsync_dir

_META = struct.Struct("<4sIBq")  # magic, version, fenced, max_lac
_META_MAGIC = b"BKLM"
_META_VERSION = 1
_LEN = struct.Struct("<i")
_CRC = struct.Struct("<I")
SCAN_SLOTS = 1 << 16  # slots per read when a whole index file is scanned (1.5 MiB)


def empty_slots(count: int) -> Slots:
    return np.zeros((count, 3), dtype=np.int64)


@dataclass
class LedgerIndex:
    """What the bookie keeps in memory about one ledger in one ledger directory (no slots)."""

    ledger_id: int
    dir_index: int
    last_entry: int = -1
    master_key: bytes | None = None
    fenced: bool = False
    explicit_lac: bytes | None = None
    max_lac: int = -1
    meta_version: int = 0  # counts changes of the state in the meta file; `meta_written`: the version durable
    meta_written: int = 0
    file_pages: int = 0  # pages of the index file that may hold slots; later pages are all absent
    usage: dict[int, list[int]] = field(default_factory=dict)  # entry log id -> [slots, bytes] naming it
    # its directory's live bytes per entry log, shared by its ledgers and kept with `usage`, so the GC's
    # per-log totals take no walk over every ledger (which held the storage lock 10 ms per 20,000)
    totals: dict[int, int] | None = field(default=None, repr=False, compare=False)

    @property
    def meta_dirty(self) -> bool:
        """Whether the meta file lacks a change: cleared only by `meta_durable` for the version written."""
        return self.meta_version != self.meta_written

    @meta_dirty.setter
    def meta_dirty(self, changed: bool) -> None:
        if changed:
            self.meta_version += 1

    def meta_durable(self, version: int) -> None:
        """The meta file holds `version` of the state, fsynced (the state is clean unless it changed since)."""
        self.meta_written = max(self.meta_written, version)

    def count(self, slots: Slots, sign: int) -> None:
        """Add (sign 1) or remove (sign -1) the held slots among `slots` from the per-log usage."""
        held = slots[slots[:, 0] != 0]
        if len(held) == 0:
            return
        logs = held[:, 0]
        if (logs == logs[0]).all():
            self.count_log(int(logs[0]), sign * len(held), sign * int(held[:, 2].sum()))
            return
        log_ids, inverse = np.unique(logs, return_inverse=True)
        counts = np.bincount(inverse)
        sizes = np.bincount(inverse, weights=held[:, 2].astype(np.float64))
        for log_id, n, b in zip(log_ids.tolist(), counts.tolist(), sizes.tolist(), strict=True):
            self.count_log(int(log_id), sign * int(n), sign * int(b))

    def count_log(self, log_id: int, slots: int, size: int) -> None:
        """Add `slots` slots of `size` bytes in all to entry log `log_id`'s usage (negative: remove)."""
        use = self.usage.setdefault(log_id, [0, 0])
        use[0] += slots
        use[1] += size
        if use[0] <= 0:
            del self.usage[log_id]
        if self.totals is not None:
            add_live(self.totals, log_id, size)

    def attach(self, totals: dict[int, int]) -> None:
        """Count this ledger's usage in its directory's `totals` from now on (it is added now)."""
        self.totals = totals
        for log_id, (_, size) in self.usage.items():
            add_live(totals, log_id, size)

    def detach(self) -> None:
        """Take this ledger's usage out of its directory's totals (the ledger is being deleted)."""
        if self.totals is not None:
            for log_id, (_, size) in self.usage.items():
                add_live(self.totals, log_id, -size)
            self.totals = None

    def encode_meta(self) -> bytes:
        parts = [_META.pack(_META_MAGIC, _META_VERSION, int(self.fenced), self.max_lac)]
        for blob in (self.master_key, self.explicit_lac):
            parts.append(_LEN.pack(-1 if blob is None else len(blob)))
            parts.append(blob or b"")
        body = b"".join(parts)
        return body + _CRC.pack(crc32c(body))

    def decode_meta(self, raw: bytes) -> None:
        if len(raw) < _META.size + 2 * _LEN.size + _CRC.size or _CRC.unpack(raw[-4:])[0] != crc32c(raw[:-4]):
            raise StorageError(f"ledger {self.ledger_id}: corrupt meta file")
        magic, version, fenced, max_lac = _META.unpack_from(raw, 0)
        if magic != _META_MAGIC or version != _META_VERSION:
            raise StorageError(f"ledger {self.ledger_id}: unknown meta format")
        pos = _META.size
        blobs: list[bytes | None] = []
        for _ in range(2):
            (n,) = _LEN.unpack_from(raw, pos)
            pos += _LEN.size
            blobs.append(None if n < 0 else raw[pos : pos + n])
            pos += max(n, 0)
        self.fenced, self.max_lac = bool(fenced), max(self.max_lac, max_lac)
        self.master_key, self.explicit_lac = blobs


# ---- files ------------------------------------------------------------------------------------


def index_path(index_dir: Path, ledger_id: int) -> Path:
    return index_dir / f"{ledger_id:x}.idx"


def meta_path(index_dir: Path, ledger_id: int) -> Path:
    return index_dir / f"{ledger_id:x}.meta"


def add_live(totals: dict[int, int], log_id: int, size: int) -> None:
    left = totals.get(log_id, 0) + size
    if left > 0:
        totals[log_id] = left
    else:
        totals.pop(log_id, None)


def load_index_dir(index_dir: Path, dir_index: int, geometry: PageGeometry) -> dict[int, LedgerIndex]:
    """Every ledger with an index or meta file in `index_dir`: its state, last entry and log usage.

    Index files are scanned in bounded chunks; no slot stays in memory.
    """
    ledgers: dict[int, LedgerIndex] = {}
    for name in sorted(os.listdir(index_dir)):
        stem, _, ext = name.partition(".")
        if ext.endswith("tmp"):
            os.unlink(index_dir / name)  # an interrupted meta write; the old file is intact
        try:
            ledger_id = int(stem, 16)
        except ValueError:
            continue
        if ext not in ("idx", "meta"):
            continue
        led = ledgers.setdefault(ledger_id, LedgerIndex(ledger_id, dir_index))
        if ext == "meta":
            led.decode_meta((index_dir / name).read_bytes())
        else:
            _load_slots(led, index_dir / name, geometry)
    return ledgers


def _load_slots(led: LedgerIndex, path: Path, geometry: PageGeometry) -> None:
    size = os.stat(path).st_size
    led.file_pages = geometry.pages_for(size)
    for first, slots in scan_file(path, 0, size // SLOT_SIZE):
        held = np.flatnonzero(slots[:, 0])
        if len(held):
            led.last_entry = first + int(held[-1])
            led.count(slots, 1)


def read_slots(path: Path, first_slot: int, count: int) -> Slots:
    """`count` slots from `first_slot` of an index file; absent (zero) past its end or if it is missing."""
    out = empty_slots(count)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return out
    try:
        raw = os.pread(fd, count * SLOT_SIZE, first_slot * SLOT_SIZE)
    except OSError as exc:
        raise StorageError(f"index file {path.name}: {exc}") from exc
    finally:
        os.close(fd)
    whole = len(raw) // SLOT_SIZE  # a torn trailing slot is ignored, as if never written
    out[:whole] = np.frombuffer(raw, dtype="<i8", count=whole * 3).reshape(-1, 3)
    return out


def scan_file(path: Path, first_slot: int, end_slot: int) -> Iterator[tuple[int, Slots]]:
    """(first slot, slots) chunks of at most SCAN_SLOTS covering the data of [first_slot, end_slot) of an
    index file: its holes (never written, so all absent) are skipped, so a scan costs time in proportion
    to the slots written, not to the highest entry id."""
    for run_start, run_end in data_runs(path, first_slot, end_slot):
        pos = run_start
        while pos < run_end:
            count = min(SCAN_SLOTS, run_end - pos)
            yield pos, read_slots(path, pos, count)
            pos += count


def data_runs(path: Path, first_slot: int, end_slot: int) -> list[tuple[int, int]]:
    """The [start, end) slot runs of [first_slot, end_slot) that hold file data (SEEK_DATA / SEEK_HOLE); the
    whole range where the file system cannot tell, none where the file is missing."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        return _runs(fd, first_slot, end_slot)
    finally:
        os.close(fd)


def next_data_slot(path: Path, slot: int) -> int | None:
    """The first slot at or after `slot` in a data region of the index file (None: no data after it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return max(slot, os.lseek(fd, slot * SLOT_SIZE, os.SEEK_DATA) // SLOT_SIZE)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return None
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return slot
        raise StorageError(f"index file {path.name}: {exc}") from exc
    finally:
        os.close(fd)


def _runs(fd: int, first_slot: int, end_slot: int) -> list[tuple[int, int]]:
    end = end_slot * SLOT_SIZE
    pos = first_slot * SLOT_SIZE
    runs: list[tuple[int, int]] = []
    while pos < end:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:          # no data at or after pos
                break
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return [(first_slot, end_slot)]  # the file system cannot say: scan it all
            raise StorageError(f"index file: {exc}") from exc
        if data >= end:
            break
        hole = os.lseek(fd, data, os.SEEK_HOLE)
        run = (max(first_slot, data // SLOT_SIZE), min(end_slot, -(-hole // SLOT_SIZE)))
        if runs and run[0] <= runs[-1][1]:
            runs[-1] = (runs[-1][0], max(runs[-1][1], run[1]))
        else:
            runs.append(run)
        pos = hole
    return runs


def write_pages(path: Path, page_bytes: int, pages: list[tuple[int, bytes]]) -> None:
    """pwrite whole pages (sorted by page number) into an index file (sparse) and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for page_no, raw in pages:
            view = memoryview(raw)
            pos = page_no * page_bytes
            while view:
                n = os.pwrite(fd, view, pos)
                view, pos = view[n:], pos + n
        os.fsync(fd)
    finally:
        os.close(fd)


def write_meta(index_dir: Path, ledger_id: int, raw: bytes) -> None:
    """Replace the ledger's meta file atomically (temp, fsync, rename); the caller fsyncs the dir."""
    path = meta_path(index_dir, ledger_id)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, raw)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def remove_ledger_files(index_dir: Path, ledger_id: int) -> None:
    for path in (index_path(index_dir, ledger_id), meta_path(index_dir, ledger_id)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
    fsync_dir(index_dir)
