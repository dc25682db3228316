"""The simulated writer: a LedgerHandle driving the production WriterMachine (R5, R6, R9, R10, R21).

Mirrors BookKeeper's LedgerHandle as `client/writer.py` does, with the simulated network and clock instead
of gRPC and asyncio: each add gets the next entry id from the machine, is packaged with the real digest code
and sent to its write set; acks, errors, request timeouts and the clock (`on_tick(world.now)`) are fed to
the same `WriterMachine` the client runs, and its effects run by a `match` over the closed `WriterEffect`
union. The machine decides each step of an ensemble change (when it starts, its rounds, which bookies are
excluded, what happens when none is free), the metadata each CAS writes (`ensemble_change`,
`close_metadata`) and the conflicts after a lost race or a lost answer; replacements are picked by the
client's own `RandomPlacementPolicy` (seeded from the world) through the machine, and this driver only
talks to the simulated metadata store. What the writer saw acknowledged goes to the oracle. After an add is
sent, after an acknowledgement moved its LAC (which no bookie knows before the next add) and while a CAS is
in flight it reaches a hazard point (the world may pause or kill it there). Writer mutants are
`WriterRules` injected into the machine (`tests.sim.mutations.writer_rules`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

from bkledger.client.errors import BKError, ClientInternalError, LedgerFencedError
from bkledger.client.meta.errors import UpdateConflictError
from bkledger.client.placement import RandomPlacementPolicy
from bkledger.client.protocol.digest import DigestManager, master_key, package_entry
from bkledger.client.protocol.metadata import LedgerMetadata
from bkledger.client.protocol.pending_adds import CompleteAdds, FailAdds, Resend, SendAdd
from bkledger.client.protocol.status import StatusCode
from bkledger.client.protocol.writer_machine import (
    FindReplacements,
    GoingOnWithout,
    RetryReplacement,
    SendLac,
    StoreEnsembleChange,
    SuspectBookie,
    WriterEffect,
    WriterMachine,
)
from tests.sim.actors import Actor
from tests.sim.messages import AddRequest, AddResponse, Payload
from tests.sim.mutations import writer_rules
from tests.sim.net import Network
from tests.sim.oracle import Oracle
from tests.sim.world import World

MAX_CAS_ATTEMPTS = 10           # the client's metadataMaxAttempts: lost CAS races before an ensemble change fails
MAX_CLOSE_ATTEMPTS = 10
CHANGE_ATTEMPTS = 3             # the client's ensembleChangeMaxAttempts: with the add timeout, the stall bound


class Writer(Actor):
    """The one writer of the simulated ledger."""

    def __init__(self, world: World, net: Network, oracle: Oracle, md: LedgerMetadata, version: int,
                 bookies: list[str], digest: DigestManager, password: bytes, *, max_adds: int,
                 window: int, add_gap: int = 6, mutation: str = "none") -> None:
        super().__init__("writer", world, net, oracle, md.ledger_id)
        self.md = md
        self.version = version
        self.bookies = bookies
        self.digest = digest
        self.key = master_key(password)
        self.max_adds = max_adds
        self.window = window
        self.add_gap = add_gap
        self.m = WriterMachine(md, add_timeout=world.timeout, change_attempts=CHANGE_ATTEMPTS,
                               rules=writer_rules(mutation), now=world.now)
        self.pa = self.m.pending
        self.placement = RandomPlacementPolicy(seed=world.rng.getrandbits(32))   # the client's own policy
        self.bodies: dict[int, bytes] = {}
        self.lengths: dict[int, int] = {-1: 0}
        self.state = "writing"      # writing -> closing -> closed | failed
        self.adding = True
        self._close_attempts = 0

    def start(self) -> None:
        self.later(self.world.between(1, 5), "tick", self._tick)

    @property
    def finished(self) -> bool:
        """Crashed, failed or closed: it will not add any more."""
        return not self.alive or self.state in ("closed", "failed")

    def stop_adding(self) -> None:
        self.adding = False

    # ---- adds ---------------------------------------------------------------------------------------
    def _tick(self) -> None:
        if self.state != "writing":
            return
        self._run(self.m.on_tick(self.world.now))
        if self.pa.error is not None:
            self._failed(self.pa.error)
            return
        issued = self.pa.next_entry_id
        busy = bool(self.pa.pending_entry_ids) or self.pa.changing_ensemble
        if self.adding and issued < self.max_adds:
            if len(self.pa.pending_entry_ids) < self.window:
                self._add()
        elif not busy:
            self._close()
            return
        self.later(self.world.between(1, self.add_gap), "tick", self._tick)

    def _add(self) -> None:
        try:
            send = self.m.on_add(self.world.now)
        except BKError as exc:
            self._failed(exc)
            return
        payload = self.world.rng.randbytes(self.world.between(1, 48))
        entry_id = send.entry_id
        length = self.lengths[entry_id - 1] + len(payload)
        self.lengths[entry_id] = length
        body = package_entry(self.digest, self.ledger_id, entry_id, self.pa.last_add_confirmed, length, payload)
        self.bodies[entry_id] = body
        self.oracle.on_entry_created(entry_id, payload, body)
        self._run([send])
        self.world.hazard("writer_add_sent", self)

    def _run(self, effects: Sequence[WriterEffect]) -> None:
        for effect in effects:
            match effect:
                case SendAdd() | Resend():
                    for index in effect.indices:
                        self._send_add(effect.entry_id, self.pa.ensemble[index])
                case CompleteAdds():
                    self.oracle.on_acked(effect.first_entry_id, effect.last_add_confirmed)
                    # The LAC just moved and no bookie knows it yet (it rides on the next add).
                    self.world.hazard("writer_acked", self)
                case FindReplacements():      # every simulated bookie is writable; the client's placement picks
                    self._run(self.m.on_writable_bookies(self.bookies, self.placement.replace_bookie, self.world.now))
                case StoreEnsembleChange():
                    self.world.note(f"writer: ensemble change at {effect.first_entry_id} replaces "
                                    f"{list(effect.replacements)}")
                    self._store_change(effect, self.md, self.version, self.md, 1)
                case GoingOnWithout():
                    self.world.note(f"writer: no bookie free to replace {list(effect.bookie_ids)}: going on with Qa")
                case FailAdds():
                    self.world.note(f"writer: adds {list(effect.entry_ids)} failed: {type(effect.error).__name__}")
                    self._failed(effect.error)
                case RetryReplacement():
                    self._run(self.m.on_free_bookies(self.bookies))      # every simulated bookie is writable
                case SendLac():
                    self.world.note(f"writer: idle at LAC {effect.last_add_confirmed}")   # no explicit LAC here
                case SuspectBookie():
                    self.world.note(f"writer: bookie {effect.bookie_id} {effect.reason}: replacing it")
                case _:
                    assert_never(effect)

    def _send_add(self, entry_id: int, bookie: str) -> None:
        def reply(payload: Payload) -> None:
            assert isinstance(payload, AddResponse)
            if payload.status == StatusCode.EOK:
                self._run(self.m.on_acks(bookie, [entry_id], self.world.now))
            else:
                self._run(self.m.on_errors(bookie, [entry_id], payload.status, self.world.now))

        def timeout() -> None:
            self._run(self.m.on_errors(bookie, [entry_id], StatusCode.TIMEOUT, self.world.now))

        request = AddRequest(self.ledger_id, entry_id, self.key, self.bodies[entry_id], False)
        self.m.on_sent(bookie, 1, self.world.now)
        self.call(bookie, request, reply, timeout)

    def _failed(self, error: BKError) -> None:
        if self.state in ("closed", "failed"):
            return
        self.state = "failed"
        self.world.note(f"writer failed: {type(error).__name__}")

    # ---- ensemble change (R9): the machine decides each step, this runs the metadata store's CAS ------
    def _store_change(self, change: StoreEnsembleChange, known: LedgerMetadata, version: int,
                      stored: LedgerMetadata, attempt: int) -> None:
        """CAS the machine's ensemble change over `stored` (at `version`); a conflict re-reads and asks it
        again, up to MAX_CAS_ATTEMPTS times (the client's metadataMaxAttempts)."""
        try:
            mine = self.m.ensemble_change(stored, known, change.first_entry_id, change.chosen)
        except BKError as exc:
            self.world.note(f"writer: ensemble change refused: {type(exc).__name__}")
            self._run(self.m.on_change_failed(exc, self.world.now))
            return
        except ValueError as exc:   # as the client's guard: an unexpected error fails the writer, typed
            self._run(self.m.on_change_failed(ClientInternalError(repr(exc)), self.world.now))
            return
        if mine is None:
            self.world.note("writer: ensemble change already stored")
            self._changed(stored, version, change)
            return
        if attempt > MAX_CAS_ATTEMPTS:
            self._run(self.m.on_change_failed(UpdateConflictError(), self.world.now))
            return
        self.cas_md(version, mine, lambda v: self._changed(mine, v, change),
                    lambda: self.read_md(lambda v, now: self._store_change(change, known, v, now, attempt + 1),
                                         lambda: self._run(self.m.on_change_failed(LedgerFencedError(),
                                                                                   self.world.now))))
        self.world.hazard("writer_cas_sent", self)

    def _changed(self, md: LedgerMetadata, version: int, change: StoreEnsembleChange) -> None:
        self.md, self.version = md, version
        self._run(self.m.on_ensemble_changed(md.last_fragment.ensemble, change.first_entry_id, self.world.now))

    # ---- close (R10) ------------------------------------------------------------------------------------
    def _close(self) -> None:
        self.state = "closing"
        self._run(self.m.on_close_waited(True, self.world.now))     # idle: nothing pending to fail
        self._store_close(self.version, self.md)

    def _store_close(self, version: int, stored: LedgerMetadata) -> None:
        """CAS the machine's close over `stored` (at `version`); a conflict re-reads and asks it again (R10)."""
        self.md, self.version = stored, version
        lac = self.m.last_add_confirmed
        try:
            mine = self.m.close_metadata(stored, self.lengths[lac])
        except BKError as exc:
            self.world.note(f"writer: close refused: {type(exc).__name__}")
            self._failed(exc)
            return
        if mine is None:
            self._closed(lac)
            return
        self._close_attempts += 1
        if self._close_attempts > MAX_CLOSE_ATTEMPTS:
            self._failed(LedgerFencedError())
            return
        self.cas_md(version, mine, lambda _v: self._closed(lac),
                    lambda: self.read_md(self._store_close, lambda: self._failed(LedgerFencedError())))
        self.world.hazard("writer_cas_sent", self)

    def _closed(self, lac: int) -> None:
        self.state = "closed"
        self.oracle.on_close_result(self.name, lac)
