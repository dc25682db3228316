"""Per-ledger entry index and ledger state (master key, fenced, explicit LAC, max piggy-backed LAC).

Mirrors BookKeeper's `FileInfo` index files (InterleavedLedgerStorage) and `LedgerMetadataIndex`
(DbLedgerStorage): in memory each ledger has a numpy array of fixed-size slots indexed by entry id,
slot = (entry log id, byte offset of the packaged entry, size), all zero when the entry is absent.
On disk, `current/index/<hex ledger id>.idx` is a sparse file of the same 24-byte little-endian slots
(only the changed slot range is rewritten on flush), and `<hex ledger id>.meta` holds the ledger
state, replaced atomically.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bookie.core.records import crc32c
from bookie.entrylog import StorageError
from bookie.files import fsync_dir

SLOT_SIZE = 24  # three little-endian int64: log id, offset, size
_META = struct.Struct("<4sIBq")  # magic, version, fenced, max_lac
_META_MAGIC = b"BKLM"
_META_VERSION = 1
_LEN = struct.Struct("<i")
_CRC = struct.Struct("<I")

Locations = npt.NDArray[np.int64]


@dataclass
class LedgerIndex:
    """Everything the bookie keeps about one ledger in one ledger directory."""

    ledger_id: int
    dir_index: int
    locs: Locations = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int64))
    last_entry: int = -1
    master_key: bytes | None = None
    fenced: bool = False
    explicit_lac: bytes | None = None
    max_lac: int = -1
    dirty_lo: int = -1  # dirty slot range [dirty_lo, dirty_hi), empty when dirty_lo < 0
    dirty_hi: int = -1
    meta_dirty: bool = False

    def put(self, entry_ids: Locations, log_id: int, offsets: Locations, sizes: Locations) -> None:
        """Record the locations of a batch (overwriting earlier ones, as replay does)."""
        if len(entry_ids) == 0:
            return
        lo, hi = int(entry_ids.min()), int(entry_ids.max()) + 1
        if hi > len(self.locs):
            grown = np.zeros((max(hi, 2 * len(self.locs), 64), 3), dtype=np.int64)
            grown[: len(self.locs)] = self.locs
            self.locs = grown
        self.locs[entry_ids, 0] = log_id
        self.locs[entry_ids, 1] = offsets
        self.locs[entry_ids, 2] = sizes
        self.last_entry = max(self.last_entry, hi - 1)
        self.mark_dirty(lo, hi)

    def mark_dirty(self, lo: int, hi: int) -> None:
        if self.dirty_lo < 0:
            self.dirty_lo, self.dirty_hi = lo, hi
        else:
            self.dirty_lo, self.dirty_hi = min(self.dirty_lo, lo), max(self.dirty_hi, hi)

    def location(self, entry_id: int) -> tuple[int, int, int] | None:
        if entry_id < 0 or entry_id >= len(self.locs):
            return None
        log_id, offset, size = (int(v) for v in self.locs[entry_id])
        return None if log_id == 0 else (log_id, offset, size)

    def present(self, first: int, last: int) -> tuple[Locations, Locations]:
        """(entry ids, their slots) of the held entries in [first, last], a copy."""
        first, last = max(first, 0), min(last, len(self.locs) - 1)
        if last < first:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 3), dtype=np.int64)
        window = self.locs[first : last + 1]
        rel = np.flatnonzero(window[:, 0])
        return rel.astype(np.int64) + first, window[rel].copy()

    def take_dirty(self) -> tuple[int, bytes] | None:
        """The dirty slot range as (first slot, raw bytes), clearing it."""
        if self.dirty_lo < 0:
            return None
        lo, hi = self.dirty_lo, self.dirty_hi
        self.dirty_lo = self.dirty_hi = -1
        return lo, self.locs[lo:hi].astype("<i8").tobytes()

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


def load_index_dir(index_dir: Path, dir_index: int) -> dict[int, LedgerIndex]:
    """Every ledger with an index or meta file in `index_dir`."""
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
        raw = (index_dir / name).read_bytes()
        if ext == "meta":
            led.decode_meta(raw)
        else:
            _load_slots(led, raw)
    return ledgers


def _load_slots(led: LedgerIndex, raw: bytes) -> None:
    usable = len(raw) - len(raw) % SLOT_SIZE
    locs = np.frombuffer(raw, dtype="<i8", count=usable // 8).reshape(-1, 3).astype(np.int64)
    led.locs = locs.copy()
    held = np.flatnonzero(locs[:, 0])
    led.last_entry = int(held[-1]) if len(held) else -1


def write_slots(index_dir: Path, ledger_id: int, first_slot: int, raw: bytes) -> None:
    """pwrite a slot range into the ledger's (sparse) index file and fsync it."""
    fd = os.open(index_path(index_dir, ledger_id), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        view = memoryview(raw)
        pos = first_slot * SLOT_SIZE
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
