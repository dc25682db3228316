"""Every HTTP address `bkledger local status` prints answers 200 (issue 45 item 5: the admin URL answered
404), and the metrics pages of the bookie and of the autorecovery daemon carry the process and GC series."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def status_of(base: str, *extra: str) -> str:
    done = subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", "local", "status", "--dir", base, *extra],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def get(url: str, timeout_s: float = 30.0) -> tuple[int, str]:
    """The status and body of a GET, retried while nothing listens yet (a daemon still starting)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_every_url_local_status_prints_answers_200(cluster_factory):
    cluster = cluster_factory(1, autorecovery=True)
    text = status_of(str(cluster.base_dir))
    urls = re.findall(r"http://\S+", text)
    assert len(urls) == 3, text                    # the bookie's metrics and admin API, the daemon's metrics
    for url in urls:
        status, body = get(url)
        assert status == 200, (url, status, body[:200])
        if url.endswith("/metrics"):
            assert "process_cpu_seconds_total" in body and "python_gc_collections_total" in body, url
    urls_json = json.loads(status_of(str(cluster.base_dir), "--json"))["bookies"][0]["urls"]
    assert sorted(urls_json.values()) == sorted(urls)
    info = json.loads(get(urls_json["admin"])[1])
    assert info["bookieId"] == cluster.bookies[0].bookie_id


SLOW_DAEMON_START = """import sys, time
if "autorecovery" in sys.argv:
    time.sleep(3)
"""


def test_up_returns_once_a_slow_autorecovery_daemon_serves(cluster_factory, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    """`up` of a new cluster returns with its daemons serving their metrics, not merely spawned: a daemon
    made to start 3 s late (a sitecustomize the children import) answers the first scrape after `up`.
    `up` waited only for the bookies before, and a dashboard test's first scrape was refused."""
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "sitecustomize.py").write_text(SLOW_DAEMON_START)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "slow"),
                                                                   os.environ.get("PYTHONPATH")])))
    cluster = cluster_factory(1, autorecovery=True)
    assert get(f"http://127.0.0.1:{cluster.bookies[0].autorecovery_metrics_port}/metrics", timeout_s=0)[0] == 200
