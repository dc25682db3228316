"""Fixtures of the Spark tests: one real local SparkSession and one bookie cluster for the session.

The session is `local[2]` on 127.0.0.1 with the UI off and few shuffle partitions; its Python workers
run this interpreter. Spark's auto-registration of `pyspark_*` modules runs the lookup with the default
Python (PYSPARK_PYTHON) and finds modules with `pkgutil.iter_modules`, which does not see modules of a
setuptools editable install (they come through an import hook): the repo root goes on PYTHONPATH here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.spark_connector import clients
from tests.integration.conftest import start_cluster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark() -> Iterator:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]").appName("bkledger-tests")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        # a Python worker's connect back to the JVM times out after 15 s by default: too short when the
        # machine is loaded (seen at load 20 on 2 cores: "Python worker failed to connect back")
        .config("spark.python.authenticate.socketTimeout", "120s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module", autouse=True)
def no_shared_clients_left() -> Iterator[None]:
    """Driver-side code run in this process (a sink's planning, for one) caches a client per URI
    (spark_connector.clients). Left open, its ZooKeeper session outlives the module's cluster, and its
    kazoo thread keeps drawing from the global `random` while later Hypothesis tests generate data
    (HypothesisDeprecationWarning: "Do not use the `random` module inside strategies")."""
    yield
    clients.close_all()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[LocalCluster]:
    """Three real bookies shared by the Spark tests of the session (a start and stop of three bookie
    processes per module cost ~2.5 s each): no Spark test kills, pauses or reconfigures them (those that do
    start their own), each writes logs and ledgers of fresh names, and what a test counts of the cluster's
    ledgers it counts as a difference from before."""
    made = start_cluster(tmp_path_factory.mktemp("spark-cluster"), zookeeper, 3)
    yield made
    made.down()


@pytest.fixture(scope="module")
def bk(cluster: LocalCluster) -> Iterator:
    from bkledger.client import BookKeeper

    client = BookKeeper(cluster.metadata_service_uri)
    yield client
    client.close()
