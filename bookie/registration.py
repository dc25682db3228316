"""The bookie's registration in ZooKeeper, kept by its own thread so that ZooKeeper never blocks the loop.

A kazoo call made while the session is reconnecting waits until ZooKeeper is back, however long that is.
Made on the bookie's event loop (as the disk check once did), such a call stopped the loop: the bookie
served nothing and ignored SIGTERM until killed. So the loop only says which mode it wants (`want`), and
the `Registrar` thread makes ZooKeeper match: at once when the mode changes, and every `interval` to
register again after a session expiry. `call_bounded` runs one ZooKeeper call on a daemon thread and waits
for it a bounded time, for shutdown: a daemon thread left waiting does not keep the process alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import KazooException

from bkledger.bookie.thread_guard import FAILURES
from bkledger.client.errors import BKError
from bkledger.client.meta.store import MetadataStore

log = logging.getLogger("bkledger.bookie")


class Registrar:
    """Holds `available/<id>` (or `available/readonly/<id>`) for this bookie while it runs."""

    def __init__(self, store: MetadataStore, bookie_id: str, info: dict[str, str], interval: float) -> None:
        self.store, self.bookie_id, self.info, self.interval = store, bookie_id, info, interval
        self._want = False
        self._registered_as: bool | None = None
        self._poke = threading.Event()
        self._settled = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register_now(self, readonly: bool) -> None:
        """The first registration, made before the bookie is announced as serving (ZooKeeper is up). After
        a crash it waits for the earlier session's node to expire; `stop()` ends that wait
        (RegistrationAbandonedError)."""
        self._want = readonly
        self.store.register_bookie(self.bookie_id, self.info, readonly=readonly, given_up=self._stop.is_set)
        self._mark(readonly)

    def start(self) -> Registrar:
        self._thread = threading.Thread(target=self._run, name="registrar", daemon=True)
        self._thread.start()
        return self

    def want(self, readonly: bool) -> None:
        """Register in this mode as soon as ZooKeeper answers (never blocks)."""
        self._want = readonly
        self._poke.set()

    def wait_settled(self, timeout: float) -> bool:
        """Wait (not on the loop) until ZooKeeper shows the wanted mode; False if it has not within `timeout`."""
        with self._settled:
            return self._settled.wait_for(lambda: self._registered_as == self._want, timeout)

    def _mark(self, registered_as: bool) -> None:
        with self._settled:
            self._registered_as = registered_as
            self._settled.notify_all()

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._poke.wait(self.interval)
            self._poke.clear()
            if self._stop.is_set():
                return
            try:
                self.reconcile()
            except (BKError, KazooException) as exc:   # ZooKeeper may be away: the next round tries again
                log.warning("could not update the registration in ZooKeeper: %s", exc)
            except Exception:  # noqa: BLE001 - anything else: logged with its traceback, counted, tried again
                FAILURES.record("registrar", "updating the registration")

    def reconcile(self) -> None:
        """One round: register in the wanted mode if the mode changed or the registration was lost."""
        want = self._want
        if self._registered_as == want and self.store.is_registered(self.bookie_id):
            return
        if self._registered_as == want:
            log.warning("registration lost (ZooKeeper session expired?): registering again")
        self.store.register_bookie(self.bookie_id, self.info, readonly=want)
        self._mark(want)


async def call_bounded(what: str, fn: Callable[[], Any], timeout: float) -> None:
    """Run `fn` on a daemon thread and wait at most `timeout` s; on timeout or failure, log and go on."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(exc: BaseException | None) -> None:
        if not done.done():
            done.set_exception(exc) if exc is not None else done.set_result(None)

    def run() -> None:
        exc: BaseException | None = None
        try:
            fn()
        except BaseException as caught:  # noqa: BLE001 - handed to the waiting coroutine
            exc = caught
        with contextlib.suppress(RuntimeError):  # the loop may be closed by then
            loop.call_soon_threadsafe(settle, exc)

    threading.Thread(target=run, name=f"zk-{what}", daemon=True).start()
    try:
        await asyncio.wait_for(done, timeout)
    except TimeoutError:
        log.warning("%s: ZooKeeper did not answer within %.0f s; going on", what, timeout)
    except Exception as exc:  # noqa: BLE001 - shutdown goes on whatever ZooKeeper says
        log.warning("%s failed: %s", what, exc)
