"""R13 with speculation: the pure decisions of client/protocol/speculative.py (whom next, when, reorder)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkledger.client.protocol.speculative import (
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
from bkledger.client.protocol.status import StatusCode

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


def test_client_settings_use_bookkeeper_names_and_parse_booleans():
    """speculativeReadTimeout in ms (0 disables), reorderReadSequenceEnabled as Spark/properties give it."""
    from bkledger.client.config import ClientConfig
    from bkledger.client.errors import InvalidOptionError

    default = ClientConfig()
    assert default.speculativeReadTimeout == 500 and default.reorderReadSequenceEnabled
    config = ClientConfig.from_options({"speculativeReadTimeout": "0", "reorderReadSequenceEnabled": "false",
                                        "maxSpeculativeReadTimeout": "2000"})
    assert config.speculativeReadTimeout == 0 and config.reorderReadSequenceEnabled is False
    assert not SpeculativePolicy.from_ms(config.speculativeReadTimeout, config.maxSpeculativeReadTimeout).enabled
    assert ClientConfig.from_options({"reorderReadSequenceEnabled": "TRUE"}).reorderReadSequenceEnabled is True
    with pytest.raises(InvalidOptionError, match="reorderReadSequenceEnabled"):
        ClientConfig.from_options({"reorderReadSequenceEnabled": "maybe"})


# ---- quiet bookies: a short wait for a first answer ----------------------------------------------
def test_quiet_timeout_is_a_fifth_of_the_timeout_at_most_quiet_wait():
    from bkledger.client.protocol.speculative import QUIET_WAIT
    assert POLICY.first_wait(quiet=True) == pytest.approx(min(QUIET_WAIT, 0.1))   # a fifth of 0.5 s at most
    assert POLICY.first_wait(quiet=False) == pytest.approx(0.5)
    assert SpeculativePolicy.from_ms(100).first_wait(quiet=True) == pytest.approx(0.02)
    assert SpeculativePolicy(0.5).first_wait(quiet=True) == 0.5     # no quiet rule unless asked for


def test_a_quiet_first_bookie_is_waited_for_briefly_then_the_full_timeout_applies():
    """A paused bookie keeps its connection open: a quiet one (not heard from lately) gets the quiet wait
    for its first answer; the next bookie, heard from lately, gets the full timeout."""
    read = SequenceRead(("a", "b", "c"), POLICY, quiet={"a"})
    read.start(0.0)
    quiet = POLICY.first_wait(quiet=True)
    assert read.deadline == pytest.approx(quiet)
    assert read.on_timer(quiet) == [MarkSlow(("a",)), SendRead("b", speculative=True)]
    assert read.deadline == pytest.approx(quiet + 0.5)


def test_a_quiet_bookie_that_starts_answering_gets_the_full_timeout():
    read = SequenceRead(("a", "b"), POLICY, quiet={"a"})
    read.start(0.0)
    read.on_progress("a", 0.01)
    assert read.deadline == pytest.approx(0.51)


def test_health_tells_quiet_bookies_by_when_they_last_answered():
    health = BookieHealth(quiet_after=0.1)
    assert health.quiet(("a", "b"), 5.0) == {"a", "b"}          # never heard from
    health.on_heard("a", 5.0)
    assert health.quiet(("a", "b"), 5.05) == {"b"}
    assert health.quiet(("a", "b"), 5.2) == {"a", "b"}


def test_a_quiet_stream_stalls_after_the_quiet_wait():
    from bkledger.client.protocol.speculative import stall_deadline, stalled
    quiet = POLICY.first_wait(quiet=True)
    assert stall_deadline(1.0, POLICY, quiet=True) == pytest.approx(1.0 + quiet)
    assert stalled(1.0, 1.0 + quiet, POLICY, quiet=True) and not stalled(1.0, 1.0 + quiet, POLICY)


def test_a_quiet_stream_far_behind_its_peers_stalls_sooner():
    """Parallel streams of one read: once a peer answered (after 5 ms), a quiet stream that has sent
    nothing is given up after PEER_FACTOR times that (at least QUIET_FLOOR), before the quiet timeout."""
    from bkledger.client.protocol.speculative import PEER_FACTOR, QUIET_FLOOR, stall_deadline, stalled
    quiet = POLICY.first_wait(quiet=True)
    assert stall_deadline(0.0, POLICY, True, peer_first=0.005) == pytest.approx(max(QUIET_FLOOR, PEER_FACTOR * 0.005))
    assert stall_deadline(0.0, POLICY, True, peer_first=0.0) == pytest.approx(QUIET_FLOOR)
    assert stall_deadline(0.0, POLICY, True, peer_first=0.04) == pytest.approx(quiet)   # never later
    assert stall_deadline(0.0, POLICY, False, peer_first=0.0) == pytest.approx(0.5)     # not quiet: full
    assert not stalled(0.0, 0.009, POLICY, True, peer_first=0.001)
