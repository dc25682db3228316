"""A local cluster restarts over its data (`local down`, then `local up` on the same directory), and a
bookie's port is checked before any cookie is written (R24: cookies bind a bookie's id, host:port)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bkledger.bookie import config as bkconfig
from bkledger.bookie.local.cluster import LocalCluster
from bkledger.bookie.local.zookeeper import free_port, pid_alive
from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig
from bkledger.client.meta.store import MetadataStore

pytestmark = pytest.mark.integration
FAST = ClientConfig.from_options({"addEntryTimeoutSec": 10.0, "readTimeout": 5.0})
PASSWORD = b"restart"


def _write(uri: str) -> tuple[list[int], list[bytes]]:
    with BookKeeper(uri, config=FAST) as bk:
        ledgers = []
        for n in range(2):
            handle = bk.create_ledger(2, 2, 2, password=PASSWORD)
            for i in range(20):
                handle.add_entry(f"ledger {n} entry {i}".encode(), timeout=10)
            handle.close()
            ledgers.append(handle.ledger_id)
        writer = bk.open_log_writer("orders")
        records = [f"order {i}".encode() for i in range(30)]
        for i, record in enumerate(records):
            writer.append(record)
            if i == 14:
                writer.roll()
        writer.close()
    return ledgers, records


def _read_back(uri: str, ledgers: list[int], records: list[bytes]) -> None:
    with BookKeeper(uri, config=FAST) as bk:
        for n, ledger_id in enumerate(ledgers):
            got = [e.payload for e in bk.open_ledger(ledger_id, PASSWORD, recovery=False).read_entries(0, 19)]
            assert got == [f"ledger {n} entry {i}".encode() for i in range(20)]
        with bk.open_log_reader("orders", "earliest") as reader:
            got = [r.payload for r in reader.read(max_records=len(records), timeout=10)]
        assert got == records


def test_restart_keeps_bookies_ledgers_and_logs(tmp_path: Path) -> None:
    """R24: `down` keeps the data and the state; `up` over it restarts ZooKeeper and each bookie on its
    kept port, so with its id, and the cookies match: everything written reads back, and more appends."""
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        cluster.up(3, autorecovery=False)
        before = cluster.status()
        ledgers, records = _write(cluster.metadata_service_uri)
        cluster.down()
        assert LocalCluster.load(cluster.base_dir).bookies    # the state is kept

        again = LocalCluster(tmp_path / "cluster")
        again.up(3, autorecovery=False)
        cluster = again
        assert again.metadata_service_uri == before["metadataServiceUri"]
        assert [(b.bookie_id, b.port) for b in again.bookies] == [(b["bookie_id"], b["port"])
                                                                   for b in before["bookies"]]
        _read_back(again.metadata_service_uri, ledgers, records)
        with BookKeeper(again.metadata_service_uri, config=FAST) as bk:
            writer = bk.open_log_writer("orders")
            writer.append(b"after restart")
            writer.close()
            with bk.open_log_reader("orders", "earliest") as reader:
                got = [r.payload for r in reader.read(max_records=len(records) + 1, timeout=10)]
            assert got == [*records, b"after restart"]
            handle = bk.create_ledger(2, 2, 2, password=PASSWORD)
            handle.add_entry(b"new ledger", timeout=10)
            handle.close()
    finally:
        cluster.down()


def test_restart_after_kill_9_of_every_process(tmp_path: Path) -> None:
    """R24: after kill -9 of ZooKeeper and the bookie (no `down`), `up` over the directory finds the
    stale pids dead, restarts with the kept ports and ids, and the journal's acknowledged entries read back."""
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        cluster.up(1, autorecovery=False)
        with BookKeeper(cluster.metadata_service_uri, config=FAST) as bk:
            handle = bk.create_ledger(1, 1, 1, password=PASSWORD)
            for i in range(10):
                handle.add_entry(b"acked %d" % i, timeout=10)
            ledger_id = handle.ledger_id
        pids = [cluster.zk_pid, cluster.bookies[0].pid]     # the state file keeps naming them
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        cluster = LocalCluster(tmp_path / "cluster")
        cluster.up(autorecovery=False, timeout=90)
        with BookKeeper(cluster.metadata_service_uri, config=FAST) as bk:
            reader = bk.open_ledger(ledger_id, PASSWORD, recovery=True)
            assert [e.payload for e in reader.read_entries(0, 9)] == [b"acked %d" % i for i in range(10)]
    finally:
        cluster.down()


def _local(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", "local", *args], capture_output=True,
                          text=True, timeout=120)


def test_a_kept_port_taken_now_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """`bkledger local up` over a kept cluster whose bookie port another process holds now names the port
    and the fix, starts nothing and keeps the state; once the port is free it restarts the cluster (and
    says so); `local down --wipe` deletes it."""
    home = str(tmp_path / "cluster")
    try:
        assert _local("up", "--dir", home, "--bookies", "1", "--set", "autoRecoveryDaemonEnabled=false").returncode == 0
        down = _local("down", "--dir", home)
        assert down.returncode == 0 and "data is kept" in down.stdout
        port = LocalCluster.load(home).bookies[0].port
        shell = subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", "shell", "listbookies", "--dir", home],
                               capture_output=True, text=True, timeout=10)
        assert shell.returncode == 1 and "is stopped" in shell.stderr     # at once, not after a ZooKeeper wait
        with socket.create_server(("127.0.0.1", port)):
            refused = _local("up", "--dir", home)
        assert refused.returncode == 1
        assert f"port {port}" in refused.stderr and "taken now" in refused.stderr
        assert "local down --wipe" in refused.stderr and "Traceback" not in refused.stderr
        kept = LocalCluster.load(home)
        assert kept.zk_pid == 0 and [b.port for b in kept.bookies] == [port]
        again = _local("up", "--dir", home)
        assert again.returncode == 0 and "restarted the cluster" in again.stderr, again.stderr
        assert [b.port for b in LocalCluster.load(home).bookies] == [port]
    finally:
        wiped = _local("down", "--wipe", "--dir", home)
    assert wiped.returncode == 0 and not (tmp_path / "cluster").exists()


def test_a_first_start_on_a_port_in_use_writes_no_cookie(tmp_path: Path, metadata_uri: str) -> None:
    """R24: the port is checked before the cookies are written, so a bookie that cannot serve leaves no
    cookie under an id it never served, and says why in one line (no gRPC traceback)."""
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        config = bkconfig.from_mapping({"metadataServiceUri": metadata_uri, "bookiePort": str(port),
                                        "listenAddress": "127.0.0.1", "allowLoopback": "true",
                                        "journalDirectories": str(tmp_path / "journal"),
                                        "ledgerDirectories": str(tmp_path / "ledgers"),
                                        "prometheusStatsHttpPort": str(free_port())})
        conf = tmp_path / "bookie.conf"
        conf.write_text(bkconfig.render(config))
        done = subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", "bookie", "--conf", str(conf)],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 4, done.stderr
    assert f"cannot listen on 127.0.0.1:{port} (bookiePort)" in done.stderr
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.rglob("VERSION"))
    with MetadataStore(metadata_uri) as store:
        assert store.read_cookie(config.bookie_id) is None


def test_a_kept_add_port_is_kept_and_one_taken_now_is_moved(tmp_path: Path) -> None:
    """Each bookie's add port (addStreamPort) is kept across `down` and `up` like its other ports; one that
    another process holds now is moved to a free one, registered there, and the client adds on it."""
    cluster = LocalCluster(tmp_path / "cluster")
    try:
        cluster.up(2, autorecovery=False)
        kept = [b.add_port for b in cluster.bookies]
        assert all(kept)
        cluster.down()
        with socket.create_server(("127.0.0.1", kept[1])):     # the second bookie's add port, taken
            cluster = LocalCluster(tmp_path / "cluster")
            cluster.up(2, autorecovery=False)
        moved = [b.add_port for b in cluster.bookies]
        assert moved[0] == kept[0] and moved[1] not in (0, kept[1])
        with BookKeeper(cluster.metadata_service_uri, config=FAST) as bk:
            for bookie, port in zip(cluster.bookies, moved, strict=True):
                info = bk.store.bookie_info(bookie.bookie_id)
                assert info is not None and info["addStreamPort"] == str(port)
            handle = bk.create_ledger(2, 2, 2, password=PASSWORD)
            assert handle.add_entry(b"on the moved port", timeout=10) == 0
            handle.close()
            assert sorted(c.add_port for c in bk._ctx.pool._clients.values()) == sorted(moved)
    finally:
        cluster.down()
