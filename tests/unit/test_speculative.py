"""R13 with speculation: the pure decisions of client/protocol/speculative.py (whom next, when, reorder)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.protocol.speculative import (
    DISABLED,
    BookieHealth,
    CancelReads,
    MarkSlow,
    ReadDone,
    ReadFailed,
    SendRead,
    SequenceRead,
    SpeculativePolicy,
)
from client.protocol.status import StatusCode

POLICY = SpeculativePolicy.from_ms(500)


def test_policy_from_ms_and_backoff():
    """BookKeeper's defaults: max = first, so the wait never grows; with a max it doubles up to it."""
    assert POLICY.first_timeout == 0.5 and POLICY.max_timeout == 0.5
    assert POLICY.next_timeout(0.5) == 0.5
    growing = SpeculativePolicy.from_ms(100, 350)
    assert growing.next_timeout(0.1) == pytest.approx(0.2)
    assert growing.next_timeout(0.2) == pytest.approx(0.35)
    assert not SpeculativePolicy.from_ms(0).enabled and POLICY.enabled


def test_first_send_goes_to_first_bookie_and_arms_timer():
    """R13: one bookie at a time, in the given order; the timer is due one timeout later."""
    read = SequenceRead(("a", "b", "c"), POLICY)
    assert read.start(10.0) == [SendRead("a")]
    assert read.deadline == pytest.approx(10.5)
    assert read.start(10.0) == []          # starting twice sends nothing


def test_timer_before_deadline_does_nothing():
    read = SequenceRead(("a", "b", "c"), POLICY)
    read.start(0.0)
    assert read.on_timer(0.49) == []


def test_timeout_speculates_to_next_bookie_and_marks_slow():
    """No answer within the timeout: the same request also goes to the next bookie; the first stays asked."""
    read = SequenceRead(("a", "b", "c"), POLICY)
    read.start(0.0)
    actions = read.on_timer(0.5)
    assert actions == [MarkSlow(("a",)), SendRead("b", speculative=True)]
    assert read.outstanding == ("a", "b")
    assert read.deadline == pytest.approx(1.0)
    assert read.on_timer(1.0) == [MarkSlow(("a", "b")), SendRead("c", speculative=True)]
    assert read.deadline is None           # nobody left to ask: no timer
    assert read.speculations == 2


def test_first_valid_answer_wins_and_cancels_the_others():
    read = SequenceRead(("a", "b", "c"), POLICY)
    read.start(0.0)
    read.on_timer(0.5)
    assert read.on_success("b") == [CancelReads(("a",)), ReadDone("b")]
    assert read.winner == "b" and read.finished and read.deadline is None
    assert read.on_success("a") == []      # a late answer is dropped
    assert read.on_failure("a", StatusCode.TIMEOUT, 2.0) == []


def test_error_with_nothing_outstanding_moves_on_at_once():
    """BookKeeper: an error (or digest mismatch) asks the next replica at once when nothing else is out."""
    read = SequenceRead(("a", "b", "c"), POLICY)
    read.start(0.0)
    assert read.on_failure("a", StatusCode.DIGEST_MISMATCH, 0.1) == [SendRead("b")]
    assert read.deadline == pytest.approx(0.6)


def test_error_while_another_is_outstanding_waits_for_it():
    read = SequenceRead(("a", "b", "c"), POLICY)
    read.start(0.0)
    read.on_timer(0.5)
    assert read.on_failure("b", StatusCode.EIO, 0.6) == []
    assert read.outstanding == ("a",)
    assert read.on_timer(1.0) == [MarkSlow(("a",)), SendRead("c", speculative=True)]


def test_all_fail_reports_every_status():
    read = SequenceRead(("a", "b"), POLICY)
    read.start(0.0)
    read.on_failure("a", StatusCode.ENOENTRY, 0.0)
    assert read.on_failure("b", StatusCode.EIO, 0.0) == [
        ReadFailed((("a", StatusCode.ENOENTRY), ("b", StatusCode.EIO)))]
    assert read.finished and read.winner is None


def test_disabled_policy_never_speculates():
    """speculativeReadTimeout=0: no timer; only errors move on to the next bookie."""
    read = SequenceRead(("a", "b"), DISABLED)
    read.start(0.0)
    assert read.deadline is None
    assert read.on_timer(1e9) == []
    assert read.on_failure("a", StatusCode.TIMEOUT, 1.0) == [SendRead("b")]


def test_progress_rearms_the_timer():
    """A stream that keeps delivering batches is alive: no speculation while it progresses."""
    read = SequenceRead(("a", "b"), POLICY)
    read.start(0.0)
    read.on_progress("a", 0.4)
    assert read.on_timer(0.5) == []
    assert read.deadline == pytest.approx(0.9)
    read.on_progress("zz", 0.8)            # a bookie not asked: ignored
    assert read.deadline == pytest.approx(0.9)


def test_empty_bookie_list_is_refused():
    with pytest.raises(ValueError):
        SequenceRead((), POLICY)


def test_health_reorders_recently_slow_bookies_last_then_forgets():
    """reorderReadSequenceEnabled: slow bookies last (oldest failure first), forgotten after the expiry."""
    health = BookieHealth(expiry=60.0)
    assert health.order(("a", "b", "c"), 0.0) == ("a", "b", "c")
    health.on_slow("b", 10.0)
    health.on_slow("a", 20.0)
    assert health.order(("a", "b", "c"), 30.0) == ("c", "b", "a")
    assert health.slow_bookies(30.0) == {"a", "b"}
    assert health.order(("a", "b", "c"), 70.0) == ("b", "c", "a")   # b expired at 70, a still slow
    assert health.order(("a", "b", "c"), 80.0) == ("a", "b", "c")
    assert not health.is_slow("a", 80.0)


def test_health_without_reorder_keeps_write_set_order():
    health = BookieHealth(reorder=False)
    health.on_slow_all(["a"], 0.0)
    assert health.order(("a", "b"), 1.0) == ("a", "b")
    assert health.is_slow("a", 1.0)


@given(n=st.integers(1, 6), events=st.lists(st.tuples(st.sampled_from(["timer", "fail", "ok", "progress"]),
                                                       st.integers(0, 5), st.floats(0, 2)), max_size=30))
def test_sequence_read_invariants(n, events):
    """Whatever happens: each bookie is asked at most once, in order; at most one winner, which was
    asked; after the end nothing more is sent; it fails only when every bookie was asked and answered."""
    bookies = tuple(f"b{i}" for i in range(n))
    read = SequenceRead(bookies, POLICY)
    sent = [a.bookie_id for a in read.start(0.0) if isinstance(a, SendRead)]
    now = 0.0
    ends = 0
    for kind, pick, dt in events:
        now += dt
        target = bookies[pick % n]
        if kind == "timer":
            actions = read.on_timer(now)
        elif kind == "fail":
            actions = read.on_failure(target, StatusCode.EIO, now)
        elif kind == "ok":
            actions = read.on_success(target)
        else:
            read.on_progress(target, now)
            actions = []
        sent += [a.bookie_id for a in actions if isinstance(a, SendRead)]
        ends += sum(isinstance(a, ReadDone | ReadFailed) for a in actions)
        for action in actions:
            if isinstance(action, ReadDone):
                assert action.bookie_id in sent
            if isinstance(action, ReadFailed):
                assert len(action.errors) == n
    assert sent == list(bookies[:len(sent)])
    assert ends <= 1
    assert ends == int(read.finished)
