"""The client's event loop: one asyncio loop on a daemon thread per BookKeeper instance.

All protocol drivers (bookie connections, ledger handles) live on this loop. The blocking API hands
coroutines to it and waits with a bound; the asyncio API wraps the same coroutines for the caller's
own loop. Calling the blocking API from the loop thread itself would deadlock, so it raises instead.

Fork: a process holding a client forks whenever it starts a SparkSession or a multiprocessing child.
Hooks (`os.register_at_fork`) park every client loop on a callback just before the fork, so no loop
thread is inside gRPC or holds a client lock at that instant, and release it in the parent right after.
In the child the loop thread does not exist: the client is marked forked and every use of it raises
ClientForkedError at once (make a client in the child). gRPC's own fork handlers are what crashed such
children: `bkledger.client` sets GRPC_ENABLE_FORK_SUPPORT=0 (unless the user set it) before gRPC is first
imported, which is when gRPC reads it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from bkledger.client.errors import BKError, ClientClosedError, ClientForkedError, ClientTimeoutError, typed_error

T = TypeVar("T")

DRAIN_WAIT_S = 2.0      # how long stop() waits for the tasks it cancelled to end
FORK_PARK_WAIT_S = 1.0  # how long a fork waits for a client loop to park (a busy callback finishes first)
FORK_PARK_MAX_S = 30.0  # a parked loop resumes by itself after this, should the after-fork hook never run

log = logging.getLogger("bkledger.client.runtime")


class EventLoopThread:
    def __init__(self, name: str = "bkledger-client"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()
        self.stopping = False        # stop() began: calls cancelled from here on fail with ClientClosedError
        self.forked = False          # this is a fork child of the process that made the client: unusable
        self._fork_resumes: list[threading.Event] = []
        self._thread.start()
        self._started.wait(10)
        _RUNTIMES.add(self)
        _warn_if_grpc_forks_unsafely()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def check_not_forked(self) -> None:
        """ClientForkedError in a fork child: the loop and connections are the parent's."""
        if self.forked:
            raise ClientForkedError()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self.forked:
            coro.close()
            raise ClientForkedError()
        if self.stopping or self.loop.is_closed():
            coro.close()
            raise ClientClosedError("this BookKeeper client is closed; create a new client")
        return asyncio.run_coroutine_threadsafe(self._guarded(coro), self.loop)

    async def _guarded(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro`, except that being cancelled by stop() ends it with ClientClosedError: a future handed
        out by submit (read_chunk_async's, say) then fails with a typed error instead of ending cancelled."""
        try:
            return await coro
        except asyncio.CancelledError:
            if self.stopping:
                raise _closed_under_call() from None
            raise

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for it (from any thread but the loop's own)."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("the blocking bkledger API was called from the client's event loop; use the async API")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ClientTimeoutError(f"bkledger operation did not finish within {timeout}s") from None
        except concurrent.futures.CancelledError:
            if self.stopping:
                raise _closed_under_call() from None
            raise

    def wrap(self, coro: Coroutine[Any, Any, T]) -> Awaitable[T]:
        """An awaitable for the caller's loop (or the client loop itself) running `coro` here."""
        try:
            caller = asyncio.get_running_loop()
        except RuntimeError:
            caller = None
        if caller is self.loop:
            return coro
        return self._awaited(self.submit(coro))

    async def _awaited(self, future: concurrent.futures.Future[T]) -> T:
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.stopping and future.cancelled() and not (task is not None and task.cancelling()):
                raise _closed_under_call() from None
            raise

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.check_not_forked()
        self.loop.call_soon_threadsafe(fn, *args)

    # ---- fork (os.register_at_fork) -------------------------------------------------------------
    def _park_for_fork(self) -> None:
        """Just before a fork, in the forking thread: have the loop thread wait on a callback, so it is
        not inside gRPC nor holding a lock of the client when the process is copied (bounded both ways)."""
        if self.forked or self.stopping or self.loop.is_closed() or self.in_loop_thread():
            return
        if not self._thread.is_alive():
            return
        parked, resume = threading.Event(), threading.Event()
        try:
            self.loop.call_soon_threadsafe(_park, parked, resume)
        except RuntimeError:                 # the loop closed meanwhile
            return
        self._fork_resumes.append(resume)
        parked.wait(FORK_PARK_WAIT_S)

    def _resume_after_fork(self) -> None:
        while self._fork_resumes:
            self._fork_resumes.pop().set()

    def _forked_child(self) -> None:
        """In the child: the loop thread was not copied; nothing of this client may run here."""
        self.forked = True
        self._fork_resumes.clear()

    def stop(self) -> None:
        """Stop the loop after its remaining tasks end: a gRPC call's status task left pending when the loop
        closes is logged as 'Task was destroyed but it is pending!' at exit."""
        if self.forked:                      # the loop thread is the parent's: nothing to stop here
            self.stopping = True
            return
        if self.loop.is_closed():
            return
        self.stopping = True
        if self.loop.is_running() and not self.in_loop_thread():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._drain(), self.loop).result(DRAIN_WAIT_S + 1)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.in_loop_thread():
            self._thread.join(10)
            if not self.loop.is_running():
                self.loop.close()

    async def _drain(self) -> None:
        """Cancel the loop's other tasks, as asyncio.run does before it closes a loop, and wait for them."""
        await asyncio.sleep(0)                 # tasks whose result has arrived finish on their own
        pending = asyncio.all_tasks(self.loop) - {asyncio.current_task()}
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=DRAIN_WAIT_S)


async def bounded(coro: Awaitable[T], bound: float, what: str,
                  timeout: type[ClientTimeoutError] = ClientTimeoutError) -> T:
    """`coro` within `bound` seconds, for a future handed to a caller: a timeout fails it with `timeout`,
    an unexpected exception with ClientInternalError (never a bare TimeoutError or CancelledError)."""
    try:
        return await asyncio.wait_for(coro, bound)
    except BKError:
        raise
    except Exception as exc:  # noqa: BLE001 - the caller's future gets a typed error
        raise typed_error(exc, f"{what} (bound {bound:.1f}s)", timeout) from exc


def _park(parked: threading.Event, resume: threading.Event) -> None:
    """A loop callback: wait (the loop thread idle, outside gRPC) until the fork is done."""
    parked.set()
    if not resume.wait(FORK_PARK_MAX_S):
        log.warning("the client loop resumed on its own %.0fs after a fork began", FORK_PARK_MAX_S)


_RUNTIMES: weakref.WeakSet[EventLoopThread] = weakref.WeakSet()
_warned = threading.Event()


def _warn_if_grpc_forks_unsafely() -> None:
    """Once: gRPC was imported before bkledger with GRPC_ENABLE_FORK_SUPPORT unset, so its fork handlers
    are on and a fork child of this process (a SparkSession's JVM launch, multiprocessing) may crash."""
    import bkledger

    if bkledger.grpc_fork_setting_known or _warned.is_set():
        return
    _warned.set()
    log.warning("grpc was imported before bkledger with GRPC_ENABLE_FORK_SUPPORT unset: a fork() while a "
                "BookKeeper client runs (starting a SparkSession, a multiprocessing child) may crash the child. "
                "Set GRPC_ENABLE_FORK_SUPPORT=0 in the environment, or import bkledger before grpc.")


def _before_fork() -> None:
    for runtime in list(_RUNTIMES):
        runtime._park_for_fork()


def _after_fork_in_parent() -> None:
    for runtime in list(_RUNTIMES):
        runtime._resume_after_fork()


def _after_fork_in_child() -> None:
    for runtime in list(_RUNTIMES):
        runtime._forked_child()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                    after_in_child=_after_fork_in_child)


def _closed_under_call() -> ClientClosedError:
    return ClientClosedError("the BookKeeper client was closed while this call ran; close the client only "
                             "after its calls have returned")
