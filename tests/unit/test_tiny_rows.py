"""A task's batches of tiny ledgers: many one-entry ledgers make one Arrow batch, in order, bounded in
rows and bytes (spark_connector.batch_reader.TinyRows, merged; spark_connector.arrow_io.rows_to_batch)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from bkledger.client.reader import ReadChunk
from bkledger.spark_connector import batch_reader as br
from bkledger.spark_connector.arrow_io import chunk_to_batch
from bkledger.spark_connector.planning import LedgerPartition

SCHEMA = to_arrow_schema(br.read_schema(False), timezone="UTC")


def piece(ledger_id: int, log: str = "a", base: int = 0) -> LedgerPartition:
    return LedgerPartition(ledger_id=ledger_id, first_entry_id=0, last_entry_id=0, log=log, base=base)


def test_tiny_pieces_make_one_batch_in_order_split_by_log() -> None:
    tiny = br.TinyRows(SCHEMA)
    out: list[pa.RecordBatch] = []
    for i in range(10):
        out += tiny.add(piece(100 + i, "a" if i < 6 else "b"), ReadChunk([0], [b"v%d" % i]), 0)
    out += tiny.drain()
    assert [b.num_rows for b in out] == [6, 4]
    table = pa.Table.from_batches(out)
    assert table.column("ledger_id").to_pylist() == list(range(100, 110))
    assert table.column("entry_id").to_pylist() == [0] * 10
    assert table.column("log").to_pylist() == ["a"] * 6 + ["b"] * 4
    assert table.column("value").to_pylist() == [b"v%d" % i for i in range(10)]


def test_a_compacted_piece_gives_its_own_entry_ids() -> None:
    tiny = br.TinyRows(SCHEMA)
    out = list(tiny.add(piece(7, base=40), ReadChunk([40], [b"x"]), 0)) + list(tiny.drain())
    assert pa.Table.from_batches(out).column("entry_id").to_pylist() == [0]


def test_merged_is_bounded_by_rows_and_bytes() -> None:
    small = [chunk_to_batch(SCHEMA, "a", i, [0], [b"x"], 0) for i in range(10)]
    assert [b.num_rows for b in br.merged(small, 4, 1 << 20)] == [4, 4, 2]
    big = [chunk_to_batch(SCHEMA, "a", i, [0], [b"x" * 1000], 0) for i in range(3)]
    assert [b.num_rows for b in br.merged(big, 100, 1500)] == [2, 1]
