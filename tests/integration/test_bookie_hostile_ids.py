"""A bookie cannot be wedged by an entry id, never forgets a fence, never scans on its loop (issue 41, 1-3).

Real bookie processes of a local cluster; the checkpoint is made to fail for real, by strace fault injection
(every rename of the bookie process gets EIO: a meta file and the lastMark are written by a rename).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from bkledger.bookie.local.cluster import LocalCluster, bookie_health
from bkledger.client.bookie_client import BookieClient
from bkledger.client.protocol.digest import package_batch
from bkledger.proto import bookie_pb2 as pb
from tests.integration.bookie_util import DIGEST, add, expected_payload, read, wait_for

pytestmark = pytest.mark.integration

FAST_CHECKPOINTS = {"flushInterval": "200", "checkpointFailuresBeforeReadOnly": "2"}


def _raw(ledger_id: int, entry_id: int, lac: int) -> tuple[bytes, list[int]]:
    """One packaged entry with the piggy-backed LAC a (buggy or hostile) writer chose."""
    return package_batch(DIGEST, ledger_id, entry_id, lac, 0, [b"wild"])


def _health(cluster: LocalCluster, index: int = 0) -> dict[str, Any]:
    health = bookie_health(cluster.bookies[index].http_port)
    assert health is not None, "the bookie's admin HTTP API does not answer"
    return health


def _list_entries(address: str, ledger_id: int, timeout: float = 10.0) -> pb.GetListOfEntriesResponse:
    async def go() -> pb.GetListOfEntriesResponse:
        client = BookieClient(address, address)
        try:
            return await client.list_entries(ledger_id, timeout)
        finally:
            await client.close()

    return asyncio.run(go())


def _metrics(http_port: int) -> dict[str, float]:
    """The bookie's Prometheus samples, by name with labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def _checkpointed_since(cluster: LocalCluster, since: float) -> bool:
    return _health(cluster)["lastCheckpointTime"] > since


def test_far_entry_ids_get_ebadreq_with_the_clients_address(cluster_factory):
    """R26: an add far beyond the ledger's known range (entry 2^32 of a writer whose LAC is 8: a 32-bit bug),
    a forged one past the index file limit (2^62 with LAC 2^62-1) and such a recovery add get EBADREQ, each
    logged with the client's address; the bookie goes on serving and checkpointing, nothing was stored."""
    cluster = cluster_factory(1, conf=FAST_CHECKPOINTS)
    bookie = cluster.bookies[0]
    assert add(bookie.address, 5, list(range(10))).ok() == list(range(10))
    wild = {2**32: (2**32, 8, False), 2**62: (2**62, 2**62 - 1, False), 2**40: (2**40, 9, True)}
    for entry_id, (eid, lac, recovery) in wild.items():
        result = add(bookie.address, 5, [eid], raw=_raw(5, eid, lac), recovery=recovery)
        assert result.statuses == {entry_id: pb.EBADREQ}, entry_id
    text = Path(bookie.log).read_text()
    assert text.count("refused with EBADREQ") >= 3 and "from ipv4:127.0.0.1:" in text, text[-2000:]
    assert add(bookie.address, 5, [10, 11]).ok() == [10, 11]
    since = time.time()
    wait_for(lambda: _checkpointed_since(cluster, since), 20, "a checkpoint after the refused adds")
    health = _health(cluster)
    assert health["checkpointFailures"] == 0 and not health["storageFailed"] and health["state"] == "writable"
    listed = _list_entries(bookie.address, 5)
    assert listed.status == pb.EOK and list(listed.entry_ids) == list(range(12))


def test_ensemble_change_far_into_a_ledger_is_accepted(cluster_factory):
    """A bookie that joins a ledger's ensemble at entry 10^8 knows nothing of the ledger: the LAC its first
    batch carries (the writer's, trailing the ids by the adds in flight) puts the ids in the known range."""
    cluster = cluster_factory(1)
    address = cluster.bookies[0].address
    first = 10**8
    data, sizes = package_batch(DIGEST, 6, first, first - 50, 0, [b"a", b"b", b"c"])
    assert add(address, 6, [first, first + 1, first + 2], raw=(data, sizes)).ok() == [first, first + 1, first + 2]
    listed = _list_entries(address, 6)
    assert list(listed.entry_ids) == [first, first + 1, first + 2]


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace for fault injection")
def test_failing_checkpoints_turn_the_bookie_read_only_and_a_fence_survives_the_restart(cluster_factory):
    """R15, R22: while every checkpoint fails (strace injects EIO into the bookie's renames), the failures are
    counted and the bookie turns read-only, visibly in /api/v1/bookie/state and `local status`; killed then
    (no checkpoint ever succeeded after the fence), it restarts with the fence held (a plain add gets
    EFENCED) and every acknowledged entry reads back byte for byte."""
    cluster = cluster_factory(1, conf={"flushInterval": "500", "checkpointFailuresBeforeReadOnly": "8"})
    bookie = cluster.bookies[0]
    assert add(bookie.address, 1, list(range(20))).ok() == list(range(20))
    assert add(bookie.address, 2, list(range(5))).ok() == list(range(5))
    since = time.time()
    wait_for(lambda: _checkpointed_since(cluster, since), 20, "a first checkpoint")
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-p", str(bookie.pid), "-e", "trace=rename,renameat,renameat2",
                               "-e", "inject=rename,renameat,renameat2:error=EIO", "-o", "/dev/null"])
    try:
        wait_for(lambda: _health(cluster)["checkpointFailures"] >= 1, 20, "the first injected checkpoint failure")
        assert read(bookie.address, 2, -1, fence=True).status == pb.EOK
        assert add(bookie.address, 1, list(range(20, 40))).ok() == list(range(20, 40))
        wait_for(lambda: _health(cluster)["storageFailed"], 30, "failed checkpoints to turn storage failed")
        health = _health(cluster)
        assert health["checkpointFailures"] >= 8 and health["state"] == "read-only", health
        assert health["threadFailures"].get("checkpoint", 0) >= 8
        assert add(bookie.address, 1, [40]).statuses == {40: pb.EREADONLY}
        row = cluster.status(health=True)["bookies"][0]["health"]
        assert row["storageFailed"] and row["state"] == "read-only"
        metrics = _metrics(bookie.http_port)
        assert metrics["bookie_CHECKPOINT_FAILURES_total"] >= 8 and metrics["bookie_LEDGER_STORAGE_FAILED"] == 1
        assert 0 < metrics["bookie_LAST_CHECKPOINT_TIMESTAMP_SECONDS"] < time.time()
        assert metrics['bookie_THREAD_FAILURES_total{thread="checkpoint"}'] >= 8
        cluster.kill_bookie(0)
    finally:
        tracer.terminate()
        tracer.wait(10)
    cluster.start_bookie(0)
    cluster.wait_registered(60)
    assert add(bookie.address, 2, [5]).statuses == {5: pb.EFENCED}
    for entry_id in range(40):
        response = read(bookie.address, 1, entry_id)
        assert response.status == pb.EOK and response.body.endswith(expected_payload(entry_id)), entry_id
    assert _health(cluster)["state"] == "writable"


def test_sigterm_stops_a_bookie_listing_a_sparse_ledger(cluster_factory):
    """R26: GetListOfEntries of a ledger with an entry at 2^31 (a 48 GiB sparse index file) answers at once
    (the scan skips the index's holes, off the event loop), reads are served meanwhile, and SIGTERM stops
    the bookie within a few seconds."""
    cluster = cluster_factory(1, conf=FAST_CHECKPOINTS)
    bookie = cluster.bookies[0]
    far = 2**31
    assert add(bookie.address, 3, list(range(10))).ok() == list(range(10))
    assert add(bookie.address, 3, [far], raw=_raw(3, far, far - 1)).ok() == [far]
    since = time.time()
    wait_for(lambda: _checkpointed_since(cluster, since), 20, "the sparse index written")
    started = time.monotonic()
    listed = _list_entries(bookie.address, 3)
    assert list(listed.entry_ids) == [*range(10), far]
    assert read(bookie.address, 3, far).status == pb.EOK
    assert time.monotonic() - started < 5
    stopping = time.monotonic()
    assert cluster.stop_bookie(0, timeout=10) == 0
    assert time.monotonic() - stopping < 5
