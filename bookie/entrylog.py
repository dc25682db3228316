"""Entry logs of one ledger directory: append-only files holding the entries of all its ledgers.

Mirrors BookKeeper's `DefaultEntryLogger`: files `current/<hex id>.log` with a small header, one active
log per directory, rolled at `logSizeLimit`. Records use the journal's codec (ADD_BATCH frames), so a
log is self-describing. Writes are plain write(2) — the journal is what makes an add durable — and
`flush()` fsyncs. Reads are pread(2) on cached read-only descriptors, safe from many threads.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

from bookie.files import fsync_dir, list_hex_ids

MAGIC = b"BKLO"
VERSION = 1
_HEADER = struct.Struct("<4sI8x")
HEADER_SIZE = _HEADER.size


class StorageError(OSError):
    """Ledger storage cannot tell what it holds (I/O error, corrupt index or log): answer EIO (R22)."""


def list_log_ids(current: Path) -> list[int]:
    return list_hex_ids(current, "log")


class EntryLogger:
    """The entry logs of one ledger directory (log ids start at 1; 0 means "no location")."""

    def __init__(self, current: Path, size_limit: int) -> None:
        self.current = current
        self.current.mkdir(parents=True, exist_ok=True)
        self.size_limit = size_limit
        ids = list_log_ids(current)
        self._next_id = (ids[-1] + 1) if ids else 1
        self._lock = threading.Lock()
        self._active_id = 0
        self._active_fd = -1
        self._active_size = 0
        self._read_fds: dict[int, int] = {}
        self._read_lock = threading.Lock()
        self.rolls = 0
        self.bytes_written = 0          # records appended since start (metrics)

    def path(self, log_id: int) -> Path:
        return self.current / f"{log_id:x}.log"

    def _roll(self) -> None:
        """Close the active log (fsynced) and start a new one."""
        if self._active_fd >= 0:
            os.fsync(self._active_fd)
            os.close(self._active_fd)
            self._active_fd = -1
            self.rolls += 1
        log_id = self._next_id
        fd = os.open(self.path(log_id), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, _HEADER.pack(MAGIC, VERSION))
        except OSError:
            os.close(fd)
            raise
        fsync_dir(self.current)
        self._next_id += 1
        self._active_id, self._active_fd, self._active_size = log_id, fd, HEADER_SIZE

    def append(self, record: bytes) -> tuple[int, int]:
        """Write one record to the active log; return (log id, offset of the record)."""
        with self._lock:
            full = self._active_size > HEADER_SIZE and self._active_size + len(record) > self.size_limit
            if self._active_fd < 0 or full:
                self._roll()
            offset = self._active_size
            try:
                _write_all(self._active_fd, record)
            except OSError:
                self._abandon_active()
                raise
            self._active_size += len(record)
            self.bytes_written += len(record)
            return self._active_id, offset

    def _abandon_active(self) -> None:
        """After a failed write the tail of the active log is unknown: never append to it again."""
        try:
            os.close(self._active_fd)
        finally:
            self._active_fd = -1

    def flush(self) -> None:
        """fsync the active log (rolled logs were fsynced when they were closed)."""
        with self._lock:
            if self._active_fd >= 0:
                os.fsync(self._active_fd)

    def _read_fd(self, log_id: int) -> int:
        with self._read_lock:
            fd = self._read_fds.get(log_id)
            if fd is None:
                fd = os.open(self.path(log_id), os.O_RDONLY)
                self._read_fds[log_id] = fd
            return fd

    def read(self, log_id: int, offset: int, size: int) -> bytes:
        """Exactly `size` bytes at `offset` of log `log_id`, or StorageError."""
        if log_id <= 0 or offset < HEADER_SIZE or size < 0:
            raise StorageError(f"corrupt location: log {log_id} offset {offset} size {size}")
        try:
            data = os.pread(self._read_fd(log_id), size, offset)
        except OSError as exc:
            raise StorageError(f"entry log {log_id:x}: {exc}") from exc
        if len(data) != size:
            raise StorageError(f"entry log {log_id:x}: short read at {offset} ({len(data)} of {size})")
        return data

    # ---- garbage collection support ------------------------------------------------------
    @property
    def active_id(self) -> int:
        """The log appended to now (0 before the first append); GC never touches it."""
        with self._lock:
            return self._active_id if self._active_fd >= 0 else 0

    def log_ids(self) -> list[int]:
        return list_log_ids(self.current)

    def size(self, log_id: int) -> int:
        """Bytes of the log's records (file size without the header); 0 if it is gone."""
        try:
            return max(os.stat(self.path(log_id)).st_size - HEADER_SIZE, 0)
        except FileNotFoundError:
            return 0

    def remove(self, log_id: int) -> int:
        """Delete a log that no index slot points at any more; returns the bytes freed."""
        with self._lock:
            if log_id == self._active_id and self._active_fd >= 0:
                raise StorageError(f"entry log {log_id:x} is the active log; it cannot be removed")
        with self._read_lock:
            fd = self._read_fds.pop(log_id, None)
            if fd is not None:
                os.close(fd)
        path = self.path(log_id)
        try:
            freed = os.stat(path).st_size
            os.unlink(path)
        except FileNotFoundError:
            return 0
        fsync_dir(self.current)
        return freed

    def close(self) -> None:
        with self._lock:
            if self._active_fd >= 0:
                try:
                    os.fsync(self._active_fd)
                finally:
                    os.close(self._active_fd)
                    self._active_fd = -1
        with self._read_lock:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
