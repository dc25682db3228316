"""The read-only status page on the bookie's admin HTTP (issue 45 item 5): `GET /status` needs no token
and shows the bookies (from ZooKeeper), this bookie's disks, the logs, the under-replicated ledgers and
two inline SVG charts; headless Chromium loads it and takes a screenshot that is not blank."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import urllib.request
import zlib
from pathlib import Path

import pytest

from bkledger.client.meta.underreplication import UnderReplicationManager
from tests.integration.test_log_figures import write_log
from tests.integration.test_metrics import client

pytestmark = pytest.mark.integration

SCREENSHOT_DIR_ENV = "BKLEDGER_STATUS_SCREENSHOT"     # keep the PNG there (to look at it)


def get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return answer.status, answer.headers["Content-Type"], answer.read().decode()


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium on PATH: `make .venv/.installed` installs Debian's chromium package when run "
                    "as root where apt-get exists; else install it (apt-get install chromium) to run this test")
    return found


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """(width, height, the decompressed scanlines) of a PNG (filter bytes left in: enough to tell a blank
    image, whose rows repeat one value, from a page)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", chunk[:8])
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    return width, height, zlib.decompress(idat)


def test_status_page_in_headless_chromium(cluster_factory, tmp_path: Path):
    cluster = cluster_factory(3)
    port = cluster.bookies[0].http_port
    with client(cluster.metadata_service_uri) as bk:
        write_log(bk, "orders <&> \"quoted\"", ledgers=3, per_ledger=40)
        write_log(bk, "clicks", ledgers=2, per_ledger=10)
        UnderReplicationManager(bk.store).mark(4242, [cluster.bookies[2].bookie_id])
    cluster.stop_bookie(2)                               # its cookie stays: listed as down
    status, content_type, page = get(f"http://127.0.0.1:{port}/status")
    assert status == 200 and content_type.startswith("text/html")
    for bookie in cluster.bookies[:2]:
        assert bookie.bookie_id in page
    assert '<span class="down">down</span>' in page
    assert "orders &lt;&amp;&gt; &quot;quoted&quot;" in page and "<&>" not in page      # escaped
    assert "clicks" in page and "4242" in page and "1 under-replicated" in page
    assert page.count("<svg") == 2 and "<script" not in page
    assert str(cluster.bookies[0].journal_dir) in page

    keep = os.environ.get(SCREENSHOT_DIR_ENV)
    png = Path(keep) / "status.png" if keep else tmp_path / "status.png"
    browser = chromium()
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1280,1400", f"--screenshot={png}",
         f"http://127.0.0.1:{port}/status"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]
    width, height, pixels = png_pixels(png.read_bytes())
    assert (width, height) == (1280, 1400)
    assert png.stat().st_size > 20_000, png.stat().st_size         # a blank page compresses to a few KB
    assert len(set(pixels)) > 50, "the screenshot is blank"
