"""Fencing and recovery under real faults (PROTOCOL.md scenarios; R14-R21)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from bkledger.client import LedgerFencedError, LedgerRecoveryError
from bkledger.client.errors import BKError
from bkledger.client.protocol.metadata import LedgerState
from tests.integration.writer_proc import payload

pytestmark = pytest.mark.integration


class WriterProcess:
    def __init__(self, uri: str, e: int, qw: int, qa: int, count: int):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.writer_proc", uri, str(e), str(qw), str(qa), str(count)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=os.getcwd(),
        )
        self.acked: list[int] = []
        self.lines: list[str] = []
        self.ledger_id = int(self._line().split()[1])

    def _line(self, timeout: float = 60) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line, f"writer exited: {self.proc.poll()}"
        self.lines.append(line)
        if line.startswith("ACK "):
            self.acked.append(int(line.split()[1]))
        return line

    def wait_acks(self, n: int) -> None:
        while len(self.acked) < n:
            self._line()

    def wait_for(self, prefix: str) -> str:
        while True:
            line = self._line()
            if line.startswith(prefix):
                return line

    def command(self, text: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self._line()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        assert self.proc.stdout is not None
        for line in self.proc.stdout.read().splitlines():   # acks printed before the kill still count
            if line.startswith("ACK "):
                self.acked.append(int(line.split()[1]))


def _check_oracle(bk, ledger_id: int, acked: list[int]) -> int:
    """Oracle 1+2: closed, no acknowledged entry above the last entry id, every entry readable."""
    md = bk.ledger_metadata(ledger_id)
    assert md.state is LedgerState.CLOSED
    assert max(acked, default=-1) <= md.last_entry_id
    if md.last_entry_id >= 0:
        rh = bk.open_ledger(ledger_id, b"pw", recovery=False)
        got = list(rh.read_entries(0, md.last_entry_id))
        assert [en.entry_id for en in got] == list(range(md.last_entry_id + 1))
        assert all(en.payload == payload(en.entry_id) for en in got)
    return md.last_entry_id


def test_writer_killed_with_adds_in_flight(cluster_factory, bk_factory):
    """Scenario: kill -9 the writer with adds in flight; another client recovers: CLOSED, oracle holds."""
    cluster = cluster_factory(3)
    writer = WriterProcess(cluster.metadata_service_uri, 3, 3, 2, 4000)
    writer.wait_acks(1000)
    writer.kill()
    bk = bk_factory(cluster.metadata_service_uri)
    rh = bk.open_ledger(writer.ledger_id, b"pw", recovery=True)
    assert rh.is_closed
    last = _check_oracle(bk, writer.ledger_id, writer.acked)
    again = bk_factory(cluster.metadata_service_uri).open_ledger(writer.ledger_id, b"pw", recovery=True)
    assert again.last_entry_id == last                      # every client agrees on the last entry


def test_paused_bookie_does_not_hold_recovery_up(cluster_factory, bk_factory):
    """R16 + oracle 7: with one bookie SIGSTOPped, recovery of E=3 Qw=3 Qa=2 completes without
    waiting for it (well inside the fence/read timeout)."""
    cluster = cluster_factory(3)
    writer = WriterProcess(cluster.metadata_service_uri, 3, 3, 2, 3000)
    writer.wait_for("DONE")
    writer.kill()
    bk = bk_factory(cluster.metadata_service_uri, fenceTimeout=20.0, readTimeout=20.0)
    cluster.signal_bookie(1, signal.SIGSTOP)
    try:
        start = time.monotonic()
        rh = bk.open_ledger(writer.ledger_id, b"pw", recovery=True)
        elapsed = time.monotonic() - start
    finally:
        cluster.signal_bookie(1, signal.SIGCONT)
    assert rh.is_closed and rh.last_entry_id == 2999
    assert elapsed < 10, f"recovery took {elapsed:.1f}s: it waited for the paused bookie"
    _check_oracle(bk, writer.ledger_id, writer.acked)


def test_e5_recovery_with_one_and_two_bookies_down(cluster_factory, bk_factory):
    """Scenario: E=5 Qw=3 Qa=2. Two bookies of one write set down: recovery fails and does not close;
    with one of them back it succeeds. (One bookie down alone is the same success path.)"""
    cluster = cluster_factory(5)
    writer = WriterProcess(cluster.metadata_service_uri, 5, 3, 2, 500)
    writer.wait_for("DONE")
    writer.kill()
    bk = bk_factory(cluster.metadata_service_uri)
    ensemble = bk.ledger_metadata(writer.ledger_id).last_fragment.ensemble
    ids = {b.bookie_id: b.index for b in cluster.bookies}
    first, second = ids[ensemble[0]], ids[ensemble[1]]       # adjacent: they share write sets
    cluster.kill_bookie(first)
    cluster.kill_bookie(second)
    with pytest.raises(LedgerRecoveryError):
        bk.open_ledger(writer.ledger_id, b"pw", recovery=True)
    assert bk.ledger_metadata(writer.ledger_id).state is LedgerState.IN_RECOVERY   # not closed
    cluster.start_bookie(second)
    cluster.wait_registered(ids=[ensemble[1]])
    rh = bk.open_ledger(writer.ledger_id, b"pw", recovery=True)   # one down: succeeds
    assert rh.is_closed and rh.last_entry_id == 499
    _check_oracle(bk, writer.ledger_id, writer.acked)


def test_writer_cut_off_while_another_client_recovers(cluster_factory, bk_factory):
    """R15/R21: a writer paused (cut off) while another client recovers its ledger finds, once it runs
    again, that its adds fail as fenced (maybe written), never as an ensemble change."""
    cluster = cluster_factory(3)
    writer = WriterProcess(cluster.metadata_service_uri, 3, 3, 2, 100)
    writer.wait_for("DONE")
    writer.proc.send_signal(signal.SIGSTOP)
    try:
        bk = bk_factory(cluster.metadata_service_uri)
        rh = bk.open_ledger(writer.ledger_id, b"pw", recovery=True)
        assert rh.last_entry_id == 99
    finally:
        writer.proc.send_signal(signal.SIGCONT)
    assert writer.command("add") == "ERROR LedgerFencedError"
    md = bk.ledger_metadata(writer.ledger_id)
    assert md.state is LedgerState.CLOSED and md.last_entry_id == 99 and len(md.fragments) == 1
    assert writer.command("close").startswith(("CLOSED 99", "ERROR"))
    writer.kill()


def _race_close_and_recovery(lh, other) -> dict[str, object]:
    outcome: dict[str, object] = {}

    def close() -> None:
        try:
            lh.close()
            outcome["writer"] = lh.last_entry_id
        except BKError as exc:
            outcome["writer"] = exc

    def recover() -> None:
        outcome["recovery"] = other.open_ledger(lh.ledger_id, b"pw", recovery=True).last_entry_id

    threads = [threading.Thread(target=close), threading.Thread(target=recover)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return outcome


def test_writer_close_racing_a_recovery(cluster_factory, bk_factory):
    """R10/R20: a writer's close and another client's recovery race: one winner; the writer either
    succeeds with the same last entry or gets an error; everyone agrees on the last entry."""
    cluster = cluster_factory(3)
    for attempt in range(3):
        bk = bk_factory(cluster.metadata_service_uri)
        lh = bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(200):
            lh.add_entry_async(payload(i))
        lh.add_entry(payload(200))
        other = bk_factory(cluster.metadata_service_uri)
        outcome = _race_close_and_recovery(lh, other)
        final = other.ledger_metadata(lh.ledger_id)
        assert final.state is LedgerState.CLOSED and final.last_entry_id == 200, attempt
        assert outcome["recovery"] == 200
        assert outcome["writer"] == 200 or isinstance(outcome["writer"], (LedgerFencedError, BKError))
