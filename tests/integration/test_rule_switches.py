"""The rule switches the simulation's mutants flip, in the code that ships, on real bookies and ZooKeeper:
each default keeps its rule, each switch off breaks it there as the mutant does in the simulation
(R11 read-past-lac, R12 reader-fences, R20 close-no-adopt, R28 log-no-fence). R7 (no-digest-check) is
unit-tested on the functions the reader verifies with (tests/unit/test_reader_rules.py)."""

from __future__ import annotations

import uuid

import pytest

from bkledger.client import BookKeeper
from bkledger.client.errors import BKError, ReadBeyondLastEntryError
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core.takeover import DEFAULT_LOG_RULES, LogRules
from bkledger.client.log.ledgers import seal_tail
from bkledger.client.protocol import transforms
from bkledger.client.protocol.digest import make_digest
from bkledger.client.protocol.metadata import LedgerState
from bkledger.client.protocol.reads import DEFAULT_READER_RULES, ReaderRules
from bkledger.client.protocol.recovery import DEFAULT_RULES, CloseLedger, RecoveryRules
from bkledger.client.reader import LedgerReader
from bkledger.client.recovery_driver import RecoveryRun

PASSWORD = b"pw"


def _written(bk: BookKeeper, count: int = 3):
    lh = bk.create_ledger(3, 3, 2, password=PASSWORD)
    for i in range(count):
        assert lh.add_entry(b"entry-%d" % i) == i
    return lh


def test_a_reader_reads_past_its_lac_only_with_the_rule_off(bk: BookKeeper):
    """R11: a handle opened without recovery refuses a read above the LAC it knows, though the bookies hold
    the entry; with ReaderRules(lac_bound=False), the read-past-lac mutant, it returns that entry."""
    lh = _written(bk)
    rh = bk.open_ledger(lh.ledger_id, PASSWORD, recovery=False)
    lac = rh.last_add_confirmed
    assert lh.add_entry(b"above the reader's LAC") == 3 and lac < 3
    with pytest.raises(ReadBeyondLastEntryError):
        list(rh.read_entries(0, 3))
    rh._reader.rules = ReaderRules(lac_bound=False)
    assert [e.payload for e in rh.read_entries(lac + 1, 3)][-1] == b"above the reader's LAC"


def test_reader_lac_reads_fence_only_with_the_rule_off(bk: BookKeeper):
    """R12: the LAC read of an open without recovery (LedgerReader.read_lac) leaves the writer writing; with
    ReaderRules(open_never_fences=False), the reader-fences mutant, it fences the writer's bookies."""
    lh = _written(bk)
    md = lh.metadata
    for rules, fences in ((DEFAULT_READER_RULES, False), (ReaderRules(open_never_fences=False), True)):
        reader = LedgerReader(bk._ctx, md, make_digest(md.digest_type, PASSWORD), PASSWORD, rules)
        assert bk._ctx.runtime.run(reader.read_lac(), 30) >= 1
        if fences:
            with pytest.raises(BKError):
                lh.add_entry(b"after a fencing open", timeout=30)
        else:
            assert lh.add_entry(b"after an open", timeout=30) == 3


def test_recovery_close_adopts_a_stored_close_only_with_the_rule_on(bk: BookKeeper):
    """R20: a recovery whose closing CAS finds the ledger closed by another recoverer adopts that close
    (RecoveryRun._close); with RecoveryRules(adopt_stored_close=False), the close-no-adopt mutant, it writes
    its own close over the stored one (a CLOSED ledger changed: R4 broken)."""
    store = bk._ctx.store
    for rules, adopts in ((DEFAULT_RULES, True), (RecoveryRules(adopt_stored_close=False), False)):
        lh = _written(bk)
        lid = lh.ledger_id
        recovering, _ = store.update_ledger(lid, transforms.to_in_recovery)
        other, _ = store.update_ledger(lid, lambda md: transforms.close_after_recovery(md, 1, 14))  # won the race
        mine = CloseLedger(last_entry_id=2, length=21, new_fragments=())
        md, _ = bk._ctx.runtime.run(RecoveryRun(bk._ctx, recovering, PASSWORD, rules)._close(mine, recovering), 30)
        stored, _ = store.read_ledger(lid)
        assert stored.state is LedgerState.CLOSED and stored == md
        assert stored.last_entry_id == (1 if adopts else 2)
        assert (stored == other) is adopts


def test_seal_tail_fences_the_previous_writer_only_with_the_rule_on(bk: BookKeeper):
    """R28: a new log writer's `seal_tail` fences and recovers the previous tail, so its old writer can add
    nothing more; with LogRules(fence_previous_tail=False), the log-no-fence mutant, it takes the LAC and
    the old writer goes on adding above the end the log recorded (two writers)."""
    for rules, fenced in ((DEFAULT_LOG_RULES, True), (LogRules(fence_previous_tail=False), False)):
        lh = _written(bk)
        meta = lm.with_ledger_appended(lm.new_log(f"log-{uuid.uuid4().hex[:8]}", 0), lh.ledger_id, 0)
        sealed = seal_tail(bk, meta, PASSWORD, rules)
        recorded = sealed.ledgers[-1]
        assert recorded.ledger_id == lh.ledger_id and recorded.sealed
        if fenced:
            with pytest.raises(BKError):
                lh.add_entry(b"after the takeover", timeout=30)
            assert recorded.entries == 3
        else:
            assert lh.add_entry(b"after the takeover", timeout=30) == 3
            assert recorded.entries is not None and recorded.entries <= 3    # entry 3 is past the log's end
