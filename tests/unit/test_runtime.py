"""The client's event loop thread: stopping it ends every task it still holds."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from bkledger.client.runtime import EventLoopThread


def test_stop_cancels_leftover_tasks_so_none_is_destroyed_pending(caplog: pytest.LogCaptureFixture) -> None:
    """A task left running on the loop (a gRPC call's status task, say) is cancelled and awaited by stop(),
    so closing the loop logs no 'Task was destroyed but it is pending!'."""
    runtime = EventLoopThread("test-runtime")
    cleanup_ran: list[bool] = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleanup_ran.append(True)

    async def start() -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(forever())

    task = runtime.run(start(), 5)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        runtime.stop()
        del task
        gc.collect()
    assert runtime.loop.is_closed()
    assert cleanup_ran == [True]
    assert "destroyed but it is pending" not in caplog.text

