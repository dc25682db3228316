"""Reading a log's offloaded history inside the Python data source: Parquet rows of the log's Delta table as
Arrow batches of the read schema, and record timestamps for reads by time.

A piece of an offloaded ledger (`planning.LedgerPartition.offloaded`: the table store URI and the file, as
the snapshot of the log's metadata taken at planning named them) reads only the row groups holding its
rows (`seam.row_groups`), checks that they are the entries the log says (`offload_store.check_rows`, via
`client.connector`), and ships them with the columns a read of the bookies gives: `log`, `ledger_id`,
`entry_id`, `value`, `key` and `timestamp` (null for ledgers written without the record envelope),
`headers` null (offload stores only envelopes without headers). A file gone since planning (retention or
truncation removed it after its deletion lag) is `OffloadedFileGoneError`, a DataLossError: the read was
planned before the removal; failOnDataLoss=false skips it with a warning, as for a ledger gone from the
bookies.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from bkledger.client import DataLossError
from bkledger.client.connector import check_rows, table_store
from bkledger.client.errors import OffloadError
from bkledger.spark_connector.arrow_io import HEADERS, TIMESTAMP, repeated_string
from bkledger.spark_connector.planning import LedgerPartition, LedgerView
from bkledger.spark_connector.seam import row_groups

log = logging.getLogger("bkledger.spark")
FILES_KEPT = 8                 # Parquet files a task keeps open (pieces of one file come one after another)
_COLUMNS = ["ledger_id", "entry_id", "key", "timestamp", "value"]


class OffloadedFileGoneError(DataLossError):
    """An offloaded file the read was planned on is gone (removed after planning, by retention or
    truncation once its deletion lag passed)."""


class OffloadedFiles:
    """The Parquet files one task (or one planner) reads, opened once each (the last FILES_KEPT)."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str, str], pq.ParquetFile] = {}
        self._stamps: dict[tuple[str, str, str], pa.ChunkedArray] = {}

    def file(self, log_name: str, table: str, name: str) -> pq.ParquetFile:
        key = (table, log_name, name)
        found = self._open.get(key)
        if found is not None:
            return found
        store = table_store(table, log_name)
        try:
            opened = pq.ParquetFile(store.fs.open_input_file(store.path(name)))
        except FileNotFoundError as exc:
            raise OffloadedFileGoneError(
                f"log {log_name!r}: offloaded file {name} of its table at {table!r} is gone; the read was "
                "planned before it was removed (retention or truncation after the deletion lag): run the "
                "read again, or set failOnDataLoss=false to skip it") from exc
        except (OSError, pa.ArrowException) as exc:
            raise OffloadError(f"log {log_name!r}: offloaded file {name} of its table at {table!r} cannot be "
                               f"read: {exc}") from exc
        if len(self._open) >= FILES_KEPT:
            self._open.clear()
        self._open[key] = opened
        return opened

    def rows(self, part: LedgerPartition) -> pa.Table:
        """Rows base+first..base+last of the piece's file, checked to be its entries."""
        assert part.offloaded is not None and part.log is not None
        table, name = part.offloaded
        pf = self.file(part.log, table, name)
        meta = pf.metadata
        groups, skip = row_groups([meta.row_group(i).num_rows for i in range(meta.num_row_groups)],
                                  part.base + part.first_entry_id, part.base + part.last_entry_id)
        try:
            rows = pf.read_row_groups(groups, columns=_COLUMNS).slice(skip, part.entries)
        except (OSError, pa.ArrowException) as exc:
            raise OffloadError(f"log {part.log!r}: offloaded file {name} cannot be read: {exc}") from exc
        check_rows(part.log, name, rows, part.ledger_id, part.first_entry_id, part.entries)
        return rows

    def timestamp(self, log_name: str, view: LedgerView, entry_id: int) -> int | None:
        """The record timestamp (us) of entry `entry_id` of an offloaded ledger: the timestamp column of
        the one row group holding it is read (once; a binary search probes few row groups)."""
        assert view.offloaded is not None
        table, name = view.offloaded
        pf = self.file(log_name, table, name)
        meta = pf.metadata
        groups, skip = row_groups([meta.row_group(i).num_rows for i in range(meta.num_row_groups)],
                                  view.base + entry_id, view.base + entry_id)
        if not groups:
            raise OffloadError(f"log {log_name!r}: offloaded file {name} has no row {view.base + entry_id}")
        key = (table, log_name, f"{name}#{groups[0]}")
        if key not in self._stamps:
            if len(self._stamps) >= FILES_KEPT:
                self._stamps.clear()
            self._stamps[key] = pf.read_row_group(groups[0], columns=["timestamp"]).column(0)
        value = self._stamps[key][skip]
        return None if not value.is_valid else int(value.cast(pa.int64()).as_py())


def to_batches(schema: pa.Schema, part: LedgerPartition, rows: pa.Table) -> Iterator[pa.RecordBatch]:
    """The rows as batches of the read schema (as `arrow_io.rows_to_batch` makes them from bookie reads)."""
    n = rows.num_rows
    envelope = part.envelope != 0
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        "log": pa.chunked_array([repeated_string(part.log, n)]),
        "ledger_id": rows.column("ledger_id"),
        "entry_id": rows.column("entry_id"),
        "value": rows.column("value"),
        "key": rows.column("key") if envelope else pa.nulls(n, pa.binary()),
        "timestamp": rows.column("timestamp").cast(TIMESTAMP) if envelope else pa.nulls(n, TIMESTAMP),
        "headers": pa.nulls(n, HEADERS),
    }
    out = pa.Table.from_arrays([_typed(columns[f.name], f.type) for f in schema], schema=schema)
    yield from out.combine_chunks().to_batches()


def _typed(column: pa.Array | pa.ChunkedArray, kind: pa.DataType) -> pa.Array | pa.ChunkedArray:
    return column if column.type == kind else column.cast(kind)


def read_offloaded(files: OffloadedFiles, part: LedgerPartition, schema: pa.Schema,
                   fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    """A piece of offloaded history as batches of the read schema."""
    try:
        rows = files.rows(part)
    except OffloadedFileGoneError:
        if fail_on_data_loss:
            raise
        log.warning("log %r: offloaded file %s is gone since planning; ledger %d entries %d..%d skipped "
                    "(failOnDataLoss=false)", part.log, part.offloaded and part.offloaded[1], part.ledger_id,
                    part.first_entry_id, part.last_entry_id)
        return
    yield from to_batches(schema, part, rows)
