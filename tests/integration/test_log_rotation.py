"""The bookie's and the autorecovery daemon's log files roll by size and keep a bounded number of rolled
files (issue 45 item 5: "bookie logs never rotate"): logFileMaxSize, logFileMaxBackups, `--log-file`."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from tests.integration.bookie_util import wait_for

pytestmark = pytest.mark.integration

TOKEN = "rotation-test-token"


def put_read_only(port: int, read_only: bool) -> None:
    """One mode change through the admin API: the bookie logs a warning line for each."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/bookie/state/readonly", method="PUT",
                                     data=json.dumps({"readOnly": read_only}).encode(),
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200


def rolled(log: Path) -> list[str]:
    return sorted(p.name for p in log.parent.glob(log.name + ".*"))


def test_bookie_log_rolls_by_size_and_keeps_at_most_max_backups(cluster_factory):
    cluster = cluster_factory(1, {"logFileMaxSize": "1KB", "logFileMaxBackups": "2",
                                  "httpServerAdminToken": TOKEN}, autorecovery=True)
    bookie = cluster.bookies[0]
    log, daemon_log = Path(bookie.log), Path(bookie.autorecovery_log)
    seen: set[str] = set()
    deadline = time.monotonic() + 120
    toggles = 0
    while toggles < 40 or len(seen) < 2:           # enough lines for several rolls past the backup count
        assert time.monotonic() < deadline, f"after {toggles} mode changes only {sorted(seen)} rolled files"
        put_read_only(bookie.http_port, toggles % 2 == 0)
        toggles += 1
        names = rolled(log)
        assert set(names) <= {f"{log.name}.1", f"{log.name}.2"}, names     # never a third
        seen.update(names)
    assert seen == {f"{log.name}.1", f"{log.name}.2"}
    # each file stays near the limit (a record is written whole: at most one record over it)
    for path in [log, *(log.parent / n for n in seen)]:
        assert path.stat().st_size < 1024 + 512, (path, path.stat().st_size)
    text = "".join((log.parent / n).read_text() for n in [*rolled(log), log.name])
    assert "bookie is now read-only" in text
    # the daemon writes its own file through the same handler (started with --log-file), not the bookie's;
    # its start line may sit in a rolled file by now (the daemon's log rolls at 1 KB too)
    wait_for(lambda: daemon_log.exists() and "autorecovery for bookie" in "".join(
        p.read_text() for p in [daemon_log, *daemon_log.parent.glob(daemon_log.name + ".*")]), 60,
        "the autorecovery daemon's start line in its own log file")
