"""Entry logs of one ledger directory: append-only files holding the entries of all its ledgers.

Mirrors BookKeeper's `DefaultEntryLogger`: files `current/<hex id>.log` with a small header, one active
log per directory, rolled at `logSizeLimit`. Records use the journal's codec (ADD_BATCH frames), so a
log is self-describing. The journal is what makes an add durable; `flush()` (the checkpoint) fsyncs.

Writes: where the file system allows O_DIRECT, records collect in memory and go to the active log in
whole blocks of about WRITE_BYTES, written directly (a buffered write copied every byte into the page
cache, about a sixth of a core per bookie at 50 MB/s on this machine). The blocks are written by the
log's writer thread, not by the add that filled them: a 1 MiB direct write took 3-4 ms at p99 under
load, and every tenth batch of an add stream waited for it. The journal makes an add durable, so the
entry log only has to be on disk by the next checkpoint: `flush()` waits for the writer, writes the
partial last block padded with zeros, and the next record starts on a fresh block, so no block is ever
written twice and a block a reader cached is never stale. Records not on disk yet (held, or being
written) are read from memory; at most MAX_HELD bytes are held before an append waits for the writer.
A failed write leaves its records readable from memory, is logged and counted (`write_failures`), and
the next append starts a new log; no checkpoint passes them until a restart replays the journal.
Where O_DIRECT is refused, each record is a plain write(2). Reads are pread(2) on cached read-only
descriptors, safe from many threads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

from bkledger.bookie.direct_append import ALIGN, DirectAppender, open_direct
from bkledger.bookie.files import fsync_dir, list_hex_ids, remove_gradually, remove_leftovers, write_all

MAGIC = b"BKLO"
VERSION = 1
_HEADER = struct.Struct("<4sI8x")
HEADER_SIZE = _HEADER.size
WRITE_BYTES = 1 << 20   # a direct log writes once this much is collected
MAX_HELD = 8 * WRITE_BYTES   # an append waits for the writer while this much is held and not written

log = logging.getLogger(__name__)


class StorageError(OSError):
    """Ledger storage cannot tell what it holds (I/O error, corrupt index or log): answer EIO (R22)."""


def list_log_ids(current: Path) -> list[int]:
    return list_hex_ids(current, "log")


class EntryLogger:
    """The entry logs of one ledger directory (log ids start at 1; 0 means "no location")."""

    def __init__(self, current: Path, size_limit: int, direct_io: bool = True) -> None:
        self.current = current
        self.direct_io = direct_io
        self.current.mkdir(parents=True, exist_ok=True)
        remove_leftovers(self.current)
        self.size_limit = size_limit
        ids = list_log_ids(current)
        self._next_id = (ids[-1] + 1) if ids else 1
        self._lock = threading.Lock()
        self._written = threading.Condition(self._lock)   # the writer took or finished a block
        self._active_id = 0
        self._active_fd = -1
        self._active_size = 0
        self._direct: DirectAppender | None = None     # the active log's writer when it is direct
        self._flight: bytearray | None = None           # whole blocks the writer is writing, from _direct.end
        self._pending = bytearray()                     # the records after them, not handed to the writer yet
        self._unwritten: tuple[int, int] = (0, 0)       # (log id, end on disk): reads past it use memory
        self._write_error: OSError | None = None        # the writer's failed write, until an append abandons the log
        self._stopping = False
        self.write_failures = 0                         # since start (metrics)
        self._writer: threading.Thread | None = None
        if direct_io:
            self._writer = threading.Thread(target=self._write_blocks, name=f"entrylog-writer-{current.parent.name}",
                                            daemon=True)
            self._writer.start()
        self._orphans: dict[int, tuple[int, bytes]] = {}  # logs abandoned after a failed write: what never got there
        self._read_fds: dict[int, int] = {}
        self._read_lock = threading.Lock()
        self.rolls = 0
        self.bytes_written = 0          # records appended since start (metrics)

    def path(self, log_id: int) -> Path:
        return self.current / f"{log_id:x}.log"

    def _roll(self) -> None:
        """Close the active log (written and fsynced) and start a new one."""
        self._settle_writes()
        if self._active_fd >= 0:
            self._write_pending(pad=True)
            os.fsync(self._active_fd)
            self._close_active()
            self.rolls += 1
        log_id = self._next_id
        path = self.path(log_id)
        header = _HEADER.pack(MAGIC, VERSION)
        fd = open_direct(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL) if self.direct_io else None
        direct = fd is not None
        if fd is None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if not direct:
                write_all(fd, header)
            fsync_dir(self.current)
        except OSError:     # out of descriptors for the directory, say: no half-made log, the next add tries again
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
        self._next_id += 1
        if direct:
            self._direct = DirectAppender(fd)
            self._pending = bytearray(header)
            self._unwritten = (log_id, 0)
        self._active_id, self._active_fd, self._active_size = log_id, fd, HEADER_SIZE

    def append(self, record: Sequence[bytes | memoryview]) -> tuple[int, int]:
        """Write one record, given as its pieces, to the active log; return (log id, offset of the record)."""
        size = sum(len(part) for part in record)
        with self._lock:
            failed = self._settle_writes() if self._write_error is not None else None
            if failed is not None:             # the writer failed: this add fails as a failed write did, the log is
                raise failed                   # abandoned (its records readable from memory), the next add rolls
            full = self._active_size > HEADER_SIZE and self._active_size + size > self.size_limit
            if self._active_fd < 0 or full:
                self._roll()
            offset = self._active_size
            try:
                if self._direct is None:
                    write_all(self._active_fd, b"".join(record))
                else:
                    self._collect(record, size)
            except OSError:
                self._abandon_active()
                raise
            self._active_size += size
            self.bytes_written += size
            return self._active_id, offset

    def _collect(self, record: Sequence[bytes | memoryview], size: int) -> None:
        """A direct log's record: held in memory; once WRITE_BYTES are held the writer thread takes their
        whole blocks. With the lock held; waits (releasing it) while MAX_HELD bytes are held."""
        while len(self._pending) >= MAX_HELD and self._flight is not None and self._write_error is None:
            self._written.wait()
        held = self._pending
        for part in record:
            held += part
        if len(held) >= WRITE_BYTES and self._flight is None:
            self._written.notify_all()

    def _write_blocks(self) -> None:
        """The writer thread: write the whole blocks held, WRITE_BYTES or more at a time, in order."""
        while True:
            with self._written:
                while not self._stopping and (self._flight is not None or self._write_error is not None
                                              or len(self._pending) < WRITE_BYTES):
                    self._written.wait()
                if self._stopping:
                    return
                flight, direct, log_id = self._take_blocks()
            error: OSError | None = None
            try:
                with memoryview(flight) as view:
                    direct.append([view])
            except OSError as exc:
                error = exc
            except Exception as exc:  # noqa: BLE001 - never die silently: fail the log as an I/O error would
                log.exception("entry log %x: the writer failed unexpectedly", log_id)
                error = OSError(f"the entry log writer failed: {exc!r}")
            with self._written:
                self._written_back(flight, direct, log_id, error)
                self._written.notify_all()

    def _take_blocks(self) -> tuple[bytearray, DirectAppender, int]:
        """With the lock held: hand the whole blocks held to the writer (the partial last one stays)."""
        assert self._direct is not None
        held = self._pending
        whole = len(held) - len(held) % ALIGN
        self._pending = bytearray(held[whole:])
        del held[whole:]
        self._flight = held
        return held, self._direct, self._active_id

    def _written_back(self, flight: bytearray, direct: DirectAppender, log_id: int, error: OSError | None) -> None:
        """With the lock held: the writer's block write ended."""
        self._flight = None
        if error is None:
            self._unwritten = (log_id, direct.end)
            return
        self.write_failures += 1
        log.error("entry log %x: writing %d bytes failed (%s); they stay readable from memory, the next add "
                  "starts a new log, and no checkpoint passes them until a restart replays the journal",
                  log_id, len(flight), error)
        flight += self._pending          # everything after the end on disk, in order, back in _pending
        self._pending = flight
        self._write_error = error

    def _settle_writes(self) -> OSError | None:
        """With the lock held: wait for the block being written; if the writer failed, abandon the log and
        return the writer's error."""
        while self._flight is not None:
            self._written.wait()
        error, self._write_error = self._write_error, None
        if error is not None and self._active_fd >= 0:
            self._abandon_active()
        return error

    def written(self) -> None:
        """Wait until the writer has no block in hand (tests; `flush` does it itself)."""
        with self._written:
            while self._flight is not None or (len(self._pending) >= WRITE_BYTES and self._write_error is None
                                               and self._writer is not None and self._direct is not None):
                self._written.wait()

    def _write_pending(self, pad: bool) -> None:
        """Write the collected records of a direct log: whole blocks only, or all of them and pad."""
        direct = self._direct
        if direct is None:
            return
        assert self._flight is None, "the writer's block is written first (_settle_writes)"
        count = len(self._pending) if pad else len(self._pending) - len(self._pending) % ALIGN
        if count:
            with memoryview(self._pending) as view, view[:count] as chunk:
                direct.append([chunk])
            del self._pending[:count]
        if pad:
            direct.pad()
            self._active_size = direct.end
        self._unwritten = (self._active_id, direct.end)

    def _close_active(self) -> None:
        try:
            os.close(self._active_fd)
        finally:
            self._active_fd = -1
            if self._direct is not None:
                self._direct.close()
                self._direct = None
            self._pending = bytearray()
            self._unwritten = (0, 0)

    def _abandon_active(self) -> None:
        """After a failed write the tail of the active log is unknown: never append to it again. Records
        that never reached it stay readable from memory until the bookie restarts (the journal has them)."""
        if self._direct is not None and self._pending:
            self._orphans[self._active_id] = (self._direct.end, bytes(self._pending))
        self._close_active()

    def flush(self) -> None:
        """Write what a direct log holds in memory and fsync the active log (rolled logs were fsynced when
        they were closed): everything appended before this call is durable when it returns. The fsync
        runs on a duplicate of the descriptor, outside the lock, so appends (the journal thread's) do not
        wait for it; a roll meanwhile closes only the original."""
        with self._lock:
            self._settle_writes()
            if self._orphans:   # their records are only in memory and the journal: the mark must not pass them
                raise StorageError(f"entry logs {', '.join(f'{i:x}' for i in self._orphans)} could not be written; "
                                   "no checkpoint until the bookie restarts and replays the journal")
            if self._active_fd < 0:
                return
            try:
                self._write_pending(pad=True)
            except OSError:
                self._abandon_active()
                raise
            fd = os.dup(self._active_fd)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

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
        unwritten_log, written_end = self._unwritten
        if (log_id == unwritten_log and offset + size > written_end) or log_id in self._orphans:
            return self._read_unwritten(log_id, offset, size)
        data = self._pread(log_id, offset, size)
        if len(data) != size:
            raise StorageError(f"entry log {log_id:x}: short read at {offset} ({len(data)} of {size})")
        return data

    def read_into(self, log_id: int, offset: int, out: memoryview) -> None:
        """`read` straight into `out` (len(out) bytes at `offset`): no copy of its own for a read on disk."""
        size = len(out)
        if log_id <= 0 or offset < HEADER_SIZE:
            raise StorageError(f"corrupt location: log {log_id} offset {offset} size {size}")
        unwritten_log, written_end = self._unwritten
        if (log_id == unwritten_log and offset + size > written_end) or log_id in self._orphans:
            out[:] = self._read_unwritten(log_id, offset, size)
            return
        try:
            got = os.preadv(self._read_fd(log_id), [out], offset)
        except OSError as exc:
            raise StorageError(f"entry log {log_id:x}: {exc}") from exc
        if got != size:
            raise StorageError(f"entry log {log_id:x}: short read at {offset} ({got} of {size})")

    def _pread(self, log_id: int, offset: int, size: int) -> bytes:
        try:
            return os.pread(self._read_fd(log_id), size, offset)
        except OSError as exc:
            raise StorageError(f"entry log {log_id:x}: {exc}") from exc

    def _read_unwritten(self, log_id: int, offset: int, size: int) -> bytes:
        """A read that reaches past what is on disk: the rest comes from the records held in memory."""
        with self._lock:
            if log_id == self._unwritten[0]:
                end = self._unwritten[1]
                tail = self._held(max(0, offset - end), max(0, offset + size - end))
            else:
                end, pending = self._orphans.get(log_id, (offset + size, b""))
                tail = bytes(pending[max(0, offset - end) : max(0, offset + size - end)])
        head_end = min(end, offset + size)      # the range may lie wholly on disk by now
        head = self._pread(log_id, offset, head_end - offset) if offset < head_end else b""
        data = head + tail
        if len(data) != size:
            raise StorageError(f"entry log {log_id:x}: short read at {offset} ({len(data)} of {size})")
        return data

    def _held(self, start: int, stop: int) -> bytes:
        """With the lock held: bytes [start, stop) of what follows the end on disk (the writer's block,
        then the records held after it)."""
        flight = self._flight if self._flight is not None else b""
        cut = len(flight)
        return bytes(flight[start:min(stop, cut)]) + bytes(self._pending[max(0, start - cut):max(0, stop - cut)])

    # ---- garbage collection support ------------------------------------------------------
    @property
    def active_id(self) -> int:
        """The log appended to now (0 before the first append); GC never touches it."""
        with self._lock:
            return self._active_id if self._active_fd >= 0 else 0

    def log_ids(self) -> list[int]:
        return list_log_ids(self.current)

    def size(self, log_id: int) -> int:
        """Bytes of the log's records (file size without the header; for the active log also the records
        still in memory); 0 if it is gone."""
        with self._lock:
            if log_id == self._active_id and self._active_fd >= 0:
                return self._active_size - HEADER_SIZE
        try:
            return max(os.stat(self.path(log_id)).st_size - HEADER_SIZE, 0)
        except FileNotFoundError:
            return 0

    def remove(self, log_id: int) -> int:
        """Delete a log that no index slot points at any more (gradually, `files.remove_gradually`: call it
        without storage's write lock); returns the bytes freed."""
        with self._lock:
            if log_id == self._active_id and self._active_fd >= 0:
                raise StorageError(f"entry log {log_id:x} is the active log; it cannot be removed")
        with self._read_lock:
            fd = self._read_fds.pop(log_id, None)
            if fd is not None:
                os.close(fd)
        return remove_gradually(self.path(log_id))

    def close(self) -> None:
        with self._lock:
            try:
                self._settle_writes()
                if self._active_fd >= 0:
                    try:
                        self._write_pending(pad=True)
                        os.fsync(self._active_fd)
                    finally:
                        self._close_active()
            finally:
                self._stopping = True
                self._written.notify_all()
        if self._writer is not None and self._writer is not threading.current_thread():
            self._writer.join(timeout=30)
            if self._writer.is_alive():
                log.error("entry log writer of %s did not stop within 30 s", self.current)
        with self._read_lock:
            for fd in self._read_fds.values():
                os.close(fd)
            self._read_fds.clear()
