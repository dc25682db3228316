"""Fixtures for integration tests: real bookie processes on 127.0.0.1 over the session's ZooKeeper."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig

FAST_CLIENT = {"addEntryTimeoutSec": 3.0, "readTimeout": 3.0, "fenceTimeout": 3.0}


def start_cluster(base: Path, zookeeper, bookies: int, conf: dict[str, str] | None = None,
                  scheme: str = "zk", autorecovery: bool = False) -> LocalCluster:
    """Autorecovery daemons are off unless asked for: they would re-replicate behind other tests' backs.
    Bookie GC is off unless the conf sets gcWaitTime: the bookie-level tests write ledgers that have no
    metadata, which a bookie's garbage collection rightly deletes."""
    cluster = LocalCluster(base)
    root = f"/it-{uuid.uuid4().hex[:8]}/ledgers"
    cluster.up(bookies, {"gcWaitTime": "0", **(conf or {})}, zookeeper_port=zookeeper.port, root=root,
               scheme=scheme, autorecovery=autorecovery)
    return cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[LocalCluster]:
    """Three bookies shared by the tests of every module that does not define its own (the log tests': one
    start for all of them, not ~2.5 s per module). Such a test neither kills, pauses nor reconfigures them,
    names its logs afresh, and counts the cluster's ledgers only as a difference from before."""
    made = start_cluster(tmp_path_factory.mktemp("cluster"), zookeeper, 3)
    try:
        yield made
    finally:
        made.down()


@pytest.fixture
def bk(cluster: LocalCluster) -> Iterator[BookKeeper]:
    client = BookKeeper(cluster.metadata_service_uri)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def cluster_factory(tmp_path: Path, zookeeper) -> Iterator:
    """Start clusters with chosen sizes and settings; all are stopped at the end of the test."""
    made: list[LocalCluster] = []

    def make(bookies: int = 3, conf: dict[str, str] | None = None, name: str = "cluster",
             scheme: str = "zk", autorecovery: bool = False) -> LocalCluster:
        cluster = start_cluster(tmp_path / name, zookeeper, bookies, conf, scheme, autorecovery)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.down()


@pytest.fixture
def cluster3(cluster_factory) -> LocalCluster:
    return cluster_factory(3)


@pytest.fixture(scope="module")
def shared3(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, zookeeper
            ) -> Iterator[LocalCluster]:
    """Three bookies shared by one module's tests that only pause bookies (a pause ends with its test) and
    write ledgers of their own; none kills or reconfigures one: one start per module, not one per test.
    Tests take it through `registered3`."""
    made = start_cluster(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]), zookeeper, 3)
    try:
        yield made
    finally:
        made.down()


@pytest.fixture
def registered3(shared3: LocalCluster) -> LocalCluster:
    """The module's shared bookies, each registered and serving again (a bookie paused by an earlier test
    may still be registering again after its ZooKeeper session expired)."""
    shared3.wait_registered(30.0)
    return shared3


@pytest.fixture(scope="module")
def shared_cluster5(tmp_path_factory, zookeeper) -> Iterator[LocalCluster]:
    """Five bookies shared by the non-destructive tests of one module."""
    cluster = start_cluster(tmp_path_factory.mktemp("shared5"), zookeeper, 5)
    yield cluster
    cluster.down()


@pytest.fixture
def bk_factory() -> Iterator:
    """BookKeeper clients with short timeouts, closed at the end of the test."""
    made: list[BookKeeper] = []

    def make(uri: str, **options: float) -> BookKeeper:
        bk = BookKeeper(uri, config=ClientConfig.from_options({**FAST_CLIENT, **options}))
        made.append(bk)
        return bk

    yield make
    for bk in made:
        bk.close()
