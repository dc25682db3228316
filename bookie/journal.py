"""The bookie journal: the write-ahead log every add, fence and explicit LAC goes through first.

Mirrors BookKeeper's `Journal` / `JournalChannel` (and the ForceWriteThread folded into the same thread):
one journal thread takes queued records in groups (journalMaxGroupWaitMSec,
journalBufferedWritesThreshold, journalFlushWhenQueueEmpty), writes each group with one write(2)
and makes it durable with ONE fdatasync, and only then runs the callbacks of the group (R8, R15).
A producer with nothing else to do may ask to commit its record itself (`append(inline=True)`): when the
journal thread is idle and nothing is queued, the record is written, synced and answered on the caller's
thread, the same one-group commit without the two thread wake-ups of the hand-off (at low load those were
a fifth of a bookie's CPU per add). One committer at a time (`_committing`), so groups stay in order.
Files are `current/<hex id>.txn` with a 16-byte header, rolled at journalMaxSizeMB (later while no file
descriptor is free: `Journal._roll`); replay reads them from a LastLogMark and stops each file at its
torn tail (R23). Also owns the lastMark file I/O.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bkledger.bookie.core.decisions import out_of_descriptors
from bkledger.bookie.core.records import LogMark, Record, decode_log_mark, encode_log_mark, iter_records
from bkledger.bookie.direct_append import DirectAppender, open_direct
from bkledger.bookie.files import fsync_dir, list_hex_ids, remove_gradually, remove_leftovers, write_all
from bkledger.bookie.log_limit import LogLimit, left_out_note
from bkledger.bookie.thread_guard import FAILURES

__all__ = ["Journal", "JournalClosedError", "JournalStats", "LogMark", "read_mark_file", "write_mark_file"]

log = logging.getLogger(__name__)

ROLL_LOG_INTERVAL_S = 10.0      # at most one line per this while rolls are put off (Journal._roll)

MAGIC = b"BKJN"
VERSION = 1
_HEADER = struct.Struct("<4sI8x")
HEADER_SIZE = _HEADER.size
_READ_CHUNK = 16 << 20

Callback = Callable[[BaseException | None], None]


class JournalClosedError(OSError):
    """The journal is closed (or was never started); nothing more is written."""


@dataclass
class JournalStats:
    appends: int = 0
    groups: int = 0
    fsyncs: int = 0
    bytes_written: int = 0
    rolls: int = 0
    rolls_deferred: int = 0     # rolls put off for want of a file descriptor (see Journal._roll)


@dataclass
class _Item:
    payloads: Sequence[bytes | memoryview]
    callback: Callback
    sync: bool
    trace: Any = None           # a bookie.add_trace.BatchTrace: stamped when grouped and synced


# ---- lastMark files ---------------------------------------------------------------------------


def read_mark_file(path: Path) -> LogMark | None:
    """The LogMark stored in `path`, or None when it is missing or not a mark."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode_log_mark(raw)


def write_mark_file(path: Path, mark: LogMark) -> None:
    """Atomically replace `path` with `mark`: write a temp file, fsync, rename, fsync the dir."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, encode_log_mark(mark))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


# ---- journal files ----------------------------------------------------------------------------


def _file_name(file_id: int) -> str:
    return f"{file_id:x}.txn"


def list_journal_ids(current: Path) -> list[int]:
    return list_hex_ids(current, "txn")


def _header_ok(fd: int) -> bool:
    raw = os.pread(fd, HEADER_SIZE, 0)
    if len(raw) != HEADER_SIZE:
        return False
    magic, version = _HEADER.unpack(raw)
    return bool(magic == MAGIC and version == VERSION)


def _replay_file(path: Path, file_id: int, start: int, apply: Callable[[int, int, Record], None]) -> int:
    """Apply the records of one journal file from `start`; return the end of its valid prefix."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if not _header_ok(fd):
            log.warning("journal %s: bad or missing header, skipped", path)
            return start
        pos = max(start, HEADER_SIZE)
        buf = b""
        while True:
            chunk = os.pread(fd, _READ_CHUNK, pos + len(buf))
            buf = buf + chunk if buf else chunk
            it = iter_records(buf, 0)
            for offset, record in it:
                apply(file_id, pos + offset, record)
            if not (it.incomplete and chunk):
                return pos + it.end
            pos, buf = pos + it.end, buf[it.end :]
    finally:
        os.close(fd)


class Journal:
    """Group-committing write-ahead log with one journal thread."""

    def __init__(
        self,
        journal_dir: Path,
        *,
        max_group_wait_ms: float = 2.0,
        buffered_writes_threshold: int = 512 * 1024,
        flush_when_queue_empty: bool = True,
        sync_data: bool = True,
        page_cache_flush_interval_ms: float = 1000.0,
        max_size_mb: int = 2048,
        max_backups: int = 5,
        direct_io: bool = True,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.current_dir = Path(journal_dir) / "current"
        self.current_dir.mkdir(parents=True, exist_ok=True)
        self.max_group_wait = max_group_wait_ms / 1000.0
        self.buffered_writes_threshold = buffered_writes_threshold
        self.flush_when_queue_empty = flush_when_queue_empty or max_group_wait_ms <= 0
        self.sync_data = sync_data
        self.flush_interval = page_cache_flush_interval_ms / 1000.0   # <= 0: unsynced data waits for a sync
        self._unsynced = False                  # written without fdatasync (journalSyncData=false, deferred)
        self._last_sync = time.monotonic()
        self.max_size = max_size_mb * 1024 * 1024
        self._roll_log = LogLimit(ROLL_LOG_INTERVAL_S)
        self.max_backups = max_backups
        self.direct_io = direct_io
        self.on_fatal = on_fatal
        self.stats = JournalStats()
        self.on_sync: Callable[[float], None] | None = None       # metrics: seconds one fdatasync took
        self.on_group: Callable[[int, int], None] | None = None   # metrics: (items, bytes) of a written group
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._queue: collections.deque[_Item] = collections.deque()
        self._checkpoints: list[Callable[[LogMark], None]] = []
        self._closing = False
        self._closed = False
        self._committing = False                # a thread (the journal's or an inline caller) writes a group now
        self._inline_committer = 0              # the thread id of an inline commit in progress (0: none)
        self._thread: threading.Thread | None = None
        self._fd = -1
        self._direct: DirectAppender | None = None   # set while the current file is written with O_DIRECT
        self._file_id = 0
        self._offset = 0

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def queue_size(self) -> int:
        """Records waiting for the journal thread (metrics; read without the lock)."""
        return len(self._queue)

    # ---- replay -------------------------------------------------------------------------------

    def replay(self, mark: LogMark, apply: Callable[[int, int, Record], None]) -> LogMark:
        """Apply every record from `mark` on, file by file in id order; return the end position."""
        if self._thread is not None:
            raise RuntimeError("replay() must run before start()")
        end = mark
        for file_id in list_journal_ids(self.current_dir):
            if file_id < mark.file_id:
                continue
            start = mark.offset if file_id == mark.file_id else 0
            stop = _replay_file(self.current_dir / _file_name(file_id), file_id, start, apply)
            end = LogMark(file_id, max(stop, HEADER_SIZE))
        return end

    # ---- files --------------------------------------------------------------------------------

    def _open_new_file(self) -> None:
        self._fd, self._file_id, self._direct = self._new_file()
        self._offset = HEADER_SIZE

    def _new_file(self) -> tuple[int, int, DirectAppender | None]:
        """Create the next journal file with its header, durably: (descriptor, file id, direct appender)."""
        ids = list_journal_ids(self.current_dir)
        file_id = ids[-1] + 1 if ids else int(time.time() * 1000)
        path = self.current_dir / _file_name(file_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        header = _HEADER.pack(MAGIC, VERSION)
        try:
            write_all(fd, header)
            os.fsync(fd)
            fsync_dir(self.current_dir)
            direct_fd = open_direct(path, os.O_WRONLY) if self.direct_io else None
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):   # no half-made file left behind (it was harmless: empty)
                path.unlink()
            raise
        if direct_fd is None:
            return fd, file_id, None
        os.close(fd)
        return direct_fd, file_id, DirectAppender(direct_fd, HEADER_SIZE, header)

    def _close_file(self, sync: bool) -> None:
        if self._fd < 0:
            return
        try:
            if sync:
                os.fdatasync(self._fd)
                self.stats.fsyncs += 1
        finally:
            os.close(self._fd)
            self._fd = -1
            if self._direct is not None:
                self._direct.close()
                self._direct = None

    def _roll(self) -> None:
        """Go on in a new file. The new one is made before the current one is closed: when the process has
        no file descriptor to spare (EMFILE, ENFILE: a flood of connections, say), the groups go on into
        the current file past journalMaxSizeMB, and the next group tries again (logged once per
        ROLL_LOG_INTERVAL_S), instead of the journal failing for good."""
        try:
            made = self._new_file()
        except OSError as exc:
            if not out_of_descriptors(exc.errno):
                raise
            self.stats.rolls_deferred += 1
            left_out = self._roll_log.allow()
            if left_out is not None:
                log.warning("journal: cannot start a new file (%s); writing on in file %x past journalMaxSizeMB "
                            "until a descriptor is free%s", exc, self._file_id, left_out_note(left_out))
            return
        self._close_file(sync=True)
        self._fd, self._file_id, self._direct = made
        self._offset = HEADER_SIZE
        self.stats.rolls += 1

    def position(self) -> LogMark:
        """(file id, offset) just past the last written group."""
        with self._cond:
            return LogMark(self._file_id, self._offset)

    def remove_old_files(self, mark: LogMark) -> None:
        """Delete journal files wholly before `mark`, keeping the newest `max_backups` of them (gradually:
        see `files.remove_gradually`; this runs on the checkpoint thread, off every add's path)."""
        old = [i for i in list_journal_ids(self.current_dir) if i < mark.file_id and i != self._file_id]
        doomed = old[: max(0, len(old) - self.max_backups)]
        for file_id in doomed:
            remove_gradually(self.current_dir / _file_name(file_id))

    # ---- producer side ------------------------------------------------------------------------

    def start(self) -> None:
        """Open a new journal file and start the journal thread."""
        if self._thread is not None or self._closed:
            raise RuntimeError("journal already started or closed")
        remove_leftovers(self.current_dir)
        self._open_new_file()
        self._thread = threading.Thread(target=self._run, name="journal", daemon=True)
        self._thread.start()

    def append(self, payloads: Sequence[bytes | memoryview], callback: Callback, *, sync: bool = True,
               trace: Any = None, inline: bool = False) -> None:
        """Queue records; `callback(None)` runs on the journal thread once they are durable
        (or written, for sync=False), `callback(error)` if they never will be. `trace` (a
        bookie.add_trace.BatchTrace) gets the times the records were queued, grouped and synced.
        `inline`: the caller has nothing else queued; if the journal thread is idle and no record waits,
        the records are committed (written, synced, answered) on the caller's thread before this returns."""
        if trace is not None:
            trace.enqueued = time.perf_counter_ns()
        with self._cond:
            err = self.error
            if err is None and (self._closing or self._closed):
                err = JournalClosedError("journal is closed")
            if err is None:
                item = _Item(payloads, callback, sync, trace)
                self.stats.appends += 1
                if not (inline and self._may_commit_inline()):
                    self._queue.append(item)
                    self._cond.notify()
                    return
                self._committing, self._inline_committer = True, threading.get_ident()
        if err is not None:
            callback(err)
            return
        self._commit_inline(item)

    def _may_commit_inline(self) -> bool:
        """(lock held) Whether a record may skip the queue: nothing queued or being written before it, and no
        group wait to fill (with a wait, the journal thread gathers the group)."""
        return (not self._committing and not self._queue and not self._checkpoints and self.flush_when_queue_empty
                and self._thread is not None)

    def _commit_inline(self, item: _Item) -> None:
        """Commit one record on the caller's thread, as the journal thread would (see `append`)."""
        try:
            self._commit([item])
        except Exception as exc:  # noqa: BLE001 - as on the journal thread: no record is left waiting for ever
            FAILURES.record("journal", "an inline journal group")
            if self.error is None:
                self._fail(exc, [item])
        finally:
            with self._cond:
                self._committing, self._inline_committer = False, 0
                if self._queue or self._checkpoints or self._closing or self._unsynced:
                    self._cond.notify_all()     # the journal thread takes what came meanwhile, or times a flush

    def request_checkpoint(self, fn: Callable[[LogMark], None]) -> None:
        """Run fn(mark) on the journal thread after the current group; mark covers applied records."""
        with self._cond:
            if self._closing or self._closed:
                return
            self._checkpoints.append(fn)
            self._cond.notify()

    def close(self) -> None:
        """Flush what is queued (callbacks fire), stop the thread, close the file. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closing = True
            self._cond.notify_all()
        if self._thread is threading.current_thread() or self._inline_committer == threading.get_ident():
            return  # called from a callback or hook: the thread stops after its current work
        if self._thread is not None:
            self._thread.join()
        with self._cond:
            self._closed = True
            leftover = list(self._queue)
            self._queue.clear()
        for item in leftover:
            _call(item.callback, self.error or JournalClosedError("journal is closed"))

    def _finish(self) -> None:
        """On the journal thread, after the last group: sync and close the file."""
        try:
            self._close_file(sync=self.error is None)
        except OSError as exc:
            log.error("journal close: %s", exc)

    # ---- journal thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            group: list[_Item] = []
            try:
                group, checkpoints, stop = self._next_work()
                if group:
                    self._commit(group)
                elif self._flush_due():
                    self._flush_page_cache()
                for fn in checkpoints:
                    self._run_checkpoint(fn)
            except Exception as exc:  # noqa: BLE001 - never a dead journal thread that adds wait on for ever
                FAILURES.record("journal", "a journal group")
                if self.error is None:
                    self._fail(exc, group)      # the file's state is unknown: no further record is acknowledged
                continue
            finally:
                with self._cond:
                    self._committing = False
            if stop:
                self._finish()
                return

    def _next_work(self) -> tuple[list[_Item], list[Callable[[LogMark], None]], bool]:
        """The next group, checkpoints and whether to stop; the journal thread is the committer from here
        until `_run` has done them (an inline commit in progress is waited for first)."""
        with self._cond:
            while self._committing or (not self._queue and not self._checkpoints and not self._closing):
                if self._committing or not self._unsynced or self.flush_interval <= 0:
                    self._cond.wait()
                elif self._flush_due() or not self._cond.wait(self._last_sync + self.flush_interval
                                                              - time.monotonic()):
                    if self._committing:
                        continue
                    self._committing = True
                    return [], [], False            # idle with unsynced data: time to flush it
            self._committing = True
            group = self._drain_locked()
            checkpoints, self._checkpoints = self._checkpoints, []
            return group, checkpoints, self._closing and not self._queue

    def _drain_locked(self) -> list[_Item]:
        """Take one group off the queue (called with the lock held; may wait out the window)."""
        group: list[_Item] = []
        if not self._queue:
            return group
        nbytes = 0
        deadline = time.monotonic() + self.max_group_wait
        while True:
            while self._queue and nbytes < self.buffered_writes_threshold:
                item = self._queue.popleft()
                group.append(item)
                nbytes += sum(len(p) for p in item.payloads)
                if time.monotonic() >= deadline:
                    return group
            if nbytes >= self.buffered_writes_threshold or self._closing or self.flush_when_queue_empty:
                return group
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return group
            self._cond.wait(remaining)

    def _write_group(self, parts: list[bytes | memoryview], nbytes: int, need_sync: bool) -> tuple[int, int]:
        """Write (and sync) one group; returns when its fdatasync started and ended (perf_counter_ns; both the
        end of the write when there is none)."""
        if self._offset >= self.max_size:
            with self._cond:
                self._roll()
        if self._direct is not None:
            self._direct.append(parts)
        elif nbytes:
            write_all(self._fd, b"".join(parts))
        sync_start = time.perf_counter_ns()
        if need_sync:
            started = time.monotonic()
            os.fdatasync(self._fd)
            self.stats.fsyncs += 1
            self._unsynced, self._last_sync = False, time.monotonic()
            if self.on_sync is not None:
                self.on_sync(self._last_sync - started)
            return sync_start, time.perf_counter_ns()
        if nbytes:
            self._unsynced = True
        return sync_start, sync_start

    def _flush_due(self) -> bool:
        return self._unsynced and self.flush_interval > 0 and \
            time.monotonic() - self._last_sync >= self.flush_interval

    def _flush_page_cache(self) -> None:
        """journalPageCacheFlushIntervalMSec: data acknowledged without fdatasync reaches the disk within
        an interval (bounds what a machine crash can lose when journalSyncData=false or deferred sync)."""
        if self.error is not None or self._fd < 0:
            return
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            self._fail(exc, [])
            return
        self.stats.fsyncs += 1
        self._unsynced, self._last_sync = False, time.monotonic()

    def _commit(self, group: list[_Item]) -> None:
        """Write one group with one write and at most one fdatasync, then run its callbacks."""
        if self.error is not None:
            for item in group:
                _call(item.callback, self.error)
            return
        formed = time.perf_counter_ns()
        parts = [p for item in group for p in item.payloads]
        nbytes = sum(len(p) for p in parts)
        need_sync = (self.sync_data and any(item.sync for item in group)) or self._flush_due()
        try:
            sync_start, sync_done = self._write_group(parts, nbytes, need_sync)
        except OSError as exc:
            self._fail(exc, group)
            return
        for item in group:
            if item.trace is not None:
                item.trace.grouped, item.trace.sync_start, item.trace.sync_done = formed, sync_start, sync_done
        with self._cond:
            self._offset += nbytes
        self.stats.groups += 1
        self.stats.bytes_written += nbytes
        if self.on_group is not None:
            self.on_group(len(group), nbytes)
        for item in group:
            _call(item.callback, None)

    def _fail(self, exc: BaseException, group: list[_Item]) -> None:
        log.error("journal write/fsync failed: %s; the journal stops accepting records", exc)
        with self._cond:
            self.error = exc
            rest = list(self._queue)
            self._queue.clear()
        for item in group + rest:
            _call(item.callback, exc)
        if self.on_fatal is not None:
            try:
                self.on_fatal(exc)
            except Exception:
                log.exception("journal on_fatal hook failed")

    def _run_checkpoint(self, fn: Callable[[LogMark], None]) -> None:
        if self.error is not None:
            return
        try:
            fn(LogMark(self._file_id, self._offset))
        except Exception:
            log.exception("journal checkpoint failed")


def _call(callback: Callback, err: BaseException | None) -> None:
    try:
        callback(err)
    except Exception:
        log.exception("journal callback failed")
