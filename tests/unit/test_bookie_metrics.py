"""The add path's lock-free histograms and counts (bookie.metrics.LoopHistogram, AddPathCollector) export what
prometheus_client's own Histogram and Counter export for the same observations: names, labels, buckets, sums."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bkledger.bookie import metrics
from bkledger.bookie.add_trace import STAGES

VALUES = [0.0, 0.01, 0.25, 0.26, 3.0, 7.5, 10.0, 99.0, 20000.0]


def _samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
            if f.name == name for s in f.samples}


def test_add_path_histograms_export_as_prometheus_histograms() -> None:
    ours = metrics.new_registry()
    stats = metrics.ServerStats(ours)
    theirs = CollectorRegistry()
    add = Histogram("bookkeeper_server_ADD_ENTRY_REQUEST", "x", ["success"], buckets=metrics.LATENCY_MS_BUCKETS,
                    registry=theirs)
    stage = Histogram("bookie_ADD_ENTRY_STAGE", "x", ["stage"], buckets=metrics.STAGE_MS_BUCKETS, registry=theirs)
    sync = Histogram("bookie_journal_JOURNAL_SYNC", "x", buckets=metrics.LATENCY_MS_BUCKETS, registry=theirs)
    for v in VALUES:
        stats._add[True].observe(v)
        add.labels(success="true").observe(v)
        stats.add_stages[STAGES.index("fsync")].observe(v)
        stage.labels(stage="fsync").observe(v)
        stats.journal_sync(v / 1000.0)
        sync.observe(v)
    for name in ("bookkeeper_server_ADD_ENTRY_REQUEST", "bookie_ADD_ENTRY_STAGE", "bookie_journal_JOURNAL_SYNC"):
        mine, expected = _samples(ours, name), _samples(theirs, name)
        for key, value in expected.items():
            assert abs(mine[key] - value) < 1e-9, (name, key, mine.get(key), value)


def test_add_counts_export_as_prometheus_counters() -> None:
    ours = metrics.new_registry()
    stats = metrics.ServerStats(ours)
    started = stats.add_started()
    stats.add_done(started, True, 5, 5000)
    stats.add_done(stats.add_started(), False, 2, 10)
    stats.add_started()
    theirs = CollectorRegistry()
    Counter("bookie_BOOKIE_ADD_ENTRY", "x", registry=theirs).inc(5)
    assert _samples(ours, "bookie_BOOKIE_ADD_ENTRY") == _samples(theirs, "bookie_BOOKIE_ADD_ENTRY")
    assert _samples(ours, "bookie_BOOKIE_ADD_ENTRY_BYTES") == {("bookie_BOOKIE_ADD_ENTRY_BYTES_total", ()): 5000.0}
    assert _samples(ours, "bookkeeper_server_ADD_ENTRY_REJECTED") == {
        ("bookkeeper_server_ADD_ENTRY_REJECTED_total", ()): 1.0}
    assert _samples(ours, "bookie_ADD_ENTRY_IN_PROGRESS") == {("bookie_ADD_ENTRY_IN_PROGRESS", ()): 1.0}
