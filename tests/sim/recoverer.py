"""The simulated recoverer: open-with-recovery driving the real LedgerRecovery machine (R14-R20).

Mirrors BookKeeper's LedgerOpenOp(recovery) + LedgerRecoveryOp: CAS the metadata to IN_RECOVERY
(`transforms.to_in_recovery`; a CLOSED ledger is just adopted), then execute LedgerRecovery's actions
(fencing reads, recovery reads, write-backs with the recovery flag, local ensemble changes) and finally the
single closing CAS (`transforms.close_after_recovery`), resolving a lost race or a lost answer with
`decide_recovery_close_conflict` (ADOPT the stored result). A failed attempt is retried a bounded number of
times. The `RecoveryRules` passed in may be deliberately broken (mutation tests; "close-no-adopt" makes a
recoverer that lost the close race overwrite the stored close).

A log successor (`successor=True`) is the takeover step of a new log writer (R28): it seals the previous
tail ledger as the log layer's rule says (`client.log.core.takeover.tail_seal`: recover it, then declare it
sealed at the recovered last entry, `Oracle.on_tail_sealed`). The "log-no-fence" mutant's `LogRules` make it
read the LAC without fencing and seal the tail there.
"""

from __future__ import annotations

from bkledger.client.errors import BKError
from bkledger.client.log.core.takeover import DEFAULT_LOG_RULES, LogRules, TailSeal, tail_seal
from bkledger.client.protocol.digest import DigestManager, master_key
from bkledger.client.protocol.metadata import LedgerMetadata, LedgerState
from bkledger.client.protocol.pending_adds import NeedEnsembleChange
from bkledger.client.protocol.recovery import (
    CloseLedger,
    LedgerRecovery,
    RecoveryAction,
    RecoveryFailed,
    RecoveryRules,
    SendFenceRead,
    SendRecoveryRead,
    WriteBack,
)
from bkledger.client.protocol.status import StatusCode
from bkledger.client.protocol.transforms import (
    ConflictDecision,
    close_after_recovery,
    decide_recovery_close_conflict,
    to_in_recovery,
)
from tests.sim.actors import Actor
from tests.sim.messages import AddRequest, AddResponse, MetaCas, Payload, ReadRequest, ReadResponse
from tests.sim.meta import ZK
from tests.sim.net import Network
from tests.sim.oracle import Oracle
from tests.sim.world import World


class Recoverer(Actor):
    """One client opening the ledger with recovery, retrying up to `max_attempts` times."""

    def __init__(self, name: str, world: World, net: Network, oracle: Oracle, ledger_id: int,
                 bookies: list[str], digest: DigestManager, password: bytes, rules: RecoveryRules, *,
                 max_attempts: int, successor: bool = False, log_rules: LogRules = DEFAULT_LOG_RULES) -> None:
        super().__init__(name, world, net, oracle, ledger_id)
        self.bookies = bookies
        self.digest = digest
        self.key = master_key(password)
        self.rules = rules
        self.max_attempts = max_attempts
        self.successor = successor
        self.log_rules = log_rules
        self.attempts = 0
        self.done = False
        self.gave_up = False
        self.rec: LedgerRecovery | None = None
        self._reading: LedgerRecovery | None = None    # the attempt whose reads the oracle has seen start
        self.md: LedgerMetadata | None = None
        self.version = -1

    # ---- open with recovery (R14) -----------------------------------------------------------------------
    def start(self) -> None:
        if self.done or self.gave_up:
            return
        if self.attempts >= self.max_attempts:
            self.gave_up = True
            self.world.note(f"{self.name}: gave up after {self.attempts} attempts")
            return
        self.attempts += 1
        self.rec = None
        if self.successor and tail_seal(self.log_rules) is TailSeal.READ_LAC:
            self.read_md(self._seal_at_lac, self._retry)
            return
        self.read_md(self._on_md, self._retry)

    def _seal_at_lac(self, _version: int, md: LedgerMetadata) -> None:
        """TailSeal.READ_LAC (the log-no-fence mutant): the previous tail's end is a plain LAC read's."""
        if md.state is LedgerState.CLOSED:
            self._done(md.last_entry_id, "found the tail closed")
            return
        ensemble = md.last_fragment.ensemble
        state = {"left": len(ensemble), "lac": -1}

        def answered(lac: int) -> None:
            state["lac"] = max(state["lac"], lac)
            state["left"] -= 1
            if state["left"] == 0:
                self._done(state["lac"], "sealed the tail at its LAC without fencing")

        for bookie in ensemble:
            self.call(bookie, ReadRequest(self.ledger_id, -1, False, b""),
                      lambda p: answered(p.lac if isinstance(p, ReadResponse) and p.status == StatusCode.EOK
                                         else -1),
                      lambda: answered(-1))

    def _retry(self) -> None:
        self.rec = None
        self.later(self.world.between(10, 60), "retry recovery", self.start)

    def _on_md(self, version: int, md: LedgerMetadata) -> None:
        if md.state is LedgerState.CLOSED:
            self._done(md.last_entry_id, "adopted the closed ledger")
        elif md.state is LedgerState.OPEN:
            marked = to_in_recovery(md)
            self.cas_md(version, marked, lambda v: self._begin(v, marked), self._retry_open)
        else:
            self._begin(version, md)

    def _retry_open(self) -> None:
        self.read_md(self._on_md, self._retry)

    def _begin(self, version: int, md: LedgerMetadata) -> None:
        self.md, self.version = md, version
        window = self.world.rng.choice([1, 2, 4, 8])
        rec = LedgerRecovery(md, self.digest, self.rules, read_window=window)
        self.rec = rec
        self.world.note(f"{self.name}: recovering from v{version}, window {window}")
        self._run(rec, rec.start())
        self.world.hazard("recovery_reading", self)

    # ---- executing the machine's actions ----------------------------------------------------------------
    def _run(self, rec: LedgerRecovery, actions: list[RecoveryAction]) -> None:
        for action in actions:
            if rec is not self.rec:
                return  # an abandoned attempt
            if isinstance(action, SendFenceRead):
                self._read(rec, action.bookie_id, -1, True, action.index)
            elif isinstance(action, SendRecoveryRead):
                if rec is not self._reading:
                    self._reading = rec
                    md = self.md
                    assert md is not None
                    self.oracle.on_recovery_reading(self.name, md.last_fragment.ensemble, md.write_quorum,
                                                    md.ack_quorum)
                self._read(rec, action.bookie_id, action.entry_id, action.fence, action.index)
            elif isinstance(action, WriteBack):
                for bookie in action.bookie_ids:
                    self._write_back(rec, action.entry_id, action.body, bookie)
            elif isinstance(action, NeedEnsembleChange):
                self._change(rec, action)
            elif isinstance(action, CloseLedger):
                self._close(action)
            elif isinstance(action, RecoveryFailed):
                self.world.note(f"{self.name}: recovery failed: {action.error}")
                self._retry()

    def _read(self, rec: LedgerRecovery, bookie: str, entry_id: int, fence: bool, index: int) -> None:
        def feed(status: int, body: bytes | None = None, lac: int = -1) -> None:
            if rec is not self.rec:
                return
            if entry_id < 0:
                self._run(rec, rec.on_fence_response(index, status, lac))
            else:
                self._run(rec, rec.on_read_response(entry_id, index, status, body))

        def reply(payload: Payload) -> None:
            assert isinstance(payload, ReadResponse)
            feed(payload.status, payload.body, payload.lac)

        self.call(bookie, ReadRequest(self.ledger_id, entry_id, fence, self.key, recovery=True), reply,
                  lambda: feed(StatusCode.TIMEOUT))

    def _write_back(self, rec: LedgerRecovery, entry_id: int, body: bytes, bookie: str) -> None:
        def reply(payload: Payload) -> None:
            assert isinstance(payload, AddResponse)
            if rec is not self.rec:
                return
            if payload.status == StatusCode.EOK:
                self._run(rec, rec.on_write_ack(entry_id, bookie))
            else:
                self._run(rec, rec.on_write_error(entry_id, bookie, payload.status))

        def timeout() -> None:
            if rec is self.rec:
                self._run(rec, rec.on_write_error(entry_id, bookie, StatusCode.TIMEOUT))

        self.call(bookie, AddRequest(self.ledger_id, entry_id, self.key, body, True), reply, timeout)

    def _change(self, rec: LedgerRecovery, need: NeedEnsembleChange) -> None:
        """R19: replacements are chosen locally and only stored with the closing CAS."""
        ensemble = list(rec.local_metadata.last_fragment.ensemble)
        candidates = [b for b in self.bookies if b not in ensemble]
        if len(candidates) < len(need.failed_indices):
            self.world.note(f"{self.name}: no bookies left to replace {list(need.failed_indices)}")
            self._retry()
            return
        for index, bookie in zip(need.failed_indices, self.world.rng.sample(candidates, len(need.failed_indices)),
                                 strict=True):
            ensemble[index] = bookie
        self.world.note(f"{self.name}: local ensemble change -> {ensemble}")
        self._run(rec, rec.on_ensemble_changed(ensemble))

    # ---- close (R20) ------------------------------------------------------------------------------------
    def _close(self, close: CloseLedger) -> None:
        assert self.md is not None
        try:
            mine = close_after_recovery(self.md, close.last_entry_id, close.length, close.new_fragments)
        except BKError as exc:
            self.world.note(f"{self.name}: cannot close: {exc}")
            self._retry()
            return
        self.cas_md(self.version, mine, lambda _v: self._done(close.last_entry_id, "closed the ledger"),
                    lambda: self.read_md(lambda v, stored: self._close_conflict(close, v, stored), self._retry))
        self.world.hazard("recovery_close_sent", self)

    def _close_conflict(self, close: CloseLedger, version: int, stored: LedgerMetadata) -> None:
        decision = decide_recovery_close_conflict(stored, self.rules.adopt_stored_close)
        self.world.note(f"{self.name}: close conflict -> {decision.value}")
        if decision is ConflictDecision.OVERWRITE:
            # The rule off (close-no-adopt): "re-read the version and CAS again" over what is stored.
            assert self.md is not None
            mine = close_after_recovery(self.md, close.last_entry_id, close.length, close.new_fragments)
            self.call(ZK, MetaCas(self.ledger_id, version, mine),
                      lambda _p: self._done(close.last_entry_id, "overwrote the stored close"), self._retry)
            return
        if decision is ConflictDecision.ADOPT:
            self._done(stored.last_entry_id, "adopted another close")
        elif decision is ConflictDecision.RETRY:
            self.md, self.version = stored, version
            self._close(close)
        else:
            self._retry()

    def _done(self, last_entry_id: int, how: str) -> None:
        self.done = True
        self.rec = None
        self.world.note(f"{self.name}: {how} at last entry {last_entry_id}")
        if self.successor:
            self.oracle.on_tail_sealed(self.name, last_entry_id)
        else:
            self.oracle.on_close_result(self.name, last_entry_id)
