"""Session fixtures shared by every test: one real ZooKeeper server, and a fresh ledgers root per test.

The server is the real ZooKeeper (QuorumPeerMain from the pyspark wheel's jars) on 127.0.0.1, started
once per test session by `bookie.local.zookeeper.ZooKeeperServer`. Each test that asks for
`metadata_uri` gets its own chroot `/test-<uuid>/ledgers`, so tests never see each other's znodes.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkledger.bookie.local.zookeeper import ZooKeeperServer
from bkledger.client.meta.store import MetadataStore

#: Every JVM the tests start (ZooKeeper, Spark drivers and workers, Spark Connect), in this process and the
#: processes it starts, compiles with C1 only: they live seconds to minutes, where C2's compiler threads
#: cost more CPU than they win back, on a 2-core machine that the suite keeps busy (tests/spark/test_batch.py:
#: 101 CPU-s without, 82 with). The JVM notes the option on its stderr ("Picked up JAVA_TOOL_OPTIONS").
JIT_OPTION = "-XX:TieredStopAtLevel=1"
if JIT_OPTION not in os.environ.get("JAVA_TOOL_OPTIONS", ""):
    os.environ["JAVA_TOOL_OPTIONS"] = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} {JIT_OPTION}".strip()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer()
    server.start(tmp_path_factory.mktemp("zookeeper"), port=0, timeout=30.0)
    try:
        yield server
    finally:
        server.stop(timeout=10.0)


@pytest.fixture
def metadata_uri(zookeeper: ZooKeeperServer) -> str:
    """`zk://127.0.0.1:<port>/test-<uuid>/ledgers`; the parent znode exists, the root does not yet."""
    parent = f"/test-{uuid.uuid4().hex[:12]}"
    uri = f"zk://{zookeeper.connect_string}{parent}/ledgers"
    with MetadataStore(uri, session_timeout=5.0) as store:
        store.create(parent, b"", makepath=True)
    return uri


@pytest.fixture
def zk_data_dir(tmp_path: Path) -> Path:
    return tmp_path / "zk"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `pytest -n N --dist loadgroup` (`make test`), a module's tests run in one worker, so its module
    fixtures (a cluster, a SparkSession's data) start once: each test without an `xdist_group` mark of its
    own is put in its module's group. Tests marked `xdist_group(name)` run in that group's worker, whatever
    their module. Without xdist the mark means nothing."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
