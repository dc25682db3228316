"""AddFuture: a concurrent.futures.Future sharing its creating thread's Condition still behaves as one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from bkledger.client.add_future import AddFuture


def test_result_and_exception_once_done() -> None:
    ok, bad = AddFuture(), AddFuture()
    ok.set_result(7)
    bad.set_exception(ValueError("no"))
    assert ok.result() == 7 and ok.exception() is None
    with pytest.raises(ValueError):
        bad.result(0)
    assert isinstance(bad.exception(), ValueError)


def test_futures_of_one_thread_share_a_condition_and_another_thread_has_its_own() -> None:
    a, b = AddFuture(), AddFuture()
    other: list[AddFuture] = []
    thread = threading.Thread(target=lambda: other.append(AddFuture()))
    thread.start()
    thread.join()
    assert a._condition is b._condition
    assert other[0]._condition is not a._condition


def test_waiter_is_not_fooled_by_another_future_completing() -> None:
    """The shared Condition wakes every waiter; one whose future is not done keeps waiting."""
    mine, theirs = AddFuture(), AddFuture()
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(mine.result(30)))
    waiter.start()
    time.sleep(0.05)
    theirs.set_result(1)                 # notifies the shared Condition
    time.sleep(0.05)
    assert not got and waiter.is_alive()
    mine.set_result(2)
    waiter.join(30)
    assert got == [2]


def test_timeout_is_kept_despite_wakeups() -> None:
    mine, theirs = AddFuture(), AddFuture()
    threading.Timer(0.02, theirs.set_result, args=(1,)).start()
    with pytest.raises(concurrent.futures.TimeoutError):
        mine.result(0.1)
    with pytest.raises(concurrent.futures.TimeoutError):
        mine.exception(0)


def test_cancel_callbacks_wait_and_asyncio() -> None:
    cancelled = AddFuture()
    assert cancelled.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        cancelled.result(1)
    seen: list[int] = []
    futures = [AddFuture() for _ in range(3)]
    futures[0].add_done_callback(lambda f: seen.append(f.result()))

    def finish() -> None:
        for i, f in enumerate(futures):
            f.set_result(i)

    threading.Timer(0.02, finish).start()
    done, not_done = concurrent.futures.wait(futures, timeout=30)
    assert len(done) == 3 and not not_done and seen == [0]

    async def awaited() -> int:
        future = AddFuture()
        threading.Timer(0.01, future.set_result, args=(5,)).start()
        return await asyncio.wrap_future(future)

    assert asyncio.run(awaited()) == 5
