"""The autorecovery daemon (`bkledger autorecovery --conf FILE`): auditor election + replication worker.

Mirrors BookKeeper's AutoRecoveryMain. It reads the bookie's configuration (metadataServiceUri, bookie id,
zkTimeout and the autorecovery keys), opens one client (one ZooKeeper session: its vote and locks are
ephemeral, so they vanish when the daemon dies) and runs two threads:

- election: cast an EPHEMERAL_SEQUENTIAL vote `underreplication/auditorelection/V_<seq>`; the lowest vote
  is the auditor; every other daemon re-checks each round and takes over when the auditor's vote goes
  (its session ended). A vote lost with an expired session is cast again;
- worker: the replication worker for the local bookie;
- logs (logMetricsInterval > 0): while this daemon is the elected auditor, the per-log figures for its
  metrics, read every logMetricsInterval seconds (bookie.log_metrics). Only the auditor reads them: the
  figures are the cluster's, not this bookie's, so one daemon reads ZooKeeper for them and one series
  per log reaches Prometheus (every daemon exporting them would multiply the reads and the series).

Each thread runs a round as soon as a ZooKeeper watch says something it cares about changed
(registrations, cookies and votes for the election/auditor; marks and registrations for the worker),
and at least every 0.5 s / 0.25 s anyway (due audits, retry backoffs, marks deeper in the tree).
SIGTERM / SIGINT stop both and close the session, which removes the vote and the locks (ephemeral) at
once; with ZooKeeper unreachable they go when the session expires, and a stop takes at most about one
round's retry deadline (2 x zkTimeout) instead of waiting for ZooKeeper to come back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from bkledger.bookie.address import resolve
from bkledger.bookie.autorecovery.auditor import Auditor
from bkledger.bookie.autorecovery.worker import ReplicationWorker
from bkledger.bookie.config import BookieConfig, ConfigError
from bkledger.bookie.http_admin import AdminHttpServer, metrics_routes
from bkledger.bookie.log_metrics import LogFiguresReader, log_metric_families
from bkledger.bookie.metrics import _counter, _gauge, new_registry
from bkledger.bookie.stop_signals import block_stop_signals, install_fallback_handlers, watch_stop_signals
from bkledger.client import BookKeeper
from bkledger.client.admin import Admin
from bkledger.client.config import SECURITY_KEYS, ClientConfig
from bkledger.client.errors import BKError
from bkledger.client.meta.store import Watch
from bkledger.client.meta.underreplication import UR_ELECTION, UR_LEDGERS

log = logging.getLogger("bkledger.autorecovery")


class AutoRecovery:
    def __init__(self, config: BookieConfig) -> None:
        self.config = config
        # seconds between rounds unless a watch (or, for logs, becoming the auditor) wakes it
        self.poll = {"auditor": 0.5, "worker": 0.25, "logs": float(config.logMetricsInterval)}
        self.stop_event = threading.Event()
        self.bk = BookKeeper(config.metadataServiceUri, config=client_config(config))
        self.admin = Admin(self.bk, window_entries=max(config.rereplicationEntryBatchSize, 1) * 100)
        self.admin.underreplication.init()
        self.local = config.bookie_id
        self.vote: str | None = None
        self.auditor: Auditor | None = None
        self.audits = 0                  # audits run by this daemon while auditor (metrics)
        self.last_audit_time = 0.0       # unix time of the last one
        self._wake = {"auditor": threading.Event(), "worker": threading.Event(), "logs": threading.Event()}
        self.log_figures = LogFiguresReader(self.admin.store, config.logMetricsMaxLogs)
        self._watches: list[Watch] = []
        self.worker = ReplicationWorker(self.admin, self.local, config.openLedgerRereplicationGracePeriod,
                                        config.rwRereplicateBackoffMs)
        self._threads: list[threading.Thread] = []

    @property
    def is_auditor(self) -> bool:
        return self.auditor is not None

    def election_round(self) -> None:
        ur = self.admin.underreplication
        if self.vote is None or not self.admin.store.exists(f"{UR_ELECTION}/{self.vote}"):
            self.vote = ur.vote(self.local)
            log.info("%s voted in the auditor election (%s)", self.local, self.vote)
        votes = ur.votes()
        if votes and votes[0] == self.vote:
            if self.auditor is None:
                log.info("%s is now the auditor", self.local)
                self._wake["logs"].set()
                self.auditor = Auditor(self.admin, self.config.lostBookieRecoveryDelay,
                                       float(self.config.auditorPeriodicCheckInterval))
            before = self.auditor.audits
            self.auditor.tick()
            if self.auditor.audits != before:
                self.audits += self.auditor.audits - before
                self.last_audit_time = time.time()
        elif self.auditor is not None:
            log.info("%s is no longer the auditor", self.local)
            self.auditor = None

    def log_figures_round(self) -> None:
        """The auditor reads the per-log figures; any other daemon holds none."""
        if self.is_auditor:
            self.log_figures.refresh()
        else:
            self.log_figures.clear()

    def _loop(self, name: str, step: Callable[[], object]) -> None:
        wake = self._wake[name]
        while not self.stop_event.is_set():
            wake.clear()
            try:
                step()
            except (BKError, OSError, TimeoutError) as exc:
                log.warning("%s round failed: %s", name, exc)
            except Exception:  # noqa: BLE001 - a daemon thread must survive a surprise and say what it was
                log.exception("%s round failed unexpectedly", name)
            wake.wait(self.poll[name])

    def _watch(self) -> None:
        """Wake the auditor on registrations, cookies and votes, the worker on new marks (polling stays as
        the safety net: marks live in a tree whose deeper levels are not watched)."""
        store = self.admin.store
        layout = store.layout
        for path, name in ((layout.available, "auditor"), (layout.readonly, "auditor"),
                           (layout.cookies, "auditor"), (UR_ELECTION, "auditor"), (UR_LEDGERS, "worker"),
                           (layout.available, "worker")):
            self._watches.append(store.watch_children(path, self._wake[name].set))

    def start(self) -> AutoRecovery:
        self._watch()
        steps: list[tuple[str, Callable[[], object]]] = [("auditor", self.election_round), ("worker", self.worker.tick)]
        if self.config.logMetricsInterval > 0:
            steps.append(("logs", self.log_figures_round))
        for name, step in steps:
            thread = threading.Thread(target=self._loop, args=(name, step), name=f"autorecovery-{name}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("autorecovery for bookie %s started (lostBookieRecoveryDelay=%ss, grace=%sms)", self.local,
                 self.config.lostBookieRecoveryDelay, self.config.openLedgerRereplicationGracePeriod)
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.bk.store.interrupt()    # a round waiting for an absent ZooKeeper ends at its next retry
        for watch in self._watches:
            watch.cancel()
        for wake in self._wake.values():
            wake.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self.bk.close()     # ends the session: ZooKeeper drops its vote and locks (no separate delete to wait on)


def client_config(config: BookieConfig) -> ClientConfig:
    """The daemon's client settings: the bookie's session timeout and its TLS and ZooKeeper security keys
    (the bookie's certificate is the daemon's client certificate, as in BookKeeper's AutoRecoveryMain)."""
    security = {key: getattr(config, key) for key in SECURITY_KEYS}
    return ClientConfig.from_options({"zkTimeout": config.zkTimeout / 1000.0, **security})


def run_autorecovery(config: BookieConfig) -> int:
    """Run until SIGTERM / SIGINT."""
    block_stop_signals()  # before any thread exists (see bookie.stop_signals)
    try:
        config = resolve(config)        # the bookie's id, as the bookie resolves it (bookie.address)
        daemon = AutoRecovery(config)
    except (BKError, ConfigError) as exc:
        log.error("autorecovery cannot start: %s", exc)
        return 1
    stopped_by: list[str] = []
    stop = threading.Event()

    def on_stop(what: str) -> None:
        stopped_by.append(what)
        stop.set()

    watch_stop_signals(on_stop)
    install_fallback_handlers(on_stop)
    daemon.start()
    http = start_autorecovery_metrics(daemon)     # prometheusStatsHttpPort (off unless set)
    while not stop.wait(0.5):        # wakes up so that a fallback handler gets to run in this thread
        pass
    log.info("autorecovery for bookie %s stopping (%s)", config.bookie_id, stopped_by[0])
    daemon.stop()
    if http is not None:
        http.stop()
    return 0


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
