"""Spark reads of a compacted log: a checkpointed streaming query restarted after compaction of what it had
read, and batch reads with positions held from before compaction (real Spark, bookies, ZooKeeper)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bkledger.client.log.core.meta import Position
from tests.spark.test_streaming import Collector, fill, fresh, stream

pytestmark = pytest.mark.spark


def batch(spark, uri: str, log: str, **options: str):
    r = spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", log)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def test_streaming_query_restarts_after_compaction_of_what_it_read(spark, cluster, bk, tmp_path: Path) -> None:
    """A query reads 120 records (12 ledgers) and stops; compaction rewrites what it read (old ledgers
    deleted at once); the query restarts from its checkpoint and reads exactly the 40 new records, in
    order, at the positions a fresh query sees them."""
    uri, log = cluster.metadata_service_uri, fresh("compact-stream")
    checkpoint = str(tmp_path / "ck")
    fill(bk, log, 0, 120, roll_entries=10)

    def run() -> Collector:
        sink = Collector()
        q = (stream(spark, uri, log, maxEntriesPerTrigger="25").writeStream.foreachBatch(sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        assert q.awaitTermination(120), "Trigger.AvailableNow did not end"
        return sink

    first = run()
    assert [v for _, _, v in first.rows] == [b"%d" % i for i in range(120)]
    done = bk.compact_log(log, target_bytes=1 << 20, min_ledgers=2, grace_s=0)
    assert done.replaced == 10 and done.deleted                        # what it read is rewritten and gone
    fill(bk, log, 120, 40, roll_entries=10)
    second = run()
    assert [v for _, _, v in second.rows] == [b"%d" % i for i in range(120, 160)]
    everything = Collector()
    q = (stream(spark, uri, log).writeStream.foreachBatch(everything)
         .option("checkpointLocation", str(tmp_path / "fresh")).trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    assert everything.rows == first.rows + second.rows                  # same positions before and after


def test_batch_read_positions_across_compaction(spark, cluster, bk) -> None:
    """startingPositions/endingPositions naming ledgers that compaction replaced still select the same rows,
    and a compacted log reads back the same (ledger_id, entry_id, value) rows in few tasks."""
    uri, log = cluster.metadata_service_uri, fresh("compact-batch")
    fill(bk, log, 0, 60, roll_entries=5)
    rows = [(r.ledger_id, r.entry_id, bytes(r.value)) for r in batch(spark, uri, log).collect()]
    bk.compact_log(log, target_bytes=1 << 20, min_ledgers=2, grace_s=0)
    assert len(bk.log_metadata(log).ledgers) == 3
    after = batch(spark, uri, log)
    assert [(r.ledger_id, r.entry_id, bytes(r.value)) for r in after.collect()] == rows
    assert after.rdd.getNumPartitions() == 1
    (start_lid, start_e, _), (end_lid, end_e, _) = rows[12], rows[31]
    narrowed = batch(spark, uri, log, startingPositions=f'{{"{log}": {{"{start_lid}": {start_e}}}}}',
                     endingPositions=f'{{"{log}": {{"{end_lid}": {end_e}}}}}')
    assert [(r.ledger_id, r.entry_id, bytes(r.value)) for r in narrowed.collect()] == rows[12:31]


def test_streaming_query_whose_ledgers_were_truncated_meets_data_loss(spark, cluster, bk, tmp_path: Path) -> None:
    """A trigger reads the log from its start ledger's segment only; a start ledger truncated away is still
    seen as such: failOnDataLoss=true fails the query, false goes on from the log's earliest record."""
    uri, log = cluster.metadata_service_uri, fresh("truncated-stream")
    checkpoint = str(tmp_path / "ck")
    fill(bk, log, 0, 30, roll_entries=10)

    def run(**options: str) -> Collector:
        sink = Collector()
        q = (stream(spark, uri, log, **options).writeStream.foreachBatch(sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        try:
            q.awaitTermination(120)
        finally:
            q.stop()
        return sink

    assert [v for _, _, v in run(maxEntriesPerTrigger="15").rows] == [b"%d" % i for i in range(30)]
    fill(bk, log, 30, 30, roll_entries=10)
    kept = bk.log_metadata(log).ledgers[-2].ledger_id
    bk.truncate_log(log, before=Position(kept, 0))
    with pytest.raises(Exception, match="truncated from log"):
        run()
    assert [v for _, _, v in run(failOnDataLoss="false").rows] == [b"%d" % i for i in range(40, 60)]
