"""Runs one speculative read on the client loop: sends, timers and cancellation for a SequenceRead.

The decisions (whom next, when to speculate, who won) are `client.protocol.speculative`'s; this
driver only executes them, as BookKeeper's PendingReadOp does with its timer: each `SendRead` starts
the caller's `attempt` coroutine for that bookie, the timer fires at the read's deadline, the first
attempt that returns a valid answer wins and the other attempts are cancelled. Attempts report
progress (a streamed batch arrived) through the callback they get, which restarts the timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from client.protocol.speculative import (
    BookieHealth,
    CancelReads,
    MarkSlow,
    SendRead,
    SequenceRead,
    SpeculativeAction,
)
from client.protocol.status import StatusCode

T = TypeVar("T")
#: An attempt returns (status, value): EOK with the verified value, or the status that says why not.
Attempt = Callable[[str, Callable[[], None]], Awaitable[tuple[int, T | None]]]
#: Failures that say the bookie is unreachable or slow (not that it lacks the entry): remembered as such.
SLOW_STATUSES = frozenset({StatusCode.TIMEOUT, StatusCode.UNAVAILABLE})


class _Run(Generic[T]):
    def __init__(self, read: SequenceRead, attempt: Attempt[T], health: BookieHealth) -> None:
        self.read = read
        self.attempt = attempt
        self.health = health
        self.loop = asyncio.get_running_loop()
        self.tasks: dict[asyncio.Future[tuple[int, T | None]], str] = {}
        self.value: T | None = None

    def apply(self, actions: list[SpeculativeAction]) -> None:
        for action in actions:
            if isinstance(action, SendRead):
                progress = self._progress(action.bookie_id)
                self.tasks[asyncio.ensure_future(self.attempt(action.bookie_id, progress))] = action.bookie_id
            elif isinstance(action, MarkSlow):
                self.health.on_slow_all(action.bookie_ids, self.loop.time())
            elif isinstance(action, CancelReads):
                for task, bookie_id in list(self.tasks.items()):
                    if bookie_id in action.bookie_ids:
                        task.cancel()
                        del self.tasks[task]

    def _progress(self, bookie_id: str) -> Callable[[], None]:
        def report() -> None:
            self.read.on_progress(bookie_id, self.loop.time())
        return report

    def on_done(self, task: asyncio.Future[tuple[int, T | None]]) -> None:
        bookie_id = self.tasks.pop(task)
        status, value = task.result()
        now = self.loop.time()
        if status == StatusCode.EOK and value is not None:
            if not self.read.finished:
                self.value = value
            self.apply(self.read.on_success(bookie_id))
            return
        if status in SLOW_STATUSES:
            self.health.on_slow(bookie_id, now)
        self.apply(self.read.on_failure(bookie_id, status, now))

    async def run(self) -> T | None:
        self.apply(self.read.start(self.loop.time()))
        try:
            while not self.read.finished and self.tasks:
                deadline = self.read.deadline
                timeout = None if deadline is None else max(0.0, deadline - self.loop.time())
                done, _ = await asyncio.wait(self.tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    self.apply(self.read.on_timer(self.loop.time()))
                for task in done:
                    if task in self.tasks:
                        self.on_done(task)
        finally:
            for task in self.tasks:
                task.cancel()
        return self.value if self.read.winner is not None else None


async def run_speculative(read: SequenceRead, attempt: Attempt[T], health: BookieHealth) -> T | None:
    """Run `read`: the winner's value, or None when every bookie failed (`read.errors` says how)."""
    return await _Run(read, attempt, health).run()
