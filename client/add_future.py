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

import collections
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
        self._condition = getattr(_local, "condition", None) or _thread_condition()
        self._state = RUNNING       # queued is running: never cancelled (see the module docstring)
        self._result: Any = None
        self._exception: BaseException | None = None
        self._waiting: list[Any] | None = None
        self._callbacks: list[Any] | None = None

    @property
    def _waiters(self) -> list[Any]:
        """Made on first use (always under the Condition: by concurrent.futures.wait and as_completed):
        most adds are never waited on this way, and a list per add was one more object per add in flight
        for the garbage collector to walk."""
        if self._waiting is None:
            self._waiting = []
        return self._waiting

    @_waiters.setter
    def _waiters(self, waiters: list[Any]) -> None:
        self._waiting = waiters

    @property
    def _done_callbacks(self) -> list[Any]:
        """Made on first use (by add_done_callback, under the Condition), as `_waiters`."""
        if self._callbacks is None:
            self._callbacks = []
        return self._callbacks

    def _invoke_callbacks(self) -> None:
        if self._callbacks:
            super()._invoke_callbacks()        # type: ignore[misc]

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
                    if future._waiting:
                        for waiter in future._waiting:
                            waiter.add_result(future)
                end += 1
            condition.notify_all()
        for future in futures[index:end]:
            if future._callbacks:           # type: ignore[attr-defined]  # an AddFuture: most have none
                future._invoke_callbacks()  # type: ignore[attr-defined]
        index = end


def _set_one(future: concurrent.futures.Future[int], result: int) -> None:
    try:
        future.set_result(result)
    except concurrent.futures.InvalidStateError as exc:     # cancelled or set by someone else
        log.error("an add's future was already done (%s): its result %d is not set", exc, result)


class PendingFutures:
    """The futures of a writer's pending adds and bulks, in entry order, each with the last entry id it
    waits for and the window slots it holds (a single add: its entry and one slot; a bulk: its last entry
    and its slots). Ids and futures are kept in two deques and the slots of bulks in a dict, so an add in
    flight costs no object of its own here (a tuple per add was one more object per add for the garbage
    collector to walk, tens of thousands of times a second)."""

    def __init__(self) -> None:
        self._ids: collections.deque[int] = collections.deque()
        self._futures: collections.deque[concurrent.futures.Future[int]] = collections.deque()
        self._slots: dict[int, int] = {}             # last entry id -> slots, where not 1

    def __len__(self) -> int:
        return len(self._ids)

    def entry_ids(self) -> list[int]:
        return list(self._ids)

    def holds(self) -> set[int]:
        """The id()s of the futures held (to tell which of a drain's adds were registered)."""
        return {id(future) for future in self._futures}

    def add_run(self, first_entry_id: int, futures: Sequence[concurrent.futures.Future[int]]) -> None:
        """Single adds with consecutive entry ids from first_entry_id, one slot each."""
        self._ids.extend(range(first_entry_id, first_entry_id + len(futures)))
        self._futures.extend(futures)

    def add(self, last_entry_id: int, future: concurrent.futures.Future[int], slots: int = 1) -> None:
        self._ids.append(last_entry_id)
        self._futures.append(future)
        if slots != 1:
            self._slots[last_entry_id] = slots

    def complete_through(self, last_add_confirmed: int) -> int:
        """Complete (in order) every future whose last entry is at or below the LAC; the slots they held."""
        ids, futures = self._ids, self._futures
        ready: list[concurrent.futures.Future[int]] = []
        ready_ids: list[int] = []
        while ids and ids[0] <= last_add_confirmed:
            ready_ids.append(ids.popleft())
            ready.append(futures.popleft())
        set_results(ready, ready_ids)
        return self._slots_of(ready_ids)

    def fail_from(self, lowest: int, error: BaseException) -> int:
        """Fail every future whose last entry is at or above `lowest` (the later ones with it); the slots
        they held."""
        ids, futures = self._ids, self._futures
        failing_ids: list[int] = []
        failing: list[concurrent.futures.Future[int]] = []
        while ids and ids[-1] >= lowest:
            failing_ids.append(ids.pop())
            failing.append(futures.pop())
        for future in reversed(failing):
            _fail_one(future, error)
        return self._slots_of(failing_ids)

    def _slots_of(self, entry_ids: list[int]) -> int:
        if not self._slots:
            return len(entry_ids)
        return sum(self._slots.pop(entry_id, 1) for entry_id in entry_ids)


def _fail_one(future: concurrent.futures.Future[int], error: BaseException) -> None:
    try:
        future.set_exception(error)
    except concurrent.futures.InvalidStateError as exc:
        log.error("an add's future was already done (%s): its failure %r is not set", exc, error)
