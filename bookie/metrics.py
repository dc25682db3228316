"""Prometheus metrics of a bookie (and the registry helpers the autorecovery daemon shares).

Mirrors BookKeeper's PrometheusMetricsProvider with the names of `BookKeeperServerStats` / `RequestStats`
where one exists (`bookkeeper_server_ADD_ENTRY_REQUEST`, `bookie_journal_JOURNAL_SYNC`,
`bookie_SERVER_STATUS`, ...). Latencies are histograms in milliseconds, as BookKeeper reports them,
labelled `success`. Counters carry the `_total` suffix of the Prometheus text format.

Two kinds of source, to keep hot paths cheap:
- request paths call `ServerStats` once per add batch / read request (a few counter and histogram updates
  per batch, never per entry); the journal thread reports each group and each fdatasync;
- everything else (read-only state, queue depths, directory sizes, ledger count, GC activity) is read
  from the bookie's own state when Prometheus scrapes (`bookie.collectors.BookieCollector`), costing nothing
  between scrapes.
With neither `prometheusStatsHttpPort` nor `httpServerEnabled` set, the bookie uses `NO_STATS` (no-ops).
"""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from bkledger.bookie.add_trace import STAGES
from bkledger.wire.process_metrics import add_default_collectors

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
