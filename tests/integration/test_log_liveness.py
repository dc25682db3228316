"""No silent fencing of a live log writer: writer leases (client.log.liveness) on real bookies and ZooKeeper.

append_ledgers (what a Spark append or sink commit runs) refuses a log whose last ledger is open under a
live LogWriter, takes over only when asked, and recovers a dead writer's tail as before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bkledger.client import BookKeeper
from bkledger.client.errors import LiveLogWriterError, LogFencedError
from bkledger.client.log.liveness import live_writer
from bkledger.client.meta import log_leases

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def name() -> str:
    return f"live-{uuid.uuid4().hex[:8]}"


def closed_ledger(bk: BookKeeper, *payloads: bytes) -> int:
    lh = bk.create_ledger(3, 2, 2)
    for payload in payloads:
        lh.add_entry(payload)
    lh.close()
    return lh.ledger_id


def test_live_writer_is_not_fenced_by_append_ledgers(bk: BookKeeper, name: str):
    writer = bk.open_log_writer(name)
    writer.append(b"w0")
    job = closed_ledger(bk, b"j0")
    with pytest.raises(LiveLogWriterError, match="fenceLiveWriter=true") as err:
        bk.append_ledgers(name, [job])
    assert str(writer.ledger_id) in str(err.value) and str(os.getpid()) in str(err.value)
    assert writer.append(b"w1").ledger_id == writer.ledger_id          # the writer goes on, unharmed
    assert job not in bk.log_metadata(name).ledger_ids
    writer.close()


def test_fence_live_writer_takes_over(bk: BookKeeper, name: str):
    writer = bk.open_log_writer(name)
    writer.append(b"w0")
    job = closed_ledger(bk, b"j0")
    assert bk.append_ledgers(name, [job], fence_live_writer=True)
    with pytest.raises(LogFencedError):
        writer.append(b"w1")
    meta = bk.log_metadata(name)
    assert meta.ledger_ids[-1] == job and meta.entries == 2
    writer.close()


def test_closed_or_rolled_writer_holds_no_lease(bk: BookKeeper, name: str):
    writer = bk.open_log_writer(name)
    first = writer.ledger_id
    writer.append(b"a")
    assert log_leases.holder(bk.store, name, first) is not None
    second = writer.roll()
    assert log_leases.holder(bk.store, name, first) is None          # dropped once the ledger is closed
    assert live_writer(bk, bk.log_metadata(name)) is not None
    writer.close()
    assert log_leases.holder(bk.store, name, second) is None
    assert bk.append_ledgers(name, [closed_ledger(bk, b"j")])         # a closed writer: nothing to fence
    assert bk.store.exists(f"{bk.store.layout.log_writers}/{name}")
    bk.delete_log(name)
    assert not bk.store.exists(f"{bk.store.layout.log_writers}/{name}")


def test_dead_writer_is_recovered_once_its_session_ends(cluster, bk: BookKeeper, name: str):
    """kill -9 the writer process: its lease lives until its ZooKeeper session expires (then the tail is
    a dead writer's and append_ledgers recovers it, as before the leases)."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.integration.log_writer_proc",
                             cluster.metadata_service_uri, name, "100000"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        acked = 0
        deadline = time.monotonic() + 60
        while acked < 50 and time.monotonic() < deadline:
            acked += proc.stdout.readline().startswith("ACK")
        assert acked >= 50
        assert live_writer(bk, bk.log_metadata(name)) is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    job = closed_ledger(bk, b"j0")
    with pytest.raises(LiveLogWriterError):                 # its session (zkTimeout 10 s) still runs
        bk.append_ledgers(name, [job])
    deadline = time.monotonic() + 60
    while live_writer(bk, bk.log_metadata(name)) is not None:
        assert time.monotonic() < deadline, "the dead writer's lease never expired"
        time.sleep(0.2)
    assert bk.append_ledgers(name, [job])
    meta = bk.log_metadata(name)
    assert meta.ledger_ids[-1] == job and all(led.sealed for led in meta.ledgers)
    assert meta.entries is not None and meta.entries >= acked + 1
