"""The bookie: journal + ledger storage + the in-memory ledger state its decisions read.

Mirrors BookKeeper's BookieImpl. Every add, fence and explicit LAC goes through the journal; a
reply that depends on a journal record is released only from the journal's callback, after the
fsync that covers it (R8, R15). As in BookKeeper, an add goes into ledger storage first and is then
queued for the journal, so it is readable before its acknowledgement leaves (R22) and the journal
thread only writes, syncs and answers: done in its callback, the storage work lengthened every group
cycle (at 38k adds/s the bookie took 20 ms per add against 5-7 ms this way). The storage work runs on
one `storage` thread, which also queues every other journal record (fence, explicit LAC, force), so
the journal holds them in the order they were decided: an add accepted before a fence is durable
before the fence is answered. With nothing more queued for it, the storage thread commits an add's
record to the journal itself when the journal thread is idle (`Journal.append(inline=True)`): at low load
that saves the hand-off to the journal thread and its wake-up; under load the journal thread groups as
before. An entry stored but not yet durable is one the bookie has not acknowledged, like any entry a
crash takes before its fsync. At start the journal is replayed from the last checkpoint (LastLogMark)
before anything is served (R22, R23). The storage thread also refuses an add that would change the
bytes of an entry already stored (`decisions.check_rewrites`: records cannot be rewritten, even with the
master key).
A checkpoint that fails, with any exception, keeps the journal and is counted (`checkpoint_failures`, the time
of the last good one in `last_checkpoint_time`); checkpointFailuresBeforeReadOnly failures in a row mark the
ledger storage failed and the bookie read-only until restarted, as BookKeeper does on a failed disk.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import resource
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bkledger.bookie import records_io
from bkledger.bookie.config import BookieConfig
from bkledger.bookie.core import decisions
from bkledger.bookie.core import records as rec
from bkledger.bookie.core.index_pages import PageGeometry
from bkledger.bookie.journal import Journal, LogMark
from bkledger.bookie.storage import LedgerStorage, StorageError
from bkledger.bookie.thread_guard import FAILURES

log = logging.getLogger("bkledger.bookie")
MAX_INDEX_FILE_BYTES = 1 << 40   # 1 TiB: an index file any Linux file system holds (ext4 4k: 16 TiB)


def index_file_limit() -> int:
    """The largest index file this process may write: MAX_INDEX_FILE_BYTES, or less under RLIMIT_FSIZE."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return MAX_INDEX_FILE_BYTES if soft == resource.RLIM_INFINITY else min(soft, MAX_INDEX_FILE_BYTES)

Done = Callable[[BaseException | None], None]


class EntryRewriteError(Exception):
    """An add would change the bytes of an entry the bookie stores (`decisions.check_rewrites`): EBADREQ."""


class NotStoredError(Exception):
    """Ledger storage failed to take an add, so it was not journaled (answered EIO; the journal is fine)."""


class Bookie:
    """Owns the journal, the ledger storage and the per-ledger view (master key, fenced, LAC)."""

    def __init__(self, config: BookieConfig, on_fatal: Callable[[BaseException], None] | None = None):
        self.config = config
        self._on_fatal = on_fatal
        self._lock = threading.Lock()
        self._keys: dict[int, bytes] = {}
        self._fenced: set[int] = set()
        self.storage: LedgerStorage | None = None
        self.journal: Journal | None = None
        self._checkpoint_stop = threading.Event()
        self._checkpoint_wake = threading.Event()    # set by storage when its index cache is half dirty, and by close
        self._checkpoint_thread: threading.Thread | None = None
        self._ordered: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()  # see _in_order
        self._storage_thread: threading.Thread | None = None
        self.max_entry_id = decisions.max_entry_id(index_file_limit(), PageGeometry(config.pageSize))
        self.checkpoint_failures = 0            # since start (metric bookie_CHECKPOINT_FAILURES)
        self._failed_in_a_row = 0
        self.last_checkpoint_time = 0.0         # unix time of the last checkpoint that succeeded (0: none yet)
        self.storage_failed = ""                # why storage is unusable ("" while it is fine): read-only
        self.on_checkpoint: Callable[[bool], None] | None = None   # told whether each checkpoint's flush worked

    # ---- start and stop -------------------------------------------------------------------
    def start(self) -> None:
        cfg = self.config
        for d in [cfg.journal_dir, *cfg.ledger_dirs]:
            (d / "current").mkdir(parents=True, exist_ok=True)
        self.storage = LedgerStorage(cfg.ledger_dirs, entry_log_size_limit=cfg.logSizeLimit,
                                     page_size=cfg.pageSize, page_limit=cfg.pageLimit,
                                     direct_io=cfg.entryLogDirectIO, checkpoint_wanted=self._checkpoint_wake.set)
        self.journal = Journal(
            cfg.journal_dir,
            max_group_wait_ms=cfg.journalMaxGroupWaitMSec,
            buffered_writes_threshold=cfg.journalBufferedWritesThreshold,
            flush_when_queue_empty=cfg.journalFlushWhenQueueEmpty,
            sync_data=cfg.journalSyncData,
            page_cache_flush_interval_ms=cfg.journalPageCacheFlushIntervalMSec,
            max_size_mb=cfg.journalMaxSizeMB,
            max_backups=cfg.journalMaxBackups,
            direct_io=cfg.journalDirectIO,
            on_fatal=self._journal_failed,
        )
        mark = records_io.read_last_mark(cfg.ledger_dirs)
        replayed = [0]

        def apply(_file_id: int, _offset: int, record: rec.Record) -> None:
            self._apply_record(record)
            replayed[0] += 1

        end = self.journal.replay(mark, apply)
        log.info("replayed %d journal records from %s to %s", replayed[0], mark, end)
        self._load_view()
        self.journal.start()
        self._storage_thread = threading.Thread(target=self._run_in_order, name="storage", daemon=True)
        self._storage_thread.start()
        self._checkpoint_thread = threading.Thread(target=self._checkpoint_loop, name="checkpoint", daemon=True)
        self._checkpoint_thread.start()

    def _load_view(self) -> None:
        assert self.storage is not None
        for ledger_id in self.storage.ledgers():
            key = self.storage.master_key(ledger_id)
            if key is not None:
                self._keys[ledger_id] = key
            if self.storage.is_fenced(ledger_id):
                self._fenced.add(ledger_id)

    def _apply_record(self, record: rec.Record) -> None:
        """Replay one journal record into ledger storage (idempotent)."""
        assert self.storage is not None
        if isinstance(record, rec.AddBatchRecord):
            self.storage.add_batch(record.ledger_id, record.entry_ids, record.sizes, record.data)
        elif isinstance(record, rec.LedgerKeyRecord):
            self.storage.set_master_key(record.ledger_id, record.master_key)
        elif isinstance(record, rec.FenceRecord):
            self.storage.set_fenced(record.ledger_id)
        elif isinstance(record, rec.ExplicitLacRecord):
            self.storage.set_explicit_lac(record.ledger_id, record.body)

    def close(self) -> None:
        self._checkpoint_stop.set()
        self._checkpoint_wake.set()
        if self._storage_thread is not None:     # what was queued reaches the journal (or fails) first
            self._ordered.put(None)
            self._storage_thread.join()
        if self.journal is not None:
            self.journal.close()
        if self._checkpoint_thread is not None:
            self._checkpoint_thread.join(timeout=10)
        if self.storage is not None and self.journal is not None and not self.journal.failed:
            self._checkpoint(self.journal.position())
        if self.storage is not None:
            self.storage.close()

    # ---- checkpoint -----------------------------------------------------------------------
    def _checkpoint_loop(self) -> None:
        """Every flushInterval: take the journal's mark between two groups (every record before it is in
        ledger storage), then flush storage and record the mark HERE, on the checkpoint thread, as
        BookKeeper's SyncThread does. Run on the journal thread, the flush's fsyncs stalled every add of
        this bookie for their whole length (30-100 ms measured at 6k adds/s), and the bookies of a local
        cluster, started together, stalled together, so that no add could reach its ack quorum.
        Storage wakes it early when half its index page cache is dirty (see LedgerStorage._make_room)."""
        interval = max(self.config.flushInterval, 10) / 1000.0
        while not self._checkpoint_stop.is_set():
            self._checkpoint_wake.wait(interval)
            if self._checkpoint_stop.is_set():
                break
            with FAILURES.guard("checkpoint", "a checkpoint round"):
                self._checkpoint_once()
            self._checkpoint_wake.clear()    # asks made during it are repeated by the adds that still see it due

    def _checkpoint_once(self) -> None:
        if self.journal is None or self.journal.failed:
            return
        marks: queue.SimpleQueue[LogMark] = queue.SimpleQueue()
        self.journal.request_checkpoint(marks.put)
        mark = None
        while mark is None and not self._checkpoint_stop.is_set():
            with contextlib.suppress(queue.Empty):
                mark = marks.get(timeout=0.5)
        if mark is not None and not self.journal.failed:
            self._checkpoint(mark)

    def _checkpoint(self, mark: LogMark) -> None:
        """Flush ledger storage, then record that the journal before `mark` is no longer needed."""
        assert self.storage is not None and self.journal is not None
        try:
            self.storage.flush()
            records_io.write_last_mark(self.config.ledger_dirs, mark)
        except Exception as exc:  # noqa: BLE001 - any failure: the journal is kept, the thread goes on
            self._checkpoint_failed(exc)
            self._tell_checkpoint(False)
            return
        self._tell_checkpoint(True)
        self._failed_in_a_row = 0
        self.last_checkpoint_time = time.time()
        try:
            self.journal.remove_old_files(mark)
        except OSError as exc:
            log.error("checkpoint: removing journal files before %s failed (tried again next time): %s", mark, exc)

    def _tell_checkpoint(self, flushed: bool) -> None:
        if self.on_checkpoint is not None:
            self.on_checkpoint(flushed)

    def _checkpoint_failed(self, exc: Exception) -> None:
        """Counted and logged with its traceback; after checkpointFailuresBeforeReadOnly in a row the ledger
        storage counts as failed (as BookKeeper's failed disk) and the bookie turns read-only until restarted.
        A failure for want of file descriptors is counted and logged (one line per interval, no traceback:
        bookie.thread_guard) but is not the disk's (`decisions.checkpoint_failure_counts`): the next
        checkpoint tries again."""
        self.checkpoint_failures += 1
        FAILURES.record("checkpoint", f"checkpoint {self.checkpoint_failures} (journal kept, {exc!r})")
        if not decisions.checkpoint_failure_counts(exc.errno if isinstance(exc, OSError) else None):
            return      # not the disk's: logged by FAILURES (one line per interval), tried again next interval
        self._failed_in_a_row += 1
        if self._failed_in_a_row >= self.config.checkpointFailuresBeforeReadOnly and not self.storage_failed:
            self.storage_failed = f"{self._failed_in_a_row} checkpoints in a row failed, the last with {exc!r}"
            log.error("ledger storage failed: %s; the bookie turns read-only", self.storage_failed)
            if self._on_fatal is not None:
                self._on_fatal(StorageError(self.storage_failed))

    def _journal_failed(self, exc: BaseException) -> None:
        log.error("journal failed (%s): no further adds are acknowledged", exc)
        if self._on_fatal is not None:
            self._on_fatal(exc)

    # ---- ledger view ----------------------------------------------------------------------
    def view(self, ledger_id: int) -> decisions.LedgerView | None:
        with self._lock:
            key = self._keys.get(ledger_id)
            if key is None:
                return None
            return decisions.LedgerView(key, ledger_id in self._fenced)

    @property
    def journal_failed(self) -> bool:
        return self.journal is not None and self.journal.failed

    # ---- writes (each reply only from the journal callback) --------------------------------
    def _in_order(self, work: Callable[[], None]) -> None:
        """Run `work` on the storage thread after everything queued before it (see the module doc)."""
        self._ordered.put(work)

    def _run_in_order(self) -> None:
        while (work := self._ordered.get()) is not None:
            with FAILURES.guard("storage", "queuing a journal record"):   # one bad record stops no later write
                work()

    def add_batch(
        self,
        ledger_id: int,
        master_key: bytes,
        record_key: bool,
        entry_ids: rec.IntVector,
        sizes: rec.IntVector,
        data: bytes | memoryview,
        *,
        sync: bool,
        done: Done,
        max_lac: int | None = None,
        trace: Any = None,
        check_rewrites: bool = True,
    ) -> None:
        """`trace`: a bookie.add_trace.BatchTrace the storage thread and the journal stamp (or None). `done` gets an
        EntryRewriteError or a NotStoredError if the batch was not journaled, the journal's error if it failed."""
        assert self.journal is not None and self.storage is not None
        if record_key:
            with self._lock:
                self._keys.setdefault(ledger_id, master_key)
        storage, journal = self.storage, self.journal

        def store_then_journal() -> None:
            if trace is not None:
                trace.picked = time.perf_counter_ns()
            payloads = [rec.encode_ledger_key(ledger_id, master_key)] if record_key else []
            try:
                why = decisions.check_rewrites(entry_ids, sizes, data, storage.stored_entries(ledger_id, entry_ids)) \
                    if check_rewrites else ""
                if why:
                    done(EntryRewriteError(why))     # decided here, on the one thread that stores adds
                    return
                record = rec.add_batch_parts(ledger_id, entry_ids, sizes, data)
                if record_key:
                    storage.set_master_key(ledger_id, master_key)
                storage.add_batch(ledger_id, entry_ids, sizes, data, record=record, max_lac=max_lac)
            except Exception as exc:  # noqa: BLE001 - any failure: not journaled, never acknowledged (EIO)
                log.error("storing an add to ledger %d failed: %r", ledger_id, exc)
                done(NotStoredError(f"storing the add failed: {exc!r}"))
                return
            journal.append([*payloads, *record], done, sync=sync, trace=trace, inline=self._ordered.empty())

        self._in_order(store_then_journal)

    def fence(self, ledger_id: int, master_key: bytes, record_key: bool, done: Done) -> None:
        """R15: mark fenced now (later adds see it at once), reply after the FENCE record is durable."""
        self.mark_fenced(ledger_id, master_key, record_key)
        self.journal_fence(ledger_id, master_key, record_key, done)

    def mark_fenced(self, ledger_id: int, master_key: bytes, record_key: bool) -> None:
        """The fence in memory: every add decided from now on sees it (`machine.MarkFenced`)."""
        with self._lock:
            if record_key:
                self._keys.setdefault(ledger_id, master_key)
            self._fenced.add(ledger_id)

    def journal_fence(self, ledger_id: int, master_key: bytes, record_key: bool, done: Done) -> None:
        """Queue the FENCE record (and the master key's) after everything queued before it; once durable the
        fence goes to ledger storage and `done` runs (`machine.JournalFence`)."""
        assert self.journal is not None and self.storage is not None
        payloads = [rec.encode_ledger_key(ledger_id, master_key)] if record_key else []
        payloads.append(rec.encode_fence(ledger_id))
        storage = self.storage

        def journaled(err: BaseException | None) -> None:
            if err is None:
                if record_key:
                    storage.set_master_key(ledger_id, master_key)
                storage.set_fenced(ledger_id)
            done(err)

        journal = self.journal
        self._in_order(lambda: journal.append(payloads, journaled, sync=True))

    def forget_fence(self, ledger_id: int) -> None:
        """Drop a fence from memory: only the simulator's "flush-drops-fence" mutant asks for it."""
        with self._lock:
            self._fenced.discard(ledger_id)

    def write_explicit_lac(self, ledger_id: int, body: bytes, done: Done) -> None:
        assert self.journal is not None and self.storage is not None
        storage = self.storage

        def journaled(err: BaseException | None) -> None:
            if err is None:
                storage.set_explicit_lac(ledger_id, body)
            done(err)

        journal = self.journal
        self._in_order(lambda: journal.append([rec.encode_explicit_lac(ledger_id, body)], journaled, sync=True))

    def forget_ledger(self, ledger_id: int) -> None:
        """Garbage collection: the ledger was deleted in the metadata store; drop it and its state."""
        assert self.storage is not None
        with self._lock:
            self._keys.pop(ledger_id, None)
            self._fenced.discard(ledger_id)
        self.storage.delete_ledger(ledger_id)

    def force_ledger(self, done: Done) -> None:
        """Make every earlier (deferred-sync) write durable: an empty synced group covers them."""
        journal = self.journal
        assert journal is not None
        self._in_order(lambda: journal.append([], done, sync=True))


def dirs_have_data(dirs: Sequence[Path]) -> bool:
    """Whether any directory already holds bookie files (used by the cookie check)."""
    for d in dirs:
        current = d / "current"
        if current.is_dir() and any(p.name != "VERSION" for p in current.iterdir()):
            return True
    return False
