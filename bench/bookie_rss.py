"""bookie_rss: the resident memory of a bookie process must not grow with the data written to it.

A fresh LocalCluster with one bookie (journalSyncData=true, the rest as bookie_session), its own, so
"right after start" means it. One client writes 1 KiB entries to one E=1 Qw=1 Qa=1 ledger until
1 GiB of payload (64 MiB with --quick), in four quarters; after each quarter is acknowledged the
bookie's RSS (psutil) is sampled. Each sample is compared to the RSS right after start (and after the
first add, when the connection and the ledger exist), and the growth during the last quarter to the
growth during the first one: flat memory means the last quarter grows (close to) nothing.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future

import psutil

from bench.bookie_add import BenchError
from bench.bookie_session import CONF_OVERRIDES
from bench.cluster3 import ENTRY_SIZE, PASSWORD, ClientSizes
from bench.core import Context, MiB, Row, size_label
from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper

QUARTERS = 4
ACK_TIMEOUT = 300.0


def _rss(pid: int) -> float:
    """Resident set size of `pid` in MiB."""
    return psutil.Process(pid).memory_info().rss / MiB


def measure(ctx: Context, total_bytes: int) -> tuple[float, float, list[float]]:
    """(RSS right after start, RSS after the first add, RSS after each quarter), MiB."""
    cluster = LocalCluster(ctx.data_dir / "rss")
    ctx.stack.callback(cluster.down)
    try:
        cluster.up(1, dict(CONF_OVERRIDES))
        pid = cluster.bookies[0].pid
        at_start = _rss(pid)
        payload = os.urandom(ENTRY_SIZE)
        per_quarter = max(1, total_bytes // ENTRY_SIZE // QUARTERS)
        samples: list[float] = []
        with BookKeeper(cluster.metadata_service_uri) as bk:
            lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
            lh.add_entry(payload)
            first_add = _rss(pid)
            for _ in range(QUARTERS):
                last: Future[int] | None = None
                for _ in range(per_quarter):
                    last = lh.add_entry_async(payload)
                if last is not None:
                    last.result(ACK_TIMEOUT)
                time.sleep(0.2)  # let the bookie finish the work behind the last ack (entry log, index)
                samples.append(_rss(pid))
            lh.close()
    finally:
        cluster.down()
    if len(samples) != QUARTERS:
        raise BenchError("the bookie's memory was not sampled")
    return at_start, first_add, samples


def run(ctx: Context) -> list[Row]:
    total = ClientSizes.of(ctx).rss_bytes
    at_start, first_add, samples = measure(ctx, total)
    name = "bookie_rss"
    setup = f"one bookie, 1 ledger E=Qw=Qa=1, {size_label(ENTRY_SIZE)} entries, {size_label(total)} in all"
    rows = [Row(name, "RSS after the first add", first_add, "MiB", at_start,
                f"RSS right after start (registered, serving); {setup}")]
    for i, rss in enumerate(samples, 1):
        rows.append(Row(name, f"RSS after {size_label(total * i // QUARTERS)} ({i * 100 // QUARTERS}%)", rss, "MiB",
                        at_start, "RSS right after start; must stay flat, not grow with the data written"))
    rows.append(Row(name, "RSS after 100% vs after 25%", samples[-1], "MiB", samples[0],
                    "RSS after the first quarter (ratio ~1.0 when flat)"))
    first_growth = samples[0] - first_add
    rows.append(Row(name, "RSS growth during the last quarter", samples[-1] - samples[-2], "MiB", first_growth,
                    f"growth during the first quarter ({first_growth:+.1f} MiB; a ratio near 0 when flat, "
                    "none when the first quarter did not grow)"))
    return rows
