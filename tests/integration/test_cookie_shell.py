"""`bkledger shell bookieformat` and `bkledger shell cookie get|delete|list` on a real bookie, and the
cookie mismatch that names them (R24: cookies bind a bookie's id to its directories and cluster)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bkledger.bookie import config as bkconfig
from bkledger.bookie.local.zookeeper import free_port
from bkledger.client import BookKeeper

pytestmark = pytest.mark.integration


def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", *args], capture_output=True, text=True,
                          timeout=90, input=stdin)


def _versions(conf: str) -> list[Path]:
    config = bkconfig.load(Path(conf))
    return [d / "current" / "VERSION" for d in (config.journal_dir, *config.ledger_dirs)
            if (d / "current" / "VERSION").exists()]


def test_a_cookie_mismatch_names_bookieformat(cluster_factory, tmp_path: Path) -> None:
    """R24: the bookie started on another port (another id) over its directories refuses, and the
    message names the fix (its old id, or bookieformat)."""
    cluster = cluster_factory(1)
    proc = cluster.bookies[0]
    cluster.stop_bookie(0)
    moved = bkconfig.load(Path(proc.conf)).with_overrides(bookiePort=free_port(), prometheusStatsHttpPort=0,
                                                         httpServerEnabled="false")
    conf = tmp_path / "moved.conf"
    conf.write_text(bkconfig.render(moved))
    done = _cli("bookie", "--conf", str(conf))
    assert done.returncode == 3, done.stderr
    assert f"bookie_id='{proc.bookie_id}'" in done.stderr
    assert "bkledger shell bookieformat" in done.stderr and "Traceback" not in done.stderr


def test_cookie_verbs_and_bookieformat_on_a_real_bookie(cluster_factory) -> None:
    """R24: cookie get shows the cookie; cookie delete and bookieformat refuse while the bookie runs and
    while a ledger has a fragment on it; bookieformat asks first (or needs -f with -n), then wipes the
    directories and with -d deletes the cookie, and the bookie starts again empty."""
    cluster = cluster_factory(1)
    proc, uri = cluster.bookies[0], cluster.metadata_service_uri
    got = _cli("shell", "cookie", "get", proc.bookie_id, "--uri", uri, "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["journal_dir"] == proc.journal_dir

    refused = _cli("shell", "cookie", "delete", proc.bookie_id, "--uri", uri)
    assert refused.returncode == 1 and "registered (running)" in refused.stderr
    refused = _cli("shell", "bookieformat", "--conf", proc.conf, "-n", "-f", "-d")
    assert refused.returncode == 1 and "registered (running)" in refused.stderr

    with BookKeeper(uri) as bk:
        handle = bk.create_ledger(1, 1, 1, password=b"pw")
        handle.add_entry(b"needed", timeout=10)
        handle.close()
        cluster.stop_bookie(0)
        refused = _cli("shell", "bookieformat", "--conf", proc.conf, "-n", "-f", "-d")
        assert refused.returncode == 1 and "still have fragments" in refused.stderr, refused.stderr
        assert "decommission" in refused.stderr and _versions(proc.conf)
        bk.delete_ledger(handle.ledger_id)

    refused = _cli("shell", "bookieformat", "--conf", proc.conf, "-n")
    assert refused.returncode == 1 and "add -f" in refused.stderr
    refused = _cli("shell", "bookieformat", "--conf", proc.conf, stdin="n\n")
    assert refused.returncode == 1 and "not formatted" in refused.stderr
    assert _versions(proc.conf)

    done = _cli("shell", "bookieformat", "--conf", proc.conf, "-n", "-f", "-d", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["cookies_deleted"] == [proc.bookie_id]
    assert not _versions(proc.conf)
    missing = _cli("shell", "cookie", "get", proc.bookie_id, "--uri", uri)
    assert missing.returncode == 1 and "no cookie" in missing.stderr

    cluster.start_bookie(0)
    cluster.wait_registered(60)
    listed = _cli("shell", "cookie", "list", "--uri", uri, "--json")
    assert json.loads(listed.stdout) == [{"bookie_id": proc.bookie_id, "registered": True}]

    cluster.stop_bookie(0)
    deleted = _cli("shell", "cookie", "delete", proc.bookie_id, "--uri", uri)
    assert deleted.returncode == 0, deleted.stderr
    assert _cli("shell", "cookie", "list", "--uri", uri, "--json").stdout.strip() == "[]"
