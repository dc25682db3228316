"""bookie_read: sequential range reads of what bookie_add wrote, against reading the entry logs raw.

The read is `BookieClient.read_range` (a server stream of batches of packaged entries), once as it
arrives and once verified the way a reader does it (`unpack_batch`, CRC32C per entry). The limit is
reading the bookie's own entry log files with os.read in 1 MiB chunks. Nothing is dropped from the
page cache: the data was just written and the machine has the memory, so both sides read from
memory and the figure is about the bookie's and the client's per-byte work, not the disk.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from bench.bookie_add import ENTRY_SIZES, BenchError, write_ledger
from bench.bookie_session import PASSWORD, BookieSession, WrittenLedger, bookie_session
from bench.core import MB, Context, MiB, Row, size_label
from bkledger.client.bookie_client import BookieClient
from bkledger.client.protocol.digest import make_digest, unpack_batch
from bkledger.proto import bookie_pb2 as pb

READ_TIMEOUT = 600.0


async def _read(address: str, ledger: WrittenLedger, verify: bool) -> tuple[int, int, float]:
    """Stream entries 0..last of the ledger; (entries, packaged bytes, seconds)."""
    client = BookieClient("bench-bookie", address)
    digest = make_digest("crc32c", PASSWORD)
    entries = nbytes = 0
    try:
        start = time.perf_counter()
        async for batch in client.read_range(ledger.ledger_id, 0, ledger.entries - 1, READ_TIMEOUT):
            if batch.status != pb.EOK:
                raise BenchError(f"range read of ledger {ledger.ledger_id}: {pb.StatusCode.Name(batch.status)}")
            if verify:
                unpack_batch(digest, ledger.ledger_id, batch.entry_ids, batch.sizes, batch.data)
            entries += len(batch.entry_ids)
            nbytes += len(batch.data)
        elapsed = time.perf_counter() - start
    finally:
        await client.close()
    if entries != ledger.entries:
        raise BenchError(f"ledger {ledger.ledger_id}: read {entries} entries, {ledger.entries} were acknowledged")
    return entries, nbytes, elapsed


def raw_read_mb_s(paths: list[Path]) -> float:
    """MB/s of reading `paths` start to end with os.read in 1 MiB chunks (page cache as it is)."""
    total = 0
    start = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            while chunk := os.read(fd, MiB):
                total += len(chunk)
        finally:
            os.close(fd)
    return total / (time.perf_counter() - start) / MB


def _ledger_rows(session: BookieSession, ledger: WrittenLedger, limit: float) -> list[Row]:
    label = f"{size_label(ledger.payload_size)} entries"
    why = "raw os.read (1 MiB chunks) of the bookie's entry log files; both from page cache, nothing dropped"
    rows = []
    for verify in (False, True):
        _, nbytes, seconds = asyncio.run(_read(session.process.address, ledger, verify))
        how = "read_range + unpack_batch (CRC32C)" if verify else "read_range stream"
        rows.append(Row("bookie_read", f"{label}: {how}", nbytes / seconds / MB, "MB/s", limit,
                        f"{why}; MB of packaged entries ({ledger.entries} entries)"))
    return rows


def run(ctx: Context) -> list[Row]:
    session = bookie_session(ctx)
    for size in ENTRY_SIZES:
        if size not in session.written:
            write_ledger(ctx, session, size)
    ledgers = [session.written[size] for size in ENTRY_SIZES]
    raw_read_mb_s(session.entry_logs())  # warm-up: whatever writeback evicted is back in the page cache
    limit = raw_read_mb_s(session.entry_logs())
    rows: list[Row] = []
    for ledger in ledgers:
        rows.extend(_ledger_rows(session, ledger, limit))
    return rows
