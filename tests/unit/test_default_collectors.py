"""The default process, platform and GC collectors in the bookie's, the autorecovery daemon's and the
client's registries (issue 45 item 5): each series once, never registered twice."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from bkledger.bookie.metrics import new_registry
from bkledger.client.metrics import add_default_collectors, client_metrics

DEFAULT_SERIES = ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds",
                  "process_open_fds", "python_info", "python_gc_objects_collected_total",
                  "python_gc_collections_total")


def series(registry: CollectorRegistry) -> list[str]:
    """The names of the samples in the registry's exposition, one per line (labels dropped)."""
    text = generate_latest(registry).decode()
    return [line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")]


def test_bookie_and_autorecovery_registry_has_process_and_gc_series_once():
    """new_registry() is what the bookie and the autorecovery daemon serve on /metrics."""
    names = series(new_registry())
    for name in DEFAULT_SERIES:
        assert name in names, name
    assert names.count("process_cpu_seconds_total") == 1
    assert names.count("python_info") == 1


def test_adding_the_default_collectors_again_is_harmless():
    """Registering a collector twice raises with auto_describe (the bookie's registries) and doubles every
    series without; add_default_collectors adds only what is missing."""
    registry = new_registry()
    add_default_collectors(registry)                     # would raise ValueError: Duplicated timeseries
    plain = CollectorRegistry()
    add_default_collectors(plain)
    add_default_collectors(plain)
    assert series(plain).count("process_cpu_seconds_total") == 1


def test_client_registry_gets_the_default_collectors():
    registry = CollectorRegistry(auto_describe=True)
    client_metrics(registry)
    names = series(registry)
    for name in DEFAULT_SERIES:
        assert name in names, name
    assert "bookkeeper_client_ADD_ENTRY_total" in names


def test_client_on_the_default_registry_does_not_register_them_twice():
    """prometheus_client's REGISTRY has the three collectors already: a client given it adds none."""
    before = series(REGISTRY).count("process_cpu_seconds_total")
    client_metrics(REGISTRY)
    assert before == 1 and series(REGISTRY).count("process_cpu_seconds_total") == 1
