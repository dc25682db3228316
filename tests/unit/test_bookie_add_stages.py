"""A real stall on the bookie's add path is named by its stage (issue 48 item 1): the bookie's gRPC service
(bookie.server) over a real Bookie (journal and ledger storage in a temporary directory), its add path
driven directly. A storage thread held busy by earlier work shows as `handoff`, not as the storage work; an
event loop held busy while the journal's fdatasync completes shows as `to_loop`, not as the reply."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bkledger.bookie.add_request import AddBatchView
from bkledger.bookie.bookie import Bookie
from bkledger.bookie.config import BookieConfig
from bkledger.bookie.server import BookieService
from bkledger.proto import bookie_pb2 as pb
from tests.integration.bookie_util import KEY, package

STALL_S = 0.2
LEDGER = 3


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[Bookie]:
    config = BookieConfig(journalDirectories=(str(tmp_path / "journal"),),
                          ledgerDirectories=(str(tmp_path / "ledgers"),), addTraceSampleEvery=1,
                          slowAddThresholdMs=0.0)
    bookie = Bookie(config)
    bookie.start()
    yield bookie
    bookie.close()


def batch(first: int, count: int) -> AddBatchView:
    ids = list(range(first, first + count))
    data, sizes = package(LEDGER, ids)
    return AddBatchView(ledger_id=LEDGER, master_key=KEY, entry_ids=np.asarray(ids, dtype=np.int64),
                        sizes=np.asarray(sizes, dtype=np.int64), data=memoryview(data))


def submit(service: BookieService, added: AddBatchView) -> asyncio.Future[bytes]:
    answered: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    service.submit_batch(added, answered.set_result)
    return answered


def status(ack: bytes) -> int:
    """The status of one serialized AddAck (what the service queues on the stream for a batch)."""
    return int(pb.AddAck.FromString(ack).status)


def traced(service: BookieService, first_entry: int) -> dict[str, Any]:
    [record] = [r for r in service.tracer.slow_adds() if r["firstEntryId"] == first_entry]
    return record


Stall = Callable[[BookieService], Awaitable["asyncio.Future[bytes]"]]


def second_batch_trace(bookie: Bookie, stall: Stall) -> dict[str, Any]:
    """Adds entries 0-9, then 10-19 through `stall` (which submits them, stalling one stage around it);
    both must be acknowledged. Returns the slow-add record of the second batch."""
    async def run() -> dict[str, Any]:
        service = BookieService(bookie, "test-bookie", asyncio.get_running_loop())
        assert status(await asyncio.wait_for(submit(service, batch(0, 10)), 30)) == pb.EOK
        answered = await stall(service)
        assert status(await asyncio.wait_for(answered, 30)) == pb.EOK
        return traced(service, 10)

    return asyncio.run(run())


def assert_named(record: dict[str, Any], stage: str, next_stage: str) -> None:
    """The stall is the batch's slowest stage, and it did not leak into the stage after it."""
    assert record["slowestStage"] == stage, record
    assert record["stagesMs"][stage] >= STALL_S * 1000 * 0.9, record
    assert record["stagesMs"][next_stage] < STALL_S * 1000 / 2, record


def test_a_storage_thread_busy_with_earlier_work_is_the_handoff_stage(bookie: Bookie) -> None:
    async def stall(service: BookieService) -> asyncio.Future[bytes]:
        holding, release = threading.Event(), threading.Event()

        def earlier_work() -> None:
            holding.set()
            release.wait(30)

        bookie._in_order(earlier_work)            # queued before the add: the storage thread is held
        assert await asyncio.to_thread(holding.wait, 30)
        answered = submit(service, batch(10, 10))
        asyncio.get_running_loop().call_later(STALL_S, release.set)
        return answered

    assert_named(second_batch_trace(bookie, stall), "handoff", "storage")


def test_an_event_loop_busy_when_the_fsync_completes_is_the_to_loop_stage(bookie: Bookie) -> None:
    assert bookie.journal is not None
    synced = threading.Event()

    async def stall(service: BookieService) -> asyncio.Future[bytes]:
        assert bookie.journal is not None
        bookie.journal.on_sync = lambda _seconds: synced.set()
        answered = submit(service, batch(10, 10))
        assert synced.wait(30)      # the loop is held, not awaiting: its fdatasync is done meanwhile ...
        time.sleep(STALL_S)         # ... and the loop stays busy (the stall under test) while its outcome waits
        return answered

    assert_named(second_batch_trace(bookie, stall), "to_loop", "reply")
