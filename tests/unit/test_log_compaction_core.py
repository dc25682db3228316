"""Compaction of a log, the pure part: runs, the compacted record, positions through it, pending deletes."""

from __future__ import annotations

import dataclasses

from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import stored as st
from bkledger.client.log.core.meta import LogLedger, LogMetadata, Position


def log_of(*spec: tuple[int, int, int]) -> LogMetadata:
    """Sealed ledgers given as (ledger id, entries, bytes), first positions filled in."""
    meta = lm.new_log("orders", 1)
    for lid, entries, size in spec:
        meta = lm.with_sealed_ledgers_appended(meta, [(lid, entries - 1, size, 1)], 100 + lid)
    return meta


def compact(meta: LogMetadata, run: cp.Run, new_id: int) -> LogMetadata:
    elements = [led for led in meta.ledgers if led.ledger_id in run.ledger_ids]
    out = cp.with_compacted(meta, run, cp.compacted_ledger(elements, new_id, 5))
    assert out is not None
    return out


def test_runs_take_small_closed_ledgers_and_leave_the_tail():
    meta = log_of((1, 2, 10), (2, 3, 10), (3, 1, 10), (4, 5, 500), (5, 1, 10), (6, 1, 10), (7, 1, 10),
                  (8, 1, 10), (9, 1, 10))
    assert cp.plan_runs(meta, 100, 2) == [cp.Run((1, 2, 3)), cp.Run((5, 6, 7))]      # 4 too big; 8, 9 tail
    assert cp.plan_runs(meta, 100, 4) == []
    assert cp.plan_runs(meta, 25, 2) == [cp.Run((1, 2)), cp.Run((5, 6))]             # bytes bound a run
    open_tail = lm.with_ledger_appended(log_of((1, 1, 1), (2, 1, 1)), 3, 9)
    assert cp.plan_runs(open_tail, 100, 2, keep_tail=0) == [cp.Run((1, 2))]         # stops at the open one


def test_positions_resolve_through_a_compacted_ledger():
    """Ledgers 1 (2 entries), 2 (empty), 3 (3 entries) become ledger 50; (3, 1) is entry 3 of ledger 50."""
    meta = compact(log_of((1, 2, 20), (2, 0, 0), (3, 3, 30), (4, 1, 10), (5, 1, 10)), cp.Run((1, 2, 3)), 50)
    assert meta.ledger_ids == [50, 4, 5] and meta.logical_ids == [1, 2, 3, 4, 5]
    assert meta.ledgers[0].replaced == ((1, 0, 20), (2, 2, 0), (3, 2, 30))
    where = lm.locate(meta, 3)
    assert where is not None and (where.physical, where.base, where.entries, where.first_position) == (50, 2, 3, 2)
    assert lm.locate(meta, 4) == lm.Located(4, 4, 0, 1, 5, 10)
    assert lm.next_ledger(meta, 1) == 2 and lm.next_ledger(meta, 3) == 4 and lm.next_ledger(meta, 5) is None
    assert lm.check_start(meta, Position(3, 1)) == "ok" and lm.earliest(meta) == Position(1, 0)
    assert [x.ledger_id for x in lm.logical_ledgers(meta)] == [1, 2, 3, 4, 5]
    assert meta.listed_ids == {1, 2, 3, 4, 5, 50}
    assert not lm.lost_after(meta, meta, 3, None)


def test_compacting_compacted_ledgers_merges_their_maps():
    meta = log_of(*[(i, 2, 10) for i in range(1, 9)])
    meta = compact(meta, cp.Run((1, 2)), 20)
    meta = compact(meta, cp.Run((3, 4)), 21)
    meta = compact(meta, cp.Run((20, 21, 5)), 30)
    assert meta.ledger_ids == [30, 6, 7, 8] and meta.logical_ids == list(range(1, 9))
    assert meta.ledgers[0].replaced == ((1, 0, 10), (2, 2, 10), (3, 4, 10), (4, 6, 10), (5, 8, 10))
    assert meta.ledgers[0].entries == 10 and meta.ledgers[1].first_position == 10


def test_truncation_keeps_a_compacted_ledger_that_holds_the_position():
    meta = compact(log_of(*[(i, 1, 10) for i in range(1, 7)]), cp.Run((1, 2, 3)), 40)
    kept, dropped = lm.truncated_before(meta, Position(2, 0))
    assert dropped == [] and kept.ledger_ids == [40, 4, 5, 6]
    kept, dropped = lm.truncated_before(meta, Position(5, 0))
    assert dropped == [40, 4] and kept.logical_ids == [5, 6]
    assert lm.check_start(kept, Position(2, 0)) == "truncated"


def test_swap_is_skipped_when_the_run_changed():
    meta = log_of(*[(i, 1, 10) for i in range(1, 7)])
    elements = list(meta.ledgers[:3])
    new = cp.compacted_ledger(elements, 40, 5)
    truncated, _ = lm.truncated_before(meta, Position(2, 0))
    assert cp.with_compacted(truncated, cp.Run((1, 2, 3)), new) is None
    assert cp.with_compacted(meta, cp.Run((1, 2, 3)), new) is not None


def test_compacted_ledgers_survive_the_stored_form():
    """The replaced map goes through the segments and back; the compacted ledger stays in its segment."""
    meta = compact(log_of(*[(i, 1, 10) for i in range(1, 600)]), cp.Run(tuple(range(1, 300))), 1000)
    conv = st.change(st.Window(log_of(*[(i, 1, 10) for i in range(1, 600)])), meta, "p")
    base, head = st.decode_head("orders", conv.head)
    assert head is not None
    back = st.assemble(base, head, [(n, st.decode_segment("orders", n, d)) for n, d in conv.creates.items()])
    assert back.meta.ledgers == meta.ledgers


def test_pending_deletes_wait_for_their_time():
    """Ids listed in the head (as stored before) and child znodes holding them (as compaction writes now)."""
    meta = cp.with_pending(cp.with_pending(log_of((1, 1, 1)), [7, 8], 1000), "pending-ab", 2000)
    assert cp.pending(meta) == [(1000, [7, 8]), (2000, "pending-ab")]
    later, due, znodes = cp.without_due(meta, 1500)
    assert (due, znodes) == ([7, 8], []) and cp.pending(later) == [(2000, "pending-ab")]
    done, due, znodes = cp.without_due(later, 2000)
    assert (due, znodes) == ([], ["pending-ab"]) and cp.pending(done) == [] and cp.PENDING_KEY not in done.extra
    assert lm.decode("orders", lm.encode(meta)).extra == meta.extra
    assert dataclasses.replace(meta).extra[cp.PENDING_KEY] == [[1000, [7, 8]], [2000, "pending-ab"]]
    assert cp.decode_pending(cp.encode_pending([3, 4])) == [3, 4]


def test_a_million_replaced_ledgers_keep_the_head_small():
    """The head names one child znode per swap, not the ledgers: its size does not grow with them."""
    meta = log_of((1, 1, 1))
    for n in range(245):                        # a million ledgers swapped 4096 at a time
        meta = cp.with_pending(meta, f"pending-{n:012x}", 1000 + n)
    head = st.encode_head(meta, st.Head("s1"))
    assert len(head) < 16 * 1024
    assert len(cp.encode_pending(range(10**12, 10**12 + 4096))) < 64 * 1024


def test_replaced_record_names_each_old_ledger_once():
    elements = [LogLedger(1, 0, 0, 2, 20, 5), LogLedger(2, 0, 2, 1, 10, 9)]
    led = cp.compacted_ledger(elements, 9, 11)
    assert (led.entries, led.size, led.closed_ms, led.first_position) == (3, 30, 9, 0)
