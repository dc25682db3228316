"""The base of the simulated clients: request/answer with timeouts, and metadata read/CAS helpers.

Mirrors what BookKeeper's client runtime gives its protocol code: a request to a bookie or to ZooKeeper
either gets its answer or, after a timeout, is given up ("maybe written"); late or duplicate answers are
ignored. A crashed client forgets everything it was waiting for. A paused client (SIGSTOP, a long GC)
runs nothing: messages to it are held by the network and its timers fire only once it resumes. A CAS
whose answer does not come back is reported like a lost race (`on_conflict`): the caller must re-read
the metadata and decide (R9, R10, R20).
"""

from __future__ import annotations

from collections.abc import Callable

from bkledger.client.protocol.metadata import LedgerMetadata
from tests.sim.messages import Envelope, MetaCas, MetaRead, MetaResponse, Payload
from tests.sim.meta import ZK
from tests.sim.net import Network
from tests.sim.oracle import Oracle
from tests.sim.world import Event, World

META_READ_ATTEMPTS = 8

OnMeta = Callable[[int, LedgerMetadata], None]


class Actor:
    """A client node: sends requests, matches answers by request id, times them out."""

    def __init__(self, name: str, world: World, net: Network, oracle: Oracle, ledger_id: int) -> None:
        self.name = name
        self.world = world
        self.net = net
        self.oracle = oracle
        self.ledger_id = ledger_id
        self.alive = True
        self.paused = False
        self._deferred: list[Callable[[], None]] = []
        self._next_req = 0
        self._pending: dict[int, tuple[Callable[[Payload], None], Callable[[], None], Event]] = {}
        net.register(self)

    # ---- Node -------------------------------------------------------------------------------------
    def is_up(self) -> bool:
        return self.alive

    def is_paused(self) -> bool:
        return self.paused

    def pause(self) -> None:
        if self.alive and not self.paused:
            self.paused = True
            self.world.note(f"{self.name} paused")

    def resume(self) -> None:
        if not self.paused:
            return
        self.paused = False
        self.world.note(f"{self.name} resumed")
        deferred, self._deferred = self._deferred, []
        for fn in deferred:
            self._defer_run(fn)
        self.net.release_held(self.name)

    def _defer_run(self, fn: Callable[[], None]) -> None:
        self.world.at(0, f"{self.name} deferred", lambda: self._run_timer(fn))

    def _run_timer(self, fn: Callable[[], None]) -> None:
        """A timer fired: run it now, or once this client resumes; never after a crash."""
        if not self.alive:
            return
        if self.paused:
            self._deferred.append(fn)
            return
        fn()

    def deliver(self, src: str, env: Envelope) -> None:
        waiting = self._pending.pop(env.req_id, None)
        if waiting is None or not self.alive:
            return  # late (timed out) or duplicate answer
        on_reply, _on_timeout, timer = waiting
        timer.cancel()
        on_reply(env.payload)

    # ---- requests ---------------------------------------------------------------------------------------
    def call(self, dst: str, payload: Payload, on_reply: Callable[[Payload], None],
             on_timeout: Callable[[], None]) -> None:
        self._next_req += 1
        req_id = self._next_req
        timer = self.world.at(self.world.timeout, f"{self.name} timeout #{req_id} ({dst} {payload.label()})",
                              lambda: self._timed_out(req_id))
        self._pending[req_id] = (on_reply, on_timeout, timer)
        self.net.send(self.name, dst, Envelope(req_id, payload))

    def _timed_out(self, req_id: int) -> None:
        if self.paused:
            self._deferred.append(lambda: self._timed_out(req_id))
            return
        waiting = self._pending.pop(req_id, None)
        if waiting is not None and self.alive:
            waiting[1]()

    def later(self, delay: int, label: str, fn: Callable[[], None]) -> None:
        """Schedule `fn` unless this client has crashed by then."""
        self.world.at(delay, f"{self.name} {label}", lambda: self._run_timer(fn))

    def crash(self) -> None:
        """kill -9: everything in flight is forgotten; answers that still arrive are dropped."""
        self.alive = False
        self.paused = False
        self._deferred.clear()
        self.net.drop_held(self.name)
        for _on_reply, _on_timeout, timer in self._pending.values():
            timer.cancel()
        self._pending.clear()
        self.world.note(f"{self.name} crashed")

    # ---- metadata ------------------------------------------------------------------------------------------
    def read_md(self, on_done: OnMeta, on_fail: Callable[[], None], attempts: int = META_READ_ATTEMPTS) -> None:
        """getData with retries on connection loss; `on_fail` once every attempt timed out."""
        def reply(payload: Payload) -> None:
            assert isinstance(payload, MetaResponse) and payload.ok and payload.md is not None
            on_done(payload.version, payload.md)

        def timeout() -> None:
            if attempts <= 1:
                on_fail()
            else:
                self.later(self.world.between(5, 20), "retry zk read",
                           lambda: self.read_md(on_done, on_fail, attempts - 1))

        self.call(ZK, MetaRead(self.ledger_id), reply, timeout)

    def cas_md(self, version: int, md: LedgerMetadata, on_ok: Callable[[int], None],
               on_conflict: Callable[[], None]) -> None:
        """setData(version): `on_ok(new_version)`, or `on_conflict()` on BADVERSION *and* on connection loss
        (the write may or may not have happened: the caller re-reads and decides)."""
        def reply(payload: Payload) -> None:
            assert isinstance(payload, MetaResponse)
            if payload.ok:
                on_ok(payload.version)
            else:
                on_conflict()

        def lost() -> None:
            self.world.note(f"{self.name}: zk connection loss on CAS (maybe written)")
            on_conflict()

        self.call(ZK, MetaCas(self.ledger_id, version, md), reply, lost)
