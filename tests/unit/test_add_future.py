"""AddFuture: a concurrent.futures.Future sharing its creating thread's Condition still behaves as one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from bkledger.client.add_future import AddFuture, set_results


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


def test_an_add_cannot_be_cancelled_and_its_result_still_arrives() -> None:
    """A queued add may already be on a bookie's disk: cancel() refuses, as for a running future (a
    cancelled future would make the writer's set_result raise and fail every add of the ledger)."""
    future = AddFuture()
    assert future.running() and not future.cancel() and not future.cancelled()
    set_results([future], [4])
    assert future.result(0) == 4

    async def cancelled_awaiter() -> None:         # asyncio cancelling its wrapper cancels nothing
        task = asyncio.ensure_future(asyncio.wrap_future(future_b))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    future_b = AddFuture()
    asyncio.run(cancelled_awaiter())
    assert not future_b.done()
    set_results([future_b], [5])
    assert future_b.result(0) == 5


def test_set_results_completes_waiters_callbacks_and_mixed_futures_in_order() -> None:
    """One lock round per run of futures sharing a Condition, and everything set_result does: waiters
    (result() in another thread, concurrent.futures.wait) woken, callbacks run in order, a plain Future and
    another thread's AddFutures completed too, a future already done left alone."""
    mine = [AddFuture() for _ in range(3)]
    theirs: list[AddFuture] = []
    maker = threading.Thread(target=lambda: theirs.extend(AddFuture() for _ in range(2)))
    maker.start()
    maker.join()
    plain: concurrent.futures.Future[int] = concurrent.futures.Future()
    already = AddFuture()
    already.set_result(99)
    futures = [mine[0], mine[1], theirs[0], plain, theirs[1], already, mine[2]]
    order: list[int] = []
    for f in futures:
        f.add_done_callback(lambda done: order.append(done.result()))
    order.clear()                                  # `already` ran its callback at once
    got: list[int] = []
    started = threading.Event()

    def wait_for_last() -> None:
        started.set()
        got.append(mine[2].result(30))

    waiter = threading.Thread(target=wait_for_last)
    waiter.start()
    started.wait(30)
    pool_wait = concurrent.futures.ThreadPoolExecutor(1).submit(concurrent.futures.wait, futures[:5], 30)
    set_results(futures, [0, 1, 2, 3, 4, 5, 6])
    waiter.join(30)
    assert got == [6]
    done, not_done = pool_wait.result(30)
    assert len(done) == 5 and not not_done
    assert [f.result(0) for f in futures] == [0, 1, 2, 3, 4, 99, 6]
    assert order == [0, 1, 2, 3, 4, 6]


def test_callbacks_wait_and_asyncio() -> None:
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


def test_a_pending_add_future_holds_no_container_of_its_own() -> None:
    """The collector walks what an add in flight holds (tens of thousands of them at a time): an AddFuture
    makes its waiter and callback lists only when someone waits or adds a callback."""
    import gc

    future = AddFuture()
    own = {name: value for name, value in vars(future).items() if name != "_condition"}   # shared per thread
    assert not any(gc.is_tracked(value) for value in own.values()), own
    seen: list[int] = []
    future.add_done_callback(lambda f: seen.append(f.result()))
    set_results([future], [3])
    assert seen == [3]


def test_pending_futures_complete_in_order_and_fail_from_an_entry_on_with_their_slots() -> None:
    """R6: a future completes once the LAC reaches its last entry; a bulk's future (many slots) fails
    whole when one of its entries fails, with every later future; the slots given back are exact."""
    from bkledger.client.add_future import PendingFutures

    pending = PendingFutures()
    singles = [AddFuture() for _ in range(3)]
    pending.add_run(0, singles)                       # entries 0, 1, 2
    bulk, after = AddFuture(), AddFuture()
    pending.add(9, bulk, slots=7)                     # entries 3..9
    pending.add(10, after)
    assert len(pending) == 5 and pending.entry_ids() == [0, 1, 2, 9, 10]
    assert pending.complete_through(1) == 2
    assert [f.result(0) for f in singles[:2]] == [0, 1] and not singles[2].done()
    assert pending.complete_through(5) == 1          # entry 2; the bulk waits for entry 9
    assert not bulk.done()
    error = RuntimeError("bookie gone")
    assert pending.fail_from(8, error) == 8           # the bulk (7 slots) and the add after it
    assert bulk.exception(0) is error and after.exception(0) is error
    assert len(pending) == 0 and pending.complete_through(100) == 0
