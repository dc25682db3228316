"""DESIGN.md's public API: `BookKeeper.open_ledger(ledger_id, password, recovery)`, `open_ledgers` and
`handles_for`; recovery rules are no part of it (the simulation and tests inject them with
`client.bookkeeper.open_ledger_with_rules` and its twins)."""

from __future__ import annotations

import inspect

from bkledger.client import BookKeeper
from bkledger.client.bookkeeper import handles_for_with_rules, open_ledger_with_rules, open_ledgers_with_rules


def test_open_ledger_takes_no_recovery_rules():
    """open_ledger's parameters are the documented ones; the internal function takes the rules."""
    assert list(inspect.signature(BookKeeper.open_ledger).parameters) == ["self", "ledger_id", "password", "recovery"]
    assert "rules" in inspect.signature(open_ledger_with_rules).parameters


def test_open_ledgers_and_handles_for_take_no_recovery_rules():
    """open_ledgers and handles_for (issue 46 item 5) lost `rules=` too; their internal twins take it."""
    assert list(inspect.signature(BookKeeper.open_ledgers).parameters) == [
        "self", "ledger_ids", "password", "recovery"]
    assert list(inspect.signature(BookKeeper.handles_for).parameters) == ["self", "found", "password", "recovery"]
    assert "rules" in inspect.signature(open_ledgers_with_rules).parameters
    assert "rules" in inspect.signature(handles_for_with_rules).parameters
