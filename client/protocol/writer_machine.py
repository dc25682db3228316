"""The writer of a ledger handle as one pure machine: what LedgerWriter decides (R5, R6, R9, R10, R21).

Mirrors the decisions of BookKeeper's LedgerHandle write path, without its threads: the pending adds and the
LAC (through `PendingAdds`), the per-bookie add timeouts (`UnansweredAdds`, addEntryTimeoutSec), the bound
past which stalled adds fail (issue 46: no add hangs), when to replace a bookie, when to retry a replacement
that found no free bookie, going on with the ack quorum left, the explicit LAC of an idle writer, and the
metadata each CAS writes: the ensemble change and the close, with their conflicts
(`decide_ensemble_change_conflict`, `decide_writer_close_conflict`).

Time is an argument (`now`, any monotonic unit: seconds in the client, ticks in the simulation); nothing
here reads a clock, sleeps or does I/O. Events are method calls; their outputs are the closed union
`WriterEffect` of frozen dataclasses, which drivers run with a `match` ending in `assert_never`. Bulk adds
stay bulk: `on_adds` gives one `SendAdds` for a whole batch and acks are fed as arrays.

`WriterRules` are protocol switches, as `RecoveryRules`: anything but the defaults is a known bug, injected
by the simulation's mutants into this production machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from bkledger.client.errors import AddEntryQuorumTimeoutError, BKError
from bkledger.client.protocol.add_timeouts import UnansweredAdds, add_settle_bound, adds_stalled, timed_out_indices
from bkledger.client.protocol.metadata import LedgerMetadata, LedgerState
from bkledger.client.protocol.pending_adds import (
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


#: Everything the writer machine asks its driver to do. A driver runs each with a `match` over exactly these.
WriterEffect = (SendAdd | Resend | CompleteAdds | FailAdds | NeedEnsembleChange | RetryReplacement | SendLac
                | SuspectBookie)


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
        return self._progress(list(self.pending.on_acks_from(entry_ids, bookie_id)), now)

    def on_errors(self, bookie_id: str, entry_ids: Sequence[int], status: int, now: float) -> list[WriterEffect]:
        """bookie_id failed these entries with `status` (R9; EFENCED / EUA fail the adds, R21)."""
        self.unanswered.on_answered(bookie_id, len(entry_ids))
        effects: list[WriterEffect] = []
        for entry_id in entry_ids:
            effects += self.pending.on_error_from(entry_id, bookie_id, status)
        return self._progress(effects, now)

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
        return list(self.pending.on_bookie_failed(index))

    def fail(self, error: BKError) -> list[WriterEffect]:
        """Fail every pending add with `error`; the writer takes no more adds. Always announced once."""
        return list(self.pending.fail_all(error))

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
        return effects + list(changes)

    # ---- ensemble change (R9) ------------------------------------------------------------------------
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
        """The new fragment is stored: forget the replaced bookies' requests, resend to their replacements."""
        for bookie_id in set(self.pending.ensemble) - set(new_ensemble):
            self.unanswered.forget(bookie_id)
        self._last_progress = now
        effects = self.pending.on_ensemble_changed(new_ensemble, first_entry_id)
        self._silent_change = self._silent_change and self.pending.changing_ensemble
        return list(effects)

    def on_no_replacement(self, error: BKError, now: float) -> list[WriterEffect]:
        """No bookie is free to replace the failed ones: go on with the ack quorum left, or fail (R9)."""
        self._last_retry = now
        self._silent_change = False
        if not self.pending.changing_ensemble:
            return self.fail(error)
        return list(self.pending.on_ensemble_change_failed(error))

    def on_free_bookies(self, writable: Sequence[str]) -> list[WriterEffect]:
        """The answer to RetryReplacement: these bookies are writable; retry if one is free to use."""
        free = set(writable) - set(self.pending.ensemble) - self.bad_bookies
        if not free or self.pending.error is not None:
            return []
        return list(self.pending.retry_ensemble_change())

    # ---- close (R10) --------------------------------------------------------------------------------
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
