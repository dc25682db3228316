"""Spark reads across the seam of a log's offloaded history (issue 42 item 3): planning from one snapshot of
the log's metadata (offloaded ledgers as rows of the files it names, at the same positions; the seam; the
files of `read_log`), row groups as the unit of reading, and the rows a piece reads back from a real
Parquet file (checked against the log's record; a file gone since planning is a typed data loss)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bkledger.client.errors import OffloadError
from bkledger.client.log import offload_store as store_io
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import offload as ol
from bkledger.spark_connector.batch_reader import read_schema
from bkledger.spark_connector.offloaded import OffloadedFileGoneError, OffloadedFiles, read_offloaded
from bkledger.spark_connector.planning import LedgerPartition, LedgerView, plan_partitions, resolve_bounds
from bkledger.spark_connector.seam import history_files, offloaded_views, row_groups, seam
from bkledger.spark_connector.spark_compat import arrow_schema
from tests.unit.test_log_compaction_core import log_of

V1 = {i: 1 for i in range(100)}      # the ledgers carry envelope v1 (key, timestamp)


def offloaded(meta: lm.LogMetadata, uri: str, max_file_bytes: int = 1000, run: int = 1) -> lm.LogMetadata:
    groups = ol.plan(meta, V1, max_file_bytes)
    records = [ol.offloaded_record(g, ol.file_name(run, g, "t0"), run, 7) for g in groups]
    got = ol.with_offloaded(meta, records, run, uri, run)
    assert got is not None and got[1] == []
    return got[0]


def test_offloaded_ledgers_plan_as_rows_of_their_files_at_the_same_positions():
    meta = offloaded(log_of((1, 2, 20), (2, 0, 0), (3, 3, 30), (4, 1, 10), (5, 1, 10)), "/store")
    file = "run-00000001-1-3-t0.parquet"
    views = offloaded_views(meta)
    assert sorted(views) == [1, 2, 3]
    assert views[1] == LedgerView(1, (0,), 1, 1, True, 20, 1, 0, offloaded=("/store", file))
    assert (views[3].base, views[3].last_entry_id, views[3].offloaded) == (2, 2, ("/store", file))
    all_views = [views[1], views[2], views[3], LedgerView(4, (0,), 0, 1), LedgerView(5, (0,), 0, 1)]
    bounds = resolve_bounds("orders", all_views, {3: 1}, "latest")
    parts = plan_partitions("orders", all_views, bounds, max_entries=1)
    assert [(p.ledger_id, p.first_entry_id, p.base, p.offloaded) for p in parts] == [
        (3, 1, 2, ("/store", file)), (3, 2, 2, ("/store", file)), (4, 0, 0, None), (5, 0, 0, None)]


def test_the_seam_and_the_files_of_a_snapshot():
    meta = log_of((1, 2, 20), (2, 3, 30), (3, 1, 10), (4, 1, 10), (5, 1, 10))
    assert seam(meta) is None and history_files(meta) == [] and offloaded_views(meta) == {}
    once = offloaded(meta, "/store", max_file_bytes=25)
    assert seam(once) == lm.Position(4, 0)
    assert history_files(once) == ["run-00000001-1-1-t0.parquet", "run-00000001-2-2-t0.parquet",
                                   "run-00000001-3-3-t0.parquet"]


@pytest.mark.parametrize(("first", "last", "expected"), [
    (0, 8, ([0, 1, 2], 0)), (2, 4, ([0, 1], 2)), (3, 3, ([1], 0)), (8, 8, ([2], 2)), (5, 6, ([1, 2], 2))])
def test_row_groups_hold_exactly_the_rows_asked_for(first, last, expected):
    assert row_groups([3, 3, 3], first, last) == expected


def write_file(tmp_path, name: str, ledger_ids, entry_ids, group_rows: int) -> str:
    """A file of the table's schema, as offload writes it, with small row groups; its table store URI."""
    n = len(entry_ids)
    stamps = [dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in range(n)]
    rows = pa.Table.from_pydict({
        "ledger_id": ledger_ids, "entry_id": entry_ids, "offset": list(range(n)),
        "key": [b"k%d" % i for i in range(n)], "timestamp": stamps, "value": [b"v%d" % i for i in range(n)],
    }, schema=store_io.SCHEMA)
    store = store_io.table_store(str(tmp_path), "orders")
    store.fs.create_dir(store.root, recursive=True)
    pq.write_table(rows, store.path(name), row_group_size=group_rows)
    return str(tmp_path)


def test_a_piece_reads_its_rows_from_the_file_with_the_columns_of_a_bookie_read(tmp_path):
    uri = write_file(tmp_path, "f.parquet", [7] * 4 + [9] * 5, [0, 1, 2, 3, 0, 1, 2, 3, 4], group_rows=2)
    schema = arrow_schema(read_schema(True, headers=True))
    part = LedgerPartition("orders", 9, 1, 3, 1, 7, 4, (uri, "f.parquet"))
    batches = list(read_offloaded(OffloadedFiles(), part, schema, True))
    got = pa.Table.from_batches(batches, schema)
    assert got.column_names == ["log", "ledger_id", "entry_id", "value", "key", "timestamp", "headers"]
    assert got.column("log").to_pylist() == ["orders"] * 3
    assert got.column("ledger_id").to_pylist() == [9, 9, 9]
    assert got.column("entry_id").to_pylist() == [1, 2, 3]
    assert got.column("value").to_pylist() == [b"v5", b"v6", b"v7"]
    assert got.column("key").to_pylist() == [b"k5", b"k6", b"k7"]
    assert got.column("timestamp")[0].as_py() == dt.datetime(2026, 1, 1, 0, 0, 5, tzinfo=dt.UTC)
    assert got.column("headers").null_count == 3
    view = LedgerView(9, (0,), 4, 1, True, None, 7, 4, offloaded=(uri, "f.parquet"))
    files = OffloadedFiles()
    assert files.timestamp("orders", view, 2) == 1767225606 * 1_000_000          # row 6: row group 3, first
    assert files.timestamp("orders", view, 3) == 1767225607 * 1_000_000          # row 7: row group 3, second
    assert files.timestamp("orders", view, 0) == 1767225604 * 1_000_000


def test_a_file_not_holding_what_the_log_says_is_refused(tmp_path):
    uri = write_file(tmp_path, "f.parquet", [7] * 4, [0, 1, 2, 3], group_rows=2)
    part = LedgerPartition("orders", 7, 0, 3, 1, 7, 1, (uri, "f.parquet"))     # base 1: rows 1..4 (3 rows)
    with pytest.raises(OffloadError, match="does not hold entries"):
        OffloadedFiles().rows(part)


def test_a_file_gone_since_planning_is_data_loss_that_says_so(tmp_path):
    """A file removed after planning (retention after the deletion lag): OffloadedFileGoneError, never
    fewer rows silently; failOnDataLoss=false skips the piece."""
    uri = write_file(tmp_path, "f.parquet", [7] * 4, [0, 1, 2, 3], group_rows=2)
    part = LedgerPartition("orders", 7, 0, 3, 1, 7, 0, (uri, "f.parquet"))
    schema = arrow_schema(read_schema(True))
    store = store_io.table_store(uri, "orders")
    store.fs.delete_file(store.path("f.parquet"))
    with pytest.raises(OffloadedFileGoneError, match="planned before it was removed"):
        list(read_offloaded(OffloadedFiles(), part, schema, True))
    assert list(read_offloaded(OffloadedFiles(), part, schema, False)) == []


def test_read_log_names_the_files_as_spark_reads_them_and_reads_whole_logs_only(tmp_path):
    from bkledger.spark_connector import read_log
    from bkledger.spark_connector.history import file_uri
    from bkledger.spark_connector.options import BkLedgerOptionError

    assert file_uri(str(tmp_path), "orders", "run-1.parquet") == f"file://{tmp_path}/orders/run-1.parquet"
    s3 = "s3://bucket/pre?endpoint_override=127.0.0.1:9&scheme=http&region=us-east-1"
    assert file_uri(s3, "a/b", "f.parquet") == f"s3a://bucket/pre/{ol.table_dir('a/b')}/f.parquet"
    for option in ("startingPositions", "endingTimestamp", "log", "ledgers"):
        with pytest.raises(BkLedgerOptionError, match="read_log reads one whole log"):
            read_log(None, "orders", metadataServiceUri="zk://127.0.0.1:1/ledgers", **{option: "1"})
