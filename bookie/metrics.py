"""Prometheus metrics of a bookie (and the registry helpers the autorecovery daemon shares).

Mirrors BookKeeper's PrometheusMetricsProvider with the names of `BookKeeperServerStats` / `RequestStats`
where one exists (`bookkeeper_server_ADD_ENTRY_REQUEST`, `bookie_journal_JOURNAL_SYNC`,
`bookie_SERVER_STATUS`, ...). Latencies are histograms in milliseconds, as BookKeeper reports them,
labelled `success`. Counters carry the `_total` suffix of the Prometheus text format.

Two kinds of source, to keep hot paths cheap:
- request paths call `ServerStats` once per add batch / read request (a few counter and histogram updates
  per batch, never per entry); the journal thread reports each group and each fdatasync;
- everything else (read-only state, queue depths, directory sizes, ledger count, GC activity) is read
  from the bookie's own state when Prometheus scrapes (`BookieCollector`), costing nothing between scrapes.
With neither `prometheusStatsHttpPort` nor `httpServerEnabled` set, the bookie uses `NO_STATS` (no-ops).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from bkledger.bookie.add_trace import STAGES
from bkledger.bookie.log_metrics import log_metric_families
from bkledger.bookie.thread_guard import FAILURES, THREADS
from bkledger.client.metrics import add_default_collectors

if TYPE_CHECKING:
    from bkledger.bookie.autorecovery.daemon import AutoRecovery
    from bkledger.bookie.http_admin import AdminHttpServer
    from bkledger.bookie.service import BookieServer

log = logging.getLogger("bkledger.metrics")

LATENCY_MS_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
STAGE_MS_BUCKETS = (0.01, 0.05, 0.1, *LATENCY_MS_BUCKETS)     # stages are often microseconds
COUNT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
BYTES_BUCKETS = tuple(float(1 << n) for n in range(10, 28, 2))     # 1 KiB .. 128 MiB


def new_registry() -> CollectorRegistry:
    """A registry of this process's own (no `_created` series: they double every counter for nothing), with
    prometheus_client's default process, platform and GC collectors (`process_*`, `python_info`,
    `python_gc_*`), as its default registry has them."""
    disable_created_metrics()
    registry = CollectorRegistry(auto_describe=True)
    add_default_collectors(registry)
    return registry



class NoServerStats:
    """The request-path recorder when metrics are off: every call does nothing."""

    def add_started(self) -> float:
        return 0.0

    def add_done(self, started: float, ok: bool, entries: int, nbytes: int) -> None:
        return None

    def read_started(self) -> float:
        return 0.0

    def read_done(self, started: float, ok: bool, entries: int, nbytes: int, timed: bool = True) -> None:
        """timed=False: a long poll, whose wait is not read latency (counted, not timed)."""
        return None

    def request(self, kind: str) -> None:
        """One fence, long-poll, write-LAC or force-ledger request (see ServerStats.REQUESTS)."""
        return None

    def journal_sync(self, seconds: float) -> None:
        return None

    def journal_group(self, items: int, nbytes: int) -> None:
        return None


NO_STATS = NoServerStats()


class ServerStats(NoServerStats):
    """The request-path recorder: one call per add batch, read request or journal group."""

    REQUESTS = {
        "fence": ("bookkeeper_server_READ_ENTRY_FENCE_REQUEST", "fencing reads"),
        "long_poll": ("bookkeeper_server_READ_ENTRY_LONG_POLL_REQUEST", "long-poll reads of the LAC"),
        "write_lac": ("bookkeeper_server_WRITE_LAC_REQUEST", "explicit LAC writes"),
        "force_ledger": ("bookkeeper_server_FORCE_LEDGER_REQUEST", "force-ledger requests"),
    }

    def __init__(self, registry: CollectorRegistry) -> None:
        add = Histogram("bookkeeper_server_ADD_ENTRY_REQUEST", "add batch latency, received to acknowledged (ms)",
                        ["success"], buckets=LATENCY_MS_BUCKETS, registry=registry)
        read = Histogram("bookkeeper_server_READ_ENTRY_REQUEST", "read request latency (ms); a range read is "
                         "one; long polls are not timed",
                         ["success"], buckets=LATENCY_MS_BUCKETS, registry=registry)
        self._add = {True: add.labels(success="true"), False: add.labels(success="false")}
        self._read = {True: read.labels(success="true"), False: read.labels(success="false")}
        self._add_entries = Counter("bookie_BOOKIE_ADD_ENTRY", "entries added (acknowledged)", registry=registry)
        self._add_bytes = Counter("bookie_BOOKIE_ADD_ENTRY_BYTES", "bytes of entries added", registry=registry)
        self._read_entries = Counter("bookie_BOOKIE_READ_ENTRY", "entries read", registry=registry)
        self._read_bytes = Counter("bookie_BOOKIE_READ_ENTRY_BYTES", "bytes of entries read", registry=registry)
        self._add_rejected = Counter("bookkeeper_server_ADD_ENTRY_REJECTED", "add batches refused or failed",
                                     registry=registry)
        self._read_rejected = Counter("bookkeeper_server_READ_ENTRY_REJECTED", "read requests answered with an "
                                      "error (no such entry or ledger, fenced, I/O error)", registry=registry)
        self._in_progress = Gauge("bookie_ADD_ENTRY_IN_PROGRESS", "add batches received and not yet answered",
                                  registry=registry)
        self._requests = {kind: Counter(name, text, registry=registry) for kind, (name, text) in self.REQUESTS.items()}
        self._sync = Histogram("bookie_journal_JOURNAL_SYNC", "journal fdatasync latency (ms)",
                               buckets=LATENCY_MS_BUCKETS, registry=registry)
        self._group_items = Histogram("bookie_journal_JOURNAL_FORCE_WRITE_GROUPING_COUNT",
                                      "records (add batches, fences, LACs) written per journal group",
                                      buckets=COUNT_BUCKETS, registry=registry)
        self._group_bytes = Histogram("bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES", "bytes per journal group",
                                      buckets=BYTES_BUCKETS, registry=registry)
        stage = Histogram("bookie_ADD_ENTRY_STAGE", "time a traced add batch spent in each stage (ms; "
                          "bookie.add_trace: storage, journal_queue, journal_write, fsync, reply)",
                          ["stage"], buckets=STAGE_MS_BUCKETS, registry=registry)
        self.add_stages = tuple(stage.labels(stage=name) for name in STAGES)

    def add_started(self) -> float:
        self._in_progress.inc()
        return time.perf_counter()

    def add_done(self, started: float, ok: bool, entries: int, nbytes: int) -> None:
        self._in_progress.dec()
        self._add[ok].observe((time.perf_counter() - started) * 1000.0)
        if ok:
            self._add_entries.inc(entries)
            self._add_bytes.inc(nbytes)
        else:
            self._add_rejected.inc()

    def read_started(self) -> float:
        return time.perf_counter()

    def read_done(self, started: float, ok: bool, entries: int, nbytes: int, timed: bool = True) -> None:
        if timed:
            self._read[ok].observe((time.perf_counter() - started) * 1000.0)
        if entries:
            self._read_entries.inc(entries)
            self._read_bytes.inc(nbytes)
        if not ok:
            self._read_rejected.inc()

    def request(self, kind: str) -> None:
        self._requests[kind].inc()

    def journal_sync(self, seconds: float) -> None:
        self._sync.observe(seconds * 1000.0)

    def journal_group(self, items: int, nbytes: int) -> None:
        self._group_items.observe(items)
        self._group_bytes.observe(nbytes)


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, value=value)


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


class AutoRecoveryCollector(Collector):
    """The autorecovery daemon's state, read at scrape time (the marks are counted in ZooKeeper)."""

    def __init__(self, daemon: AutoRecovery) -> None:
        self.daemon = daemon

    def collect(self) -> Iterator[Metric]:
        daemon = self.daemon
        ur = daemon.admin.underreplication
        try:
            marked: float = len(ur.list_marked())
            enabled: float = ur.is_enabled()
        except Exception:  # noqa: BLE001 - ZooKeeper unreachable: say "unknown" rather than fail the scrape
            marked = enabled = float("nan")
        yield _gauge("auditor_NUM_UNDER_REPLICATED_LEDGERS", "ledgers marked under-replicated now", marked)
        yield _gauge("autorecovery_ENABLED", "1 if autorecovery is enabled cluster-wide", enabled)
        yield _gauge("auditor_IS_AUDITOR", "1 if this daemon is the elected auditor", daemon.is_auditor)
        yield _gauge("auditor_LAST_AUDIT_TIMESTAMP_SECONDS", "unix time of this daemon's last audit of a lost "
                     "bookie (0: never)", daemon.last_audit_time)
        yield _counter("auditor_AUDITS", "audits of lost bookies run by this daemon", daemon.audits)
        worker = daemon.worker
        yield _counter("replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED",
                       "ledgers this daemon's worker re-replicated and unmarked", len(worker.replicated))
        yield _counter("replication_worker_NUM_ENTRIES_WRITTEN", "entries copied to the local bookie",
                       worker.stats.entries)
        yield _counter("replication_worker_NUM_BYTES_WRITTEN", "bytes copied to the local bookie", worker.stats.bytes)
        if daemon.is_auditor:            # the per-log figures: the elected auditor's only (bookie.log_metrics)
            yield from log_metric_families(daemon.log_figures)


def start_autorecovery_metrics(daemon: AutoRecovery) -> AdminHttpServer | None:
    """Serve the daemon's metrics on prometheusStatsHttpPort (None when 0). A taken port is logged, not fatal:
    the daemon's work matters more than its metrics."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from bkledger.bookie.http_admin import AdminHttpServer, metrics_routes

    cfg = daemon.config
    if not cfg.prometheusStatsHttpPort:
        return None
    registry = new_registry()
    registry.register(AutoRecoveryCollector(daemon))
    try:
        return AdminHttpServer(cfg.listenAddress, cfg.prometheusStatsHttpPort,
                               metrics_routes(lambda: bytes(generate_latest(registry)), CONTENT_TYPE_LATEST),
                               name="autorecovery-metrics-http").start()
    except OSError as exc:
        log.error("%s; no metrics from this daemon (if the bookie uses the port, give the daemon its own: "
                  "--set prometheusStatsHttpPort=PORT)", exc)
        return None
