"""bench.spark_floor's no-op reader yields what a bkledger read of spark_batch's rows yields: bkledger's
read columns and Arrow types, every row once, values of make_frame's sizes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from bench.spark_floor import BATCH_ROWS, NoopDataSource, NoopReader, value_sizes
from bkledger.spark_connector.batch_reader import BASE_COLUMNS

ARROW = {"log": pa.string(), "ledger_id": pa.int64(), "entry_id": pa.int64(), "value": pa.binary()}


def test_noop_read_yields_every_row_once_with_bkledger_columns_and_make_frame_sizes() -> None:
    rows = 3 * BATCH_ROWS + 17
    reader = NoopReader(rows)
    ids, sizes = [], []
    for partition in reader.partitions():
        assert isinstance(partition, InputPartition)
        for batch in reader.read(partition):
            assert batch.schema.names == list(BASE_COLUMNS)
            assert [batch.schema.field(n).type for n in BASE_COLUMNS] == [ARROW[n] for n in BASE_COLUMNS]
            batch.validate(full=True)
            ids.append(batch.column("entry_id").to_numpy())
            sizes.append(pc.binary_length(batch.column("value")).to_numpy())
    assert np.array_equal(np.concatenate(ids), np.arange(rows))
    expected = [100 + (i * 7919) % 901 for i in range(rows)]     # make_frame's SQL: 100 + pmod(id * 7919, 901)
    assert np.concatenate(sizes).tolist() == expected
    assert value_sizes(0, rows).tolist() == expected


def test_noop_source_declares_bkledger_read_columns() -> None:
    assert NoopDataSource({}).schema().fieldNames() == list(BASE_COLUMNS)
