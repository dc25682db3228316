"""AddFuture: the concurrent.futures.Future that `LedgerHandle.add_entry_async` returns, made cheap.

A stock Future builds its own threading.Condition (an RLock and a waiter list), which at tens of
thousands of adds per second is a large share of the caller's time. An AddFuture instead shares the
Condition of the thread that created it (one per thread, made on first use). It stays a real
concurrent.futures.Future (done callbacks, `concurrent.futures.wait`, `asyncio.wrap_future` all work):
only waiting changes, since a shared Condition is also notified when *other* futures complete, so
`result` and `exception` wait in a loop until this one is done or their timeout has passed.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, PENDING
from typing import Any

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
        self._state = PENDING
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
