"""`bkledger zookeeper`: a standalone ZooKeeper server run in the foreground, for other hosts to use.

Here it listens on 127.0.0.1 (servers in tests stay on loopback); serving other hosts from its own
network namespace is shown by tests/integration/test_spark_standalone_netns.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bkledger.bookie.local.zookeeper import free_port, is_serving, pid_alive
from bkledger.client.meta.store import MetadataStore

pytestmark = pytest.mark.integration


def test_zookeeper_command_serves_until_sigterm_then_stops_the_server(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bkledger.bookie.cli", "zookeeper", "--listen", "127.0.0.1",
                             "--port", str(port), "--dir", str(tmp_path / "zk")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        uri = proc.stdout.readline().strip()        # printed once the server answers (bounded: 60 s start)
        assert uri == f"zk://127.0.0.1:{port}/ledgers", uri
        assert is_serving(port)
        with MetadataStore(uri, session_timeout=10.0) as store:
            assert store.init_cluster()
        jvm = int((tmp_path / "zk" / "zookeeper.pid").read_text())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err
    assert "only clients on this host can reach it" in err          # a loopback address is said so
    assert "stopping ZooKeeper" in err and "Traceback" not in err
    assert not pid_alive(jvm) and not is_serving(port)


def test_zookeeper_command_refuses_a_wildcard_advertised_address(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", "zookeeper", "--listen", "127.0.0.1",
                           "--port", str(free_port()), "--advertise", "0.0.0.0", "--dir", str(tmp_path / "zk")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "wildcard" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "zk").exists() or not os.listdir(tmp_path / "zk")
