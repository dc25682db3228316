"""The simulated writer: a LedgerHandle driving the real PendingAdds machine (R5, R6, R9, R10, R21).

Mirrors BookKeeper's LedgerHandle: each add gets the next entry id, is packaged with the real digest code
and sent to its write set; acks and errors are fed to PendingAdds by bookie id and its actions executed.
NeedEnsembleChange picks replacement bookies and CASes `transforms.with_ensemble_change` (with none free,
the adds go on with the ack quorum left, `on_ensemble_change_failed`); a lost race or a lost answer is
resolved with `decide_ensemble_change_conflict`. Closing CASes `transforms.closed` and
resolves conflicts with `decide_writer_close_conflict`. What the writer saw acknowledged goes to the oracle.
After an add is sent, after an acknowledgement moved its LAC (which no bookie knows before the next add) and
while a CAS is in flight it reaches a hazard point (the world may pause or kill it there). `mutation`
selects a broken writer: "ensemble-change-no-cas" (setData with version -1, i.e. no compare-and-swap) or
"lac-before-quorum" (the LAC advances on a single ack).
"""

from __future__ import annotations

from bkledger.client.errors import BKError, LedgerClosedError, LedgerFencedError, NotEnoughBookiesError
from bkledger.client.protocol.digest import DigestManager, master_key, package_entry
from bkledger.client.protocol.metadata import LedgerMetadata
from bkledger.client.protocol.pending_adds import (
    AddAction,
    CompleteAdds,
    FailAdds,
    NeedEnsembleChange,
    PendingAdds,
    Resend,
    SendAdd,
)
from bkledger.client.protocol.status import StatusCode
from bkledger.client.protocol.transforms import (
    ConflictDecision,
    closed,
    decide_ensemble_change_conflict,
    decide_writer_close_conflict,
    with_ensemble_change,
)
from tests.sim.actors import Actor
from tests.sim.messages import AddRequest, AddResponse, Payload
from tests.sim.net import Network
from tests.sim.oracle import Oracle
from tests.sim.world import World

MAX_ENSEMBLE_CHANGES = 40
MAX_CLOSE_ATTEMPTS = 10


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
        self.mutation = mutation
        ack_quorum = 1 if mutation == "lac-before-quorum" else md.ack_quorum
        self.pa = PendingAdds(md.last_fragment.ensemble, md.write_quorum, ack_quorum)
        self.bodies: dict[int, bytes] = {}
        self.lengths: dict[int, int] = {-1: 0}
        self.state = "writing"      # writing -> closing -> closed | failed
        self.adding = True
        self._changes = 0
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
            send = self.pa.on_add()
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

    def _run(self, actions: list[AddAction]) -> None:
        for action in actions:
            if isinstance(action, SendAdd | Resend):
                for index in action.indices:
                    self._send_add(action.entry_id, self.pa.ensemble[index])
            elif isinstance(action, CompleteAdds):
                self.oracle.on_acked(action.first_entry_id, action.last_add_confirmed)
                # The LAC just moved and no bookie knows it yet (it rides on the next add).
                self.world.hazard("writer_acked", self)
            elif isinstance(action, NeedEnsembleChange):
                self._change(action)
            elif isinstance(action, FailAdds):
                self.world.note(f"writer: adds {list(action.entry_ids)} failed: {type(action.error).__name__}")
                self._failed(action.error)

    def _send_add(self, entry_id: int, bookie: str) -> None:
        def reply(payload: Payload) -> None:
            assert isinstance(payload, AddResponse)
            if payload.status == StatusCode.EOK:
                self._run(self.pa.on_ack_from(entry_id, bookie))
            else:
                self._run(self.pa.on_error_from(entry_id, bookie, payload.status))

        def timeout() -> None:
            self._run(self.pa.on_error_from(entry_id, bookie, StatusCode.TIMEOUT))

        request = AddRequest(self.ledger_id, entry_id, self.key, self.bodies[entry_id], False)
        self.call(bookie, request, reply, timeout)

    def _failed(self, error: BKError) -> None:
        if self.state in ("closed", "failed"):
            return
        self.state = "failed"
        self.world.note(f"writer failed: {type(error).__name__}")

    # ---- ensemble change (R9) -------------------------------------------------------------------------
    def _change(self, need: NeedEnsembleChange) -> None:
        self._changes += 1
        ensemble = self.md.last_fragment.ensemble
        candidates = [b for b in self.bookies if b not in ensemble]
        if self._changes > MAX_ENSEMBLE_CHANGES:
            self._run(self.pa.fail_all(NotEnoughBookiesError()))
            return
        if not candidates:      # as the driver: go on with the ack quorum left if every write set has it
            self.world.note(f"writer: no bookie free to replace {list(need.failed_indices)}")
            self._run(self.pa.on_ensemble_change_failed(NotEnoughBookiesError()))
            return
        replaced = need.failed_indices[:len(candidates)]        # replace what can be, the rest stays failed
        chosen = self.world.rng.sample(candidates, len(replaced))
        try:
            mine = with_ensemble_change(self.md, need.first_entry_id, dict(zip(replaced, chosen, strict=True)))
        except BKError as exc:
            self._run(self.pa.fail_all(exc))
            return
        self.world.note(f"writer: ensemble change at {need.first_entry_id} replaces {list(replaced)}"
                        f" with {chosen}")
        version = -1 if self.mutation == "ensemble-change-no-cas" else self.version
        self.cas_md(version, mine, lambda v: self._changed(mine, v, need),
                    lambda: self.read_md(lambda v, stored: self._change_conflict(need, mine, v, stored),
                                         lambda: self._run(self.pa.fail_all(LedgerFencedError()))))
        self.world.hazard("writer_cas_sent", self)

    def _change_conflict(self, need: NeedEnsembleChange, mine: LedgerMetadata, version: int,
                         stored: LedgerMetadata) -> None:
        decision = decide_ensemble_change_conflict(stored, mine.last_fragment)
        self.world.note(f"writer: ensemble change conflict -> {decision.value}")
        self.md, self.version = stored, version
        if decision is ConflictDecision.SUCCESS:
            self._changed(stored, version, need)
        elif decision is ConflictDecision.RETRY:
            self._change(need)
        elif decision is ConflictDecision.FAIL_CLOSED:
            self._run(self.pa.fail_all(LedgerClosedError()))
        else:
            self._run(self.pa.fail_all(LedgerFencedError()))

    def _changed(self, md: LedgerMetadata, version: int, need: NeedEnsembleChange) -> None:
        self.md, self.version = md, version
        self._run(self.pa.on_ensemble_changed(md.last_fragment.ensemble, need.first_entry_id))

    # ---- close (R10) ------------------------------------------------------------------------------------
    def _close(self) -> None:
        self.state = "closing"
        self._close_attempts += 1
        lac = self.pa.last_add_confirmed
        try:
            mine = closed(self.md, lac, self.lengths[lac])
        except BKError as exc:
            self._failed(exc)
            return
        self.cas_md(self.version, mine, lambda _v: self._closed(lac),
                    lambda: self.read_md(lambda v, stored: self._close_conflict(lac, v, stored),
                                         lambda: self._failed(LedgerFencedError())))
        self.world.hazard("writer_cas_sent", self)

    def _close_conflict(self, lac: int, version: int, stored: LedgerMetadata) -> None:
        decision = decide_writer_close_conflict(stored, lac)
        self.world.note(f"writer: close conflict -> {decision.value}")
        self.md, self.version = stored, version
        if decision is ConflictDecision.SUCCESS:
            self._closed(lac)
        elif decision is ConflictDecision.RETRY and self._close_attempts < MAX_CLOSE_ATTEMPTS:
            self._close()
        else:
            self._failed(LedgerClosedError())

    def _closed(self, lac: int) -> None:
        self.state = "closed"
        self.oracle.on_close_result(self.name, lac)
