"""Daemons whose ZooKeeper is gone still stop on SIGTERM, within a bound their configuration gives, exit 0 and
say what they skipped; a bookie keeps what it acknowledged (R8, R22) and serves it once restarted."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bkledger.bookie.local.cluster import LocalCluster, accepts
from bkledger.bookie.local.zookeeper import stop_pid
from bkledger.client import BookKeeper
from tests.integration.bookie_util import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
ZK_TIMEOUT_MS = 8000


def stop_zookeeper(cluster: LocalCluster) -> None:
    stop_pid(cluster.zk_pid)
    cluster.zk_pid = 0
    cluster.save()


def test_bookie_with_zookeeper_gone_stops_within_its_session_timeout_and_keeps_what_it_acknowledged(tmp_path):
    """R8, R22: ZooKeeper stopped under a bookie with a client's streams open; SIGTERM stops it (exit 0) before
    ZooKeeper would even have expired its session (zkTimeout, the bound: the gRPC grace of 2 s plus the
    journal's close fit in it); its log names the unregistration it skipped (the registration goes with
    the session). Started again with ZooKeeper back, it serves every entry it acknowledged. Before that,
    SIGUSR1 dumps its threads' stacks into its log (how to see where a stop hangs) and it goes on serving."""
    cluster = LocalCluster(tmp_path / "own-zk")
    conf = {"gcWaitTime": "1000", "zkTimeout": str(ZK_TIMEOUT_MS)}
    try:
        cluster.up(1, conf, autorecovery=False)
        bookie = cluster.bookies[0]
        bk = BookKeeper(cluster.metadata_service_uri)
        try:
            lh = bk.create_ledger(1, 1, 1)
            acked = [lh.add_entry(b"entry-%d" % i) for i in range(30)]       # acknowledged: fsync'd
            log_path = Path(bookie.log)
            cluster.signal_bookie(0, signal.SIGUSR1)        # the stacks of its threads to the log; it goes on
            wait_for(lambda: "Thread 0x" in log_path.read_text(), 30, "the thread dump in the bookie's log")
            assert lh.add_entry(b"after the dump") == 30
            acked.append(30)
            stop_zookeeper(cluster)
            wait_for(lambda: "still unreachable after 2 attempts" in log_path.read_text(), 30,
                     "the bookie to see ZooKeeper gone")
            start = time.monotonic()
            code = cluster.stop_bookie(0, timeout=60)        # SIGTERM; SIGKILL only after 60 s (code -9)
            took = time.monotonic() - start
        finally:
            bk.close()
        assert code == 0
        assert took < ZK_TIMEOUT_MS / 1000, took
        text = log_path.read_text().rsplit("got SIGTERM", 1)[-1]
        assert f"skipped unregistering /ledgers/available/{bookie.bookie_id}" in text, text[-1500:]
        assert f"bookie {bookie.bookie_id} stopped" in text, text[-1500:]
        cluster.down()                                      # keeps the state: ZooKeeper's port, the bookie's id
        cluster = LocalCluster(tmp_path / "own-zk")
        cluster.up(1, conf, autorecovery=False)              # ZooKeeper back, the same bookie on its data
        with BookKeeper(cluster.metadata_service_uri) as reader:
            rh = reader.open_ledger(lh.ledger_id, recovery=True)
            assert rh.last_entry_id == acked[-1] == 30
            assert [e.payload for e in rh.read_entries(0, 30)] == [b"entry-%d" % i for i in range(30)] + [
                b"after the dump"]
    finally:
        cluster.down()


@pytest.mark.parametrize("logs", [[], ["orders"]], ids=["every-log", "named-log"])
def test_offloader_with_zookeeper_gone_stops_at_once_on_sigterm(tmp_path, logs):
    """`bkledger offloader` in a round waiting for an absent ZooKeeper (listing the logs; or, with --logs,
    taking a log's lock: a create, retried as "maybe written"): SIGTERM interrupts the wait, so it exits 0
    within a few seconds, not once every ZooKeeper call of the round has run out its retry deadline
    (2 x zkTimeout each: 17-20 s here before the stop interrupted them)."""
    cluster = LocalCluster(tmp_path / "own-zk")
    try:
        cluster.up(1, {"gcWaitTime": "0"}, autorecovery=False)
        daemon = subprocess.Popen([sys.executable, "-m", "bkledger.bookie.cli", "offloader", "--uri",
                                   cluster.metadata_service_uri, "--store", str(tmp_path / "store"),
                                   "--interval", "0.2", *(["--logs", *logs] if logs else [])], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out: list[str] = []
            while not any("offloader started" in line for line in out):
                line = daemon.stdout.readline() if daemon.stdout else ""
                assert line, "".join(out)[-2000:]
                out.append(line)
            stop_zookeeper(cluster)
            while not any("still unreachable after 2 attempts" in line for line in out):
                line = daemon.stdout.readline() if daemon.stdout else ""
                assert line, "".join(out)[-2000:]
                out.append(line)
            start = time.monotonic()
            daemon.send_signal(signal.SIGTERM)
            rest, _ = daemon.communicate(timeout=60)
            took = time.monotonic() - start
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait(10)
        text = "".join(out) + rest
        assert daemon.returncode == 0, text[-2000:]
        assert took < 5, (took, text[-2000:])
        assert "offloader stopping (SIGTERM" in text and "offloader stopped" in text, text[-2000:]
    finally:
        cluster.down()


def test_bookie_restarted_after_kill9_stops_at_once_when_zookeeper_goes_while_it_waits_to_register(tmp_path):
    """A bookie started again after kill -9 waits for its earlier session's registration to expire; ZooKeeper
    stopped in that wait, a SIGTERM stopped it only once the wait's ZooKeeper call had run out its retry
    deadline (2 x zkTimeout: 19 s, exit 1 with a traceback). The stop interrupts that call now: exit 0,
    well within zkTimeout, and its log says it stopped before it registered."""
    cluster = LocalCluster(tmp_path / "own-zk")
    try:
        cluster.up(1, {"gcWaitTime": "0", "zkTimeout": str(ZK_TIMEOUT_MS)}, autorecovery=False)
        bookie = cluster.bookies[0]
        cluster.kill_bookie(0)
        cluster.start_bookie(0)
        log_path = Path(bookie.log)
        wait_for(lambda: accepts(bookie.port), 30, "the restarted bookie to listen (it does before registering)")
        stop_zookeeper(cluster)
        wait_for(lambda: "still unreachable after 2 attempts" in log_path.read_text(), 30,
                 "the bookie to see ZooKeeper gone")
        start = time.monotonic()
        code = cluster.stop_bookie(0, timeout=60)
        took = time.monotonic() - start
        text = log_path.read_text().rsplit("got SIGTERM", 1)[-1]
        assert code == 0, text[-2000:]
        assert took < ZK_TIMEOUT_MS / 1000, took
        assert "stopped before it registered" in text and f"bookie {bookie.bookie_id} stopped" in text, text[-2000:]
        assert "serving" not in text, text[-2000:]
    finally:
        cluster.down()


def test_bookie_started_while_zookeeper_is_gone_stops_at_once_on_sigterm(tmp_path):
    """A bookie (re)started while its ZooKeeper is down waits to connect; SIGTERM in that wait ended it only
    once the connect timeout (15 s) had passed, with exit 1 and a traceback. The stop interrupts the wait
    now: exit 0 within a few seconds, one line saying it stopped before it joined the cluster."""
    cluster = LocalCluster(tmp_path / "own-zk")
    try:
        cluster.up(1, {"gcWaitTime": "0", "zkTimeout": str(ZK_TIMEOUT_MS)}, autorecovery=False)
        bookie = cluster.bookies[0]
        assert cluster.stop_bookie(0) == 0
        stop_zookeeper(cluster)
        log_path = Path(bookie.log)
        cluster.start_bookie(0)
        wait_for(lambda: log_path.read_text().count(f"bookie id {bookie.bookie_id}: advertising") == 2, 30,
                 "the bookie to start again (then it connects to ZooKeeper)")
        start = time.monotonic()
        code = cluster.stop_bookie(0, timeout=60)
        took = time.monotonic() - start
        text = log_path.read_text().rsplit("got SIGTERM", 1)[-1]
        assert code == 0, text[-2000:]
        assert took < 5, took
        assert "stopped before it joined the cluster in ZooKeeper" in text, text[-2000:]
        assert f"bookie {bookie.bookie_id} stopped" in text and "Traceback" not in text, text[-2000:]
    finally:
        cluster.down()
