"""R6, R9, R10, R21 and issue 46: the writer machine (client/protocol/writer_machine.py), with time passed in.

The machine is what LedgerWriter and the simulated writer both run: these tests drive it with plain method
calls and a number for the clock, no loop and no bookies."""

from __future__ import annotations

import pytest

from bkledger.client.errors import (
    AddEntryQuorumTimeoutError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerInRecoveryError,
    NotEnoughBookiesError,
)
from bkledger.client.protocol.metadata import LedgerMetadata
from bkledger.client.protocol.pending_adds import CompleteAdds, FailAdds, Resend, SendAdds
from bkledger.client.protocol.status import StatusCode
from bkledger.client.protocol.transforms import closed, new_ledger_metadata, to_in_recovery, with_ensemble_change
from bkledger.client.protocol.writer_machine import (
    FindReplacements,
    GoingOnWithout,
    RetryReplacement,
    SendLac,
    StoreEnsembleChange,
    SuspectBookie,
    WriterMachine,
    WriterRules,
    choose_replacements,
)

TIMEOUT = 10.0


def _md(e: int = 3, qw: int = 3, qa: int = 2) -> LedgerMetadata:
    return new_ledger_metadata(7, [f"b{i}" for i in range(e)], e, qw, qa, "crc32c", b"pw", 0)


def _machine(md: LedgerMetadata | None = None, rules: WriterRules | None = None) -> WriterMachine:
    return WriterMachine(md or _md(), add_timeout=TIMEOUT, change_attempts=2, rules=rules or WriterRules())


def _add(m: WriterMachine, count: int, now: float) -> SendAdds:
    sends = m.on_adds(count, now)
    for bookie_id in m.pending.ensemble:
        m.on_sent(bookie_id, count, now)
    return sends


def test_r6_a_batch_is_one_effect_and_completes_on_qa_acks():
    """Bulk stays bulk: one SendAdds for a batch, one CompleteAdds for a batched ack that reaches Qa (R6)."""
    m = _machine()
    assert _add(m, 500, 0.0) == SendAdds(0, 500, frozenset())
    assert m.on_acks("b0", list(range(500)), 1.0) == []
    assert m.on_acks("b1", list(range(500)), 1.0) == [CompleteAdds(0, 499)]
    assert m.last_add_confirmed == 499 and not m.has_pending


def test_r6_the_rule_switch_completes_on_one_ack():
    """The "lac-before-quorum" mutant is this machine with WriterRules(ack_quorum=False)."""
    m = _machine(rules=WriterRules(ack_quorum=False))
    _add(m, 1, 0.0)
    assert m.on_acks("b0", [0], 1.0) == [CompleteAdds(0, 0)]


def test_r6_the_rule_switch_completes_out_of_order():
    """The "complete-out-of-order" mutant: an add with Qa acks completes before the one below it."""
    right, wrong = _machine(), _machine(rules=WriterRules(in_order=False))
    for m in (right, wrong):
        _add(m, 2, 0.0)
        m.on_acks("b0", [1], 1.0)
    assert right.on_acks("b1", [1], 1.0) == []
    assert wrong.on_acks("b1", [1], 1.0) == [CompleteAdds(0, 1)]


def test_r9_a_silent_bookie_is_replaced_after_the_add_timeout_though_qa_completes():
    """Per-bookie add timeout: b2 never answers while b0, b1 complete the adds; past the timeout the tick
    suspects b2 and asks for an ensemble change from LAC + 1, not before."""
    m = _machine()
    _add(m, 1, 0.0)
    m.on_acks("b0", [0], 1.0)
    assert m.on_acks("b1", [0], 1.0) == [CompleteAdds(0, 0)]
    assert m.on_tick(TIMEOUT - 1) == [SendLac(0)]              # idle: the LAC goes out explicitly, once
    assert m.on_tick(TIMEOUT - 0.5) == []
    effects = m.on_tick(TIMEOUT + 1)
    assert effects == [SuspectBookie("b2", 2, "left an add request unanswered"), FindReplacements((2,), 1, 1)]
    assert "b2" in m.bad_bookies


def test_r9_the_ensemble_change_applies_to_the_stored_metadata_and_resends():
    md = _md()
    m = _machine(md)
    _add(m, 2, 0.0)
    m.on_acks("b0", [0, 1], 1.0)
    assert m.on_bookie_failed("b1") == [FindReplacements((1,), 0, 1)]
    new = m.ensemble_change(md, md, 0, {1: "b9"})
    assert new is not None and new.last_fragment.ensemble == ("b0", "b9", "b2")
    assert m.ensemble_change(new, md, 0, {1: "b9"}) is None           # a lost answer: already stored
    effects = m.on_ensemble_changed(new.last_fragment.ensemble, 0, 2.0)
    assert effects == [Resend(0, (1,)), Resend(1, (1,))]
    assert m.on_acks("b9", [0, 1], 3.0) == [CompleteAdds(0, 1)]


def test_r9_an_ensemble_change_never_overwrites_a_recovery_or_a_close():
    """decide_ensemble_change_conflict in production: IN_RECOVERY fails fenced, CLOSED fails closed."""
    md = _md()
    m = _machine(md)
    with pytest.raises(LedgerInRecoveryError):
        m.ensemble_change(to_in_recovery(md), md, 0, {1: "b9"})
    with pytest.raises(LedgerClosedError):
        m.ensemble_change(closed(md, -1, 0), md, 0, {1: "b9"})


def test_r9_the_no_cas_switches_overwrite_what_is_stored():
    """The "ensemble-change-no-cas" mutant overwrites any stored state; "silent-replace-no-cas" does so only
    for the change that replaces a silent bookie (a bookie failure still CASes)."""
    md = _md()
    recovering = to_in_recovery(md)
    blind = _machine(md, WriterRules(ensemble_change_cas=False))
    assert blind.ensemble_change(recovering, md, 0, {1: "b9"}) == with_ensemble_change(md, 0, {1: "b9"})

    silent = _machine(md, WriterRules(silent_replacement_cas=False))
    _add(silent, 1, 0.0)
    silent.on_bookie_failed("b1")
    with pytest.raises(LedgerFencedError):                              # a failed bookie: still a CAS
        silent.ensemble_change(recovering, md, 0, {1: "b9"})
    silent.on_no_replacement(NotEnoughBookiesError(), 1.0)             # goes on with Qa left (b0, b2)
    silent.on_tick(TIMEOUT + 1)                                        # b0, b2 silent too
    assert silent.ensemble_change(recovering, md, 0, {0: "b9"}) is not None


def test_issue46_stalled_adds_fail_typed_past_the_settle_bound():
    """No add hangs: with nothing completing for addEntryTimeoutSec x (attempts + 1), the adds fail."""
    m = _machine()
    _add(m, 3, 100.0)
    assert not any(isinstance(e, FailAdds) for e in m.on_tick(100.0 + m.settle_bound - 1))
    effects = m.on_tick(100.0 + m.settle_bound + 1)
    assert len(effects) == 1 and isinstance(effects[0], FailAdds)
    assert effects[0].entry_ids == (0, 1, 2) and isinstance(effects[0].error, AddEntryQuorumTimeoutError)
    with pytest.raises(AddEntryQuorumTimeoutError):
        m.on_adds(1, 200.0)


def test_r21_efenced_fails_every_add_even_with_none_pending():
    m = _machine()
    _add(m, 1, 0.0)
    m.on_acks("b0", [0], 1.0)
    m.on_acks("b1", [0], 1.0)
    effects = m.on_errors("b2", [0], StatusCode.EFENCED, 2.0)
    assert len(effects) == 1 and isinstance(effects[0], FailAdds) and effects[0].entry_ids == ()
    assert isinstance(m.error, LedgerFencedError)


def test_r9_no_free_bookie_goes_on_with_qa_and_retries_later():
    """None free: the adds go on with the ack quorum left; a tick past the add timeout asks for a retry,
    which starts a change only once a writable bookie outside the ensemble (and not bad) exists."""
    m = _machine()
    _add(m, 1, 0.0)
    m.on_bookie_failed("b2")
    assert m.on_no_replacement(NotEnoughBookiesError(), 1.0) == []
    assert m.on_acks("b0", [0], 1.5) == [] and m.on_acks("b1", [0], 1.5) == [CompleteAdds(0, 0)]
    assert RetryReplacement() in m.on_tick(1.0 + TIMEOUT + 1)
    assert m.on_free_bookies(["b0", "b1", "b2"]) == []
    assert m.on_free_bookies(["b0", "b1", "b2", "b3"]) == [FindReplacements((2,), 1, 1)]


def test_r10_the_close_cas_and_its_conflicts():
    md = _md()
    m = _machine(md)
    _add(m, 1, 0.0)
    m.on_acks("b0", [0], 1.0)
    m.on_acks("b1", [0], 1.0)
    mine = m.close_metadata(md, 5)
    assert mine == closed(md, 0, 5)
    assert m.close_metadata(mine, 5) is None                        # a lost answer: closed at my LAC
    with pytest.raises(LedgerClosedError):
        m.close_metadata(closed(md, -1, 0), 5)                      # someone else closed it lower
    with pytest.raises(LedgerInRecoveryError):
        m.close_metadata(to_in_recovery(md), 5)


# ---- the ensemble change as a conversation (R9): every step decided here, the driver runs the I/O ---------
def _first_free(ensemble, writable, exclude):
    """A deterministic placement policy: the first writable bookie outside the ensemble and `exclude`."""
    free = sorted(set(writable) - set(ensemble) - set(exclude))
    if not free:
        raise NotEnoughBookiesError()
    return free[0]


def test_r9_a_change_lists_bookies_places_outside_the_bad_ones_then_cas_and_resends():
    """A failed bookie starts round 1 (FindReplacements); placement never picks a bookie of the ensemble nor
    one that failed before (b1, writable again); the chosen one is CASed and the adds are resent to it."""
    md = _md()
    m = _machine(md)
    _add(m, 2, 0.0)
    m.on_acks("b0", [0, 1], 0.5)
    assert m.on_bookie_failed("b1") == [FindReplacements((1,), 0, 1)]
    store = m.on_writable_bookies(["b0", "b1", "b2", "b4", "b5"], _first_free, 1.0)
    assert store == [StoreEnsembleChange(0, ((1, "b4"),))]
    new = m.ensemble_change(md, md, 0, store[0].chosen)
    assert new is not None and new.last_fragment.ensemble == ("b0", "b4", "b2")
    assert m.on_ensemble_changed(new.last_fragment.ensemble, 0, 2.0) == [Resend(0, (1,)), Resend(1, (1,))]
    assert m.on_bookie_failed("b4") == [FindReplacements((1,), 0, 1)]     # a new change: round 1 again
    assert m.on_writable_bookies(["b0", "b1", "b2", "b4", "b5"], _first_free, 3.0) == [
        StoreEnsembleChange(0, ((1, "b5"),))]                               # b1 and b4 failed: never again


def test_r9_one_change_at_a_time_and_what_failed_meanwhile_is_the_next_round():
    """A bookie failing while a change runs starts no second change: once the fragment is stored, the change
    goes on with it in round 2; past ensembleChangeMaxAttempts rounds it ends as if none were free."""
    m = _machine(_md(e=4, qw=3, qa=2))                               # change_attempts=2
    _add(m, 1, 0.0)
    assert m.on_bookie_failed("b0") == [FindReplacements((0,), 0, 1)]
    assert m.on_bookie_failed("b1") == []                             # the running change takes it later
    store = m.on_writable_bookies(["b5", "b6"], _first_free, 1.0)
    assert store == [StoreEnsembleChange(0, ((0, "b5"), (1, "b6")))]  # both failed ones, each excluded next
    m.on_ensemble_changed(("b5", "b6", "b2", "b3"), 0, 2.0)
    assert m.on_bookie_failed("b2") == [FindReplacements((2,), 0, 1)]
    assert m.on_bookie_failed("b3") == []
    assert m.on_writable_bookies(["b7"], _first_free, 3.0) == [StoreEnsembleChange(0, ((2, "b7"),))]
    effects = m.on_ensemble_changed(("b5", "b6", "b7", "b3"), 0, 4.0)
    assert effects[-1] == FindReplacements((3,), 0, 2)                # b3 failed meanwhile: round 2
    assert m.on_writable_bookies(["b8"], _first_free, 5.0) == [StoreEnsembleChange(0, ((3, "b8"),))]
    m.on_bookie_failed("b5")                                          # fails during round 2 (the last)
    effects = m.on_ensemble_changed(("b5", "b6", "b7", "b8"), 0, 6.0)
    assert [type(e) for e in effects] == [GoingOnWithout]            # no round 3: going on with Qa left
    assert effects[-1].bookie_ids == ("b5",) and isinstance(effects[-1].error, NotEnoughBookiesError)
    assert not m.pending.changing_ensemble and m.on_acks("b6", [0], 7.0) == []
    assert m.on_acks("b7", [0], 7.0) == [CompleteAdds(0, 0)]


def test_r9_none_free_goes_on_with_the_ack_quorum_left():
    """Placement finds none: with every write set keeping Qa bookies the adds go on (GoingOnWithout says so
    for the log) and the retry timer starts from now."""
    m = _machine()
    _add(m, 1, 0.0)
    m.on_bookie_failed("b2")
    effects = m.on_writable_bookies(["b0", "b1", "b2"], _first_free, 1.0)
    assert len(effects) == 1 and isinstance(effects[0], GoingOnWithout) and effects[0].bookie_ids == ("b2",)
    assert m.error is None and not m.pending.changing_ensemble
    assert m.on_acks("b0", [0], 1.5) == [] and m.on_acks("b1", [0], 1.5) == [CompleteAdds(0, 0)]
    assert RetryReplacement() not in m.on_tick(1.0 + TIMEOUT - 1)
    assert RetryReplacement() in m.on_tick(1.0 + TIMEOUT + 1)


def test_r9_none_free_below_the_ack_quorum_fails_the_adds_with_the_reason_given():
    """Two of E=3 Qw=3 Qa=2 failed and none free: every pending add fails, with the driver's reason when it
    knows one (a TLS rejection), else NotEnoughBookiesError; the writer takes no more adds."""
    for unusable, expected in ((None, NotEnoughBookiesError), (LedgerFencedError("tls"), LedgerFencedError)):
        m = _machine()
        _add(m, 2, 0.0)
        m.on_bookie_failed("b1")
        m.on_bookie_failed("b2")
        effects = m.on_writable_bookies(["b0", "b1", "b2"], _first_free, 1.0, unusable)
        assert len(effects) == 1 and isinstance(effects[0], FailAdds) and effects[0].entry_ids == (0, 1)
        assert isinstance(effects[0].error, expected) and isinstance(m.error, expected)
        if unusable is not None:
            assert effects[0].error is unusable


def test_r9_r21_a_failed_cas_fails_the_adds_and_late_answers_are_dropped():
    """The CAS found the ledger closed (or the store failed): the adds fail with that error; answers of the
    change that arrive after (a listing, a stored fragment) change nothing."""
    md = _md()
    m = _machine(md)
    _add(m, 1, 0.0)
    m.on_bookie_failed("b1")
    store = m.on_writable_bookies(["b4"], _first_free, 1.0)[0]
    assert isinstance(store, StoreEnsembleChange)
    with pytest.raises(LedgerClosedError) as raised:
        m.ensemble_change(closed(md, -1, 0), md, 0, store.chosen)
    effects = m.on_change_failed(raised.value, 2.0)
    assert effects == [FailAdds((0,), raised.value)]
    assert m.on_writable_bookies(["b4"], _first_free, 3.0) == []
    assert m.on_ensemble_changed(("b0", "b4", "b2"), 0, 3.0) == []
    assert m.on_change_failed(LedgerFencedError(), 3.0) == [] and m.error is raised.value
    assert _machine().on_ensemble_changed(("b0", "b9", "b2"), 0, 1.0) == []     # no change runs: a stale answer


def test_r10_a_close_that_timed_out_fails_the_pending_adds_closed_and_stops_retries():
    """The close's wait ran out: the adds still pending fail with LedgerClosedError (the CAS closes at the
    LAC); a drained close fails nothing; either way no replacement is retried from then on."""
    m = _machine()
    _add(m, 3, 0.0)
    m.on_acks("b0", [0], 1.0)
    m.on_acks("b1", [0], 1.0)
    effects = m.on_close_waited(False, 5.0)
    assert len(effects) == 1 and isinstance(effects[0], FailAdds) and effects[0].entry_ids == (1, 2)
    assert isinstance(effects[0].error, LedgerClosedError) and m.last_add_confirmed == 0
    assert m.close_metadata(_md(), 9) == closed(_md(), 0, 9)

    idle = _machine()
    _add(idle, 1, 0.0)
    idle.on_bookie_failed("b2")
    idle.on_writable_bookies([], _first_free, 1.0)                   # going on without b2
    assert idle.on_close_waited(True, 2.0) == [] and idle.error is None
    assert RetryReplacement() not in idle.on_tick(2.0 + TIMEOUT + 1)


def test_r9_replacements_fill_what_placement_can_and_leave_the_rest():
    """choose_replacements: in order, each pick excluded from the next, stopping where placement has none."""
    assert choose_replacements([0, 2], ["a", "b", "c"], ["a", "b", "c", "d"], {"x"}, _first_free) == {0: "d"}
    assert choose_replacements([1], ["a", "b", "c"], ["a", "b", "c"], (), _first_free) == {}
    assert choose_replacements([0, 1], ["a", "b"], ["c", "d", "e"], {"c"}, _first_free) == {0: "d", 1: "e"}


def test_r9_out_of_rounds_the_reason_given_is_kept():
    """Rounds used up with a bookie left failed: the error said is the driver's last reason (a TLS
    rejection behind the failures), not a bare NotEnoughBookiesError."""
    m = WriterMachine(_md(e=4, qw=3, qa=2), add_timeout=TIMEOUT, change_attempts=1)
    _add(m, 1, 0.0)
    m.on_bookie_failed("b0")
    m.on_bookie_failed("b1")
    reason = LedgerFencedError("tls")
    assert m.on_writable_bookies(["b5"], _first_free, 1.0, reason) == [StoreEnsembleChange(0, ((0, "b5"),))]
    effects = m.on_ensemble_changed(("b5", "b1", "b2", "b3"), 0, 2.0)
    assert effects[-1] == GoingOnWithout(("b1",), reason)
