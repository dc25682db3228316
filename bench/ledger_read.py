"""ledger_read: the real client reading a closed ledger, and a tailing reader following a writer.

Closed: `open_ledger(id, recovery=False)` then `read_chunk` from 0 to the end (about 4 MiB per call,
verified with CRC32C), on the 1-writer ledger of replicated_add (written now if it did not run).
The limit is the same entries streamed by `BookieClient.read_range` from one bookie of the ensemble,
as they arrive (no verification, no client bookkeeping): what the reader could get from one bookie.

Tailing: one client writes a new ledger (closed loop, as replicated_add's 1 writer) while a second
client in this process, opened with recovery=False, follows it with `wait_for_lac` + `read_chunk`.
Its MB/s (from the writer's start until it has read the last entry) is compared to the writer's
(from start to its last acknowledgement); how far behind it stayed is the writer's LAC minus the
reader's position, sampled after every read.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from concurrent.futures import Future

from bench.bookie_add import BenchError
from bench.client_add import closed_loop
from bench.cluster3 import (
    ACK_QUORUM,
    ENSEMBLE,
    ENTRY_SIZE,
    PASSWORD,
    WRITE_QUORUM,
    ClientSizes,
    ClusterSession,
    WrittenLedger,
    cluster_session,
)
from bench.core import MB, Context, Row, size_label
from bkledger.client import BookKeeper
from bkledger.client.bookie_client import BookieClient
from bkledger.client.ledger_handle import LedgerHandle
from bkledger.proto import bookie_pb2 as pb

READ_TIMEOUT = 600.0
LAC_WAIT = 0.5


def read_closed(session: ClusterSession, ledger: WrittenLedger) -> float:
    """Seconds to read entries 0..last of a closed ledger with read_chunk (a fresh client)."""
    with BookKeeper(session.uri) as bk:
        rh = bk.open_ledger(ledger.ledger_id, PASSWORD, recovery=False)
        last = rh.last_entry_id
        if last + 1 != ledger.entries:
            raise BenchError(f"ledger {ledger.ledger_id} has {last + 1} entries, {ledger.entries} were written")
        position = 0
        start = time.perf_counter()
        while position <= last:
            chunk = rh.read_chunk(position, last)
            position = chunk.entry_ids[-1] + 1
        return time.perf_counter() - start


async def _stream(address: str, ledger: WrittenLedger) -> float:
    """Seconds to stream entries 0..last from one bookie with BookieClient.read_range."""
    client = BookieClient("bench-bookie", address)
    entries = 0
    try:
        start = time.perf_counter()
        async for batch in client.read_range(ledger.ledger_id, 0, ledger.entries - 1, READ_TIMEOUT, 4 << 20):
            if batch.status != pb.EOK:
                raise BenchError(f"range read of ledger {ledger.ledger_id}: {pb.StatusCode.Name(batch.status)}")
            entries += len(batch.entry_ids)
        elapsed = time.perf_counter() - start
    finally:
        await client.close()
    if entries != ledger.entries:
        raise BenchError(f"ledger {ledger.ledger_id}: streamed {entries} entries of {ledger.entries}")
    return elapsed


def _closed_rows(ctx: Context, session: ClusterSession) -> list[Row]:
    ledger = session.ledgers.get("replicated_add")
    if ledger is None:
        ledger = closed_loop(session, 1, ClientSizes.of(ctx).add_seconds).ledger
        session.ledgers["replicated_add"] = ledger
    nbytes = ledger.entries * ledger.payload_size
    address = session.cluster.bookies[0].address
    asyncio.run(_stream(address, ledger))      # warm-up: the bookie's caches and the page cache as a reader finds them
    limit_s = asyncio.run(_stream(address, ledger))
    seconds = read_closed(session, ledger)
    label = f"closed ledger, {ledger.entries:,} x {size_label(ledger.payload_size)}"
    return [Row("ledger_read", f"{label}: read_chunk", nbytes / seconds / MB, "MB/s", nbytes / limit_s / MB,
                "payload MB/s vs BookieClient.read_range of the same entries from one bookie (4 MiB batches, "
                "unverified); E=Qw so read_chunk streams from one bookie too, verifying CRC32C")]


def _write(lh: LedgerHandle, seconds: float, result: dict[str, float]) -> None:
    """The tailed writer: adds for `seconds` (closed loop), waits for the last ack, closes."""
    payload = os.urandom(ENTRY_SIZE)
    start = time.perf_counter()
    deadline = start + seconds
    last: Future[int] | None = None
    count = 0
    while time.perf_counter() < deadline:
        last = lh.add_entry_async(payload)
        count += 1
    if last is not None:
        last.result(READ_TIMEOUT)
    result["seconds"] = time.perf_counter() - start
    result["entries"] = count
    lh.close()


def tail(session: ClusterSession, seconds: float) -> tuple[dict[str, float], float, list[int]]:
    """(writer result, reader seconds, lag samples in entries) of one tailing read."""
    with BookKeeper(session.uri) as writer_bk, BookKeeper(session.uri) as reader_bk:
        lh = writer_bk.create_ledger(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM, password=PASSWORD)
        rh = reader_bk.open_ledger(lh.ledger_id, PASSWORD, recovery=False)
        result: dict[str, float] = {}
        lags: list[int] = []
        writer = threading.Thread(target=_write, args=(lh, seconds, result), name="bench-tailed-writer")
        start = time.perf_counter()
        writer.start()
        position = 0
        deadline = time.monotonic() + seconds + READ_TIMEOUT
        while time.monotonic() < deadline:
            done = not writer.is_alive()
            if done and position >= result.get("entries", -1):
                break
            lac = rh.wait_for_lac(position - 1, LAC_WAIT)
            if lac < position and done:
                rh.refresh()  # closed: the metadata has the last entry id the LAC may not show yet
                lac = rh.last_entry_id
            if lac >= position:
                chunk = rh.read_chunk(position, lac)
                position = chunk.entry_ids[-1] + 1
                lags.append(max(0, lh.last_add_confirmed - (position - 1)))
        reader_seconds = time.perf_counter() - start
        writer.join(READ_TIMEOUT)
    if "entries" not in result or position != result["entries"]:
        raise BenchError(f"tailing reader read {position} entries, the writer wrote {result.get('entries')}")
    return result, reader_seconds, lags


def _tail_rows(ctx: Context, session: ClusterSession) -> list[Row]:
    written, reader_seconds, lags = tail(session, ClientSizes.of(ctx).tail_seconds)
    nbytes = written["entries"] * ENTRY_SIZE
    writer_mb_s = nbytes / written["seconds"] / MB
    label = f"tailing reader, {size_label(ENTRY_SIZE)} entries"
    setup = "2 clients in one process: writer closed loop, reader wait_for_lac + read_chunk"
    return [
        Row("ledger_read", f"{label}: read MB/s", nbytes / reader_seconds / MB, "MB/s", writer_mb_s,
            f"the writer's MB/s in the same run ({written['entries']:,.0f} entries); {setup}"),
        Row("ledger_read", f"{label}: lag, median", statistics.median(lags) if lags else 0.0, "entries",
            written["entries"], f"writer's LAC - reader's last entry after each read ({len(lags)} reads), "
            "vs all entries written"),
        Row("ledger_read", f"{label}: lag, max", float(max(lags, default=0)), "entries", written["entries"],
            "the same, the worst sample"),
    ]


def run(ctx: Context) -> list[Row]:
    session = cluster_session(ctx)
    return _closed_rows(ctx, session) + _tail_rows(ctx, session)
