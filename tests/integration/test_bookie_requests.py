"""Bookie request handling on real processes: bad input never crashes it (R26), read-only (R25), LAC."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from bkledger.bookie.local.cluster import accepts
from bkledger.client.bookie_client import BookieClient
from bkledger.client.meta.store import MetadataStore
from bkledger.proto import bookie_pb2 as pb
from tests.integration.bookie_util import add, fenced_range, package, read, read_range, wait_for

pytestmark = pytest.mark.integration


def test_range_read_sends_only_the_asked_residues(cluster_factory):
    """ReadRangeRequest.residue_modulus/mask: a striped reader's covering bookie sends only the entries it
    is asked for (id % modulus a bit of mask), in order, across batches; modulus 0 means all."""
    cluster = cluster_factory(1)
    address = cluster.bookies[0].address
    assert add(address, 7, list(range(200)), per_batch=50).ok() == list(range(200))
    assert read_range(address, 7, 0, 199) == list(range(200))
    assert read_range(address, 7, 0, 199, residues=(3, 0b101)) == [e for e in range(200) if e % 3 != 1]
    assert read_range(address, 7, 10, 20, residues=(4, 0b0010)) == [13, 17]
    assert read_range(address, 7, 0, 199, residues=(3, 0)) == []


def test_wrong_master_key_gets_eua(cluster_factory):
    """R26: an add or a fence with another master key is refused with EUA; the ledger is untouched."""
    cluster = cluster_factory(1)
    address = cluster.bookies[0].address
    assert add(address, 1, [0]).ok() == [0]
    wrong = bytes(20)
    assert add(address, 1, [1], key=wrong).statuses == {1: pb.EUA}
    assert read(address, 1, -1, fence=True, key=wrong).status == pb.EUA
    assert add(address, 1, [1]).ok() == [1]                   # not fenced by the refused fence


def test_recovery_range_read_fences_like_a_fencing_read(cluster_factory):
    """R18/R15: a range read with the fence flag checks the master key, fences, then streams what is held;
    adds after it get EFENCED. A ledger the bookie never saw is fenced and answers an empty range."""
    cluster = cluster_factory(1)
    address = cluster.bookies[0].address
    assert add(address, 7, [0, 1, 2]).ok() == [0, 1, 2]
    assert fenced_range(address, 7, 0, 9, key=bytes(20)) == (pb.EUA, [])
    assert add(address, 7, [3]).ok() == [3]                   # the refused fence fenced nothing
    assert fenced_range(address, 7, 0, 9) == (pb.EOK, [0, 1, 2, 3])
    assert add(address, 7, [4]).statuses == {4: pb.EFENCED}
    assert fenced_range(address, 8, 0, 9) == (pb.EOK, [])
    assert add(address, 8, [0]).statuses == {0: pb.EFENCED}


def test_malformed_and_oversized_requests_get_ebadreq(cluster_factory):
    """R26: malformed batches and entries over nettyMaxFrameSizeBytes get EBADREQ; the bookie stays up."""
    cluster = cluster_factory(1, conf={"nettyMaxFrameSizeBytes": "65536"})
    address = cluster.bookies[0].address
    data, sizes = package(2, [0, 1])
    cases = {
        "sizes do not add up": (data, [sizes[0], sizes[1] + 5]),
        "header names another entry": package(2, [5, 6]),
        "shorter than a header": (b"abc", [3]),
    }
    for name, raw in cases.items():
        result = add(address, 2, [0, 1] if name != "shorter than a header" else [0], raw=raw)
        assert set(result.statuses.values()) == {pb.EBADREQ}, name
    big = add(address, 2, [0], raw=package(2, [0], payload=b"y" * 70000))
    assert big.statuses == {0: pb.EBADREQ}
    assert add(address, 2, [0, 1]).ok() == [0, 1]             # still serving, nothing stored by the bad ones
    assert read(address, 2, 0).status == pb.EOK
    assert read(address, 3, 0).status == pb.ENOLEDGER
    assert read(address, 2, 9).status == pb.ENOENTRY
    assert cluster.status()["bookies"][0]["alive"]


def test_long_poll_waits_for_the_lac_to_move(cluster_factory):
    """A read with previous_lac returns once the LAC known to the bookie passes it (or times out)."""
    cluster = cluster_factory(1)
    address = cluster.bookies[0].address
    assert add(address, 5, [0, 1]).ok() == [0, 1]           # entry 1 carries LAC 0

    async def poll(previous: int, timeout_ms: int) -> tuple[pb.ReadResponse, float]:
        client = BookieClient(address, address)
        start = time.monotonic()
        try:
            request = pb.ReadRequest(ledger_id=5, entry_id=-1, has_previous_lac=True, previous_lac=previous,
                                     timeout_ms=timeout_ms, piggyback_entry=True)
            return await client.read(request, 10), time.monotonic() - start
        finally:
            await client.close()

    response, waited = asyncio.run(poll(-1, 5000))
    assert response.max_lac == 0 and response.entry_id == 0 and waited < 2
    response, waited = asyncio.run(poll(0, 300))
    assert response.max_lac == 0 and waited >= 0.25             # nothing new: waits out the timeout

    async def poll_then_add() -> pb.ReadResponse:
        task = asyncio.create_task(poll(0, 8000))
        await asyncio.sleep(0.2)
        await asyncio.to_thread(add, address, 5, [2])           # entry 2 carries LAC 1
        response, _ = await task
        return response

    response = asyncio.run(poll_then_add())
    assert response.max_lac == 1 and response.entry_id == 1


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_makes_the_bookie_read_only_and_it_still_serves_reads(cluster_factory, small_tmpfs):
    """R25: filling the bookie's real (tmpfs) disk past diskUsageThreshold turns it read-only: it
    re-registers under readonly, refuses adds with EREADONLY, and still serves every acknowledged entry."""
    conf = {
        "journalDirectories": str(small_tmpfs / "journal"),
        "ledgerDirectories": str(small_tmpfs / "ledgers"),
        "diskUsageThreshold": "0.6",
        "diskUsageLwmThreshold": "0.5",
        "diskCheckInterval": "100",
    }
    cluster = cluster_factory(1, conf=conf)
    bookie = cluster.bookies[0]
    acked: list[int] = []
    payload_ids = 0
    deadline = time.monotonic() + 60
    while bookie.bookie_id not in _readonly(cluster.metadata_service_uri):
        assert time.monotonic() < deadline, "the bookie never turned read-only"
        ids = list(range(payload_ids, payload_ids + 200))
        payload_ids += 200
        result = add(bookie.address, 9, ids, raw=None)
        acked += result.ok()
        if any(s == pb.EREADONLY for s in result.statuses.values()):
            break
    assert _wait_readonly(cluster.metadata_service_uri, bookie.bookie_id)
    refused = add(bookie.address, 9, [payload_ids])
    assert refused.statuses == {payload_ids: pb.EREADONLY}
    assert acked and read_range(bookie.address, 9, 0, payload_ids) == acked
    assert read(bookie.address, 9, acked[-1]).status == pb.EOK


def _readonly(uri: str) -> list[str]:
    with MetadataStore(uri) as store:
        return store.readonly_bookies()


def _wait_readonly(uri: str, bookie_id: str, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with MetadataStore(uri) as store:
            if bookie_id in store.readonly_bookies() and bookie_id not in store.writable_bookies():
                return True
        time.sleep(0.1)
    return False


def test_bookie_stops_cleanly_on_sigterm(cluster_factory):
    """SIGTERM: the bookie unregisters, checkpoints and exits 0, and its log names who sent the signal."""
    cluster = cluster_factory(1)
    bookie = cluster.bookies[0]
    assert add(bookie.address, 4, list(range(50))).ok() == list(range(50))
    code = cluster.stop_bookie(0)
    assert code == 0
    with MetadataStore(cluster.metadata_service_uri) as store:
        assert bookie.bookie_id not in store.writable_bookies()
    assert (Path(bookie.ledger_dirs[0]) / "current" / "lastMark").exists()
    text = Path(bookie.log).read_text()
    assert "stopped" in text
    assert f"got SIGTERM from pid {os.getpid()} " in text, text[-500:]


def test_bookie_stops_on_sigterm_even_with_zookeeper_gone(tmp_path):
    """A bookie whose ZooKeeper has gone away still stops promptly on SIGTERM (bounded shutdown).

    The disk check runs every 100 ms and kazoo has failed to reconnect twice before the SIGTERM: once the
    check asked ZooKeeper on the event loop, that call waited for the reconnection and the loop never saw
    the SIGTERM (1 run in 5 hung before the registration moved to its own thread)."""
    from bkledger.bookie.local.cluster import LocalCluster

    cluster = LocalCluster(tmp_path / "own-zk")
    cluster.up(1, {"gcWaitTime": "0", "zkTimeout": "4000", "diskCheckInterval": "100"}, autorecovery=False)
    try:
        from bkledger.bookie.local.zookeeper import stop_pid

        stop_pid(cluster.zk_pid)
        log_path = Path(cluster.bookies[0].log)
        wait_for(lambda: "still unreachable after 2 attempts" in log_path.read_text(), 30, "kazoo to fail twice")
        start = time.monotonic()
        cluster.stop_bookie(0, timeout=30)
        assert time.monotonic() - start < 20
        text = Path(cluster.bookies[0].log).read_text()
        assert "stopped" in text
        # it did not wait for ZooKeeper to unregister (the node goes with the session)
        assert "ZooKeeper is not connected: the registration ends with the session" in text
    finally:
        cluster.down()


def test_bookie_restarted_after_kill9_stops_on_sigterm_before_its_old_registration_expires(cluster_factory):
    """A bookie started again after kill -9 waits for its earlier session's registration to expire (up to
    the session timeout, as BookKeeper does); a SIGTERM in that wait stops it at once, not after it (the
    wait once held every such stop for the whole session timeout)."""
    cluster = cluster_factory(1, conf={"zkTimeout": "30000"})
    bookie = cluster.bookies[0]
    with cluster.metadata_store() as store:
        crashed_session = store.registered_session(bookie.bookie_id)
        assert crashed_session
        cluster.kill_bookie(0)
        cluster.start_bookie(0)
        wait_for(lambda: accepts(bookie.port), 30, "the restarted bookie to listen (it does before registering)")
        assert cluster.stop_bookie(0, timeout=60) == 0
        # it stopped while the crashed process's registration was still there: it did not wait for it
        assert store.registered_session(bookie.bookie_id) == crashed_session
    text = Path(bookie.log).read_text().rsplit("got SIGTERM", 1)[-1]
    # it stopped, and never came to serve (its HTTP servers may log that they listen: they start before
    # the wait for the old registration, and a SIGTERM can come before them)
    assert "stopped" in text and f"bookie {bookie.bookie_id} serving" not in text, text[-800:]


def test_local_cluster_down_stops_everything_even_when_its_state_cannot_be_saved(cluster_factory, monkeypatch):
    """A full disk (the state file cannot be written) must not leave bookies and daemons running."""
    import errno

    from bkledger.bookie.local.cluster import LocalCluster
    from bkledger.bookie.local.zookeeper import pid_alive

    cluster = cluster_factory(2, autorecovery=True)
    pids = [p for b in cluster.bookies for p in (b.pid, b.autorecovery_pid)]
    assert all(pid_alive(p) for p in pids)

    def full(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(LocalCluster, "save", full)
    cluster.down()
    assert not [p for p in pids if pid_alive(p)]
