"""A Spark job against a secure cluster (README "Security"): the TLS and ZooKeeper settings given as options
reach the driver's planning client and every task's client; without them the query fails on the driver with
an error that names the missing settings."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory, zookeeper) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("spark-secure"))
    try:                    # stopped also when the setup fails half-way
        cluster.up(3, {"gcWaitTime": "0"}, zookeeper_port=zookeeper.port,
                   root=f"/spark-secure-{uuid.uuid4().hex[:8]}/ledgers", autorecovery=False, secure=True)
        yield cluster
    finally:
        cluster.down()


def test_append_and_read_with_tls_and_acls(spark, secure_cluster) -> None:
    uri, log = secure_cluster.metadata_service_uri, f"secure-{uuid.uuid4().hex[:8]}"
    options = secure_cluster.client_options
    df = spark.range(0, 2000, numPartitions=2).selectExpr("cast(cast(id as string) as binary) as value")
    df.write.format("bkledger").option("metadataServiceUri", uri).option("log", log).options(**options) \
        .mode("append").save()
    out = spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", log).options(**options).load()
    assert sorted(int(r.value) for r in out.select("value").collect()) == list(range(2000))
    with BookKeeper(uri, **options) as bk:
        assert bk.log_metadata(log).entries == 2000


def test_without_credentials_the_query_fails_on_the_driver(spark, secure_cluster) -> None:
    uri, log = secure_cluster.metadata_service_uri, f"guarded-{uuid.uuid4().hex[:8]}"
    with BookKeeper(uri, **secure_cluster.client_options) as bk, bk.open_log_writer(log) as writer:
        writer.append(b"secret")
    with pytest.raises(Exception, match="zkDigestPasswordPath"):
        spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", log).load().collect()


def test_secure_demo(spark) -> None:
    """examples/secure_pipeline.py (make demo-secure) runs end to end and shows each refusal."""
    from examples import secure_pipeline

    result = secure_pipeline.main(rows=2_000, spark=spark)
    assert result["simpletest_ok"] and result["auditor"] and result["rows"] == 2_000
    assert result["refusals"] == ["BookieTlsError", "BookieTlsError", "MetadataAccessDeniedError"]
