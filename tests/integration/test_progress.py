"""Progress of long shell verbs and Ctrl-C, against real bookies (issue 17 item 6).

`shell recover` prints plain progress lines when stderr is not a terminal and nothing extra with --json;
`shell decommission` on SIGINT stops between two fragments, prints what it did and exits 130, leaving
metadata (and the cookie) that a second run completes. The bar on a terminal: tests/unit/test_progress.py.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time

import pytest

from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig
from tests.integration.conftest import FAST_CLIENT
from tests.integration.ops_util import OnBookies
from tests.integration.test_autorecovery import assert_fully_replicated

pytestmark = pytest.mark.integration


def shell_cmd(uri: str, *argv: str) -> list[str]:
    return [sys.executable, "-m", "bkledger.bookie.cli", "shell", *argv, "--uri", uri]


def shell_env(interval: str = "0") -> dict[str, str]:
    return {**os.environ, "BKLEDGER_PROGRESS_INTERVAL": interval}


def write_ledgers(uri: str, on: list[str], count: int, entries: int, size: int, write_quorum: int = 2) -> list[int]:
    """`count` closed ledgers (E=3, Qa=2) whose one fragment names the bookies `on`."""
    ids = []
    with BookKeeper(uri, config=ClientConfig.from_options(FAST_CLIENT), placement=OnBookies(on)) as bk:
        for n in range(count):
            handle = bk.create_ledger(3, write_quorum, 2, password=b"pw")
            futures = [handle.add_entry_async(payload(n, i, size)) for i in range(entries)]
            for fut in futures:
                fut.result(30)
            handle.close()
            assert set(on) <= set(handle.metadata.fragments[0].ensemble)
            ids.append(handle.ledger_id)
    return ids


def payload(ledger_no: int, entry_id: int, size: int) -> bytes:
    return f"{ledger_no}:{entry_id}:".encode().ljust(size, b".")


def test_recover_progress_lines_and_json(cluster_factory):
    """Not on a terminal: a first line with the totals, a line per step (interval 0), a last line with
    'done'; with --json: no progress at all on stderr, and the JSON result."""
    cluster = cluster_factory(5)
    uri = cluster.metadata_service_uri
    v1, v2 = cluster.bookies[3].bookie_id, cluster.bookies[4].bookie_id
    ledgers = write_ledgers(uri, [v1, v2], count=4, entries=30, size=300, write_quorum=3)   # 1 copy survives
    cluster.stop_bookie(3)
    cluster.stop_bookie(4)

    quiet = subprocess.run(shell_cmd(uri, "recover", v1, "--json"), capture_output=True, text=True, timeout=120,
                           env=shell_env())
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    result = json.loads(quiet.stdout)
    assert result["total_ledgers"] == 4 and result["ledgers"] == 4 and result["failed"] == {}
    assert result["interrupted"] is False and result["bytes"] > 0

    loud = subprocess.run(shell_cmd(uri, "recover", v2), capture_output=True, text=True, timeout=120,
                          env=shell_env())
    assert loud.returncode == 0, loud.stderr
    lines = [line for line in loud.stderr.splitlines() if line.startswith("recover: ")]
    assert re.fullmatch(r"recover: 4 ledgers, ~[\d.]+ [KM]?B", lines[0]), lines
    steps = [line for line in lines if re.match(r"recover: \d/4 ledgers, ", line)]
    assert any(line.startswith("recover: 2/4 ledgers, ") and "/s" in line for line in steps), lines
    assert re.match(r"recover: 4/4 ledgers, .*\(done after \d+s\)$", lines[-1]), lines
    assert re.search(r"^ledgers\s+4$", loud.stdout, re.M), loud.stdout
    with BookKeeper(uri) as bk:
        assert_fully_replicated(bk, ledgers, v1)
        assert_fully_replicated(bk, ledgers, v2)


def read_until(proc: subprocess.Popen[str], pattern: str, timeout: float) -> list[str]:
    """Lines of proc's stderr up to the first that matches `pattern` (bounded wait)."""
    assert proc.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        if not selector.select(max(deadline - time.monotonic(), 0.01)):
            continue
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line.rstrip("\n"))
        if re.search(pattern, line):
            return seen
    raise AssertionError(f"no line matching {pattern!r} within {timeout}s; saw {seen}")

def ctrl_c_after(args: list[str], env: dict[str, str], pattern: str, timeout: float = 60) -> tuple[int, str, str]:
    """Run a command, press Ctrl-C (SIGINT) once its stderr shows `pattern`; (exit status, stdout, stderr)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        read_until(proc, pattern, timeout)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err



def test_ctrl_c_stops_decommission_between_ledgers_and_a_rerun_finishes(cluster_factory):
    """SIGINT during `shell decommission`: a summary of what was done on stdout, exit 130, the cookie kept;
    every ledger's metadata is whole (either moved off the bookie or untouched, as many untouched as the
    summary says are left); a second run moves exactly those and deletes the cookie, and every entry is
    then on its write set."""
    cluster = cluster_factory(4)
    uri = cluster.metadata_service_uri
    victim = cluster.bookies[3].bookie_id
    ledgers = write_ledgers(uri, [victim], count=30, entries=60, size=2000)
    cluster.stop_bookie(3)

    status, out, err = ctrl_c_after(shell_cmd(uri, "decommission", victim), shell_env(), r"^decommission: 1/30 ledgers")
    assert status == 130, (out, err)
    found = re.search(r"decommission interrupted \(Ctrl-C\): (\d+) of 30 ledgers gone through, (\d+) left", out)
    assert found, out
    done, left = int(found.group(1)), int(found.group(2))
    assert done + left == 30 and done >= 1 and left >= 1, out
    assert "Ctrl-C: stopping after the step in hand" in err and "the cookie was kept" in out

    with BookKeeper(uri) as bk:
        still = []
        for ledger_id in ledgers:
            md = bk.ledger_metadata(ledger_id)
            assert md.is_closed and len(md.fragments) == 1
            ensemble = md.fragments[0].ensemble
            assert len(set(ensemble)) == 3
            if victim in ensemble:
                still.append(ledger_id)
        assert len(still) == left
        assert bk.store.read_cookie(victim) is not None

        again = subprocess.run(shell_cmd(uri, "decommission", victim, "--json"), capture_output=True, text=True,
                               timeout=120, env=shell_env())
        assert again.returncode == 0, again.stderr
        result = json.loads(again.stdout)
        assert result["total_ledgers"] == left and result["failed"] == {}
        assert bk.store.read_cookie(victim) is None
        assert_fully_replicated(bk, ledgers, victim)
        for n, ledger_id in enumerate(ledgers):
            got = [e.payload for e in bk.open_ledger(ledger_id, b"pw", recovery=False).read_entries(0, 59)]
            assert got == [payload(n, i, 2000) for i in range(60)]
