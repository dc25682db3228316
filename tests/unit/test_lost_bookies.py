"""The auditor's decisions (R31): which lost bookies to audit, and when."""

from __future__ import annotations

from bkledger.bookie.core.lost_bookies import LostBookies

A, B, C, D = "a:1", "b:1", "c:1", "d:1"


def test_a_bookie_that_goes_is_audited_after_the_delay():
    state = LostBookies()
    assert state.observe(0.0, 5.0, {A, B, C}, {A, B, C}) == []
    events = state.observe(1.0, 5.0, {A, B}, {A, B, C})
    assert events == [f"bookie {C} disappeared: auditing its ledgers in 5.0s unless it comes back"]
    assert state.due(5.9) == []
    assert state.due(6.0) == [C]
    state.audited_now(C)
    assert state.due(100.0) == []
    assert state.observe(101.0, 5.0, {A, B}, {A, B, C}) == []        # audited once, not again


def test_a_bookie_back_within_the_delay_is_not_audited():
    state = LostBookies()
    state.observe(0.0, 5.0, {A, B, C}, set())
    state.observe(1.0, 5.0, {A, B}, set())
    assert state.observe(2.0, 5.0, {A, B, C}, set()) == [f"bookie {C} came back within the delay: no audit"]
    assert state.due(10.0) == []


def test_a_bookie_registered_only_between_two_observations_is_still_audited():
    """The bug: a bookie registered and gone between two polls was never known, so never audited."""
    state = LostBookies()
    state.observe(0.0, 5.0, {A, B}, {A, B})
    events = state.observe(1.0, 5.0, {A, B}, {A, B, C})               # C wrote its cookie, came and went
    assert events == [f"bookie {C} has a cookie but is not registered: auditing its ledgers in 5.0s unless it "
                      "comes back"]
    assert state.due(6.0) == [C]


def test_a_bookie_that_returns_after_its_audit_is_audited_again_when_it_goes_again():
    state = LostBookies()
    state.observe(0.0, 1.0, {A, B, C}, set())
    state.observe(1.0, 1.0, {A, B}, set())
    state.audited_now(C)
    state.observe(3.0, 1.0, {A, B, C}, set())                          # back (re-replicated meanwhile)
    assert state.observe(4.0, 1.0, {A, B}, set()) != []
    assert state.due(5.0) == [C]


def test_named_in_metadata_but_unregistered_is_audited_once():
    state = LostBookies()
    state.observe(0.0, 2.0, {A, B}, {A, B})
    events = state.named_but_unregistered(0.0, 2.0, {A, B, D}, {A, B})
    assert events == [f"bookie {D} is named in ledger metadata but not registered: auditing its ledgers in 2.0s "
                      "unless it comes back"]
    assert state.named_but_unregistered(0.5, 2.0, {A, B, D}, {A, B}) == []   # already pending
    assert state.due(2.0) == [D]
