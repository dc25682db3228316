"""Pure rules of idempotent producer commits (issue 44 item 2; R27: every change of a log is one CAS):
duplicates, the new ledger list, the bounded producer table, the stored form."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkledger.client.errors import InvalidLogUpdateError
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import producers as pr


def closed(ledger_id: int, entries: int = 3) -> lm.ClosedLedger:
    return (ledger_id, entries - 1, entries * 10, 1000)


def test_commit_appends_and_records_sequence() -> None:
    """R27: a commit appends its ledger and records (sequence, time, ledger) in the same new metadata."""
    meta = pr.with_producer_commit(lm.new_log("orders", 0), "p1", 0, [closed(5)], 1000)
    assert meta is not None
    assert meta.ledger_ids == [5]
    assert pr.producers(meta) == {"p1": pr.ProducerState(0, 1000, 5)}
    assert lm.decode("orders", lm.encode(meta)).extra[pr.PRODUCERS_KEY] == {"p1": [0, 1000, 5, ""]}
    assert pr.next_sequence(meta, "p1") == 1 and pr.next_sequence(meta, "p2") == 0


def test_retry_of_a_committed_sequence_is_a_duplicate() -> None:
    """R27: the same (producer, sequence) again, even after other commits, appends nothing."""
    meta = pr.with_producer_commit(lm.new_log("orders", 0), "p1", 0, [closed(5)], 1000)
    assert meta is not None
    meta = pr.with_producer_commit(meta, "p2", 0, [closed(6)], 1001)
    assert meta is not None
    assert pr.with_producer_commit(meta, "p1", 0, [closed(7)], 1002) is None
    assert pr.committed(meta, "p1", 0) == pr.ProducerState(0, 1000, 5)
    assert pr.committed(meta, "p1", 1) is None


def test_overtaken_ledger_is_refused() -> None:
    """R27: a ledger below the log's last one (another commit landed first) is refused, nothing recorded."""
    meta = pr.with_producer_commit(lm.new_log("orders", 0), "p1", 0, [closed(9)], 1000)
    assert meta is not None
    with pytest.raises(InvalidLogUpdateError):
        pr.with_producer_commit(meta, "p2", 0, [closed(8)], 1001)


def test_table_expires_and_is_bounded() -> None:
    """R27: entries older than expire_ms go; at most max_producers stay, the latest committers kept."""
    bounds = pr.Bounds(expire_ms=100, max_producers=3)
    meta = lm.new_log("orders", 0)
    for i in range(5):
        got = pr.with_producer_commit(meta, f"p{i}", 0, [closed(10 + i)], 1000 + i, bounds)
        assert got is not None
        meta = got
    assert set(pr.producers(meta)) == {"p2", "p3", "p4"}
    got = pr.with_producer_commit(meta, "p9", 0, [closed(20)], 1103, bounds)    # p2 (1002) now too old
    assert got is not None
    assert set(pr.producers(got)) == {"p3", "p4", "p9"}
    # an expired producer is unknown again: its old sequence is no longer a duplicate (documented)
    assert pr.committed(got, "p2", 0) is None


def test_stored_form_round_trips_and_bad_entries_are_unknown() -> None:
    """R27: the table survives encode/decode; unreadable entries read as unknown producers."""
    meta = pr.with_producer_commit(lm.new_log("orders", 0), "p1", 4, [closed(5)], 1000)
    assert meta is not None
    back = lm.decode("orders", lm.encode(meta))
    assert pr.producers(back) == {"p1": pr.ProducerState(4, 1000, 5)}
    bad = lm.LogMetadata("orders", 0, extra={pr.PRODUCERS_KEY: {"a": [1, "x", 2], "b": "no", "c": [1, 2, 3]}})
    assert pr.producers(bad) == {"c": pr.ProducerState(1, 2, 3)}
    assert pr.producers(lm.LogMetadata("orders", 0, extra={pr.PRODUCERS_KEY: []})) == {}


@pytest.mark.parametrize("bad", ["", "x" * 129, "a\nb"])
def test_bad_producer_ids(bad: str) -> None:
    """Every request is hostile until checked: a producer id that cannot be stored is refused."""
    assert pr.check_producer_id(bad) is not None
    assert pr.check_producer_id("service-1") is None


# An attempt: (producer, outcome). Outcomes: "ok" (applied, answer seen), "lost" (applied, answer lost: the
# producer retries), "failed" (not applied: the producer retries).
attempts = st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["ok", "lost", "failed"])), max_size=80)


@settings(max_examples=300, deadline=None)
@given(attempts, st.lists(st.integers(1, 4), min_size=4, max_size=4))
def test_any_interleaving_of_commits_and_retries_lands_each_batch_once(steps: list[tuple[int, str]],
                                                                       batches: list[int]) -> None:
    """R27: whatever the interleaving of producers' commits, lost answers and retries, every batch a
    producer sends is in the log exactly once, and each producer's batches in its order."""
    meta = lm.new_log("orders", 0)
    ids = itertools.count(1)                       # each attempt's ledger: a new one (a copy when overtaken)
    owner: dict[int, tuple[int, int]] = {}         # ledger id -> (producer, sequence)
    seq = [0, 0, 0, 0]                             # each producer's batch being committed
    now = 1000
    for producer, outcome in steps:
        if seq[producer] >= batches[producer]:
            continue
        now += 1
        ledger = next(ids)
        new = pr.with_producer_commit(meta, f"p{producer}", seq[producer], [closed(ledger)], now)
        if outcome == "failed":
            continue                               # nothing written: the producer tries again
        if new is not None:
            meta = new
            owner[ledger] = (producer, seq[producer])
        if outcome == "ok" or new is None:         # answer seen, or the retry found it committed
            seq[producer] += 1
    for producer in range(4):                      # drain: every producer retries until it sees its answer
        while seq[producer] < batches[producer]:
            now += 1
            ledger = next(ids)
            new = pr.with_producer_commit(meta, f"p{producer}", seq[producer], [closed(ledger)], now)
            if new is not None:
                meta = new
                owner[ledger] = (producer, seq[producer])
            seq[producer] += 1
    landed = [owner[i] for i in meta.ledger_ids]
    assert sorted(landed) == [(p, s) for p in range(4) for s in range(batches[p])]
    for producer in range(4):
        assert [s for p, s in landed if p == producer] == list(range(batches[producer]))


def test_two_producers_sharing_an_id_conflict_not_drop() -> None:
    """R27: a second live producer with the same id whose sequence the other committed gets
    ProducerConflictError, not a silent duplicate; its own retry stays a duplicate; an entry of three
    numbers (no instance) is read as instance ""."""
    meta = pr.with_producer_commit(lm.new_log("orders", 0), "p", 0, [closed(5)], 1000, instance="a")
    assert meta is not None
    assert pr.committed(meta, "p", 0, "a") == pr.ProducerState(0, 1000, 5, "a")
    with pytest.raises(pr.ProducerConflictError):
        pr.with_producer_commit(meta, "p", 0, [closed(6)], 1001, instance="b")
    with pytest.raises(pr.ProducerConflictError):
        pr.committed(meta, "p", -1, "a")             # a later sequence of this id is in the log
    assert pr.with_producer_commit(meta, "p", 1, [closed(6)], 1001, instance="b") is not None
    old = lm.LogMetadata("orders", 0, extra={pr.PRODUCERS_KEY: {"p": [2, 1000, 5]}})
    assert pr.committed(old, "p", 2) == pr.ProducerState(2, 1000, 5, "")
