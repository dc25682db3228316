"""Coalescing many small ledgers into few Spark partitions (spark_connector.coalesce; pure, no Spark run)."""

from __future__ import annotations

from bkledger.spark_connector.coalesce import CoalescedPartition, coalesce
from bkledger.spark_connector.planning import (
    UNKNOWN_ENTRY_BYTES,
    LedgerView,
    piece_entries,
    plan_partitions,
    recorded_entry_bytes,
    resolve_bounds,
)


def flat(parts: list[CoalescedPartition]) -> list[tuple[int, int, int]]:
    return [(p.ledger_id, p.first_entry_id, p.last_entry_id) for part in parts for p in part.pieces]


def test_many_small_ledgers_go_into_few_partitions_in_log_order():
    """4,000 one-entry ledgers (what a streaming sink leaves) become 4 partitions of 1,000, in order."""
    views = [LedgerView(10 + i, (0,), 0, size=100) for i in range(4000)]
    pieces = plan_partitions("orders", views, resolve_bounds("orders", views, "earliest", "latest"), 1000)
    parts = coalesce(pieces, recorded_entry_bytes(views), 1000, 1 << 30)
    assert [p.entries for p in parts] == [1000] * 4
    assert flat(parts) == [(10 + i, 0, 0) for i in range(4000)]


def test_byte_target_bounds_a_partition():
    """Ledgers of 1 MB each with a 3 MB target: three per partition; a ledger above the target stays alone."""
    sizes = {1: (10, 1_000_000), 2: (10, 1_000_000), 3: (10, 1_000_000), 4: (10, 1_000_000), 5: (10, 5_000_000)}
    views = [LedgerView(lid, (0,), 9, size=size) for lid, (_, size) in sizes.items()]
    pieces = plan_partitions("x", views, resolve_bounds("x", views, "earliest", "latest"), 10_000)
    parts = coalesce(pieces, recorded_entry_bytes(views), 10_000, 3_000_000)
    assert [[p.ledger_id for p in part.pieces] for part in parts] == [[1, 2, 3], [4], [5]]


def test_long_ledgers_are_still_split_and_not_merged_past_the_limit():
    """Pieces of a long ledger keep their split; a small ledger after it joins the last piece if it fits."""
    views = [LedgerView(1, (0, 500), 999), LedgerView(2, (0,), 9)]
    pieces = plan_partitions(None, views, resolve_bounds(None, views, "earliest", "latest"), 300)
    parts = coalesce(pieces, {}, 300, 1 << 40)
    assert [[(p.ledger_id, p.first_entry_id, p.last_entry_id) for p in part.pieces] for part in parts] == [
        [(1, 0, 249)], [(1, 250, 499)], [(1, 500, 749)], [(1, 750, 999), (2, 0, 9)]]


def test_unknown_sizes_take_the_average_of_known_ones():
    """An OPEN ledger (no recorded size) is estimated like its closed siblings; none known: a default."""
    views = [LedgerView(1, (0,), 9, size=10_000), LedgerView(2, (0,), 9, closed=False)]
    pieces = plan_partitions(None, views, resolve_bounds(None, views, "earliest", "latest"), 1000)
    assert recorded_entry_bytes(views) == {1: 1000.0}
    assert len(coalesce(pieces, recorded_entry_bytes(views), 1000, 15_000)) == 2
    assert len(coalesce(pieces, recorded_entry_bytes(views), 1000, 20_000)) == 1
    assert len(coalesce(pieces, {}, 1000, int(UNKNOWN_ENTRY_BYTES) * 20)) == 1
    assert coalesce([], {}, 10, 10) == []


def test_a_long_ledger_is_cut_into_pieces_of_the_byte_target_too():
    """As Spark cuts files at maxPartitionBytes: 1,000,000 entries of 550 bytes with a 128 MiB target are
    five pieces of 200,000 (a cap of 244,032 entries), not one of maxEntriesPerPartition; an OPEN ledger
    is cut at the average of the closed ones; with no byte target only the entry limit counts."""
    closed = LedgerView(1, (0,), 999_999, size=550_000_000)
    tail = LedgerView(2, (0,), 599_999, closed=False)
    bounds = resolve_bounds("x", [closed, tail], "earliest", "latest")
    assert piece_entries([closed, tail], 1_000_000, 128 << 20) == ({1: 244_032}, 244_032)
    pieces = plan_partitions("x", [closed, tail], bounds, 1_000_000, 128 << 20)
    assert [(p.ledger_id, p.entries) for p in pieces] == [(1, 200_000)] * 5 + [(2, 200_000)] * 3
    assert [p.entries for p in plan_partitions("x", [closed, tail], bounds, 1_000_000)] == [1_000_000, 600_000]
    assert piece_entries([tail], 1_000_000, 128 << 20) == ({}, (128 << 20) // int(UNKNOWN_ENTRY_BYTES))
