"""prometheus_client's process, platform and GC collectors for a registry: what a bookie's and a client's
metrics both carry (`process_*`, `python_info`, `python_gc_*`), so neither imports the other for it."""

from __future__ import annotations

from typing import Any


def add_default_collectors(registry: Any) -> None:
    """Add ProcessCollector, PlatformCollector and GCCollector to `registry`, each unless it has its series
    already (registering one twice raises with auto_describe, or doubles every series without)."""
    from prometheus_client import GCCollector, PlatformCollector, ProcessCollector  # only where metrics are on

    present = {metric.name for metric in registry.collect()}
    wanted = (("process_cpu_seconds", ProcessCollector), ("python_info", PlatformCollector),
              ("python_gc_objects_collected", GCCollector))
    for name, collector in wanted:
        if name not in present:
            collector(registry=registry)
