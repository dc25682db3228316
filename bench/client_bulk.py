"""bulk_add: the real client adding 1 KiB entries to three real bookies with `LedgerHandle.add_entries`.

Closed loop, E=3 Qw=3 Qa=2, one ledger fed by one thread with bulks of BULK_ENTRIES entries (one buffer
and its offsets each), at most TOTAL_IN_FLIGHT entries in flight. The limit: the raw append + fdatasync
speed of 256 KiB groups on the data dir's disk, divided by Qw (all three bookies journal to one disk).
Issue 16's aim: payload MB/s >= 0.6 of it. A limit at the bookies' own average group (journal bytes /
fdatasync calls counted by perf, given in the entries/s row) is not used: it grows as the bookies batch
better, so the ratio fell when they did.

Two more rows say what that disk was given meanwhile (/proc/diskstats): the bytes written per payload byte
(each copy goes to a journal and to an entry log, so at least 2 x Qw) and the write rate against one
writer's raw append + fdatasync. The payload rate is at most the disk's rate divided by the first: with
journal and entry logs on one disk, 0.5 of the limit / Qw is the most any bookie could reach here.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future

import numpy as np

from bench.client_add import REFERENCE_GROUP, TOTAL_IN_FLIGHT, GroupMeter, round_group
from bench.cluster3 import (
    ACK_QUORUM,
    ENSEMBLE,
    ENTRY_SIZE,
    PASSWORD,
    WRITE_QUORUM,
    ClientSizes,
    ClusterSession,
    cluster_session,
)
from bench.core import MB, Context, Row, size_label
from bench.disk import DiskMeter, disk_rows, measure_fsync_limit
from bkledger.client import BookKeeper

BULK_ENTRIES = 1000
ACK_TIMEOUT = 120.0
NAME = "bulk_add"


def _bulk_loop(session: ClusterSession, seconds: float) -> tuple[int, float, float | None, str, int]:
    """(entries acknowledged, seconds, group bytes or None, why not, journal bytes)."""
    data = os.urandom(ENTRY_SIZE * BULK_ENTRIES)
    offsets = np.arange(0, len(data) + 1, ENTRY_SIZE, dtype=np.int64)
    with BookKeeper(session.uri, maxOutstandingAdds=TOTAL_IN_FLIGHT) as bk:
        lh = bk.create_ledger(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM, password=PASSWORD)
        lh.add_entry(b"warm-up")       # connections are up before the clock starts
        with GroupMeter(session) as meter:
            start = time.perf_counter()
            deadline = start + seconds
            count = 0
            last: Future[int] | None = None
            while time.perf_counter() < deadline:
                last = lh.add_entries(data, offsets)
                count += BULK_ENTRIES
            if last is not None:
                last.result(ACK_TIMEOUT)
            elapsed = time.perf_counter() - start
        lh.close()
        if lh.last_entry_id != count:
            raise RuntimeError(f"ledger {lh.ledger_id} closed at entry {lh.last_entry_id}, expected {count}")
    return count, elapsed, meter.group_bytes, meter.why_not, meter.journal_bytes


def run(ctx: Context) -> list[Row]:
    session = cluster_session(ctx)
    seconds = ClientSizes.of(ctx).add_seconds
    with DiskMeter(ctx.data_dir) as disk:
        entries, elapsed, group, why_not, journal_bytes = _bulk_loop(session, seconds)
    payload_mb_s = entries * ENTRY_SIZE / elapsed / MB
    ref_mb_s, _ = ctx.fsync_limit(REFERENCE_GROUP, measure_fsync_limit)
    label = f"1 writer, bulks of {BULK_ENTRIES:,} x {size_label(ENTRY_SIZE)} (add_entries)"
    setup = f"E={ENSEMBLE} Qw={WRITE_QUORUM} Qa={ACK_QUORUM}, maxOutstandingAdds {TOTAL_IN_FLIGHT}"
    groups = f"the bookies' average group {size_label(round_group(group))}" if group is not None else \
        f"group size unknown: {why_not}"
    rows = [
        Row(NAME, f"{label}: payload MB/s", payload_mb_s, "MB/s", ref_mb_s / WRITE_QUORUM,
            f"raw append+fdatasync of {size_label(REFERENCE_GROUP)} groups / Qw={WRITE_QUORUM} (all bookies share"
            f" the disk); {setup}; issue 16 aim: >= 0.6"),
        Row(NAME, f"{label}: entries/s", entries / elapsed, "entries/s", None,
            f"{journal_bytes / max(entries, 1) / WRITE_QUORUM:.0f} journal bytes per entry per bookie; {groups}"),
    ]
    return rows + disk_rows(NAME, label, disk, entries * ENTRY_SIZE, elapsed, ref_mb_s, WRITE_QUORUM)
