"""Client-side metrics: what a BookKeeper client did, counted into a registry the application passes in.

Mirrors BookKeeper's client stats (`bookkeeper_client_*`, a StatsLogger handed to the client builder):
`BookKeeper(uri, metrics_registry=registry)` with a `prometheus_client.CollectorRegistry` counts entries
added and read, add failures, speculative reads, ensemble changes and ledger recoveries. Without a registry
every counter is a no-op object (no prometheus import, nothing counted). The registry also gets
prometheus_client's process, platform and GC collectors unless it has them (its default REGISTRY does).
Call sites are one line each: `ctx.metrics.adds.inc(n)`. Several clients passing the same registry share
its counters.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from bkledger.wire.process_metrics import add_default_collectors


class NoCounter:
    """A counter that counts nothing (metrics off)."""

    def inc(self, amount: float = 1) -> None:
        return None


_NO_COUNTER = NoCounter()

# attribute -> (metric name, help)
COUNTERS = {
    "adds": ("bookkeeper_client_ADD_ENTRY", "entries added and acknowledged by an ack quorum"),
    "add_failures": ("bookkeeper_client_ADD_ENTRY_FAILED", "entries whose add failed"),
    "reads": ("bookkeeper_client_READ_ENTRY", "entries read"),
    "speculative_reads": ("bookkeeper_client_SPECULATIVE_READ_COUNT",
                          "reads also sent to another bookie because the first was slow"),
    "ensemble_changes": ("bookkeeper_client_NUM_ENSEMBLE_CHANGE", "ensemble changes of ledgers being written"),
    "recoveries": ("bookkeeper_client_LEDGER_RECOVER", "ledgers recovered (fenced and closed) by this client"),
}


STAGE_MS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class ClientMetrics:
    """The client's counters; each attribute has `.inc(amount=1)`. `add_stages`: one histogram child per
    stage of client.add_trace.STAGES (`.observe(ms)`), or None without a registry."""

    def __init__(self, counters: dict[str, Any] | None = None, add_stages: tuple[Any, ...] | None = None) -> None:
        self.add_stages = add_stages
        counters = counters or {}
        self.adds = counters.get("adds", _NO_COUNTER)
        self.add_failures = counters.get("add_failures", _NO_COUNTER)
        self.reads = counters.get("reads", _NO_COUNTER)
        self.speculative_reads = counters.get("speculative_reads", _NO_COUNTER)
        self.ensemble_changes = counters.get("ensemble_changes", _NO_COUNTER)
        self.recoveries = counters.get("recoveries", _NO_COUNTER)


NO_METRICS = ClientMetrics()

_shared: weakref.WeakKeyDictionary[Any, ClientMetrics] = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


def client_metrics(registry: Any | None) -> ClientMetrics:
    """The counters in `registry` (created once per registry), or NO_METRICS for None."""
    if registry is None:
        return NO_METRICS
    with _shared_lock:
        found = _shared.get(registry)
        if found is None:
            from prometheus_client import Counter, Histogram

            from bkledger.client.add_trace import STAGES

            add_default_collectors(registry)          # process_*, python_info, python_gc_*: once per registry
            stage = Histogram("bookkeeper_client_ADD_ENTRY_STAGE", "time a traced add spent in each stage (ms; "
                              "client.add_trace: queue, send_wait, bookie, complete)", ["stage"],
                              buckets=STAGE_MS_BUCKETS, registry=registry)
            found = ClientMetrics({attr: Counter(name, text, registry=registry)
                                   for attr, (name, text) in COUNTERS.items()},
                                  tuple(stage.labels(stage=name) for name in STAGES))
            _shared[registry] = found
        return found
