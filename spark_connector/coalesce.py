"""Bin-packing of planned entry ranges into Spark partitions: many small ledgers in one task. Pure.

`planning.plan_partitions` cuts a read into pieces (a fragment of a ledger, split by
`maxEntriesPerPartition` and `targetPartitionBytes`); a log made by Spark appends and streaming
micro-batches holds thousands of tiny ledgers, and one task per tiny ledger costs far more than reading it
(the "small files" problem Delta Lake and Spark's file sources answer by packing files into
`spark.sql.files.maxPartitionBytes`). Here, consecutive pieces, in log order, go into one
`CoalescedPartition` while it stays within `maxEntriesPerPartition` entries and `targetPartitionBytes`
estimated bytes; a piece is never split and never moved out of order, so a task reads its pieces one after
the other and returns them in log order. Byte estimates come from the sizes the log records for its closed
ledgers (average entry size times the piece's entries); a ledger of unknown size (open) takes the average
of the known ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from pyspark.sql.datasource import InputPartition

from bkledger.spark_connector.planning import UNKNOWN_ENTRY_BYTES, LedgerPartition


@dataclasses.dataclass(frozen=True)
class CoalescedPartition(InputPartition):
    """Pieces read one after the other by one task, in log order."""

    pieces: tuple[LedgerPartition, ...]

    @property
    def entries(self) -> int:
        return sum(p.entries for p in self.pieces)


def coalesce(pieces: Sequence[LedgerPartition], avg_entry_bytes: Mapping[int, float], max_entries: int,
             target_bytes: int) -> list[CoalescedPartition]:
    """Pack consecutive pieces while a partition stays within `max_entries` and `target_bytes` (at least
    one piece each). The order of pieces is kept, inside and across partitions."""
    known = list(avg_entry_bytes.values())
    fallback = sum(known) / len(known) if known else UNKNOWN_ENTRY_BYTES
    out: list[CoalescedPartition] = []
    current: list[LedgerPartition] = []
    entries, size = 0, 0.0
    for piece in pieces:
        piece_bytes = piece.entries * avg_entry_bytes.get(piece.ledger_id, fallback)
        if current and (entries + piece.entries > max_entries or size + piece_bytes > target_bytes):
            out.append(CoalescedPartition(tuple(current)))
            current, entries, size = [], 0, 0.0
        current.append(piece)
        entries += piece.entries
        size += piece_bytes
    if current:
        out.append(CoalescedPartition(tuple(current)))
    return out
