"""DESIGN.md's public API: `BookKeeper.open_ledger(ledger_id, password, recovery)`; recovery rules are no
part of it (the simulation and tests inject them with `client.bookkeeper.open_ledger_with_rules`)."""

from __future__ import annotations

import inspect

from bkledger.client import BookKeeper
from bkledger.client.bookkeeper import open_ledger_with_rules


def test_open_ledger_takes_no_recovery_rules():
    """open_ledger's parameters are the documented ones; the internal function takes the rules."""
    assert list(inspect.signature(BookKeeper.open_ledger).parameters) == ["self", "ledger_id", "password", "recovery"]
    assert "rules" in inspect.signature(open_ledger_with_rules).parameters
