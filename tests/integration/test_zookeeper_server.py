"""The embedded ZooKeeper: the real server from the pyspark wheel's jars, on 127.0.0.1."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bkledger.bookie.local import zookeeper as zkmod
from bkledger.bookie.local.zookeeper import ZooKeeperError, ZooKeeperServer, stop_pid
from bkledger.client.meta.store import MetadataStore

pytestmark = pytest.mark.integration


def _port_free(port: int) -> bool:
    """Nothing listens, and a server could bind it again (with SO_REUSEADDR, as ZooKeeper's does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as c:
        c.settimeout(1.0)
        if c.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_session_server_serves(zookeeper: ZooKeeperServer) -> None:
    assert zookeeper.running
    assert zkmod.is_serving(zookeeper.port)
    assert b"Mode: standalone" in zkmod.four_letter_word(zookeeper.port, "srvr")
    assert zookeeper.connect_string == f"127.0.0.1:{zookeeper.port}"


def test_start_connect_stop_frees_port(tmp_path: Path) -> None:
    server = ZooKeeperServer()
    server.start(tmp_path / "zk", port=0, timeout=30.0)
    try:
        port, pid = server.port, server.pid
        assert pid > 0 and (tmp_path / "zk" / "zookeeper.pid").read_text().strip() == str(pid)
        cfg = (tmp_path / "zk" / "zoo.cfg").read_text()
        assert "clientPortAddress=127.0.0.1" in cfg and "admin.enableServer=false" in cfg
        with MetadataStore(server.metadata_service_uri("/ledgers"), session_timeout=5.0) as store:
            store.init_cluster()
            assert store.exists("/ledgers/INSTANCEID")
    finally:
        server.stop()
    assert not server.running
    assert not zkmod.is_serving(port)
    assert _port_free(port)
    assert not zkmod.pid_alive(pid)


def test_stop_from_another_handle_by_pid(tmp_path: Path) -> None:
    """`bkledger local down` runs in another process: it only has the pid and port."""
    server = ZooKeeperServer()
    server.start(tmp_path / "zk", port=0)
    port, pid = server.port, server.pid
    try:
        other = ZooKeeperServer.attach(pid, port)
        assert other.running
        stop_pid(pid)
        assert not zkmod.pid_alive(pid)
        assert _port_free(port)
    finally:
        server.stop()


def test_data_survives_restart_on_same_dir(tmp_path: Path) -> None:
    server = ZooKeeperServer()
    server.start(tmp_path / "zk")
    port = server.port
    try:
        with MetadataStore(server.metadata_service_uri(), session_timeout=5.0) as store:
            store.init_cluster()
            instance = store.instance_id()
        server.stop()
        server.start(tmp_path / "zk", port=port)
        with MetadataStore(server.metadata_service_uri(), session_timeout=5.0) as store:
            assert store.instance_id() == instance
    finally:
        server.stop()


def test_no_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ZooKeeperError, match="JAVA_HOME"):
        ZooKeeperServer().start(tmp_path / "zk")


def test_busy_port_is_refused(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperError, match="already has a ZooKeeper"):
        ZooKeeperServer().start(tmp_path / "zk", port=zookeeper.port)
