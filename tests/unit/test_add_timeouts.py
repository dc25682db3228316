"""R9: a bookie that leaves an add request unanswered for addEntryTimeoutSec failed, even when Qa is met.

The pure decision (which ensemble members are silent, given send times and now) and the pending-adds
side: the silent bookie is replaced in a new fragment from LAC + 1, or, when no bookie is free, the adds go
on with the ack quorum left (as BookKeeper's client with delayEnsembleChange)."""

from __future__ import annotations

import pytest

from bkledger.client.errors import NotEnoughBookiesError
from bkledger.client.protocol.add_timeouts import UnansweredAdds, timed_out_indices
from bkledger.client.protocol.pending_adds import CompleteAdds, FailAdds, NeedEnsembleChange, PendingAdds, SendAdds
from bkledger.client.protocol.status import StatusCode


def test_oldest_unanswered_request_per_bookie():
    """Answers (acks or errors) are counted in entries and clear the oldest requests first."""
    un = UnansweredAdds()
    un.on_sent("a", 3, now=1.0)
    un.on_sent("a", 2, now=2.0)
    un.on_sent("a", 1, now=2.0)             # same instant: merged with the previous request
    un.on_sent("b", 1, now=1.5)
    un.on_sent("b", 0, now=1.6)             # nothing sent: nothing owed
    assert un.oldest_by_bookie() == {"a": 1.0, "b": 1.5}
    un.on_answered("a", 2)
    assert un.oldest("a") == 1.0 and un.unanswered("a") == 4
    un.on_answered("a", 1)
    assert un.oldest("a") == 2.0 and un.unanswered("a") == 3
    un.on_answered("a", 5)                  # more than owed (late duplicates): nothing goes negative
    assert un.oldest("a") is None and un.unanswered("a") == 0
    un.on_answered("c", 1)                  # never sent to
    un.forget("b")
    assert un.oldest_by_bookie() == {}


def test_timed_out_indices_decides_on_the_oldest_request_only():
    """R9: only a bookie whose oldest unanswered add is older than the timeout is silent; a bookie that
    already failed is not reported again, and a bookie outside the ensemble never is."""
    ensemble = ("a", "b", "c")
    sent = {"a": 10.0, "b": 9.1, "c": 7.0, "x": 0.0}
    assert timed_out_indices(ensemble, sent, now=10.0, timeout=1.0) == (2,)
    assert timed_out_indices(ensemble, sent, now=10.0, timeout=1.0, failed={2}) == ()
    assert timed_out_indices(ensemble, sent, now=10.0, timeout=0.5) == (1, 2)
    assert timed_out_indices(ensemble, {}, now=99.0, timeout=0.5) == ()
    assert timed_out_indices(ensemble, {"b": 9.0}, now=10.0, timeout=1.0) == ()   # exactly the timeout


def test_silent_bookie_is_replaced_from_lac_plus_one_although_qa_is_met():
    """R9: E=3 Qw=3 Qa=2, bookie 2 silent: adds complete with bookies 0 and 1; its timeout asks for a new
    fragment starting at LAC + 1 that replaces it, and later adds go to the replacement."""
    pa = PendingAdds(["a", "b", "c"], 3, 2)
    pa.on_adds(4)
    assert pa.on_acks_from(range(4), "a") == []
    assert pa.on_acks_from(range(4), "b") == [CompleteAdds(0, 3)]       # Qa met without "c"
    assert pa.on_bookie_failed(2) == [NeedEnsembleChange((2,), 4)]     # the timeout: LAC + 1 = 4
    actions = pa.on_ensemble_changed(["a", "b", "d"], 4)
    assert actions == []                   # nothing pending: nothing to resend
    assert pa.on_adds(1) == SendAdds(4, 1, frozenset())
    assert pa.on_acks_from([4], "c") == []       # the replaced bookie's late answers count for nothing
    assert pa.on_acks_from([4], "a") == []
    assert pa.on_acks_from([4], "d") == [CompleteAdds(4, 4)]


def test_no_free_bookie_keeps_writing_with_the_ack_quorum_left():
    """R9 with no bookie free: while every write set keeps Qa bookies that did not fail, the adds go on
    without the failed one (it is skipped, not sent to) and a later retry asks for the change again."""
    pa = PendingAdds(["a", "b", "c"], 3, 2)
    pa.on_adds(2)
    pa.on_acks_from([0, 1], "a")
    assert pa.on_bookie_failed(2) == [NeedEnsembleChange((2,), 0)]
    assert pa.on_acks_from([0, 1], "b") == []            # no add completes while the change runs
    assert pa.ack_quorum_left
    assert pa.on_ensemble_change_failed(NotEnoughBookiesError()) == [CompleteAdds(0, 1)]
    assert pa.error is None and not pa.changing_ensemble and pa.failed_indices == {2}
    assert pa.on_adds(1) == SendAdds(2, 1, frozenset({2}))           # the failed bookie is skipped
    assert pa.on_acks_from([2], "a") == []
    assert pa.on_acks_from([2], "b") == [CompleteAdds(2, 2)]
    assert pa.retry_ensemble_change() == [NeedEnsembleChange((2,), 3)]
    assert pa.retry_ensemble_change() == []                              # one at a time
    pa.on_ensemble_changed(["a", "b", "d"], 3)
    assert pa.failed_indices == frozenset() and pa.retry_ensemble_change() == []


def test_no_free_bookie_fails_the_adds_when_the_ack_quorum_is_lost():
    """R9: with two of three bookies failed and Qa = 2 no add could complete: every pending add fails."""
    pa = PendingAdds(["a", "b", "c"], 3, 2)
    pa.on_adds(1)
    pa.on_bookie_failed(1)
    pa.on_bookie_failed(2)
    assert not pa.ack_quorum_left
    error = NotEnoughBookiesError()
    assert pa.on_ensemble_change_failed(error) == [FailAdds((0,), error)]
    with pytest.raises(NotEnoughBookiesError):
        pa.on_adds(1)
    with pytest.raises(ValueError):
        PendingAdds(["a", "b", "c"], 3, 2).on_ensemble_change_failed(error)


def test_error_on_an_entry_completed_by_the_others_replaces_the_bookie():
    """R9: a bookie that fails (an error answer, or a request timed out) an entry the other bookies already
    completed (Qa < Qw) is replaced too, as BookKeeper's notifyWriteFailed; a bookie outside the entry's
    write set, or an answer for an entry that was never sent, changes nothing."""
    pa = PendingAdds(["a", "b", "c", "d"], 3, 2)
    pa.on_adds(2)
    pa.on_acks_from([0, 1], "b")
    assert pa.on_acks_from([0, 1], "c") == [CompleteAdds(0, 1)]
    assert pa.on_error_from(0, "d", StatusCode.EIO) == []          # d holds entries 1.., not entry 0
    assert pa.on_error_from(9, "a", StatusCode.EIO) == []          # never sent
    assert pa.on_error_from(0, "a", StatusCode.TIMEOUT) == [NeedEnsembleChange((0,), 2)]
    recovery = PendingAdds(["a", "b", "c"], 3, 2, recovery=True)   # a write-back is done once Qa acked (R19)
    recovery.on_adds(1)
    recovery.on_acks_from([0], "b")
    assert recovery.on_acks_from([0], "c") == [CompleteAdds(0, 0)]
    assert recovery.on_error_from(0, "a", StatusCode.EIO) == []


def test_adds_settle_within_a_bound_derived_from_the_add_timeout():
    """Issue 46 (no add hangs): adds pending with none completing for add_settle_bound fail; the bound
    covers an add timeout per ensemble change attempt and one more for the resent adds."""
    from bkledger.client.protocol.add_timeouts import add_settle_bound, adds_stalled

    bound = add_settle_bound(5.0, 5)
    assert bound == 30.0 and add_settle_bound(1.0, 0) == 2.0
    assert not adds_stalled(True, 100.0, 100.0 + bound, bound)
    assert adds_stalled(True, 100.0, 100.0 + bound + 0.1, bound)
    assert not adds_stalled(False, 100.0, 1000.0, bound)
