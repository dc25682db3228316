"""A reader's refresh loads the log only from its ledger's segment on (`load_log(from_ledger=)`): the pure
rules it moves on by (`next_ledger`, `locate`, `lost_after`) answer on such a partial snapshot exactly as on
the whole log, compacted ledgers included; and the store's check that a reused segment still covers the
ledger (`_covers`)."""

from __future__ import annotations

import dataclasses

from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import stored as st
from bkledger.client.log.core.meta import LogMetadata, Position
from bkledger.client.log.store import _covers


def long_log() -> LogMetadata:
    """Ledgers 10, 20, ..., 400 of 10 entries each (the last open), with 100..150 compacted into 1000."""
    meta = lm.new_log("partial", 0)
    ids = list(range(10, 410, 10))
    for lid in ids:
        meta = lm.with_ledger_appended(meta, lid, lid)
        if lid != ids[-1]:
            meta = lm.with_ledger_sealed(meta, lid, 9, 100, lid)
    run = cp.Run(tuple(range(100, 160, 10)))
    elements = [led for led in meta.ledgers if led.ledger_id in run.ledger_ids]
    compacted = cp.with_compacted(meta, run, cp.compacted_ledger(elements, 1000, 7))
    assert compacted is not None
    return compacted


def partial(meta: LogMetadata, skip: int) -> LogMetadata:
    """What a load from a later segment makes: the first `skip` ledgers not loaded."""
    return dataclasses.replace(meta, ledgers=meta.ledgers[skip:], first_index=meta.first_index + skip)


def test_next_ledger_and_locate_on_a_partial_snapshot_match_the_whole_log():
    """R27: for every ledger a partial snapshot holds, the next ledger and where its entries are (its own
    ledger or a part of a compacted one, with its log-wide first offset) are the whole log's."""
    whole = long_log()
    for skip in range(len(whole.ledgers)):
        part = partial(whole, skip)
        for lid in part.logical_ids:
            assert lm.next_ledger(part, lid) == lm.next_ledger(whole, lid), (skip, lid)
            assert lm.locate(part, lid) == lm.locate(whole, lid), (skip, lid)
    assert lm.locate(partial(whole, 5), 120) == lm.Located(120, 1000, 20, 10, 110, 100)


def test_lost_after_on_partial_snapshots_matches_the_whole_log():
    """R30: moving on from ledger L, partial snapshots (both loaded from L's segment on) tell truncation
    of the ledgers after L, and only that, as the whole log does. A snapshot in which L is gone is always
    whole (the store loads all of a log whose first ledger is after L), so those are compared whole."""
    whole = long_log()
    for current in (40, 120, 160, 300):
        for cut_at in (current, current + 10, current + 20, 390):
            cut, _ = lm.truncated_before(whole, Position(cut_at, 0))
            led = lm.locate(whole, current)
            assert led is not None and led.first_position is not None and led.entries is not None
            end = led.first_position + led.entries
            expected = lm.lost_after(whole, cut, current, end)
            new = cut if current not in cut.logical_ids else partial(cut, _holding(cut, current))
            for old in (whole, partial(whole, _holding(whole, current))):
                assert lm.lost_after(old, new, current, end) == expected, (current, cut_at)
    gone, _ = lm.truncated_before(whole, Position(300, 0))
    assert lm.lost_after(partial(whole, 10), gone, 200, 200)          # 210..290 were cut before it read them
    assert not lm.lost_after(partial(whole, 10), partial(whole, 12), 300, 250)


def _holding(meta: LogMetadata, ledger_id: int) -> int:
    """The index of the ledger that holds (logical) `ledger_id`: a load from there on is the most partial."""
    return next(i for i, led in enumerate(meta.ledgers) if ledger_id in (led.ledger_id, *(r[0] for r in led.replaced)))


def test_a_reused_segment_must_still_cover_the_ledger():
    """A load that reuses the segment it found before checks the segments read start at or before the
    ledger (or are all the log's): compaction may have moved it into an earlier segment."""
    head = st.Head("s", first=2, last=5, count=40)
    seg = [(3, tuple(lm.LogLedger(lid, 0) for lid in (300, 310))), (4, ())]
    assert _covers(head, 3, seg, 300) and _covers(head, 3, seg, 305)
    assert not _covers(head, 3, seg, 290)
    assert _covers(head, 2, seg, 10)                                  # from the first segment: everything
    assert not _covers(head, 3, [(3, ()), (4, ())], 300)              # nothing loaded: search again
