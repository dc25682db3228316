"""AddFuture: the concurrent.futures.Future that `LedgerHandle.add_entry_async` returns, made cheap.

A stock Future builds its own threading.Condition (an RLock and a waiter list), which at tens of
thousands of adds per second is a large share of the caller's time. An AddFuture instead shares the
Condition of the thread that created it (one per thread, made on first use). It stays a real
concurrent.futures.Future (done callbacks, `concurrent.futures.wait`, `asyncio.wrap_future` all work):
only waiting changes, since a shared Condition is also notified when *other* futures complete, so
`result` and `exception` wait in a loop until this one is done or their timeout has passed.

An add cannot be taken back once queued (its entry may already be on a bookie's disk), so an AddFuture
is RUNNING from the start: `cancel()` answers False, as for any future already running, and the entry
id still arrives. `set_results` completes the futures of many adds (one acknowledgement covers a
batch) taking each shared Condition once, not once per add.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, RUNNING
from typing import Any

log = logging.getLogger(__name__)

_DONE = frozenset((CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED))
_local = threading.local()


def _thread_condition() -> threading.Condition:
    condition: threading.Condition | None = getattr(_local, "condition", None)
    if condition is None:
        condition = _local.condition = threading.Condition()
    return condition


class AddFuture(concurrent.futures.Future[int]):
    """The entry id of one add, once acknowledged (R6); shares its creating thread's Condition."""

    def __init__(self) -> None:  # no super().__init__(): it would build a Condition per future
        self._condition = _thread_condition()
        self._state = RUNNING       # queued is running: never cancelled (see the module docstring)
        self._result: Any = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Any] = []

    def _wait_done(self, timeout: float | None) -> None:
        """Return once this future is done, or once `timeout` seconds have passed."""
        if self._state in _DONE:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while self._state not in _DONE:
                if deadline is None:
                    self._condition.wait()
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._condition.wait(remaining)

    def result(self, timeout: float | None = None) -> int:
        self._wait_done(timeout)
        return super().result(0)     # done: the result, the exception or CancelledError; else TimeoutError

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait_done(timeout)
        return super().exception(0)


def set_results(futures: Sequence[concurrent.futures.Future[int]], results: Sequence[int]) -> None:
    """futures[i].set_result(results[i]) for every i, in order, as set_result does it (waiters told,
    Condition notified, done callbacks run outside the lock), but under one lock round per run of
    AddFutures that share a Condition. A future already done is logged and left alone: completing the
    others matters more than the first duplicate."""
    index, count = 0, len(futures)
    while index < count:
        first = futures[index]
        if type(first) is not AddFuture:
            _set_one(first, results[index])
            index += 1
            continue
        condition = first._condition
        end = index
        with condition:
            while end < count:
                future = futures[end]
                if type(future) is not AddFuture or future._condition is not condition:
                    break
                if future._state in _DONE:
                    log.error("an add's future was already done (%s): its result %d is not set", future._state,
                              results[end])
                else:
                    future._result, future._state = results[end], FINISHED
                    for waiter in future._waiters:
                        waiter.add_result(future)
                end += 1
            condition.notify_all()
        for future in futures[index:end]:
            future._invoke_callbacks()      # type: ignore[attr-defined]
        index = end


def _set_one(future: concurrent.futures.Future[int], result: int) -> None:
    try:
        future.set_result(result)
    except concurrent.futures.InvalidStateError as exc:     # cancelled or set by someone else
        log.error("an add's future was already done (%s): its result %d is not set", exc, result)
