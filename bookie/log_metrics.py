"""Per-log figures (ledgers, bytes, entries, age of the last commit) read from the logs' records in
ZooKeeper: what the autorecovery daemon that is the elected auditor exports as metrics, and what the
bookie's status page shows (`bookie.status_page`).

A log's records are its head znode and its segments (`client.log.core.stored`); every change of a log sets
its head (R27), so the head's mtime is the time of the log's last commit (an append of ledgers, a seal, a
truncation or a retention cut) and an unchanged head version means unchanged figures.

The cost of a round is bounded, also with many logs: one getChildren of `{root}/logs`; the heads of at most
`max_logs` logs (the first by name; the others are only counted) in multiRead requests of 128 heads
(`ZkSession.get_many_stat`); and the segments (the ledger lists, 8 per multiRead as the log store reads
them) only of the logs whose head version changed since the previous round, least recently read first,
up to `MAX_SEGMENTS_PER_ROUND` segment znodes a round (the first changed log is read whatever its size);
the rest wait for a later round with their previous figures (`bkledger_log_figures_deferred`). A log that
cannot be read this round (changing too fast, unreadable) keeps its previous figures and is named in the
daemon's log.
Bytes and entries count the sealed ledgers (a ledger's size is recorded when it is sealed); the open
ledgers are counted apart. Logs with tiered history (an offload policy or offloaded files) also export
their offload lag and offloaded bytes (`bkledger_log_offload_*`, `bkledger_log_offloaded_bytes`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric

from bkledger.client.errors import BKError
from bkledger.client.log.core import offload as ol
from bkledger.client.log.core import offload_policy as op
from bkledger.client.log.core.offload_policy import OffloadLag
from bkledger.client.log.core.stored import decode_head
from bkledger.client.log.store import load_log

if TYPE_CHECKING:
    from kazoo.protocol.states import ZnodeStat

    from bkledger.client.meta.store import MetadataStore

log = logging.getLogger("bkledger.log_metrics")
MAX_SEGMENTS_PER_ROUND = 2048    # segment znodes (up to 256 ledgers each) read per round, beyond the first log


def _segment_count(name: str, head: bytes) -> int:
    """Segments a log's records span, from its head (a format-1 log, or an unreadable head: 1)."""
    try:
        _, stored = decode_head(name, head)
    except ValueError:
        return 1
    return 1 if stored is None else max(1, stored.last - stored.first + 1)


@dataclasses.dataclass(frozen=True)
class LogFigures:
    name: str
    ledgers: int            # ledgers in the log (sealed and open)
    open_ledgers: int       # not yet recorded as sealed (their bytes and entries are not counted yet)
    bytes: int              # bytes of the sealed ledgers
    entries: int            # entries of the sealed ledgers
    created_ms: int
    last_commit_ms: int     # mtime of the log's head znode: its last change
    version: int            # the head's version these figures were read at
    # tiered history (issue 42), for a log with an offload policy or offloaded history (else None): sealed
    # history on bookies the offloader may take and has not (`core.offload_policy.lag`)
    offload: OffloadLag | None = None


class LogFiguresReader:
    """Reads the figures of every log (`refresh`), keeping those of logs whose head did not change."""

    def __init__(self, store: MetadataStore, max_logs: int = 1000,
                 max_segments: int = MAX_SEGMENTS_PER_ROUND) -> None:
        self.store = store
        self.max_logs = max_logs
        self.max_segments = max_segments
        self.figures: dict[str, LogFigures] = {}
        self.total_logs = 0
        self.deferred = 0                # changed logs not read again in the last round (segment budget)
        self.refreshed_at = 0.0          # unix time of the last complete round (0: none yet)
        self.segment_reads = 0           # logs whose segments were read (a head changed), all rounds
        self._read_at: dict[str, float] = {}     # when each log's segments were last read (monotonic)
        self._lock = threading.Lock()

    def refresh(self) -> dict[str, LogFigures]:
        store = self.store
        names = store.children(store.layout.logs)
        chosen = names[: self.max_logs]
        heads = store.get_many_stat([store.layout.log(name) for name in chosen])
        with self._lock:
            before = dict(self.figures)
        fresh: dict[str, LogFigures] = {}
        changed: list[tuple[str, ZnodeStat, int]] = []
        for name, got in zip(chosen, heads, strict=True):
            if got is None:
                continue                               # deleted since the listing
            old = before.get(name)
            if old is not None and old.version == got[1].version:
                fresh[name] = old
            else:
                changed.append((name, got[1], _segment_count(name, got[0])))
        deferred = self._read_changed(changed, before, fresh)
        self._read_at = {name: at for name, at in self._read_at.items() if name in fresh}
        with self._lock:
            self.figures, self.total_logs, self.refreshed_at = fresh, len(names), time.time()
            self.deferred = deferred
        return fresh

    def _read_changed(self, changed: list[tuple[str, ZnodeStat, int]], before: dict[str, LogFigures],
                      fresh: dict[str, LogFigures]) -> int:
        """Read the changed logs, least recently read first, while the round's segment budget lasts (the
        first is read whatever its size); the others keep their figures until a later round. Returns how
        many were deferred."""
        budget, deferred = self.max_segments, 0
        changed.sort(key=lambda item: self._read_at.get(item[0], 0.0))
        for index, (name, stat, segments) in enumerate(changed):
            figures = None
            if index == 0 or segments <= budget:
                budget -= segments
                figures = self._read(name, int(stat.mtime), stat.version)
                self._read_at[name] = time.monotonic()
            else:
                deferred += 1
            if figures is None and name in before:
                figures = before[name]
            if figures is not None:
                fresh[name] = figures
        return deferred

    def _read(self, name: str, mtime_ms: int, version: int) -> LogFigures | None:
        try:
            loaded = load_log(self.store, name)
        except BKError as exc:
            log.warning("figures of log %r not read this round: %s", name, exc)
            return None
        if loaded is None:
            return None
        self.segment_reads += 1
        meta = loaded.meta
        sealed = [led for led in meta.ledgers if led.sealed]
        tiered = op.policy(meta) is not None or ol.state(meta).uri is not None
        return LogFigures(name, len(meta.ledgers), len(meta.ledgers) - len(sealed),
                          sum(led.size or 0 for led in sealed), sum(led.entries or 0 for led in sealed),
                          meta.created_ms, mtime_ms, version, op.lag(meta) if tiered else None)

    def clear(self) -> None:
        with self._lock:
            self.figures, self.total_logs, self.refreshed_at = {}, 0, 0.0

    def snapshot(self) -> tuple[dict[str, LogFigures], int, float]:
        """(figures by log name, logs in the cluster, unix time of the round) as of the last round."""
        with self._lock:
            return dict(self.figures), self.total_logs, self.refreshed_at


def log_metric_families(reader: LogFiguresReader, now: float | None = None) -> Iterator[Metric]:
    """The figures as Prometheus gauges labelled `log` (nothing before the first round)."""
    figures, total, refreshed = reader.snapshot()
    deferred = reader.deferred
    if not refreshed:
        return
    now = time.time() if now is None else now
    families = {
        "ledgers": GaugeMetricFamily("bkledger_log_ledgers", "ledgers in the log", labels=["log"]),
        "open": GaugeMetricFamily("bkledger_log_open_ledgers", "ledgers of the log not yet sealed",
                                  labels=["log"]),
        "bytes": GaugeMetricFamily("bkledger_log_bytes", "bytes in the log's sealed ledgers", labels=["log"]),
        "entries": GaugeMetricFamily("bkledger_log_entries", "entries in the log's sealed ledgers", labels=["log"]),
        "commit": GaugeMetricFamily("bkledger_log_last_commit_timestamp_seconds",
                                    "unix time of the log's last commit (its head znode's mtime)", labels=["log"]),
        "age": GaugeMetricFamily("bkledger_log_last_commit_age_seconds",
                                 "seconds since the log's last commit, at scrape time", labels=["log"]),
    }
    for name, fig in sorted(figures.items()):
        label = [name]
        families["ledgers"].add_metric(label, fig.ledgers)
        families["open"].add_metric(label, fig.open_ledgers)
        families["bytes"].add_metric(label, fig.bytes)
        families["entries"].add_metric(label, fig.entries)
        families["commit"].add_metric(label, fig.last_commit_ms / 1000.0)
        families["age"].add_metric(label, max(0.0, now - fig.last_commit_ms / 1000.0))
    yield from families.values()
    yield from _offload_families(figures, now)
    yield GaugeMetricFamily("bkledger_logs", "logs in the cluster", value=total)
    yield GaugeMetricFamily("bkledger_logs_omitted", "logs in the cluster with no figures exported "
                            "(beyond logMetricsMaxLogs, or not readable yet)",
                            value=max(0, total - len(figures)))
    yield GaugeMetricFamily("bkledger_log_figures_timestamp_seconds", "unix time the figures were read",
                            value=refreshed)
    yield GaugeMetricFamily("bkledger_log_figures_deferred", "changed logs whose figures wait for a later "
                            "round (segment reads per round are bounded)", value=deferred)


def _offload_families(figures: dict[str, LogFigures], now: float) -> Iterator[Metric]:
    """Offload lag (bytes and age of the sealed history on bookies not yet offloaded) and offloaded bytes,
    for the logs with an offload policy or offloaded history."""
    lag_bytes = GaugeMetricFamily("bkledger_log_offload_lag_bytes", "bytes of the log's sealed ledgers on bookies "
                                  "that offload may take and has not yet", labels=["log"])
    lag_seconds = GaugeMetricFamily("bkledger_log_offload_lag_seconds", "seconds since the oldest of those ledgers "
                                    "was closed (0: none), at scrape time", labels=["log"])
    offloaded = GaugeMetricFamily("bkledger_log_offloaded_bytes", "bytes of the log's history offloaded to its "
                                  "table (as the ledgers held them)", labels=["log"])
    for name, fig in sorted(figures.items()):
        if fig.offload is None:
            continue
        lag_bytes.add_metric([name], fig.offload.bytes)
        lag_seconds.add_metric([name], fig.offload.seconds(int(now * 1000)))
        offloaded.add_metric([name], fig.offload.offloaded_bytes)
    yield from (lag_bytes, lag_seconds, offloaded)
