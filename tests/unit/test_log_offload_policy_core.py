"""A log's offload policy, the pure part (issue 42 items 1 and 5): the stored policy and its checks, which
sealed ledgers the thresholds offload now (as Pulsar's: bytes from the newest, age by close time, every
older ledger with the newest due), the bookie copies due for deletion after the lag (0, seconds, keep), and
the offload lag figures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from bkledger.client.errors import InvalidOptionError
from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import offload as ol
from bkledger.client.log.core import offload_policy as op
from bkledger.client.log.core.meta import LogMetadata
from tests.unit.test_log_compaction_core import log_of
from tests.unit.test_log_offload_core import ZERO, offload


def policy(after_bytes: int | None = None, after_seconds: float | None = None,
           lag: float | str = 0) -> op.OffloadPolicy:
    return op.make_policy(after_bytes, after_seconds, None, lag)


def test_policy_is_stored_with_the_log_and_read_back():
    meta = log_of((1, 1, 10))
    pol = op.make_policy(100, 60, "/store", "keep")
    stored = op.with_policy(meta, pol)
    assert op.policy(stored) == pol and pol.deletion_lag_s is None and op.deletion_lag(stored) is None
    assert op.policy(op.with_policy(stored, None)) is None and op.policy(meta) is None
    assert op.deletion_lag(meta) == op.DEFAULT_DELETION_LAG_S == 4 * 3600
    assert op.policy(op.with_policy(meta, op.make_policy(1, None, None, 0))).deletion_lag_s == 0
    assert op.describe_policy(stored) == ["offload policy      after_bytes=100 after_seconds=60 deletion_lag=keep "
                                          "store=/store", "offload lag         0 bytes of sealed ledgers on "
                                          "bookies not offloaded yet"]
    longer = op.with_policy(log_of((1, 1, 10), (2, 1, 10), (3, 1, 10)), pol)
    assert op.describe_policy(longer)[1] == ("offload lag         10 bytes of sealed ledgers on bookies not "
                                             "offloaded yet (the oldest closed 1970-01-01 00:00:00 UTC)")


def test_policy_survives_the_log_head_round_trip():
    from bkledger.client.log.core import meta as lm

    meta = op.with_policy(log_of((1, 1, 10)), op.make_policy(None, 30, None, 5))
    back = lm.decode(meta.name, lm.encode(meta))
    assert op.policy(back) == op.make_policy(None, 30, None, 5)


@pytest.mark.parametrize("args, match", [
    ((None, None, None, 0), "needs after_bytes or after_seconds"),
    ((-1, None, None, 0), "after_bytes"),
    ((True, None, None, 0), "after_bytes"),
    ((None, -0.5, None, 0), "after_seconds"),
    ((None, float("nan"), None, 0), "after_seconds"),
    ((1, None, "", 0), "store_uri"),
    ((1, None, None, -1), "deletion_lag_seconds"),
    ((1, None, None, "forever"), "deletion_lag_seconds"),
])
def test_a_bad_policy_is_refused_by_name(args, match):
    with pytest.raises(InvalidOptionError, match=match):
        op.make_policy(*args)


def test_bytes_threshold_offloads_the_oldest_until_the_rest_on_bookies_is_within_it():
    # ledgers 1..6, 10 bytes each; 5 and 6 are the tail offload never takes
    meta = log_of((1, 1, 10), (2, 1, 10), (3, 1, 10), (4, 1, 10), (5, 1, 10), (6, 1, 10))
    assert op.due_count(meta, policy(after_bytes=60), 0) == 0          # 60 on bookies: not above 60
    assert op.due_count(meta, policy(after_bytes=59), 0) == 1          # 1..6 = 60 > 59: ledger 1 goes
    assert op.due_count(meta, policy(after_bytes=35), 0) == 3          # 3..6 = 40 > 35; 4..6 = 30
    assert op.due_count(meta, policy(after_bytes=0), 0) == 4           # every candidate
    done = offload(meta, ol.plan(meta, ZERO, 1000, max_ledgers=2))     # 1, 2 offloaded: off the bookies
    assert op.due_count(done, policy(after_bytes=35), 0) == 1          # 3..6 = 40 > 35: only 3 is left due


def test_age_threshold_offloads_ledgers_closed_long_enough_ago_and_every_older_one():
    meta = log_of((1, 1, 10), (2, 1, 10), (3, 1, 10), (4, 1, 10), (5, 1, 10), (6, 1, 10))   # closed at 101..
    assert op.due_count(meta, policy(after_seconds=1), 1102) == 1      # 1102 - 101 > 1000 ms; 102: not
    assert op.due_count(meta, policy(after_seconds=1), 1104) == 3
    assert op.due_count(meta, policy(after_seconds=1), 99999) == 4     # never the tail
    assert op.due_count(meta, policy(after_seconds=1, after_bytes=59), 1000) == 1     # either threshold


def test_an_offload_run_can_be_bounded_to_the_oldest_ledgers():
    meta = log_of((1, 1, 10), (2, 1, 10), (3, 1, 10), (4, 1, 10), (5, 1, 10), (6, 1, 10))
    assert [[led.ledger_id for led in g.ledgers] for g in ol.plan(meta, ZERO, 1000, max_ledgers=3)] == [[1, 2, 3]]
    assert [[led.ledger_id for led in g.ledgers] for g in ol.plan(meta, ZERO, 15, max_ledgers=2)] == [[1], [2]]


@settings(max_examples=200, deadline=None)
@given(sizes=hs.lists(hs.integers(0, 50), min_size=1, max_size=12), after=hs.integers(0, 400),
       ages=hs.integers(0, 20))
def test_due_ledgers_are_a_prefix_and_what_stays_on_bookies_is_within_the_threshold(sizes, after, ages):
    """Whatever the sizes: the due ledgers are the oldest candidates; after offloading them the ledgers
    on bookies hold at most after_bytes, or only the ledgers offload may not take are left; and a ledger
    older than after_seconds is never left behind."""
    meta = log_of(*[(i + 1, 1, size) for i, size in enumerate(sizes)])
    cands = ol.candidates(meta)
    due = op.due_count(meta, policy(after_bytes=after), 0)
    assert 0 <= due <= len(cands)
    left = sum(led.size or 0 for led in meta.ledgers[due:])
    assert left <= after or due == len(cands)
    if due:
        assert sum(led.size or 0 for led in meta.ledgers[due - 1:]) > after      # nothing went that needn't
    by_age = op.due_count(meta, policy(after_seconds=ages / 1000), 101 + len(sizes))
    now = 101 + len(sizes)
    assert all(not (now - (led.closed_ms or 0) > ages) for led in cands[by_age:])


def test_copies_name_every_bookie_ledger_of_the_run_and_their_time():
    meta = log_of((1, 2, 10), (2, 1, 10), (3, 1, 10), (4, 1, 10), (5, 1, 10), (6, 1, 10))
    run = cp.plan_runs(meta, 100, 2)[0]
    assert run.ledger_ids == (1, 2, 3, 4)
    from tests.unit.test_log_compaction_core import compact

    compacted = compact(meta, run, 77)
    groups = ol.plan(compacted, ZERO, 1000)
    records = [ol.offloaded_record(g, "f", 0, 7) for g in groups]
    got = ol.with_offloaded(compacted, records, 1, "/s", 0)
    assert got is not None
    copies = op.copies_of_run(records, ol.unlisted(compacted, got[0]))
    assert copies == [1, 2, 3, 4, 77]
    data = op.encode_copies(copies, 5000)
    assert cp.decode_pending(data) == copies                           # delete_log reads it so
    assert op.decode_copies("offloaded-00000001", data) == op.Copies("offloaded-00000001", (1, 2, 3, 4, 77), 5000)
    assert op.decode_copies("offloaded-0", cp.encode_pending([9])).swapped_ms is None
    with pytest.raises(ValueError, match="offloaded-x"):
        op.decode_copies("offloaded-x", b"{")


def test_copies_are_due_after_the_lag_at_once_with_zero_and_never_with_keep():
    runs = [op.Copies("offloaded-00000002", (3,), 10_000), op.Copies("offloaded-00000001", (1, 2), 5_000),
            op.Copies("offloaded-00000000", (9,), None)]
    assert [c.znode for c in op.due_copies(runs, 0, 5_000)] == ["offloaded-00000000", "offloaded-00000001"]
    assert [c.znode for c in op.due_copies(runs, 0, 10_000)] == [c.znode for c in sorted(runs, key=lambda c: c.znode)]
    assert [c.znode for c in op.due_copies(runs, 5, 9_999)] == ["offloaded-00000000"]
    assert [c.znode for c in op.due_copies(runs, 5, 10_000)] == ["offloaded-00000000", "offloaded-00000001"]
    assert op.due_copies(runs, None, 10**15) == []


def test_lag_counts_sealed_history_on_bookies_offload_may_take_and_the_offloaded_bytes():
    meta = log_of((1, 1, 10), (2, 1, 20), (3, 1, 30), (4, 1, 40), (5, 1, 50))
    before = op.lag(meta)
    assert (before.bytes, before.oldest_closed_ms, before.offloaded_bytes) == (60, 101, 0)
    assert before.seconds(2101) == 2.0 and op.lag(LogMetadata("x", 0)).seconds(99) == 0.0
    done = offload(meta, ol.plan(meta, ZERO, 1000, max_ledgers=2))
    after = op.lag(done)
    assert (after.bytes, after.oldest_closed_ms, after.offloaded_bytes) == (30, 103, 30)


def test_offloader_rounds_take_a_bounded_number_of_logs_and_every_log_gets_its_turn():
    names = ["d", "b", "a", "c", "e"]
    got, nxt = op.next_round(names, "", 2)
    assert (got, nxt) == (["a", "b"], "c")
    got, nxt = op.next_round(names, nxt, 2)
    assert (got, nxt) == (["c", "d"], "e")
    got, nxt = op.next_round(names, nxt, 2)
    assert (got, nxt) == (["e", "a"], "b")
    assert op.next_round(["a", "b"], "bb", 5) == (["a", "b"], "a")      # "bb" deleted: wraps around
    assert op.next_round([], "x", 3) == ([], "")
