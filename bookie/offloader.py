"""The offloader daemon (`bkledger offloader`): applies every log's offload policy in a loop (issue 42).

Its own process rather than a thread of the autorecovery daemon: offload reads whole ledgers and writes
Parquet files to the table store, so it needs the `delta` extra, the store's credentials and I/O the
bookie hosts need not carry, and a stuck store must not slow re-replication; it can run anywhere a client
can (next to the store, say), and several may run (each log is run by one at a time: a lock per log).

Each round (every `--interval` seconds; `--once`: one round) takes at most `max_logs` logs, resuming
where the previous round stopped, and for each runs `client.log.offloader.run_policy` under the log's
lock: offload the sealed ledgers the policy says are due (at most `max_ledgers` a run), then delete the
bookie copies whose deletion lag has passed (also for a log without a policy: 4 h after its offload), then
prunes the log's table (files truncation or retention dropped: removed, then vacuumed after the lag). A
failure of one log is logged with its traceback and counted (`bkledger_offloader_failures_total`), the
loop goes on with the next log and retries the failed one next round. Metrics on `--metrics-port`
(127.0.0.1; off by default): rounds, runs, bytes and entries offloaded, ledgers deleted, failures, logs
skipped because another offloader held them. SIGTERM ends the round before its next log and interrupts a
ZooKeeper wait, so the daemon stops at once also with ZooKeeper gone.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from bkledger.bookie.thread_guard import ThreadFailures
from bkledger.client.errors import BKError, LogNotFoundError
from bkledger.client.log.core import offload_policy as op
from bkledger.client.log.offloader import MAX_DELETIONS_PER_RUN, MAX_LEDGERS_PER_RUN, PolicyRun, run_policy

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from bkledger.client import BookKeeper

log = logging.getLogger("bkledger.offloader")
COUNTERS = ("rounds", "runs", "offloaded_bytes", "offloaded_entries", "deleted_ledgers", "removed_files",
            "vacuumed_files", "failures", "busy")


class Offloader:
    """The loop over logs (module docstring); `run_once` is one round."""

    def __init__(self, bk: BookKeeper, *, store_uri: str | None = None, names: Sequence[str] | None = None,
                 max_logs: int = 1000, max_ledgers: int = MAX_LEDGERS_PER_RUN,
                 max_deletions: int = MAX_DELETIONS_PER_RUN) -> None:
        self.bk = bk
        self.store_uri = store_uri
        self.names = list(names) if names else None
        self.max_logs = max_logs
        self.max_ledgers = max_ledgers
        self.max_deletions = max_deletions
        self.failures = ThreadFailures()
        self.counts = dict.fromkeys(COUNTERS, 0)
        self._lock = threading.Lock()
        self._next = ""                  # the round after this one starts at the first log name >= this

    def _chosen(self) -> list[str]:
        names = self.names if self.names is not None else self.bk.list_logs()
        chosen, self._next = op.next_round(names, self._next, self.max_logs)
        return chosen

    def run_once(self, stop: threading.Event | None = None) -> list[PolicyRun]:
        """One round; with `stop` set (SIGTERM) it ends before the next log."""
        done: list[PolicyRun] = []
        for name in self._chosen():
            if stop is not None and stop.is_set():
                break
            got = self._run_log(name)
            if got is not None:
                done.append(got)
        self._count(rounds=1)
        return done

    def _run_log(self, name: str) -> PolicyRun | None:
        try:
            got = run_policy(self.bk, name, default_store_uri=self.store_uri, max_ledgers=self.max_ledgers,
                             max_deletions=self.max_deletions)
        except LogNotFoundError:
            return None                                    # deleted since the listing
        except Exception:  # noqa: BLE001 - one log's failure never stops the others; logged with its traceback
            self.failures.record("offloader", f"log {name!r}")
            self._count(failures=1)
            return None
        offload = got.offload
        if offload is not None and offload.files:
            log.info("log %r: offload run %d: %d files, %d entries, %d bytes", name, offload.run, len(offload.files),
                     offload.entries, offload.bytes)
        self._count(runs=int(offload is not None), busy=int(got.busy), deleted_ledgers=len(got.deleted),
                    removed_files=len(got.removed), vacuumed_files=len(got.vacuumed),
                    offloaded_bytes=offload.bytes if offload else 0,
                    offloaded_entries=offload.entries if offload else 0)
        return got

    def _count(self, **by: int) -> None:
        with self._lock:
            for key, value in by.items():
                self.counts[key] += value

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def run_forever(self, stop: threading.Event, interval_s: float) -> None:
        """Rounds until `stop` is set; a round's surprise is logged and counted, never the end of the loop."""
        while not stop.is_set():
            try:
                self.run_once(stop)
            except (BKError, OSError, TimeoutError) as exc:
                if stop.is_set():
                    break                   # the stop interrupted ZooKeeper waits: not a failure
                log.warning("offloader round failed (retried next round): %s", exc)
                self._count(failures=1)
            except Exception:  # noqa: BLE001 - the daemon survives a surprise and says what it was
                self.failures.record("offloader", "round")
                self._count(failures=1)
            stop.wait(interval_s)


class OffloaderCollector:
    """The daemon's counters as Prometheus counters."""

    def __init__(self, daemon: Offloader) -> None:
        self.daemon = daemon

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily

        texts = {"rounds": "rounds over the logs", "runs": "policy runs that offloaded (or found nothing due)",
                 "offloaded_bytes": "ledger bytes offloaded", "offloaded_entries": "entries offloaded",
                 "deleted_ledgers": "bookie ledgers of offloaded history deleted after the lag",
                 "removed_files": "files taken off the logs' tables (truncation, retention)",
                 "vacuumed_files": "files deleted from the table stores after the lag",
                 "failures": "failed runs of a log's policy (logged with their traceback)",
                 "busy": "logs skipped because another offloader held them"}
        for key, value in self.daemon.snapshot().items():
            yield CounterMetricFamily(f"bkledger_offloader_{key}", texts[key], value=value)


def _start_metrics(daemon: Offloader, port: int) -> Any:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    from bkledger.bookie.http_admin import AdminHttpServer, metrics_routes

    registry = CollectorRegistry()
    registry.register(OffloaderCollector(daemon))
    routes = metrics_routes(lambda: bytes(generate_latest(registry)), CONTENT_TYPE_LATEST)
    return AdminHttpServer("127.0.0.1", port, routes, name="offloader-metrics-http").start()


def cmd_offloader(args: argparse.Namespace) -> int:
    """Run the daemon until SIGTERM / SIGINT (or one round with --once)."""
    import os

    from bkledger.bookie.shell_io import ShellError, connect
    from bkledger.bookie.stop_signals import block_stop_signals, install_fallback_handlers, watch_stop_signals

    block_stop_signals()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    if args.interval <= 0 or args.max_logs < 1 or args.max_ledgers < 1:
        log.error("offloader: --interval must be > 0, --max-logs and --max-ledgers >= 1")
        return 2
    store = args.store
    if store is None and not (args.uri or args.conf):
        store = os.path.join(os.path.abspath(args.dir), "offload")      # a local cluster's, as `log offload`
    try:
        bk = connect(args)
    except (ShellError, BKError) as exc:
        log.error("offloader cannot start: %s", exc)
        return 1
    with bk:
        daemon = Offloader(bk, store_uri=store, names=args.logs, max_logs=args.max_logs,
                           max_ledgers=args.max_ledgers)
        if args.once:
            daemon.run_once()
            return 1 if daemon.snapshot()["failures"] else 0
        stop = threading.Event()

        def on_stop(what: str) -> None:
            log.info("offloader stopping (%s)", what)
            stop.set()
            bk.store.interrupt()      # a run waiting for an absent ZooKeeper ends now, not at its retry deadline

        watch_stop_signals(on_stop)
        install_fallback_handlers(on_stop)
        http = _start_metrics(daemon, args.metrics_port) if args.metrics_port else None
        log.info("offloader started: every %ss, store %s", args.interval, store or "(each log's)")
        daemon.run_forever(stop, args.interval)
        if http is not None:
            http.stop()
    log.info("offloader stopped")
    return 0


def add_offloader_parser(sub: Any) -> None:
    from bkledger.bookie.shell import DEFAULT_LOCAL_DIR

    p = sub.add_parser("offloader", help="apply the logs' offload policies (tiered history) in a loop")
    p.add_argument("--uri", help="metadata service URI, e.g. zk://127.0.0.1:2181/ledgers")
    p.add_argument("--conf", help="a bookie configuration file (its metadataServiceUri is used)")
    p.add_argument("--dir", default=DEFAULT_LOCAL_DIR, help="local cluster to use without --uri/--conf")
    p.add_argument("--client-conf", help="client settings file (TLS, ZooKeeper credentials)")
    p.add_argument("--store", help="table store of logs whose policy and record name none (default: a local "
                                   "cluster's DIR/offload, else $BKLEDGER_OFFLOAD_URI or ~/.bkledger/offload)")
    p.add_argument("--interval", type=float, default=60.0, help="seconds between rounds")
    p.add_argument("--once", action="store_true", help="one round, then exit (1 if a log failed)")
    p.add_argument("--logs", nargs="*", metavar="NAME", help="only these logs (default: every log)")
    p.add_argument("--max-logs", type=int, default=1000, help="logs a round takes at most (the next round goes on)")
    p.add_argument("--max-ledgers", type=int, default=MAX_LEDGERS_PER_RUN, help="ledgers one run offloads at most")
    p.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics on 127.0.0.1:PORT")
    p.set_defaults(func=cmd_offloader)
