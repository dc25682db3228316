"""Long polls leave no waiter behind (issue 41, item 5): the bookie's gRPC service (bookie.server) over a
real Bookie (journal and ledger storage in a temporary directory), its Read handler called directly.
A long poll on a ledger no add ever reaches used to keep its future for ever (~290 bytes each)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bkledger.bookie.bookie import Bookie
from bkledger.bookie.config import BookieConfig
from bkledger.bookie.server import BookieService
from bkledger.proto import bookie_pb2 as pb
from tests.integration.bookie_util import KEY, package


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[Bookie]:
    config = BookieConfig(journalDirectories=(str(tmp_path / "journal"),),
                          ledgerDirectories=(str(tmp_path / "ledgers"),), longPollMaxTimeoutMs=200)
    bookie = Bookie(config)
    bookie.start()
    yield bookie
    bookie.close()


def poll(ledger_id: int, previous_lac: int, timeout_ms: int) -> pb.ReadRequest:
    return pb.ReadRequest(ledger_id=ledger_id, entry_id=-1, has_previous_lac=True, previous_lac=previous_lac,
                          timeout_ms=timeout_ms, piggyback_entry=True)


def test_polls_on_unknown_ledgers_that_time_out_leave_no_waiter(bookie: Bookie) -> None:
    async def run() -> tuple[set[int], int, int]:
        service = BookieService(bookie, "test-bookie", asyncio.get_running_loop())
        polls = [service.Read(poll(10_000 + i, -1, 50 + i % 100), context=None) for i in range(2000)]
        answers = await asyncio.gather(*polls)
        return {a.status for a in answers}, service.long_poll_waiters, len(service._lac_waiters)

    statuses, waiters, ledgers = asyncio.run(run())
    assert statuses == {pb.ENOLEDGER}
    assert waiters == 0 and ledgers == 0


def test_cancelled_polls_leave_no_waiter_and_answered_ones_neither(bookie: Bookie) -> None:
    async def run() -> list[Any]:
        loop = asyncio.get_running_loop()
        service = BookieService(bookie, "test-bookie", loop)
        seen: list[Any] = []
        tasks = [asyncio.ensure_future(service.Read(poll(7, -1, 10_000), context=None))
                 for _ in range(50)]
        while service.long_poll_waiters < 50:
            await asyncio.sleep(0.001)
        seen.append(service.long_poll_waiters)
        for task in tasks[:25]:
            task.cancel()                          # clients that went away
        await asyncio.gather(*tasks[:25], return_exceptions=True)
        seen.append(service.long_poll_waiters)
        data, sizes = package(7, [0])
        added: asyncio.Future[BaseException | None] = loop.create_future()

        def done(err: BaseException | None) -> None:
            loop.call_soon_threadsafe(added.set_result, err)

        bookie.add_batch(7, KEY, True, [0], sizes, data, sync=True, max_lac=0, done=done)
        assert await added is None
        service._advance_lac(7, 0)                 # what the add's acknowledgement does in the server
        answers = await asyncio.gather(*tasks[25:])
        seen += [{a.status for a in answers}, service.long_poll_waiters, len(service._lac_waiters)]
        return seen

    assert asyncio.run(run()) == [50, 25, {pb.EOK}, 0, 0]
