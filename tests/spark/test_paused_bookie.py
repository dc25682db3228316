"""A Spark read of a log whose ensembles include a SIGSTOPped bookie completes, with every row, about as
fast as healthy: the connector's readers speculate past the paused bookie (R13) instead of waiting for
each request's timeout. Its own cluster: pausing a bookie must not disturb other modules' tests."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from bkledger.bookie.local.cluster import LocalCluster
from tests.integration.conftest import start_cluster

pytestmark = pytest.mark.spark
ROWS = 20_000


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[LocalCluster]:
    made = start_cluster(tmp_path_factory.mktemp("paused-cluster"), zookeeper, 3)
    yield made
    made.down()


def test_r13_spark_read_with_a_paused_bookie(spark, own_cluster) -> None:
    from bkledger.client import BookKeeper

    uri, log = own_cluster.metadata_service_uri, f"paused-{uuid.uuid4().hex[:8]}"
    with BookKeeper(uri) as bk:
        writer = bk.open_log_writer(log, ensemble_size=3, write_quorum=3, ack_quorum=2)
        for future in [writer.append_async(b"row-%06d" % i) for i in range(ROWS)]:
            future.result(30)
        writer.close()
    df = spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", log)
    start = time.monotonic()
    healthy_rows = sorted(r.value for r in df.load().select("value").collect())
    healthy = time.monotonic() - start
    assert healthy_rows == [b"row-%06d" % i for i in range(ROWS)]
    with BookKeeper(uri) as bk:
        first = bk.ledger_metadata(bk.list_ledgers()[0]).last_fragment.ensemble[0]   # E=3 of 3: in every one
    index = next(b.index for b in own_cluster.bookies if b.bookie_id == first)
    own_cluster.signal_bookie(index, signal.SIGSTOP)
    try:
        start = time.monotonic()
        rows = sorted(r.value for r in df.load().select("value").collect())
        paused = time.monotonic() - start
    finally:
        own_cluster.signal_bookie(index, signal.SIGCONT)
    assert rows == healthy_rows
    # Without speculation each read chunk from the paused bookie waits readTimeout x 4 = 20 s.
    assert paused < healthy + 15.0, f"Spark read with a paused bookie took {paused:.1f}s (healthy {healthy:.1f}s)"
