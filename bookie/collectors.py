"""The bookie's state read when Prometheus scrapes (`BookieCollector`): status, queues, directories, ledgers,
garbage collection; nothing is counted between scrapes (the request paths report to `bookie.metrics`)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bkledger.bookie.metrics import _counter, _gauge
from bkledger.bookie.thread_guard import FAILURES, THREADS

if TYPE_CHECKING:
    from bkledger.bookie.serving import BookieServerView as BookieServer


class BookieCollector(Collector):
    """State read at scrape time: status, queues, directories, ledgers, garbage collection."""

    def __init__(self, server: BookieServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        server = self.server
        yield _gauge("bookie_SERVER_STATUS", "1: writable, 0: read-only, -1: not serving", server.status_code())
        yield from self._journal()
        yield from self._health()
        yield from self._directories()
        yield from self._gc()

    def _journal(self) -> Iterator[Metric]:
        journal = self.server.bookie.journal
        if journal is None:
            return
        yield _gauge("bookie_journal_JOURNAL_QUEUE_SIZE", "records waiting for the journal thread",
                     journal.queue_size)
        yield _counter("bookie_journal_JOURNAL_ADD_ENTRY", "records queued to the journal", journal.stats.appends)
        yield _counter("bookie_journal_JOURNAL_WRITE_BYTES", "bytes written to the journal",
                       journal.stats.bytes_written)
        yield _gauge("bookie_journal_JOURNAL_FAILED", "1 once a journal write or fdatasync failed", journal.failed)

    def _health(self) -> Iterator[Metric]:
        """Checkpoints and background-thread failures (bookie.thread_guard): a bookie never runs on silently."""
        bookie = self.server.bookie
        yield _gauge("bookie_LAST_CHECKPOINT_TIMESTAMP_SECONDS", "unix time of the last checkpoint that succeeded "
                     "(0: none since start)", bookie.last_checkpoint_time)
        yield _counter("bookie_CHECKPOINT_FAILURES", "checkpoints that failed (the journal is kept)",
                       bookie.checkpoint_failures)
        yield _gauge("bookie_LEDGER_STORAGE_FAILED", "1 once checkpointFailuresBeforeReadOnly checkpoints in a row "
                     "failed (read-only until restarted)", bool(bookie.storage_failed))
        failures = CounterMetricFamily("bookie_THREAD_FAILURES", "unexpected exceptions caught in a background "
                                       "thread (logged with their traceback)", labels=["thread"])
        counts = FAILURES.counts()
        for thread in THREADS:
            failures.add_metric([thread], counts.get(thread, 0))
        yield failures

    def _directories(self) -> Iterator[Metric]:
        storage = self.server.bookie.storage
        if storage is None:
            return
        logs = GaugeMetricFamily("bookie_ledger_dir_entry_log_bytes", "entry-log bytes on disk", labels=["dir"])
        index = GaugeMetricFamily("bookie_ledger_dir_index_bytes", "index bytes on disk", labels=["dir"])
        written = CounterMetricFamily("bookie_ledger_dir_written_bytes", "bytes appended to entry logs since the "
                                      "bookie started (adds, replay and compaction)", labels=["dir"])
        free = GaugeMetricFamily("bookie_ledger_dir_free_bytes", "free bytes on the directory's disk",
                                 labels=["dir"])
        failed = CounterMetricFamily("bookie_ledger_dir_entry_log_write_failures", "entry-log block writes that "
                                     "failed since the bookie started (their records stay in memory and the journal; "
                                     "no checkpoint passes them)", labels=["dir"])
        for path, count in storage.entry_log_write_failures():
            failed.add_metric([str(path)], count)
        yield failed
        writable = 0
        threshold = self.server.config.diskUsageThreshold
        for path, log_bytes, index_bytes, written_bytes in storage.directory_stats():
            label = [str(path)]
            logs.add_metric(label, log_bytes)
            index.add_metric(label, index_bytes)
            written.add_metric(label, written_bytes)
            usage = shutil.disk_usage(path)
            free.add_metric(label, usage.free)
            writable += usage.total > 0 and usage.used / usage.total < threshold
        yield from (logs, index, written, free)
        yield _gauge("bookie_ledger_writable_dirs", "ledger directories below diskUsageThreshold", writable)
        yield _gauge("bookie_gc_ACTIVE_LEDGER_TOTAL", "ledgers this bookie holds", len(storage.ledgers()))

    def _gc(self) -> Iterator[Metric]:
        gc = self.server.gc
        if gc is None:
            return
        total = gc.total
        yield _counter("bookie_gc_RUNS", "garbage-collection rounds", gc.rounds)
        yield _counter("bookie_gc_DELETED_LEDGER_COUNT", "ledgers deleted locally (deleted or moved elsewhere)",
                       len(total.ledgers_deleted))
        yield _counter("bookie_gc_MINOR_COMPACTION", "minor compaction passes", gc.minor_compactions)
        yield _counter("bookie_gc_MAJOR_COMPACTION", "major compaction passes", gc.major_compactions)
        yield _counter("bookie_gc_COMPACTED_ENTRY_LOGS", "entry logs compacted", total.logs_compacted)
        yield _counter("bookie_gc_COMPACTED_ENTRIES", "live entries moved by compaction", total.entries_moved)
        yield _counter("bookie_gc_RECLAIMED_SPACE_BYTES", "bytes freed by removing entry logs", total.bytes_freed)
