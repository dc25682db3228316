"""bookie_add: adds to ONE real bookie through its add stream, against the raw disk limit.

The client side is the real one (`client.bookie_client.BookieClient`, entries packaged by
`client.protocol.digest.package_batch` with CRC32C) with a bounded window of entries in flight and a
few hundred entries per send, on the bookie's add port as a client sends them (bookie.add_port; gRPC's
AddStream for a bookie without one). The bookie journals each group with one write and one fdatasync
(journalSyncData=true) and acknowledges only after it, so its ceiling is the raw append + fdatasync
speed at the group size it actually makes. That group size is measured from outside: journal bytes
grown / fdatasync calls counted with `perf stat` (bench.syscount); the limit is then measured at that
very size. Without perf, the comparison is against the best limit among 64 KiB / 256 KiB / 1 MiB.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time

from bench.bookie_session import PASSWORD, BookieSession, WrittenLedger, bookie_session
from bench.core import MB, Context, KiB, Row, size_label
from bench.disk import measure_fsync_limit
from bench.syscount import SyscallCounter
from bkledger.client.bookie_client import BookieClient
from bkledger.client.protocol.digest import make_digest, master_key, package_batch
from bkledger.proto import bookie_pb2 as pb

ENTRY_SIZES = (1024, 100)
BATCH_ENTRIES = {1024: 256, 100: 500}
LEDGER_IDS = {1024: 1, 100: 2}
DRAIN_TIMEOUT = 120.0
FDATASYNC = "syscalls:sys_enter_fdatasync"


class BenchError(RuntimeError):
    """The benchmark could not produce a figure (the bookie refused adds, the stream broke, ...)."""


@dataclasses.dataclass
class AddResult:
    payload_size: int
    entries: int
    payload_bytes: int
    seconds: float
    journal_bytes: int
    fdatasyncs: int | None  # None: could not be counted (no perf)
    no_count_reason: str = ""


class _Acks:
    """The AckHandler of the benchmark's one ledger: counts acknowledged entries."""

    def __init__(self) -> None:
        self.acked = 0
        self.error = ""
        self.event = asyncio.Event()

    def on_ack(self, bookie_id: str, ack: pb.AddAck) -> None:
        if ack.status != pb.EOK:
            self.error = f"bookie {bookie_id} answered {pb.StatusCode.Name(ack.status)} to an add"
        self.acked += len(ack.entry_ids)
        self.event.set()

    def on_bookie_failed(self, bookie_id: str) -> None:
        self.error = f"add stream to bookie {bookie_id} failed"
        self.event.set()


async def _wait(acks: _Acks, until: int) -> None:
    while acks.acked < until and not acks.error:
        acks.event.clear()
        await acks.event.wait()


async def _write(address: str, ledger_id: int, payload_size: int, seconds: float, window: int,
                 add_port: int = 0) -> tuple[int, float]:
    """Add entries for `seconds` with at most `window` in flight; (entries acknowledged, elapsed). `add_port`:
    the bookie's, where the adds go as a client sends them (0: gRPC's AddStream)."""
    client = BookieClient("bench-bookie", address, add_port=add_port)
    acks = _Acks()
    client.register(ledger_id, acks)
    digest, key = make_digest("crc32c"), master_key(PASSWORD)
    batch = BATCH_ENTRIES.get(payload_size, max(1, 256 * KiB // payload_size))
    payloads = [os.urandom(payload_size) for _ in range(batch)]
    sent = length = 0
    try:
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline and not acks.error:
            await _wait(acks, sent + batch - window)
            data, sizes = package_batch(digest, ledger_id, sent, acks.acked - 1, length, payloads)
            client.send_add(ledger_id, key, list(range(sent, sent + batch)), sizes, data)
            sent += batch
            length += batch * payload_size
            await asyncio.sleep(0)  # let the stream task put it on the wire
        await asyncio.wait_for(_wait(acks, sent), DRAIN_TIMEOUT)
        elapsed = time.perf_counter() - start
    finally:
        await client.close()
    if acks.error:
        raise BenchError(acks.error)
    return sent, elapsed


def write_ledger(ctx: Context, session: BookieSession, payload_size: int) -> AddResult:
    """Run the adds of one entry size, count the journal's bytes and fdatasyncs, remember the ledger."""
    ledger_id = LEDGER_IDS.get(payload_size, 100 + payload_size)
    why_not = SyscallCounter.available()
    settings = ctx.settings
    before = session.journal_bytes()
    write = _write(session.process.address, ledger_id, payload_size, settings.add_seconds, settings.window_entries,
                   session.process.add_port)
    if why_not:
        entries, elapsed = asyncio.run(write)
        fsyncs: int | None = None
    else:
        with SyscallCounter(session.process.pid) as counter:
            entries, elapsed = asyncio.run(write)
        fsyncs = counter.counts.get(FDATASYNC)
        why_not = "" if fsyncs else "perf counted no fdatasync calls"
    grown = session.journal_bytes() - before
    session.written[payload_size] = WrittenLedger(ledger_id, payload_size, entries)
    return AddResult(payload_size, entries, entries * payload_size, elapsed, grown, fsyncs or None, why_not)


def _round_group(nbytes: float) -> int:
    """The measured average group rounded to whole KiB (at least 4 KiB), the size the limit is taken at."""
    return max(4 * KiB, round(nbytes / KiB) * KiB)


def _rows(ctx: Context, session: BookieSession, res: AddResult) -> list[Row]:
    label = f"{size_label(res.payload_size)} entries"
    journal_mb_s = res.journal_bytes / res.seconds / MB
    payload_mb_s = res.payload_bytes / res.seconds / MB
    per_entry = res.journal_bytes / max(res.entries, 1)
    best_size, (best_mb_s, _) = max(
        ((g, ctx.fsync_limit(g, measure_fsync_limit)) for g in ctx.settings.compare_group_sizes),
        key=lambda item: item[1][0])
    best_why = f"best raw append+fdatasync among {', '.join(size_label(g) for g in ctx.settings.compare_group_sizes)}"
    best_why += f" groups (that is {size_label(best_size)})"
    if res.fdatasyncs is None:
        note = f"; group size unknown ({res.no_count_reason}), so compared to the {best_why}"
        return [
            Row("bookie_add", f"{label}: entries/s", res.entries / res.seconds, "entries/s",
                best_mb_s * MB / per_entry, f"the best limit in entries (journal bytes/entry {per_entry:.0f} B){note}"),
            Row("bookie_add", f"{label}: payload MB/s", payload_mb_s, "MB/s", best_mb_s, "payload only" + note),
            Row("bookie_add", f"{label}: journal MB/s", journal_mb_s, "MB/s", best_mb_s, "journal file growth" + note),
        ]
    group = res.journal_bytes / res.fdatasyncs
    at = _round_group(group)
    limit_mb_s, _ = ctx.fsync_limit(at, measure_fsync_limit)
    same = f"raw append+fdatasync of {size_label(at)} groups, the bookie's average group"
    threshold = int(session.conf.get("journalBufferedWritesThreshold", "0"))
    return [
        Row("bookie_add", f"{label}: entries/s", res.entries / res.seconds, "entries/s", limit_mb_s * MB / per_entry,
            f"{same}, in entries of {per_entry:.0f} journal bytes (payload + header, CRC32C, record framing)"),
        Row("bookie_add", f"{label}: payload MB/s", payload_mb_s, "MB/s", limit_mb_s,
            f"{same}; payload bytes only, what the application gets"),
        Row("bookie_add", f"{label}: journal MB/s", journal_mb_s, "MB/s", limit_mb_s,
            f"{same}; journal file growth/s (aim: >= 0.70). The entry log writes the data again, unsynced"),
        Row("bookie_add", f"{label}: journal MB/s", journal_mb_s, "MB/s", best_mb_s, best_why),
        Row("bookie_add", f"{label}: journal group", group / KiB, "KiB", threshold / KiB or None,
            f"journal bytes / {res.fdatasyncs} fdatasync calls (counted by perf) vs journalBufferedWritesThreshold"),
    ]


def run(ctx: Context) -> list[Row]:
    session = bookie_session(ctx)
    rows: list[Row] = []
    for size in ENTRY_SIZES:
        rows.extend(_rows(ctx, session, write_ledger(ctx, session, size)))
    return rows
