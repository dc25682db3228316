"""R1, R4, R9, R10, R14, R19, R20: pure metadata transforms and CAS-conflict decisions."""

from __future__ import annotations

import dataclasses

import pytest

from bkledger.client.errors import (
    InvalidOptionError,
    InvalidQuorumError,
    LedgerClosedError,
    LedgerFencedError,
    NotEnoughBookiesError,
)
from bkledger.client.protocol.metadata import DigestType, Fragment, LedgerState
from bkledger.client.protocol.transforms import (
    ConflictDecision,
    close_after_recovery,
    closed,
    conflict_error,
    decide_ensemble_change_conflict,
    decide_recovery_close_conflict,
    decide_writer_close_conflict,
    new_ledger_metadata,
    to_in_recovery,
    validate_quorum,
    with_ensemble_change,
)


def _md(e=3, qw=2, qa=2):
    return new_ledger_metadata(7, [f"b{i}" for i in range(e)], e, qw, qa, "crc32c", b"pw", 1234,
                               {"app": b"x"}, "")


def test_new_ledger_metadata_is_open_with_one_fragment():
    """R2: a new ledger is OPEN, last entry -1, length 0, one fragment from entry 0."""
    md = _md()
    assert md.state is LedgerState.OPEN
    assert (md.last_entry_id, md.length) == (-1, 0)
    assert md.fragments == (Fragment(0, ("b0", "b1", "b2")),)
    assert md.digest_type is DigestType.CRC32C
    assert md.custom_metadata == {"app": b"x"}
    assert md.ctime_ms == 1234


@pytest.mark.parametrize("e,qw,qa,hint", [(3, 4, 2, "ensemble_size"), (3, 2, 3, "write_quorum"),
                                          (3, 3, 0, "ack_quorum"), (2, 3, 3, "raise ensemble_size")])
def test_quorum_sizes_are_validated(e, qw, qa, hint):
    """R1: E >= Qw >= Qa >= 1, else InvalidQuorumError saying what to change."""
    with pytest.raises(InvalidQuorumError, match=hint):
        validate_quorum(e, qw, qa)
    with pytest.raises(InvalidQuorumError):
        new_ledger_metadata(1, ["a", "b", "c"][:e], e, qw, qa, "crc32c", b"", 0)


def test_ensemble_and_options_are_validated():
    """R1/R2: the ensemble must have E distinct bookies; digest and compression must be known."""
    with pytest.raises(NotEnoughBookiesError):
        new_ledger_metadata(1, ["a", "b"], 3, 2, 2, "crc32c", b"", 0)
    with pytest.raises(InvalidOptionError):
        new_ledger_metadata(1, ["a", "a", "b"], 3, 2, 2, "crc32c", b"", 0)
    with pytest.raises(InvalidOptionError):
        new_ledger_metadata(1, ["a", "b", "c"], 3, 2, 2, "md5", b"", 0)
    with pytest.raises(InvalidOptionError):
        new_ledger_metadata(1, ["a", "b", "c"], 3, 2, 2, "crc32c", b"", 0, compression="zstd")


def test_ensemble_change_appends_a_fragment():
    """R9/R4: a new fragment starts at the given entry with the failed bookie replaced."""
    md = with_ensemble_change(_md(), 5, {1: "b9"})
    assert md.fragments == (Fragment(0, ("b0", "b1", "b2")), Fragment(5, ("b0", "b9", "b2")))
    md2 = with_ensemble_change(md, 9, {0: "b8", 2: "b7"})
    assert md2.fragments[-1] == Fragment(9, ("b8", "b9", "b7"))
    firsts = [f.first_entry_id for f in md2.fragments]
    assert firsts == sorted(set(firsts))


def test_ensemble_change_at_the_same_first_entry_replaces_in_place():
    """R4: a fragment that got no entries is replaced, keeping first ids strictly increasing."""
    md = with_ensemble_change(_md(), 5, {1: "b9"})
    md2 = with_ensemble_change(md, 5, {2: "b8"})
    assert md2.fragments == (Fragment(0, ("b0", "b1", "b2")), Fragment(5, ("b0", "b9", "b8")))
    empty = with_ensemble_change(_md(), 0, {0: "b5"})
    assert empty.fragments == (Fragment(0, ("b5", "b1", "b2")),)


def test_ensemble_change_refusals():
    """R4/R9: no going back in entry ids, no duplicate bookies, and only while OPEN."""
    md = with_ensemble_change(_md(), 5, {1: "b9"})
    with pytest.raises(ValueError):
        with_ensemble_change(md, 4, {0: "x"})
    with pytest.raises(ValueError):
        with_ensemble_change(md, 6, {0: "b2"})
    with pytest.raises(ValueError):
        with_ensemble_change(md, 6, {})
    with pytest.raises(LedgerFencedError):
        with_ensemble_change(to_in_recovery(md), 6, {0: "x"})
    with pytest.raises(LedgerClosedError):
        with_ensemble_change(closed(md, 5, 10), 6, {0: "x"})
    local = with_ensemble_change(to_in_recovery(md), 6, {0: "x"}, recovery=True)
    assert local.fragments[-1] == Fragment(6, ("x", "b9", "b2"))


def test_to_in_recovery():
    """R14: OPEN -> IN_RECOVERY; already IN_RECOVERY or CLOSED -> the same value, nothing to write."""
    md = _md()
    rec = to_in_recovery(md)
    assert rec.state is LedgerState.IN_RECOVERY
    assert to_in_recovery(rec) is rec
    done = closed(md, -1, 0)
    assert to_in_recovery(done) is done


def test_writer_close():
    """R10: the writer closes OPEN metadata at its LAC; CLOSED is terminal (R4)."""
    md = closed(_md(), 41, 4200)
    assert (md.state, md.last_entry_id, md.length) == (LedgerState.CLOSED, 41, 4200)
    with pytest.raises(LedgerClosedError):
        closed(md, 41, 4200)
    with pytest.raises(LedgerFencedError):
        closed(to_in_recovery(_md()), 41, 4200)
    with pytest.raises(ValueError):
        closed(_md(), -1, 5)


def test_close_after_recovery_applies_local_fragments():
    """R19/R20: one CAS sets CLOSED, last entry, length and the fragments changed during recovery."""
    stored = to_in_recovery(with_ensemble_change(_md(), 5, {1: "b9"}))
    new = [Fragment(5, ("b0", "b9", "b8")), Fragment(8, ("b7", "b9", "b8"))]
    md = close_after_recovery(stored, 10, 99, new)
    assert md.state is LedgerState.CLOSED
    assert (md.last_entry_id, md.length) == (10, 99)
    assert md.fragments == (Fragment(0, ("b0", "b1", "b2")),) + tuple(new)
    assert close_after_recovery(stored, 4, 40).fragments == stored.fragments
    with pytest.raises(LedgerClosedError):
        close_after_recovery(md, 10, 99)
    with pytest.raises(ValueError):
        close_after_recovery(stored, 10, 99, [Fragment(2, ("x", "y", "z"))])


@pytest.mark.parametrize("state,last,mine,expected", [
    (LedgerState.OPEN, -1, 5, ConflictDecision.RETRY),
    (LedgerState.IN_RECOVERY, -1, 5, ConflictDecision.ERROR),
    (LedgerState.CLOSED, 5, 5, ConflictDecision.SUCCESS),
    (LedgerState.CLOSED, 4, 5, ConflictDecision.ERROR),
    (LedgerState.CLOSED, 6, 5, ConflictDecision.ERROR),
])
def test_writer_close_conflict(state, last, mine, expected):
    """R10: OPEN retry, IN_RECOVERY error, CLOSED same last entry success, different error."""
    stored = dataclasses.replace(_md(), state=state, last_entry_id=last)
    assert decide_writer_close_conflict(stored, mine) is expected


def test_ensemble_change_conflict():
    """R9: on a lost CAS, OPEN retries; IN_RECOVERY fails adds as fenced; CLOSED as closed."""
    md = _md()
    assert decide_ensemble_change_conflict(md) is ConflictDecision.RETRY
    assert decide_ensemble_change_conflict(to_in_recovery(md)) is ConflictDecision.FAIL_FENCED
    assert decide_ensemble_change_conflict(closed(md, 3, 3)) is ConflictDecision.FAIL_CLOSED
    mine = with_ensemble_change(md, 4, {0: "z"})
    assert decide_ensemble_change_conflict(mine, mine.last_fragment) is ConflictDecision.SUCCESS
    assert isinstance(conflict_error(ConflictDecision.FAIL_FENCED, to_in_recovery(md)), LedgerFencedError)
    assert isinstance(conflict_error(ConflictDecision.FAIL_CLOSED, closed(md, 3, 3), 5), LedgerClosedError)


def test_recovery_close_conflict_adopts_a_closed_ledger():
    """R20: if another recoverer closed the ledger, adopt the stored result, never overwrite it."""
    md = to_in_recovery(_md())
    assert decide_recovery_close_conflict(closed(_md(), 9, 90)) is ConflictDecision.ADOPT
    assert decide_recovery_close_conflict(md) is ConflictDecision.RETRY
    assert decide_recovery_close_conflict(_md()) is ConflictDecision.ERROR


def test_recovery_close_conflict_without_the_adopt_rule_overwrites():
    """R20 as a rule (`RecoveryRules.adopt_stored_close`, the close-no-adopt mutant): switched off, a close
    that lost to a stored close overwrites it (OVERWRITE) instead of adopting it; the other states decide
    as with the rule."""
    md = to_in_recovery(_md())
    assert decide_recovery_close_conflict(closed(_md(), 9, 90), adopt_stored_close=True) is ConflictDecision.ADOPT
    assert decide_recovery_close_conflict(closed(_md(), 9, 90), adopt_stored_close=False) is ConflictDecision.OVERWRITE
    assert decide_recovery_close_conflict(md, adopt_stored_close=False) is ConflictDecision.RETRY
    assert decide_recovery_close_conflict(_md(), adopt_stored_close=False) is ConflictDecision.ERROR
