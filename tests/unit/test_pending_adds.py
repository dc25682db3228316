"""R5, R6, R9, R21: the writer's add pipeline (pending adds, LAC, ensemble changes, fencing)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkledger.client.errors import BadPasswordError, LedgerFencedError, NotEnoughBookiesError
from bkledger.client.protocol.pending_adds import (
    VECTOR_MIN,
    CompleteAdds,
    FailAdds,
    NeedEnsembleChange,
    PendingAdds,
    Resend,
    SendAdd,
)
from bkledger.client.protocol.status import StatusCode
from bkledger.client.protocol.write_set import write_set


def test_adds_complete_in_order_once_qa_acked():
    """R6: an add completes when Qa of its write set acked it and every lower entry completed."""
    pa = PendingAdds(["a", "b", "c"], 3, 2)
    sends = [pa.on_add() for _ in range(3)]
    assert sends[0] == SendAdd(0, (0, 1, 2))
    assert sends[1].indices == (1, 2, 0)
    assert pa.on_ack(1, 0) == []
    assert pa.on_ack(1, 1) == []            # entry 1 has its quorum but entry 0 has not
    assert pa.on_ack(0, 2) == []
    assert pa.on_ack(0, 2) == []            # duplicate ack does not count twice
    assert pa.on_ack(0, 0) == [CompleteAdds(0, 1)]
    assert pa.last_add_confirmed == 1
    assert list(CompleteAdds(0, 1).entry_ids) == [0, 1]


def test_acks_outside_the_write_set_are_ignored():
    """R5/R6: only bookies of the entry's write set count towards its ack quorum."""
    pa = PendingAdds(["a", "b", "c", "d"], 2, 2)
    pa.on_add()
    assert pa.on_ack(0, 2) == [] and pa.on_ack(0, 3) == []
    assert pa.on_ack(0, 0) == []
    assert pa.on_ack(0, 1) == [CompleteAdds(0, 0)]


def test_bookie_failure_requests_an_ensemble_change_and_blocks_completion():
    """R9: a failed write asks for a new fragment at LAC+1; nothing completes until it is applied."""
    pa = PendingAdds(["a", "b", "c"], 3, 2)
    for _ in range(3):
        pa.on_add()
    assert pa.on_ack(0, 0) == [] and pa.on_ack(0, 1) == [CompleteAdds(0, 0)]
    assert pa.on_error(1, 2, StatusCode.EIO) == [NeedEnsembleChange((2,), 1)]
    assert pa.on_ack(1, 0) == [] and pa.on_ack(1, 1) == []   # quorum reached, but a change is running
    assert pa.on_error(2, 2, StatusCode.EIO) == []           # same bookie again: no second request
    assert pa.on_add().indices == (0, 1)                     # new adds skip the failed bookie
    actions = pa.on_ensemble_changed(["a", "b", "z"], 1)
    resends = [a for a in actions if isinstance(a, Resend)]
    assert resends == [Resend(1, (2,)), Resend(2, (2,)), Resend(3, (2,))]
    assert actions[-1] == CompleteAdds(1, 1)
    assert pa.index_of("c") is None and pa.index_of("z") == 2


def test_acks_of_a_replaced_bookie_are_dropped():
    """R9: after a bookie is replaced its earlier acks no longer count; the entry needs the replacement."""
    pa = PendingAdds(["a", "b", "c"], 3, 3)
    pa.on_add()
    pa.on_ack(0, 0)
    pa.on_ack(0, 2)
    assert pa.on_bookie_failed(2) == [NeedEnsembleChange((2,), 0)]
    assert pa.on_ensemble_changed(["a", "b", "x"], 0) == [Resend(0, (2,))]
    assert pa.acked_indices(0) == {0}
    assert pa.on_ack(0, 1) == []
    assert pa.on_ack(0, 2) == [CompleteAdds(0, 0)]


def test_second_failure_during_a_change_is_handled_after_it():
    """R9: failures during a running change lead to another change before adds complete."""
    pa = PendingAdds(["a", "b", "c", "d"], 3, 2)
    pa.on_add()
    assert pa.on_bookie_failed(0) == [NeedEnsembleChange((0,), 0)]
    assert pa.on_bookie_failed(1) == []
    actions = pa.on_ensemble_changed(["x", "b", "c", "d"], 0)
    assert actions == [Resend(0, (0,)), NeedEnsembleChange((1,), 0)]
    assert pa.changing_ensemble
    actions = pa.on_ensemble_changed(["x", "y", "c", "d"], 0)
    assert actions == [Resend(0, (1,))]
    assert not pa.changing_ensemble


def test_efenced_fails_everything_without_ensemble_change():
    """R21: EFENCED is 'maybe written': every pending add fails with LedgerFencedError, no ensemble change."""
    pa = PendingAdds(["a", "b", "c"], 2, 2)
    for _ in range(3):
        pa.on_add()
    pa.on_ack(0, 0)
    pa.on_ack(0, 1)
    actions = pa.on_error(1, 1, StatusCode.EFENCED)
    assert len(actions) == 1 and isinstance(actions[0], FailAdds)
    assert actions[0].entry_ids == (1, 2)
    assert isinstance(actions[0].error, LedgerFencedError)
    assert not pa.changing_ensemble
    with pytest.raises(LedgerFencedError):
        pa.on_add()
    assert pa.on_ack(1, 2) == [] and pa.last_add_confirmed == 0


def test_eua_to_a_writer_says_the_ledger_id_was_squatted():
    """Issue 41 item 4: a writer created its ledger with the key it sends, so EUA means another client claimed
    the id on the bookie first (a fence creates an unknown ledger with the fencer's key, R15): the error says
    squatted instead of blaming the writer's password; a recovery's write-back still gets a wrong password."""
    pa = PendingAdds(["a", "b", "c"], 2, 2)
    pa.on_add()
    actions = pa.on_error(0, 0, StatusCode.EUA)
    assert isinstance(actions[0], FailAdds) and isinstance(actions[0].error, BadPasswordError)
    assert "squatted" in str(actions[0].error)
    recovery = PendingAdds(["a", "b", "c"], 2, 2, recovery=True)
    recovery.on_add()
    error = recovery.on_error(0, 0, StatusCode.EUA)[0]
    assert isinstance(error, FailAdds) and "squatted" not in str(error.error)


def test_fail_all_after_a_failed_ensemble_change():
    """R9: if no replacement can be found, the driver fails the pending adds."""
    pa = PendingAdds(["a", "b"], 2, 2)
    pa.on_add()
    pa.on_bookie_failed(1)
    actions = pa.fail_all(NotEnoughBookiesError())
    assert actions == [FailAdds((0,), actions[0].error)]
    with pytest.raises(NotEnoughBookiesError):
        pa.on_add()


def test_on_ensemble_changed_checks_arguments():
    """R9: the new fragment must start at LAC+1 and follow a NeedEnsembleChange."""
    pa = PendingAdds(["a", "b"], 2, 1)
    with pytest.raises(ValueError):
        pa.on_ensemble_changed(["a", "c"], 0)
    pa.on_add()
    pa.on_bookie_failed(1)
    with pytest.raises(ValueError):
        pa.on_ensemble_changed(["a", "c"], 3)


@st.composite
def _config(draw):
    e = draw(st.integers(1, 5))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    return e, qw, qa


@settings(max_examples=300, deadline=None)
@given(config=_config(), n_entries=st.integers(1, 12), data=st.data())
def test_random_schedules_keep_the_invariants(config, n_entries, data):
    """R5/R6/R9/R21: under any order of acks, failures and ensemble changes: completions are in order and
    contiguous, the LAC never decreases, each completed entry has >= Qa acks from bookies of its write set
    in the current ensemble, nothing completes during a change, and resends go to replacements only."""
    e, qw, qa = config
    names = (f"b{i}" for i in itertools.count())
    pa = PendingAdds([next(names) for _ in range(e)], qw, qa)
    outstanding: list[tuple[int, str]] = []
    acked: dict[int, set[str]] = {}
    completed: list[int] = []
    need: NeedEnsembleChange | None = None
    fenced = False

    def apply(actions):
        nonlocal need, fenced
        for action in actions:
            if isinstance(action, CompleteAdds):
                assert not pa.changing_ensemble
                assert action.first_entry_id == (completed[-1] + 1 if completed else 0)
                assert action.last_add_confirmed >= action.first_entry_id
                for entry_id in action.entry_ids:
                    members = [pa.ensemble[i] for i in write_set(entry_id, e, qw)]
                    assert len(acked.get(entry_id, set()) & set(members)) >= qa
                    completed.append(entry_id)
                assert pa.last_add_confirmed == completed[-1]
            elif isinstance(action, NeedEnsembleChange):
                assert not fenced
                assert action.first_entry_id == pa.last_add_confirmed + 1
                assert set(action.failed_indices) == pa.failed_indices
                need = action
            elif isinstance(action, Resend):
                outstanding.extend((action.entry_id, pa.ensemble[i]) for i in action.indices)
            elif isinstance(action, FailAdds):
                fenced = True
                assert isinstance(action.error, LedgerFencedError)

    def change_ensemble():
        nonlocal need
        assert need is not None
        new = list(pa.ensemble)
        for i in need.failed_indices:
            new[i] = next(names)
        replaced = set(need.failed_indices)
        pending_before = set(pa.pending_entry_ids)
        first = need.first_entry_id
        need = None
        actions = pa.on_ensemble_changed(new, first)
        for action in actions:
            if isinstance(action, Resend):
                assert action.entry_id in pending_before
                assert set(action.indices) <= replaced
                assert set(action.indices) == replaced & set(write_set(action.entry_id, e, qw))
        apply(actions)

    added = 0
    for _ in range(data.draw(st.integers(0, 60))):
        choice = data.draw(st.sampled_from(["add", "ack", "ack", "ack", "fail", "change", "fence"]))
        if fenced:
            break
        if choice == "add" and added < n_entries:
            send = pa.on_add()
            assert send.entry_id == added
            assert not set(send.indices) & pa.failed_indices
            outstanding.extend((send.entry_id, pa.ensemble[i]) for i in send.indices)
            added += 1
        elif choice == "ack" and outstanding:
            entry_id, bookie = outstanding.pop(data.draw(st.integers(0, len(outstanding) - 1)))
            index = pa.index_of(bookie)
            if index is not None:
                if index not in pa.failed_indices:
                    acked.setdefault(entry_id, set()).add(bookie)
                apply(pa.on_ack(entry_id, index))
        elif choice == "fail":
            index = data.draw(st.integers(0, e - 1))
            apply(pa.on_bookie_failed(index))
        elif choice == "change" and need is not None:
            change_ensemble()
        elif choice == "fence" and data.draw(st.booleans()) and pa.pending_entry_ids:
            entry_id = pa.pending_entry_ids[0]
            apply(pa.on_error(entry_id, write_set(entry_id, e, qw)[0], StatusCode.EFENCED))
            assert not pa.changing_ensemble or need is not None

    # Liveness: with every change applied and every message delivered, every add completes.
    while not fenced and (need is not None or outstanding):
        if need is not None:
            change_ensemble()
            continue
        entry_id, bookie = outstanding.pop(0)
        index = pa.index_of(bookie)
        if index is not None:
            acked.setdefault(entry_id, set()).add(bookie)
            apply(pa.on_ack(entry_id, index))
    if not fenced:
        assert completed == list(range(added))
        assert pa.last_add_confirmed == added - 1


def test_late_replies_of_a_replaced_bookie_are_not_credited_to_its_replacement():
    """R9: replies are mapped by bookie id; a replaced bookie's late ack or error changes nothing."""
    pa = PendingAdds(["a", "b", "c"], 3, 3)
    pa.on_add()
    pa.on_bookie_failed(2)
    pa.on_ensemble_changed(["a", "b", "x"], 0)
    assert pa.on_ack_from(0, "c") == []
    assert pa.on_error_from(0, "c", StatusCode.EIO) == []
    assert not pa.changing_ensemble
    assert pa.on_ack_from(0, "a") == [] and pa.on_ack_from(0, "b") == []
    assert pa.on_ack_from(0, "x") == [CompleteAdds(0, 0)]
    assert isinstance(pa.on_error_from(1, "c", StatusCode.EFENCED), list)
    with pytest.raises(LedgerFencedError):
        pa.on_add()


def _twins(data) -> tuple[list[str], int, PendingAdds, PendingAdds]:
    """Two identical machines over a drawn ensemble and quorums: one driven entry by entry, one in bulk.
    Returns (ensemble, Qw, one, bulk)."""
    e = data.draw(st.integers(1, 5))
    qw = data.draw(st.integers(1, e))
    qa = data.draw(st.integers(1, qw))
    ensemble = [f"b{i}" for i in range(e)]
    return ensemble, qw, PendingAdds(ensemble, qw, qa), PendingAdds(ensemble, qw, qa)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_bulk_acks_complete_like_single_acks(data):
    """R6: acking a batch at once completes exactly what acking its entries one by one completes."""
    ensemble, _, one, bulk = _twins(data)
    n = data.draw(st.integers(1, 30))
    for _ in range(n):
        one.on_add()
        bulk.on_add()
    for _ in range(data.draw(st.integers(1, 12))):
        bookie = data.draw(st.sampled_from(ensemble))
        ids = data.draw(st.lists(st.integers(0, n - 1), max_size=n))
        single = [a for i in ids for a in one.on_ack_from(i, bookie)]
        merged = bulk.on_acks_from(ids, bookie)
        done_single = [i for a in single if isinstance(a, CompleteAdds) for i in a.entry_ids]
        done_bulk = [i for a in merged if isinstance(a, CompleteAdds) for i in a.entry_ids]
        assert done_single == done_bulk
        assert one.last_add_confirmed == bulk.last_add_confirmed


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_large_batched_acks_complete_like_single_acks(data):
    """R5/R6: batches of VECTOR_MIN acks and more (marked with numpy over the masks, also when the ids
    come as a numpy array) complete exactly what the same acks one by one complete, and leave the same
    acks recorded; ids beyond the pending ones, repeated or outside the write set change nothing."""
    e = data.draw(st.integers(1, 5))
    qw = data.draw(st.integers(1, e))
    qa = data.draw(st.integers(1, qw))
    ensemble = [f"b{i}" for i in range(e)]
    one, bulk = PendingAdds(ensemble, qw, qa), PendingAdds(ensemble, qw, qa)
    n = data.draw(st.integers(VECTOR_MIN, 3 * VECTOR_MIN))
    one.on_adds(n)
    bulk.on_adds(n)
    acked: list[set[int]] = [set() for _ in range(n)]    # the model: who acked each entry, in its write set
    for _ in range(data.draw(st.integers(1, 8))):
        bookie = data.draw(st.sampled_from(ensemble))
        lo = data.draw(st.integers(-3, n))
        ids = list(range(lo, lo + data.draw(st.integers(VECTOR_MIN, n + 3))))
        ids = data.draw(st.permutations(ids)) if data.draw(st.booleans()) else ids
        index = ensemble.index(bookie)
        for i in ids:
            if 0 <= i < n and index in write_set(i, len(ensemble), qw):
                acked[i].add(index)
        single = [a for i in ids for a in one.on_ack_from(i, bookie)]
        batch = np.array(ids, dtype=np.int64) if data.draw(st.booleans()) else ids
        merged = bulk.on_acks_from(batch, bookie)
        done_single = [i for a in single if isinstance(a, CompleteAdds) for i in a.entry_ids]
        done_bulk = [i for a in merged if isinstance(a, CompleteAdds) for i in a.entry_ids]
        assert done_single == done_bulk
        assert one.last_add_confirmed == bulk.last_add_confirmed
        assert bulk.last_add_confirmed == next((i for i in range(n) if len(acked[i]) < qa), n) - 1
        assert one.pending_entry_ids == bulk.pending_entry_ids
        assert [one.acked_indices(i) for i in one.pending_entry_ids] == \
            [bulk.acked_indices(i) for i in bulk.pending_entry_ids]


def test_ensembles_beyond_64_bookies_keep_their_masks_in_python_ints():
    """R6/R9 with E=70: more bookies than an unsigned 64-bit mask holds still complete and change."""
    ensemble = [f"b{i}" for i in range(70)]
    pa = PendingAdds(ensemble, 3, 2)
    pa.on_adds(2 * VECTOR_MIN)
    assert pa.on_acks_from(list(range(68, 70)), "b69") == []
    assert pa.acked_indices(69) == frozenset({69})
    assert pa.on_ack_from(0, "b0") == [] and pa.on_ack_from(0, "b1") == [CompleteAdds(0, 0)]
    assert pa.on_bookie_failed(69) == [NeedEnsembleChange((69,), 1)]
    actions = pa.on_ensemble_changed([*ensemble[:69], "x"], 1)
    assert Resend(67, (69,)) in actions and pa.acked_indices(69) == frozenset()


@given(st.data())
def test_on_adds_sends_what_single_adds_send(data):
    """on_adds(n) allocates the same ids and targets as n calls of on_add, also with failed bookies."""
    ensemble, qw, one, bulk = _twins(data)
    e = len(ensemble)
    for _ in range(data.draw(st.integers(1, 6))):
        if data.draw(st.booleans()) and not one.changing_ensemble:
            failed = data.draw(st.integers(0, e - 1))
            one.on_bookie_failed(failed)
            bulk.on_bookie_failed(failed)
        n = data.draw(st.integers(1, 20))
        singles = [one.on_add() for _ in range(n)]
        sends = bulk.on_adds(n)
        assert [(s.entry_id, s.indices) for s in singles] == sends.targets(e, qw)
        assert list(sends.entry_ids) == [s.entry_id for s in singles]
    assert one.pending_entry_ids == bulk.pending_entry_ids
    assert one.next_entry_id == bulk.next_entry_id


def test_on_adds_refuses_after_failure():
    pa = PendingAdds(["a", "b", "c"], 3, 2)
    pa.on_adds(2)
    pa.fail_all(LedgerFencedError())
    with pytest.raises(LedgerFencedError):
        pa.on_adds(1)
    with pytest.raises(ValueError):
        PendingAdds(["a"], 1, 1).on_adds(0)


def test_r21_fail_all_with_nothing_pending_still_tells_the_driver():
    """R21 (issue 46): a late EFENCED for an entry the others acknowledged, or an ensemble change that finds
    the ledger closed, comes when no add is pending: the machine still answers FailAdds (no entries), so
    the driver fails the adds it takes next instead of leaving them unsettled; only the first failure is
    announced."""
    pa = PendingAdds(["a", "b", "c"], 3, 2)
    pa.on_adds(1)
    assert pa.on_acks_from([0], "a") == [] and pa.on_acks_from([0], "b")[0] == CompleteAdds(0, 0)
    actions = pa.on_error_from(0, "c", StatusCode.EFENCED)
    assert len(actions) == 1 and isinstance(actions[0], FailAdds)
    assert actions[0].entry_ids == () and isinstance(actions[0].error, LedgerFencedError)
    assert pa.fail_all(LedgerFencedError()) == []
    with pytest.raises(LedgerFencedError):
        pa.on_adds(1)
