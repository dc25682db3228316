"""Pure rules for a commit whose ZooKeeper answer was lost (R27): the log says what it did
(`client.log.core.outcome`); only the ledgers no log lists may be deleted."""

from __future__ import annotations

import dataclasses

from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import outcome


def log_of(name: str, *ids: int) -> lm.LogMetadata:
    return dataclasses.replace(lm.new_log(name, 0), ledgers=tuple(lm.LogLedger(i, 0) for i in ids))


def test_landed_needs_every_ledger_of_every_log() -> None:
    """R27: landed only if each log lists all its ledgers (a transaction is all or none)."""
    metas = {"a": log_of("a", 1, 4), "b": log_of("b", 2, 5)}
    assert outcome.landed(metas, {"a": [4], "b": [5]})
    assert not outcome.landed(metas, {"a": [4], "b": [6]})
    assert not outcome.landed(metas, {"a": [4], "c": [7]})          # a log that does not exist lists none
    assert not outcome.landed(metas, {"a": []})                     # nothing to commit: not a landed commit


def test_compacted_ledgers_count_as_listed() -> None:
    """R27: a ledger a compacted ledger replaced is still referred to by the log: never deleted."""
    compacted = lm.LogLedger(9, 0, replaced=((4, 0, 10), (5, 3, 10)))
    metas = {"a": dataclasses.replace(lm.new_log("a", 0), ledgers=(compacted,))}
    assert outcome.landed(metas, {"a": [4, 5]})
    assert outcome.unlisted(metas, [4, 5, 6, 9]) == [6]


def test_unlisted_keeps_what_any_log_lists() -> None:
    """R27: after an unknown outcome the candidates deleted are exactly those no log lists, in order."""
    metas = {"a": log_of("a", 1, 4), "b": log_of("b", 5)}
    assert outcome.unlisted(metas, [7, 4, 5, 3]) == [7, 3]
    assert outcome.listed(metas, [7, 4, 5, 3]) == {4, 5}
    assert outcome.unlisted({}, [1, 2]) == [1, 2]
