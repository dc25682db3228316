"""The writer of a ledger handle as one pure machine: what LedgerWriter decides (R5, R6, R9, R10, R21).

Mirrors the decisions of BookKeeper's LedgerHandle write path, without its threads: the pending adds and the
LAC (through `PendingAdds`), the per-bookie add timeouts (`UnansweredAdds`, addEntryTimeoutSec), the bound
past which stalled adds fail (issue 46: no add hangs), when to replace a bookie, the ensemble change itself
(one at a time, ensembleChangeMaxAttempts rounds, which bookies are excluded, what happens when placement
finds none: go on with the ack quorum left or fail, with which typed error), when to retry a replacement
that found no free bookie, the explicit LAC of an idle writer, and the metadata each CAS writes: the
ensemble change and the close, with their conflicts (`decide_ensemble_change_conflict`,
`decide_writer_close_conflict`) and what a close that timed out does to the adds still pending.

An ensemble change is a conversation: `FindReplacements` (the driver lists the writable bookies, answers
`on_writable_bookies` with its placement policy), `StoreEnsembleChange` (the driver CASes `ensemble_change`
through its metadata store, connects to the replacements, answers `on_ensemble_changed`), or a failure of
either answered `on_change_failed`. The placement policy is passed in, as time is.

Time is an argument (`now`, any monotonic unit: seconds in the client, ticks in the simulation); nothing
here reads a clock, sleeps or does I/O. Events are method calls; their outputs are the closed union
`WriterEffect` of frozen dataclasses, which drivers run with a `match` ending in `assert_never`. Bulk adds
stay bulk: `on_adds` gives one `SendAdds` for a whole batch and acks are fed as arrays.

`WriterRules` are protocol switches, as `RecoveryRules`: anything but the defaults is a known bug, injected
by the simulation's mutants into this production machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, cast

from bkledger.client.errors import AddEntryQuorumTimeoutError, BKError, LedgerClosedError, NotEnoughBookiesError
from bkledger.client.protocol.add_timeouts import UnansweredAdds, add_settle_bound, adds_stalled, timed_out_indices
from bkledger.client.protocol.metadata import LedgerMetadata, LedgerState
from bkledger.client.protocol.pending_adds import (
    AddAction,
    CompleteAdds,
    FailAdds,
    NeedEnsembleChange,
    PendingAdds,
    Resend,
    SendAdd,
    SendAdds,
)
from bkledger.client.protocol.transforms import (
    ConflictDecision,
    closed,
    conflict_error,
    decide_ensemble_change_conflict,
    decide_writer_close_conflict,
    with_ensemble_change,
)
from bkledger.client.protocol.write_set import write_set

if TYPE_CHECKING:
    import numpy as np


@dataclasses.dataclass(frozen=True)
class WriterRules:
    """Protocol switches of the writer. Anything but the defaults is a known bug, for simulation tests only."""

    ack_quorum: bool = True              # R6: an add completes on Qa acks of its write set (False: on one)
    ensemble_change_cas: bool = True     # R9: an ensemble change applies to the stored metadata (False: the
    #                                      writer's own view overwrites it, as a setData without a version)
    silent_replacement_cas: bool = True  # R9: replacing a silent bookie (add timeout) CASes too (False: the
    #                                      change it starts overwrites the stored metadata, as above)
    in_order: bool = True                # R6: an add completes only once every add below it did


DEFAULT_WRITER_RULES = WriterRules()


@dataclasses.dataclass(frozen=True)
class RetryReplacement:
    """Failed bookies stay in the ensemble (none was free): ask whether a writable bookie is free now and
    answer with `on_free_bookies`."""


@dataclasses.dataclass(frozen=True)
class SendLac:
    """The writer is idle and the bookies have not seen its LAC: send it explicitly (tailing readers)."""

    last_add_confirmed: int


@dataclasses.dataclass(frozen=True)
class SuspectBookie:
    """The bookie at `index` is taken as failed for `reason` (to log; its replacement follows as an effect)."""

    bookie_id: str
    index: int
    reason: str


@dataclasses.dataclass(frozen=True)
class FindReplacements:
    """A round of an ensemble change starts (R9): list the writable bookies and answer with
    `on_writable_bookies` (a failure to list them: `on_change_failed`)."""

    failed_indices: tuple[int, ...]
    first_entry_id: int
    round: int                    # 1 .. ensembleChangeMaxAttempts


@dataclasses.dataclass(frozen=True)
class StoreEnsembleChange:
    """CAS the new fragment (R9): run `ensemble_change(stored, known, first_entry_id, replacements)` as the
    metadata store's update transform, connect to the replacements, answer with `on_ensemble_changed`
    (an error of the CAS: `on_change_failed`)."""

    first_entry_id: int
    replacements: tuple[tuple[int, str], ...]     # (ensemble index, new bookie), ascending

    @property
    def chosen(self) -> dict[int, str]:
        return dict(self.replacements)


@dataclasses.dataclass(frozen=True)
class GoingOnWithout:
    """No bookie is free to replace `bookie_ids` (`error` says why): the adds go on with the ack quorum
    left, under-replicated, until a retry finds one (to log)."""

    bookie_ids: tuple[str, ...]
    error: BKError


#: Everything the writer machine asks its driver to do. A driver runs each with a `match` over exactly these.
WriterEffect = (SendAdd | Resend | CompleteAdds | FailAdds | RetryReplacement | SendLac | SuspectBookie
                | FindReplacements | StoreEnsembleChange | GoingOnWithout)

#: A placement policy's `replace_bookie(ensemble, writable, exclude)`: a bookie of `writable` outside the
#: ensemble and `exclude`, or NotEnoughBookiesError.
ReplaceBookie = Callable[[Sequence[str], Sequence[str], Collection[str]], str]


def choose_replacements(failed: Sequence[int], ensemble: Sequence[str], writable: Sequence[str],
                        exclude: Collection[str], place: ReplaceBookie) -> dict[int, str]:
    """A replacement for as many failed indices as placement can fill, in order, each excluded from the
    next picks (as BookKeeper: replace what can be, the rest stays failed); {} when none is free."""
    taken = set(exclude)
    chosen: dict[int, str] = {}
    for index in failed:
        try:
            bookie = place(ensemble, writable, taken)
        except NotEnoughBookiesError:
            break
        chosen[index] = bookie
        taken.add(bookie)
    return chosen


class WriterMachine:
    """The decisions of one ledger's writer (or of the simulation's writer); see the module docstring."""

    def __init__(self, md: LedgerMetadata, *, add_timeout: float, change_attempts: int,
                 rules: WriterRules = DEFAULT_WRITER_RULES, now: float = 0.0) -> None:
        self.ledger_id = md.ledger_id
        self.rules = rules
        self.ensemble_size = md.ensemble_size
        self.write_quorum = md.write_quorum
        quorum = md.ack_quorum if rules.ack_quorum else 1
        self.pending = PendingAdds(md.last_fragment.ensemble, md.write_quorum, quorum, in_order=rules.in_order)
        self.unanswered = UnansweredAdds()     # per bookie: send times of its unanswered add requests
        self.bad_bookies: set[str] = set()     # failed or silent: never picked as a replacement
        self.add_timeout = add_timeout
        self.settle_bound = add_settle_bound(add_timeout, change_attempts)
        self.closing = False
        self.lac_sent = -1                     # the highest LAC bookies have seen (piggy-backed or explicit)
        self._last_progress = now              # an add completed, adds began to be pending, or a timeout ran
        self._settled_at = now                 # an add completed, or adds began to be pending
        self._last_retry = now
        self._silent_change = False            # the running ensemble change replaces a silent bookie
        self.change_attempts = max(1, change_attempts)
        self._rounds = 0                       # rounds of the running ensemble change (0: none runs)
        self._unusable: BKError | None = None   # why bookies were unusable, as the driver last said

    # ---- views ----------------------------------------------------------------------------------
    @property
    def last_add_confirmed(self) -> int:
        return self.pending.last_add_confirmed

    @property
    def error(self) -> BKError | None:
        return self.pending.error

    @property
    def has_pending(self) -> bool:
        return self.pending.next_entry_id > self.pending.last_add_confirmed + 1 and self.pending.error is None

    # ---- adds -------------------------------------------------------------------------------------
    def on_adds(self, count: int, now: float) -> SendAdds:
        """`count` new adds (a drain, a bulk): their entry ids, as one effect. Raises once the writer failed."""
        self._starting(now)
        sends = self.pending.on_adds(count)
        self.lac_sent = max(self.lac_sent, self.pending.last_add_confirmed)   # piggy-backed on these adds
        return sends

    def on_add(self, now: float) -> SendAdd:
        """One new add (the simulation's writer adds one at a time)."""
        self._starting(now)
        send = self.pending.on_add()
        self.lac_sent = max(self.lac_sent, self.pending.last_add_confirmed)
        return send

    def _starting(self, now: float) -> None:
        if not self.has_pending:
            self._last_progress = self._settled_at = now

    def on_sent(self, bookie_id: str, entries: int, now: float) -> None:
        """An add request of `entries` entries left for bookie_id (its add timeout starts)."""
        self.unanswered.on_sent(bookie_id, entries, now)

    def on_acks(self, bookie_id: str, entry_ids: Sequence[int] | np.ndarray, now: float) -> list[WriterEffect]:
        """bookie_id acknowledged these entries (one reply: a batch)."""
        self.unanswered.on_answered(bookie_id, len(entry_ids))
        acks = self.pending.on_acks_from(entry_ids, bookie_id)      # completions only: never a change
        return self._progress(cast("list[WriterEffect]", acks), now)

    def on_errors(self, bookie_id: str, entry_ids: Sequence[int], status: int, now: float) -> list[WriterEffect]:
        """bookie_id failed these entries with `status` (R9; EFENCED / EUA fail the adds, R21)."""
        self.unanswered.on_answered(bookie_id, len(entry_ids))
        actions: list[AddAction] = []
        for entry_id in entry_ids:
            actions += self.pending.on_error_from(entry_id, bookie_id, status)
        return self._progress(self._steer(actions), now)

    def _progress(self, effects: list[WriterEffect], now: float) -> list[WriterEffect]:
        if any(isinstance(effect, CompleteAdds) for effect in effects):
            self._last_progress = self._settled_at = now
        return effects

    def on_bookie_failed(self, bookie_id: str) -> list[WriterEffect]:
        """The connection to bookie_id failed: nothing in flight to it will be answered. It is replaced
        while adds are pending (an idle writer replaces it at its next add's failure)."""
        self.unanswered.forget(bookie_id)
        index = self.pending.index_of(bookie_id)
        if index is None or not self.has_pending:
            return []
        self.bad_bookies.add(bookie_id)
        return self._steer(self.pending.on_bookie_failed(index))

    def fail(self, error: BKError) -> list[WriterEffect]:
        """Fail every pending add with `error`; the writer takes no more adds. Always announced once."""
        self._rounds = 0
        return cast("list[WriterEffect]", self.pending.fail_all(error))

    # ---- time -------------------------------------------------------------------------------------
    def on_tick(self, now: float) -> list[WriterEffect]:
        """The clock moved: stalled adds fail, silent bookies are replaced, failed bookies left in the
        ensemble are retried, an idle writer sends its LAC."""
        if self.pending.error is not None:
            return []
        if adds_stalled(self.has_pending, self._settled_at, now, self.settle_bound):
            return self.fail(AddEntryQuorumTimeoutError(
                f"ledger {self.ledger_id}: no add completed for {self.settle_bound:.1f} (addEntryTimeoutSec "
                f"{self.add_timeout}); the pending adds fail, maybe written; the handle takes no more adds"))
        effects = self._time_out_silent_bookies(now)
        if self.pending.failed_indices and now - self._last_retry > self.add_timeout:
            self._last_retry = now
            if not self.closing and not self.pending.changing_ensemble:
                effects.append(RetryReplacement())
        if self.has_pending and now - self._last_progress > self.add_timeout:
            effects += self._time_out_slow_bookies(now)
        elif not self.has_pending and self.pending.last_add_confirmed > self.lac_sent:
            self.lac_sent = self.pending.last_add_confirmed
            effects.append(SendLac(self.lac_sent))
        return effects

    def _time_out_silent_bookies(self, now: float) -> list[WriterEffect]:
        """A bookie whose oldest unanswered add request is older than the add timeout failed, as a timed-out
        request does in BookKeeper, even while the others keep the adds completing (Qa < Qw)."""
        ensemble = self.pending.ensemble
        effects: list[WriterEffect] = []
        silent = timed_out_indices(ensemble, self.unanswered.oldest_by_bookie(), now, self.add_timeout,
                                   self.pending.failed_indices)
        for index in silent:
            self.unanswered.forget(ensemble[index])
            effects += self._replace(index, ensemble[index], "left an add request unanswered")
        return effects

    def _time_out_slow_bookies(self, now: float) -> list[WriterEffect]:
        """The oldest pending add made no progress for the add timeout: its write set's silent members failed."""
        self._last_progress = now
        if self.pending.changing_ensemble:
            return []
        oldest = self.pending.last_add_confirmed + 1
        acked = self.pending.acked_indices(oldest)
        effects: list[WriterEffect] = []
        for index in write_set(oldest, self.ensemble_size, self.write_quorum):
            if index not in acked and index not in self.pending.failed_indices:
                effects += self._replace(index, self.pending.ensemble[index], f"did not answer entry {oldest}")
        return effects

    def _replace(self, index: int, bookie_id: str, reason: str) -> list[WriterEffect]:
        self.bad_bookies.add(bookie_id)
        effects: list[WriterEffect] = [SuspectBookie(bookie_id, index, reason)]
        changes = self.pending.on_bookie_failed(index)
        self._silent_change = self._silent_change or bool(changes)
        return effects + self._steer(changes)

    # ---- ensemble change (R9) ------------------------------------------------------------------------
    def _steer(self, actions: Sequence[AddAction], stored_at: float | None = None) -> list[WriterEffect]:
        """The pipeline's actions as effects: its NeedEnsembleChange starts a change (one at a time: a
        change that runs goes on with the bookies that failed meanwhile once its fragment is stored), or,
        after a fragment was stored (at `stored_at`), the change's next round while rounds are left."""
        effects: list[WriterEffect] = []
        for action in actions:
            if not isinstance(action, NeedEnsembleChange):
                effects.append(action)
            else:
                if stored_at is None:               # a new change (the pipeline asks only when none runs)
                    self._rounds = 0
                effects += self._next_round(action, stored_at)
        return effects

    def _next_round(self, need: NeedEnsembleChange, now: float | None) -> list[WriterEffect]:
        """A round of the ensemble change, if rounds are left (ensembleChangeMaxAttempts); else placement
        is taken as having found no bookie."""
        if self._rounds >= self.change_attempts:
            return self._no_free(self._unusable or NotEnoughBookiesError(
                f"ledger {self.ledger_id}: {self._rounds} ensemble changes in a row left bookies to replace"), now)
        self._rounds += 1
        return [FindReplacements(need.failed_indices, need.first_entry_id, self._rounds)]

    def excluded(self) -> set[str]:
        """Bookies never picked as replacements: the ensemble and every bookie that failed or was silent."""
        return self.bad_bookies | set(self.pending.ensemble)

    def on_writable_bookies(self, writable: Sequence[str], place: ReplaceBookie, now: float,
                            unusable: BKError | None = None) -> list[WriterEffect]:
        """The answer to FindReplacements: `place` (the placement policy) picks replacements among the
        writable bookies outside `excluded()`. None free: go on with the ack quorum left or fail, with
        `unusable` (why bookies cannot be used, e.g. a TLS rejection, known to the driver) or
        NotEnoughBookiesError."""
        if not self._rounds or self.pending.error is not None or not self.pending.changing_ensemble:
            self._rounds = 0
            return []
        self._unusable = unusable
        failed = sorted(self.pending.failed_indices)
        chosen = choose_replacements(failed, self.pending.ensemble, writable, self.excluded(), place)
        if not chosen:
            return self._no_free(unusable or NotEnoughBookiesError(
                f"ledger {self.ledger_id}: no writable bookie outside the ensemble and the failed ones to "
                f"replace {[self.pending.ensemble[i] for i in failed]}; start another bookie"), now)
        return [StoreEnsembleChange(self.pending.last_add_confirmed + 1, tuple(sorted(chosen.items())))]

    def _no_free(self, error: BKError, now: float | None) -> list[WriterEffect]:
        self._rounds = 0
        going_on = self.pending.error is None and self.pending.changing_ensemble and self.pending.ack_quorum_left
        ensemble = self.pending.ensemble
        said: list[WriterEffect] = []
        if going_on:
            said.append(GoingOnWithout(tuple(ensemble[i] for i in sorted(self.pending.failed_indices)), error))
        return said + self.on_no_replacement(error, self._last_retry if now is None else now)

    def on_change_failed(self, error: BKError, now: float) -> list[WriterEffect]:
        """Listing the writable bookies or the CAS failed (a closed or recovering ledger, R9, R21; the
        metadata store's own errors): every pending add fails with `error`."""
        self._rounds = 0
        self._silent_change = False
        return self.fail(error)

    def ensemble_change(self, stored: LedgerMetadata, known: LedgerMetadata, first_entry_id: int,
                        replacements: Mapping[int, str]) -> LedgerMetadata | None:
        """The metadata the ensemble change CAS writes over `stored`, given the writer's `known` metadata;
        None when `stored` already holds this change (a lost answer). A closed or recovering ledger raises
        its typed error (R9: never change the ensemble of a ledger being recovered)."""
        mine = with_ensemble_change(known, first_entry_id, replacements)
        if not self.rules.ensemble_change_cas or (self._silent_change and not self.rules.silent_replacement_cas):
            return mine                             # the bug: whatever is stored is overwritten
        decision = decide_ensemble_change_conflict(stored, mine.last_fragment)
        if decision is ConflictDecision.SUCCESS:
            return None
        if decision is ConflictDecision.RETRY:
            return with_ensemble_change(stored, first_entry_id, replacements)
        raise conflict_error(decision, stored)

    def on_ensemble_changed(self, new_ensemble: Sequence[str], first_entry_id: int, now: float) -> list[WriterEffect]:
        """The new fragment is stored: forget the replaced bookies' requests, resend to their replacements;
        bookies that failed meanwhile are replaced in the change's next round."""
        if self.pending.error is not None or not self.pending.changing_ensemble:
            self._rounds = 0                        # the change was given up on (the adds failed): stale
            return []
        for bookie_id in set(self.pending.ensemble) - set(new_ensemble):
            self.unanswered.forget(bookie_id)
        self._last_progress = now
        effects = self._steer(self.pending.on_ensemble_changed(new_ensemble, first_entry_id), stored_at=now)
        if not self.pending.changing_ensemble or self.pending.error is not None:
            self._rounds = 0
        self._silent_change = self._silent_change and self.pending.changing_ensemble
        return effects

    def on_no_replacement(self, error: BKError, now: float) -> list[WriterEffect]:
        """No bookie is free to replace the failed ones: go on with the ack quorum left, or fail (R9)."""
        self._last_retry = now
        self._silent_change = False
        self._rounds = 0
        if not self.pending.changing_ensemble:
            return self.fail(error)
        return cast("list[WriterEffect]", self.pending.on_ensemble_change_failed(error))

    def on_free_bookies(self, writable: Sequence[str]) -> list[WriterEffect]:
        """The answer to RetryReplacement: these bookies are writable; retry if one is free to use."""
        free = set(writable) - self.excluded()
        if not free or self.pending.error is not None:
            return []
        return self._steer(self.pending.retry_ensemble_change())

    # ---- close (R10) --------------------------------------------------------------------------------
    def on_close_waited(self, drained: bool, now: float) -> list[WriterEffect]:
        """The close waited for the adds in flight (`drained`: all settled; else its timeout ran out). No
        replacement is retried from here on; adds still pending fail with LedgerClosedError (maybe written:
        the close CASes the ledger at the LAC, R10, so readers never see them)."""
        self.closing = True
        self._last_retry = now
        if drained or not self.has_pending:
            return []
        return self.fail(LedgerClosedError(
            f"ledger {self.ledger_id} closed with adds pending (none completed within the close's timeout); "
            f"it ends at entry {self.pending.last_add_confirmed}"))

    def close_metadata(self, stored: LedgerMetadata, length: int) -> LedgerMetadata | None:
        """The metadata the close CAS writes over `stored` (CLOSED at the LAC); None when `stored` is
        already closed at this LAC. Another close, or a recovery, raises its typed error (R10)."""
        lac = self.pending.last_add_confirmed
        if stored.state is LedgerState.OPEN:
            return closed(stored, lac, length)
        decision = decide_writer_close_conflict(stored, lac)
        if decision is ConflictDecision.SUCCESS:
            return None
        raise conflict_error(decision, stored, lac)
