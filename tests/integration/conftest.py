"""Fixtures for integration tests: real bookie processes on 127.0.0.1 over the session's ZooKeeper."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bookie.local.cluster import LocalCluster


def start_cluster(base: Path, zookeeper, bookies: int, conf: dict[str, str] | None = None) -> LocalCluster:
    cluster = LocalCluster(base)
    root = f"/it-{uuid.uuid4().hex[:8]}/ledgers"
    cluster.up(bookies, conf or {}, zookeeper_port=zookeeper.port, root=root)
    return cluster


@pytest.fixture
def cluster_factory(tmp_path: Path, zookeeper) -> Iterator:
    """Start clusters with chosen sizes and settings; all are stopped at the end of the test."""
    made: list[LocalCluster] = []

    def make(bookies: int = 3, conf: dict[str, str] | None = None, name: str = "cluster") -> LocalCluster:
        cluster = start_cluster(tmp_path / name, zookeeper, bookies, conf)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.down()


@pytest.fixture
def cluster3(cluster_factory) -> LocalCluster:
    return cluster_factory(3)
