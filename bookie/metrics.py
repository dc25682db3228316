"""Prometheus metrics of a bookie (and the registry helpers the autorecovery daemon shares).

Mirrors BookKeeper's PrometheusMetricsProvider with the names of `BookKeeperServerStats` / `RequestStats`
where one exists (`bookkeeper_server_ADD_ENTRY_REQUEST`, `bookie_journal_JOURNAL_SYNC`,
`bookie_SERVER_STATUS`, ...). Latencies are histograms in milliseconds, as BookKeeper reports them,
labelled `success`. Counters carry the `_total` suffix of the Prometheus text format.

Two kinds of source, to keep hot paths cheap:
- request paths call `ServerStats` once per add batch / read request (a few counter and histogram updates
  per batch, never per entry); the journal thread reports each group and each fdatasync. What is counted
  per add batch and per journal group (`LoopHistogram`, plain ints) is written by one thread at a time
  (the event loop; the journal's committer) without prometheus_client's lock per update, and read when
  Prometheus scrapes (`AddPathCollector`): at low load those ten updates were a twentieth of the loop's time;
- everything else (read-only state, queue depths, directory sizes, ledger count, GC activity) is read
  from the bookie's own state when Prometheus scrapes (`bookie.collectors.BookieCollector`), costing nothing
  between scrapes.
With neither `prometheusStatsHttpPort` nor `httpServerEnabled` set, the bookie uses `NO_STATS` (no-ops).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

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
        """One fence, long-poll, write-LAC or force-ledger request, or a refused add port stream (see
        ServerStats.REQUESTS)."""
        return None

    def journal_sync(self, seconds: float) -> None:
        return None

    def journal_group(self, items: int, nbytes: int) -> None:
        return None


NO_STATS = NoServerStats()


class LoopHistogram:
    """A histogram updated by one thread at a time with no lock (a bucket count and the sum), exported by
    `AddPathCollector` as prometheus_client's Histogram exports one; observing costs a tenth of its."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = [float(b) for b in bounds]
        self.counts = [0] * (len(self.bounds) + 1)     # the last: above every bound (+Inf)
        self.total = 0.0

    def observe(self, amount: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, amount)] += 1     # le: the first bound >= amount
        self.total += amount

    def cumulative(self) -> list[tuple[str, float]]:
        counts, running = list(self.counts), 0.0
        out: list[tuple[str, float]] = []
        for bound, count in zip([*self.bounds, float("inf")], counts, strict=True):
            running += count
            out.append((floatToGoString(bound), running))
        return out


class AddPathCollector(Collector):
    """The add path's histograms and counts (`ServerStats`), read at scrape time."""

    def __init__(self, stats: ServerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        st = self.stats
        yield _histogram("bookkeeper_server_ADD_ENTRY_REQUEST", "add batch latency, received to acknowledged (ms)",
                         "success", {"true": st._add[True], "false": st._add[False]})
        yield _histogram("bookie_ADD_ENTRY_STAGE", "time a traced add batch spent in each stage (ms; "
                         f"bookie.add_trace: {', '.join(STAGES)})", "stage",
                         dict(zip(STAGES, st.add_stages, strict=True)))
        yield _histogram("bookie_journal_JOURNAL_SYNC", "journal fdatasync latency (ms)", "", {"": st._sync})
        yield _histogram("bookie_journal_JOURNAL_FORCE_WRITE_GROUPING_COUNT", "records (add batches, fences, LACs) "
                         "written per journal group", "", {"": st._group_items})
        yield _histogram("bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES", "bytes per journal group", "",
                         {"": st._group_bytes})
        yield _counter("bookie_BOOKIE_ADD_ENTRY", "entries added (acknowledged)", st.added_entries)
        yield _counter("bookie_BOOKIE_ADD_ENTRY_BYTES", "bytes of entries added", st.added_bytes)
        yield _counter("bookkeeper_server_ADD_ENTRY_REJECTED", "add batches refused or failed", st.adds_rejected)
        yield _gauge("bookie_ADD_ENTRY_IN_PROGRESS", "add batches received and not yet answered", st.adds_in_progress)


def _histogram(name: str, text: str, label: str, series: dict[str, LoopHistogram]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, text, labels=[label] if label else None)
    for value, histogram in series.items():
        family.add_metric([value] if label else [], histogram.cumulative(), histogram.total)
    return family


class ServerStats(NoServerStats):
    """The request-path recorder: one call per add batch, read request or journal group."""

    REQUESTS = {
        "fence": ("bookkeeper_server_READ_ENTRY_FENCE_REQUEST", "fencing reads"),
        "long_poll": ("bookkeeper_server_READ_ENTRY_LONG_POLL_REQUEST", "long-poll reads of the LAC"),
        "write_lac": ("bookkeeper_server_WRITE_LAC_REQUEST", "explicit LAC writes"),
        "force_ledger": ("bookkeeper_server_FORCE_LEDGER_REQUEST", "force-ledger requests"),
        "add_port_refused": ("bookie_ADD_PORT_REFUSED", "add port streams refused (a frame or request that "
                             "breaks the framing or does not parse; bookie.add_port)"),
    }

    def __init__(self, registry: CollectorRegistry) -> None:
        self._add = {True: LoopHistogram(LATENCY_MS_BUCKETS), False: LoopHistogram(LATENCY_MS_BUCKETS)}
        self.added_entries = self.added_bytes = self.adds_rejected = self.adds_in_progress = 0
        read = Histogram("bookkeeper_server_READ_ENTRY_REQUEST", "read request latency (ms); a range read is "
                         "one; long polls are not timed",
                         ["success"], buckets=LATENCY_MS_BUCKETS, registry=registry)
        self._read = {True: read.labels(success="true"), False: read.labels(success="false")}
        self._read_entries = Counter("bookie_BOOKIE_READ_ENTRY", "entries read", registry=registry)
        self._read_bytes = Counter("bookie_BOOKIE_READ_ENTRY_BYTES", "bytes of entries read", registry=registry)
        self._read_rejected = Counter("bookkeeper_server_READ_ENTRY_REJECTED", "read requests answered with an "
                                      "error (no such entry or ledger, fenced, I/O error)", registry=registry)
        self._requests = {kind: Counter(name, text, registry=registry) for kind, (name, text) in self.REQUESTS.items()}
        self._sync = LoopHistogram(LATENCY_MS_BUCKETS)           # these three: the journal's committer only
        self._group_items = LoopHistogram(COUNT_BUCKETS)
        self._group_bytes = LoopHistogram(BYTES_BUCKETS)
        self.add_stages = tuple(LoopHistogram(STAGE_MS_BUCKETS) for _ in STAGES)
        registry.register(AddPathCollector(self))

    def add_started(self) -> float:
        """On the event loop (as add_done): the add path's counts have that one writer."""
        self.adds_in_progress += 1
        return time.perf_counter()

    def add_done(self, started: float, ok: bool, entries: int, nbytes: int) -> None:
        self.adds_in_progress -= 1
        self._add[ok].observe((time.perf_counter() - started) * 1000.0)
        if ok:
            self.added_entries += entries
            self.added_bytes += nbytes
        else:
            self.adds_rejected += 1

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
