"""The pure rules of transactions across logs and cursors (issue 44 item 4; R27: every change of a log,
here of several logs and cursors at once, is one versioned transaction): `client.log.core.transactions`."""

from __future__ import annotations

import pytest

from bkledger.client.log.core import transactions as tc
from bkledger.client.log.core.meta import Position


def test_phases_allow_writes_only_while_open():
    """R27: a transaction takes appends and acks while open, commits or aborts once; anything else is a
    TransactionStateError (an append after commit would otherwise be silently lost)."""
    phase = tc.next_phase(tc.Phase.OPEN, tc.Event.WRITE, "t")
    assert phase is tc.Phase.OPEN
    committing = tc.next_phase(phase, tc.Event.COMMIT, "t")
    assert tc.next_phase(committing, tc.Event.COMMITTED, "t") is tc.Phase.COMMITTED
    assert tc.next_phase(committing, tc.Event.FAILED, "t") is tc.Phase.ABORTED
    assert tc.next_phase(tc.Phase.OPEN, tc.Event.ABORT, "t") is tc.Phase.ABORTED
    assert tc.next_phase(tc.Phase.ABORTED, tc.Event.ABORT, "t") is tc.Phase.ABORTED
    for phase, event in [(tc.Phase.COMMITTED, tc.Event.WRITE), (tc.Phase.ABORTED, tc.Event.WRITE),
                         (tc.Phase.COMMITTED, tc.Event.COMMIT), (tc.Phase.ABORTED, tc.Event.COMMIT),
                         (tc.Phase.COMMITTED, tc.Event.ABORT), (tc.Phase.COMMITTING, tc.Event.WRITE)]:
        with pytest.raises(tc.TransactionStateError, match="cannot"):
            tc.next_phase(phase, event, "t")


@pytest.mark.parametrize("bad", ["", "a/b", "x" * 65, ".", "..", "a b", 7, None])
def test_transaction_ids_name_a_znode_safely(bad):
    """R27: the id names the marker znode created in the commit's transaction: hostile ids are refused."""
    with pytest.raises(ValueError, match="transaction id"):
        tc.check_transaction_id(bad)
    assert tc.check_transaction_id("svc-1_a.b") == "svc-1_a.b"


def test_acks_move_cursors_forward_only():
    """R27: an ack inside a transaction never moves a cursor back: a second ack of the same cursor keeps
    the later position if it is not behind; a position behind the stored one is a CursorMovedBackError."""
    p1, p2 = Position(5, 3), Position(6, 0)
    assert tc.merged_ack(None, p1, "a", "c") == p1
    assert tc.merged_ack(p1, p2, "a", "c") == p2
    with pytest.raises(tc.CursorMovedBackError, match="cannot go back") as got:
        tc.merged_ack(p2, p1, "a", "c")
    assert (got.value.log, got.value.cursor) == ("a", "c")
    tc.check_forward(None, p1, "a", "c")
    tc.check_forward(p1, p1, "a", "c")
    with pytest.raises(tc.CursorMovedBackError, match="back"):
        tc.check_forward(p2, p1, "a", "c")


def test_a_refused_commit_rehomes_retries_or_gives_up_bounded():
    """R27: late ledgers are re-homed, a moved head retried, anything else (or too many rounds) given up."""
    assert tc.after_failed_commit(0, {"a": [12]}, False) is tc.Step.REHOME
    assert tc.after_failed_commit(0, {"a": []}, True) is tc.Step.RETRY
    assert tc.after_failed_commit(0, {}, False) is tc.Step.GIVE_UP
    assert tc.after_failed_commit(tc.COMMIT_ATTEMPTS - 1, {"a": [12]}, True) is tc.Step.GIVE_UP


def test_an_unknown_answer_is_decided_by_the_marker():
    """R27: the marker is created by the same multi as the rest: it exists iff the transaction applied."""
    assert tc.outcome_after_unknown(True) is tc.Outcome.COMMITTED
    assert tc.outcome_after_unknown(False) is tc.Outcome.NOT_COMMITTED
