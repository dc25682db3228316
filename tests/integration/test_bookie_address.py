"""A real bookie process and its address (issue 45 item 2): a loopback id is refused unless allowLoopback=true,
in one line and before anything is written; with it, the bookie says in its log that only this host reaches it.
Listening on all interfaces and advertising the host's address is shown between network namespaces by
tests/integration/test_spark_standalone_netns.py (servers in tests bind loopback only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bkledger.bookie import config as bkconfig
from bkledger.bookie.local.cluster import LocalCluster
from bkledger.bookie.local.zookeeper import free_port
from bkledger.client.meta.store import MetadataStore

pytestmark = pytest.mark.integration


def test_a_loopback_bookie_id_is_refused_without_allow_loopback(tmp_path: Path, metadata_uri: str) -> None:
    config = bkconfig.from_mapping({"metadataServiceUri": metadata_uri, "bookiePort": str(free_port()),
                                    "listenAddress": "127.0.0.1", "journalDirectories": str(tmp_path / "journal"),
                                    "ledgerDirectories": str(tmp_path / "ledgers")})
    conf = tmp_path / "bookie.conf"
    conf.write_text(bkconfig.render(config))
    done = subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", "bookie", "--conf", str(conf)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"bookie id 127.0.0.1:{config.bookiePort} (listenAddress) is a loopback address" in done.stderr
    assert "advertisedAddress" in done.stderr and "allowLoopback=true" in done.stderr
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.rglob("VERSION"))
    with MetadataStore(metadata_uri) as store:
        assert store.read_cookie(config.bookie_id) is None


def test_a_local_clusters_bookies_say_they_serve_this_host_only(cluster3: LocalCluster) -> None:
    """`bkledger local up` keeps its bookies on 127.0.0.1 (allowLoopback=true), and each says so."""
    for proc in cluster3.bookies:
        assert proc.bookie_id.startswith("127.0.0.1:")
        text = Path(proc.log).read_text()
        assert f"bookie id {proc.bookie_id}" in text and "only clients on this host can reach it" in text
