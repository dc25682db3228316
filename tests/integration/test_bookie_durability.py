"""Bookie durability on real processes: fsync before ack, crash replay, torn tails, cookies, fencing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from bkledger.bookie.local.cluster import ClusterError
from bkledger.client.protocol.digest import unpack_entry
from bkledger.proto import bookie_pb2 as pb
from tests.integration.bookie_util import DIGEST, add, expected_payload, read, read_range

pytestmark = pytest.mark.integration


def _strace(pid: int, inject: str) -> subprocess.Popen[bytes]:
    """Attach strace to every thread of `pid`, injecting a fault into fdatasync; wait until attached."""
    tids = [t for t in os.listdir(f"/proc/{pid}/task")]
    args = ["strace", "-qq", "-f", "-e", "trace=fdatasync", "-e", f"inject=fdatasync:{inject}"]
    for tid in tids:
        args += ["-p", tid]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # attached once the tracer shows up in each thread's status
        if all(_tracer(pid, tid) == proc.pid for tid in tids if os.path.exists(f"/proc/{pid}/task/{tid}")):
            return proc
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("strace did not attach")


def _tracer(pid: int, tid: str) -> int:
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        for line in f:
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    return 0


needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


@needs_strace
@pytest.mark.parametrize("over", ["grpc", "add_port"])
def test_add_is_acknowledged_only_after_fsync(cluster_factory, over: str):
    """R8: with every fdatasync held back 1.5 s, no add can be acknowledged sooner, over gRPC's AddStream
    or the bookie's add port (addStreamPort)."""
    cluster = cluster_factory(1)
    bookie = cluster.bookies[0]
    port = bookie.add_port if over == "add_port" else 0
    assert over == "grpc" or port
    assert add(bookie.address, 1, [0], add_port=port).ok() == [0]    # warm: connection and ledger exist
    tracer = _strace(bookie.pid, "delay_enter=1500000")
    try:
        result = add(bookie.address, 1, [1], add_port=port)
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(10)
    assert result.ok() == [1]
    assert result.latency >= 1.4, f"acknowledged after {result.latency:.3f}s, before the fsync finished"


@needs_strace
def test_fsync_failure_is_not_acknowledged(cluster_factory):
    """R8 + scenario 'fsync failure (EIO)': the entry is not acknowledged; the bookie turns read-only but reads."""
    cluster = cluster_factory(1, conf={"diskCheckInterval": "200"})
    bookie = cluster.bookies[0]
    assert add(bookie.address, 7, [0]).ok() == [0]
    tracer = _strace(bookie.pid, "error=EIO")
    try:
        result = add(bookie.address, 7, [1])
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(10)
    assert result.statuses == {1: pb.EIO}
    later = add(bookie.address, 7, [2])
    assert later.statuses[2] in (pb.EIO, pb.EREADONLY)
    assert read(bookie.address, 7, 0).status == pb.EOK       # still serves what it acknowledged
    _wait(lambda: bookie.bookie_id in _readonly(cluster), "bookie to register read-only")


def _readonly(cluster) -> list[str]:
    from bkledger.client.meta.store import MetadataStore

    with MetadataStore(cluster.metadata_service_uri) as store:
        return store.readonly_bookies()


def _wait(cond, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _check_all(address: str, ledger_id: int, ids: list[int]) -> None:
    for e in ids:
        response = read(address, ledger_id, e)
        assert response.status == pb.EOK, (e, pb.StatusCode.Name(response.status))
        entry = unpack_entry(DIGEST, ledger_id, e, response.body)
        assert bytes(entry.payload) == expected_payload(e)


def test_kill9_after_acks_keeps_every_acknowledged_entry(cluster_factory):
    """R22: kill -9 right after the acks; after restart every acknowledged entry reads back exactly."""
    cluster = cluster_factory(1, conf={"flushInterval": "600000"})   # nothing checkpointed: replay only
    bookie = cluster.bookies[0]
    acked: dict[int, list[int]] = {}
    for ledger_id in (11, 12, 13):
        acked[ledger_id] = add(bookie.address, ledger_id, list(range(500)), per_batch=37).ok()
    cluster.kill_bookie(0)
    cluster.start_bookie(0)
    cluster.wait_registered()
    for ledger_id, ids in acked.items():
        assert len(ids) == 500
        assert read_range(bookie.address, ledger_id, 0, 499) == ids
        _check_all(bookie.address, ledger_id, ids[::50])


@pytest.mark.parametrize("flush_interval", ["600000", "100"], ids=["replay-only", "checkpointing"])
def test_kill9_with_a_paged_index_smaller_than_the_data(cluster_factory, flush_interval):
    """R22 with index pages evicted all along (10 slots a page, 4 pages in memory): after kill -9 and replay,
    and again after a clean restart, every acknowledged entry reads back; with checkpoints moving lastMark
    meanwhile, what replay no longer covers must come from the index files."""
    conf = {"flushInterval": flush_interval, "pageSize": "240", "pageLimit": "4"}
    cluster = cluster_factory(1, conf=conf)
    bookie = cluster.bookies[0]
    acked: dict[int, list[int]] = {}
    for ledger_id in (51, 52, 53):
        acked[ledger_id] = add(bookie.address, ledger_id, list(range(300)), per_batch=23).ok()
        assert read_range(bookie.address, ledger_id, 0, 299) == acked[ledger_id]
    for restart in (cluster.kill_bookie, cluster.stop_bookie):
        restart(0)
        cluster.start_bookie(0)
        cluster.wait_registered()
        for ledger_id, ids in acked.items():
            assert ids == list(range(300))
            assert read_range(bookie.address, ledger_id, 0, 299) == ids
            _check_all(bookie.address, ledger_id, ids[::7])


def test_junk_appended_to_journal_tail_is_survived(cluster_factory):
    """R23: a bookie killed mid-write with junk after its last record replays every whole record."""
    cluster = cluster_factory(1, conf={"flushInterval": "600000"})
    bookie = cluster.bookies[0]
    ids = add(bookie.address, 21, list(range(300))).ok()
    cluster.kill_bookie(0)
    journals = sorted((Path(bookie.journal_dir) / "current").glob("*.txn"))
    with open(journals[-1], "ab") as f:
        f.write(b"\x40\x00\x00\x00" + os.urandom(37))          # a torn frame: length past the end
    cluster.start_bookie(0)
    cluster.wait_registered()
    assert read_range(bookie.address, 21, 0, 299) == ids
    assert add(bookie.address, 21, [300]).ok() == [300]        # and it goes on accepting adds
    cluster.kill_bookie(0)                                     # the torn file is replayed again, then the new one
    cluster.start_bookie(0)
    cluster.wait_registered()
    assert read_range(bookie.address, 21, 0, 300) == [*ids, 300]


def test_wiped_directories_make_the_bookie_refuse_to_start(cluster_factory):
    """R24: a bookie whose directories were wiped must not rejoin empty (it would answer NoSuchEntry)."""
    cluster = cluster_factory(1)
    bookie = cluster.bookies[0]
    assert add(bookie.address, 31, [0, 1]).ok() == [0, 1]
    cluster.stop_bookie(0)
    for d in [bookie.journal_dir, *bookie.ledger_dirs]:
        shutil.rmtree(d)
    cluster.start_bookie(0)
    with pytest.raises(ClusterError, match="exited at start"):
        cluster.wait_registered(timeout=30)
    log = Path(bookie.log).read_text()
    assert "wiped" in log and "refusing to start" in log


def test_fenced_stays_fenced_across_restart(cluster_factory):
    """R15 + oracle 6: after a fencing read, non-recovery adds get EFENCED, also after kill -9 and restart;
    recovery adds still go through."""
    cluster = cluster_factory(1, conf={"flushInterval": "600000"})
    bookie = cluster.bookies[0]
    assert add(bookie.address, 41, [0, 1, 2]).ok() == [0, 1, 2]
    fence = read(bookie.address, 41, -1, fence=True)
    assert fence.status == pb.EOK and fence.entry_id == 2
    assert add(bookie.address, 41, [3]).statuses == {3: pb.EFENCED}
    cluster.kill_bookie(0)
    cluster.start_bookie(0)
    cluster.wait_registered()
    assert add(bookie.address, 41, [3]).statuses == {3: pb.EFENCED}
    assert add(bookie.address, 41, [3], recovery=True).ok() == [3]
    # fencing an unknown ledger creates it fenced (R15)
    assert read(bookie.address, 42, -1, fence=True).status == pb.EOK
    assert add(bookie.address, 42, [0]).statuses == {0: pb.EFENCED}


def test_many_ledgers_interleaved_concurrently(cluster_factory):
    """Many ledgers written at once from several threads, interleaved, all read back in order."""
    cluster = cluster_factory(1)
    bookie = cluster.bookies[0]
    results: dict[int, list[int]] = {}

    def writer(ledger_id: int) -> None:
        results[ledger_id] = add(bookie.address, ledger_id, list(range(400)), per_batch=20).ok()

    threads = [threading.Thread(target=writer, args=(100 + i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [100 + i for i in range(8)]
    for ledger_id, ids in results.items():
        assert ids == list(range(400))
        assert read_range(bookie.address, ledger_id, 0, 399) == ids
