"""A streaming query that names a cursor (option `cursor`, issue 44 item 3) acknowledges each committed
batch's end to it, so the query's lag is visible outside Spark and retention keeps what it has not read.
Real local SparkSession, real ZooKeeper and bookies."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from bkledger.client import BookKeeper, Position
from bkledger.spark_connector.options import BkLedgerOptionError
from bkledger.spark_connector.stream_source import parse_stream_options
from tests.spark.test_streaming import Collector, stream

pytestmark = pytest.mark.spark


def cursor_row(bk: BookKeeper, log: str, cursor: str) -> dict:
    rows = {c["cursor"]: c for c in bk.list_cursors(log)["cursors"]}
    return rows.get(cursor, {})


def wait_for(what, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"not true within {timeout} s: {what}")


def test_cursor_option_is_checked() -> None:
    with pytest.raises(BkLedgerOptionError, match="cursor"):
        parse_stream_options({"metadataServiceUri": "zk://127.0.0.1:2181/ledgers", "log": "x", "cursor": "a/b"})
    opts = parse_stream_options({"metadataServiceUri": "zk://127.0.0.1:2181/ledgers", "log": "x", "cursor": "etl"})
    assert opts.cursor == "etl"


def test_stream_acknowledges_committed_batches_to_its_cursor(spark, cluster, bk, tmp_path: Path) -> None:
    """250 records in batches of 100: Spark commits batch N-1 while planning batch N, so once all are read
    the cursor stands at the end of batch 1 (record 200, lag 50); 10 new records start batch 3, whose
    planning commits batch 2 (record 250, lag 10, or less when a trigger splits the 10). Retention keeps the
    ledger holding record 200 meanwhile."""
    uri, log = cluster.metadata_service_uri, f"cur-{uuid.uuid4().hex[:8]}"
    with bk.open_log_writer(log, roll_entries=40) as w:
        positions = [w.append(b"%d" % i) for i in range(250)]
    sink = Collector()
    q = (stream(spark, uri, log, maxEntriesPerTrigger="100", cursor="etl").writeStream.foreachBatch(sink)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="300 milliseconds").start())
    try:
        wait_for(lambda: len(sink.rows) >= 250 or q.exception())
        assert q.exception() is None
        row = wait_for(lambda: (r := cursor_row(bk, log, "etl")).get("lag_entries") == 50 and r)
        after_199 = Position(positions[199].ledger_id, positions[199].entry_id + 1)     # = record 200's position
        assert row["position"] in (str(after_199), str(positions[200]))
        ids = bk.log_metadata(log).ledger_ids             # 7 ledgers of 40 records; record 200 is in ids[5]
        bk.set_log_retention(log, max_bytes=1)               # would keep only the last ledger
        assert bk.apply_log_retention(log) == ids[:5]
        with bk.open_log_writer(log) as w:
            more = [w.append(b"%d" % i) for i in range(250, 260)]
        wait_for(lambda: len(sink.rows) >= 260 or q.exception())
        end = Position(positions[-1].ledger_id, positions[-1].entry_id + 1)
        # The 10 appends are acknowledged one by one, so a trigger may plan batch 3 before all are visible:
        # the last batch then starts at more[k], planning it committed the previous batch's end, and the
        # cursor lags by exactly the 10 - k records of the batch not yet committed.
        starts = {str(end): 0, str(more[0]): 0} | {str(more[k]): k for k in range(1, 10)}

        def moved_past_250() -> dict | bool:
            r = cursor_row(bk, log, "etl")
            return r.get("position") in starts and r.get("lag_entries") == 10 - starts[r["position"]] and r

        row = wait_for(moved_past_250)
        assert 1 <= row["lag_entries"] <= 10
        assert more[0].ledger_id > positions[-1].ledger_id
    finally:
        q.stop()
    assert [v for _, _, v in sink.rows] == [b"%d" % i for i in range(260)]
