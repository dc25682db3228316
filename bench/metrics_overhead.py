"""metrics_overhead: adds to a bookie with metrics and the admin HTTP API on, against one with both off.

Two bookies of one local cluster on the same disk: bookie 0 without `prometheusStatsHttpPort` /
`httpServerEnabled` (no recording at all), bookie 1 with both (what `bkledger local up` runs). The same
add stream as bookie_add (100 B entries, 500 per batch, a bounded window) runs against each in turn,
twice, alternating, so that drift of a loaded machine hits both. The figure is the entries/s with metrics
on, compared to the entries/s with metrics off measured in the same run (aim: >= 0.95). The metrics
bookie is scraped once at the end to check its counters saw the adds.
"""

from __future__ import annotations

import asyncio
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from bench.bookie_add import _write
from bench.bookie_session import CONF_OVERRIDES
from bench.core import Context, Row
from bkledger.bookie.local.cluster import LocalCluster

ENTRY_SIZE = 100
ROUNDS = 2


def _added(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "bookie_BOOKIE_ADD_ENTRY":
            return sum(s.value for s in family.samples)
    return 0.0


def run(ctx: Context) -> list[Row]:
    cluster = LocalCluster(ctx.data_dir / "metrics-overhead")
    ctx.stack.callback(cluster.down)        # registered before up(): a half-started cluster is stopped too
    cluster.up(1, {**CONF_OVERRIDES, "prometheusStatsHttpPort": "0", "httpServerEnabled": "false"})
    cluster.add_bookie(dict(CONF_OVERRIDES))
    cluster.save()
    cluster.wait_registered()
    off, on = cluster.bookies
    assert not off.metrics_port and on.metrics_port and on.http_port
    seconds = ctx.settings.add_seconds / ROUNDS
    totals = {"off": [0, 0.0], "on": [0, 0.0]}
    ledger_id = 1
    for _ in range(ROUNDS):
        for name, proc in (("off", off), ("on", on)):
            entries, elapsed = asyncio.run(_write(proc.address, ledger_id, ENTRY_SIZE, seconds,
                                                  ctx.settings.window_entries))
            totals[name][0] += entries
            totals[name][1] += elapsed
            ledger_id += 1
    rate = {name: entries / elapsed for name, (entries, elapsed) in totals.items()}
    counted = _added(on.metrics_port)
    return [
        Row("metrics_overhead", "100 B adds/s, metrics + admin HTTP on", rate["on"], "entries/s", rate["off"],
            f"the same adds to a bookie with both off, same disk, alternating rounds (aim: >= 0.95); "
            f"its metrics counted {counted:.0f} of {totals['on'][0]} entries"),
    ]
