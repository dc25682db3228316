"""Runs one speculative read on the client loop: sends, timers and cancellation for a SequenceRead.

The decisions (whom next, when to speculate, who won) are `client.protocol.speculative`'s; this
driver only executes them, as BookKeeper's PendingReadOp does with its timer: each `SendRead` starts
the caller's `attempt` coroutine for that bookie, the timer fires at the read's deadline, the first
attempt that returns a valid answer wins and the other attempts are cancelled. Attempts report
progress (a streamed batch arrived) through the callback they get, which restarts the timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Generic, TypeVar

import grpc

from bkledger.client.errors import BKError
from bkledger.client.protocol.speculative import (
    BookieHealth,
    CancelReads,
    MarkSlow,
    SendRead,
    SequenceRead,
    SpeculativeAction,
    SpeculativePolicy,
)
from bkledger.client.protocol.status import StatusCode

if TYPE_CHECKING:
    from bkledger.client.bookies import BookiePool

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
            now = self.loop.time()
            self.health.on_heard(bookie_id, now)
            self.read.on_progress(bookie_id, now)
        return report

    def on_done(self, task: asyncio.Future[tuple[int, T | None]]) -> None:
        bookie_id = self.tasks.pop(task)
        status, value = task.result()
        now = self.loop.time()
        if status == StatusCode.EOK and value is not None:
            self.health.on_heard(bookie_id, now)
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


# ---- connection probe ---------------------------------------------------------------------------
#: How long a read waits for new connections to finish their handshake before reading past the bookies
#: whose did not: at most this, and a fifth of speculativeReadTimeout.
PROBE_S = 0.1


async def probe_connections(pool: BookiePool, health: BookieHealth, bookies: Iterable[str],
                            policy: SpeculativePolicy) -> None:
    """Before a read picks its bookies: a bookie whose connection does not finish its handshake within
    PROBE_S is recorded as slow, so the read (reorderReadSequenceEnabled) starts with the others.

    A paused bookie (SIGSTOP, a long GC pause, a hung host) still accepts TCP connections, its kernel does
    that, but never sends the HTTP/2 settings that make a gRPC channel READY; a killed one refuses at once.
    Without the probe, every task that met a paused bookie first waited out speculativeReadTimeout, so a
    Spark read with a paused bookie took 1.22 s where it took 0.23 s with the bookie killed. A READY
    channel costs nothing to check; a new healthy one is READY in a few ms on one machine."""
    if not (policy.enabled and health.reorder):
        return
    loop = asyncio.get_running_loop()
    now = loop.time()
    waits: dict[str, asyncio.Future[None]] = {}
    for bookie_id in dict.fromkeys(bookies):
        if health.is_slow(bookie_id, now):
            continue
        try:
            client = await pool.get(bookie_id)
        except (BKError, OSError):
            continue                      # the read's own attempt reports it
        if client.channel.get_state(try_to_connect=True) != grpc.ChannelConnectivity.READY:
            waits[bookie_id] = asyncio.ensure_future(client.channel.channel_ready())
    if not waits:
        return
    _, pending = await asyncio.wait(waits.values(), timeout=min(PROBE_S, policy.first_timeout / 5))
    for bookie_id, waiting in waits.items():
        if waiting in pending:
            waiting.cancel()
            health.on_slow(bookie_id, loop.time())
