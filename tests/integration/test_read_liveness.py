"""No read dies untyped (issue 46, item 3): a read completes or fails with a BKError within its bound.

`bk.read_chunks_async` runs many ledgers' reads under one bound (12 x readTimeout); when it passed, the
cancellation itself used to land on the caller's futures: a bare asyncio.CancelledError, which the Spark
reader's `except Exception` fallback does not catch. Here every bookie is paused (SIGSTOP) and the
reader's readTimeout is tiny and it does not speculate, so the reads wait for each request's deadline in
turn and their bound passes before they could fail on their own.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from bkledger.client.errors import BKError

pytestmark = pytest.mark.integration

READ_TIMEOUT = 0.2      # the reader's readTimeout: its bound for a read is 12 x this
LEDGERS = 6


def _closed_ledgers(bk, count: int) -> list[int]:
    ids = []
    for i in range(count):
        lh = bk.create_ledger(3, 3, 2)
        for j in range(3):
            lh.add_entry(b"entry-%d-%d" % (i, j))
        lh.close()
        ids.append(lh.ledger_id)
    return ids


def test_r11_reads_with_every_bookie_paused_fail_typed_within_the_bound(cluster_factory, bk_factory):
    """R11, R13: with every bookie paused, many-ledger reads (read_chunks_async), a single async read, a
    blocking read and an asyncio read each fail with a BKError subclass (never CancelledError or a bare
    TimeoutError), and within their bound."""
    cluster = cluster_factory(3)
    writer = bk_factory(cluster.metadata_service_uri)
    ids = _closed_ledgers(writer, LEDGERS)
    reader = bk_factory(cluster.metadata_service_uri, readTimeout=READ_TIMEOUT, speculativeReadTimeout=0)
    handles = reader.open_ledgers(ids)                  # CLOSED: from the metadata alone, no bookie asked
    assert handles[ids[-1]].read_chunk(0, 2).entry_ids == [0, 1, 2]        # connected to every bookie
    for index in range(3):
        cluster.signal_bookie(index, signal.SIGSTOP)
    try:
        bound = READ_TIMEOUT * 12
        started = time.monotonic()
        futures = reader.read_chunks_async([(handles[i], 0, 2) for i in ids])
        single = handles[ids[0]].read_chunk_async(0, 2)
        for future in [*futures, single]:
            error = future.exception(timeout=bound + 10)
            assert isinstance(error, BKError), f"untyped read failure: {error!r}"
        with pytest.raises(BKError):
            handles[ids[1]].read_chunk(0, 2)
        with pytest.raises(BKError):
            asyncio.run(handles[ids[2]].read(0, 2))
        assert time.monotonic() - started < 3 * bound + 10
    finally:
        for index in range(3):
            cluster.signal_bookie(index, signal.SIGCONT)
