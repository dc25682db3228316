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
from bkledger.client.protocol.pending_adds import CompleteAdds, FailAdds, NeedEnsembleChange, Resend, SendAdds
from bkledger.client.protocol.status import StatusCode
from bkledger.client.protocol.transforms import closed, new_ledger_metadata, to_in_recovery, with_ensemble_change
from bkledger.client.protocol.writer_machine import (
    RetryReplacement,
    SendLac,
    SuspectBookie,
    WriterMachine,
    WriterRules,
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
    assert effects == [SuspectBookie("b2", 2, "left an add request unanswered"), NeedEnsembleChange((2,), 1)]
    assert "b2" in m.bad_bookies


def test_r9_the_ensemble_change_applies_to_the_stored_metadata_and_resends():
    md = _md()
    m = _machine(md)
    _add(m, 2, 0.0)
    m.on_acks("b0", [0, 1], 1.0)
    assert m.on_bookie_failed("b1") == [NeedEnsembleChange((1,), 0)]
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
    assert m.on_free_bookies(["b0", "b1", "b2", "b3"]) == [NeedEnsembleChange((2,), 1)]


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
