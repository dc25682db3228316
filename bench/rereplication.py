"""Re-replication throughput of a lost bookie's data, beside the client's write throughput (seed 003).

Four real bookies (journalSyncData=true, no autorecovery daemons). A client writes ledgers E=3 Qw=2 Qa=2
of 4 KiB entries (its payload MB/s is the write figure); then one bookie is stopped for good and
`client.admin.Admin.recover_bookies` copies every fragment it held to the others, as the replication
workers do (range reads from the survivors, recovery adds to the new bookie, one CAS per fragment). The
re-replication figure is packaged bytes copied per second; it is compared to the client's write speed.
`measure_rereplication` can also be called on its own (it returns both figures).
"""

from __future__ import annotations

import dataclasses
import signal
import time
from pathlib import Path

from bench.bookie_session import CONF_OVERRIDES
from bench.core import MB, Context, KiB, MiB, Row
from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper
from bkledger.client.admin import Admin

ENTRY_SIZE = 4 * KiB
LEDGERS = 8


@dataclasses.dataclass(frozen=True)
class RereplicationResult:
    write_mb_s: float           # client payload MB/s while writing the data (E=3 Qw=2 Qa=2)
    rereplication_mb_s: float   # bytes copied to new bookies per second of recovery
    copied_bytes: int
    copied_entries: int
    ledgers: int
    seconds: float


def measure_rereplication(base_dir: Path, total_bytes: int, bookies: int = 4,
                          entry_size: int = ENTRY_SIZE, ledgers: int = LEDGERS) -> RereplicationResult:
    """Start a local cluster in `base_dir`, write `total_bytes`, lose bookie 0, re-replicate its data."""
    cluster = LocalCluster(base_dir)
    try:
        cluster.up(bookies, dict(CONF_OVERRIDES), autorecovery=False)
        with BookKeeper(cluster.metadata_service_uri) as bk:
            payload = b"r" * entry_size
            per_ledger = max(total_bytes // (entry_size * ledgers), 1)
            start = time.monotonic()
            handles = [bk.create_ledger(3, 2, 2, password=b"pw") for _ in range(ledgers)]
            futures = [h.add_entry_async(payload) for _ in range(per_ledger) for h in handles]
            for fut in futures:
                fut.result(120)
            for h in handles:
                h.close()
            write_s = time.monotonic() - start
            written = per_ledger * ledgers * entry_size
            lost = cluster.bookies[0].bookie_id
            cluster.stop_bookie(0, sig=signal.SIGTERM)
            stats = Admin(bk).recover_bookies([lost])
            if stats.failed:
                raise RuntimeError(f"re-replication failed for {stats.failed}")
        return RereplicationResult(written / MB / write_s, stats.bytes / MB / stats.seconds, stats.bytes,
                                   stats.entries, stats.ledgers, stats.seconds)
    finally:
        cluster.down()


def run(ctx: Context) -> list[Row]:
    total = {"tiny": 2 * MiB, "quick": 32 * MiB}.get(ctx.settings.mode, 256 * MiB)
    res = measure_rereplication(ctx.data_dir / "rereplication", total)
    ctx.facts["rereplication"] = dataclasses.asdict(res)
    why = f"client write of the same data (E=3 Qw=2 Qa=2, {ENTRY_SIZE // KiB} KiB entries)"
    return [
        Row("rereplication", "client write: payload MB/s", res.write_mb_s, "MB/s", None,
            f"{LEDGERS} ledgers, {total // MiB} MiB in all"),
        Row("rereplication", "lost bookie's data re-replicated: MB/s", res.rereplication_mb_s, "MB/s",
            res.write_mb_s, why),
        Row("rereplication", "re-replication time", res.seconds, "s", None,
            f"{res.copied_entries} entries of {res.ledgers} ledgers, {res.copied_bytes / MB:.1f} MB copied"),
    ]
