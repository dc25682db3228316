"""No add hangs (issue 46, item 3): every add completes or fails with a typed error within a bound.

The reproduction (4 bookies, so a replacement is free): one bookie of an E=3 Qw=3 Qa=2 ensemble is
paused (SIGSTOP); an add completes with the other two (Qa); a second client recovers the ledger (fences
it and closes it, R10); once the first writer's add timeout fires, it tries to replace the silent
bookie, and that ensemble change finds the ledger closed. The writer had no add pending then, and the
adds after it used to hang for ever (the failure never reached the writer, and the next drain raised
out of the loop callback).
"""

from __future__ import annotations

import signal
import time

import pytest

from bkledger.client.errors import ClientTimeoutError, LedgerClosedError, LedgerFencedError, LogFencedError

pytestmark = pytest.mark.integration

TIMEOUT = 1.0        # addEntryTimeoutSec of the writer
SETTLE = 30.0        # the add after the takeover must settle well within this (it used to never settle)


def _pause_one(cluster, lh) -> int:
    """SIGSTOP a bookie of the ledger's ensemble; its cluster index."""
    silent = lh.metadata.last_fragment.ensemble[2]
    index = next(b.index for b in cluster.bookies if b.bookie_id == silent)
    cluster.signal_bookie(index, signal.SIGSTOP)
    return index


def _past_the_add_timeout(since: float) -> None:
    """Let the writer's add timeout pass: the time passing is the fault here (its tick then times out the
    silent bookie and tries the ensemble change that finds the ledger closed)."""
    time.sleep(max(0.0, since + TIMEOUT * 3 - time.monotonic()))


def test_r10_r21_add_after_recovery_by_another_client_fails_instead_of_hanging(cluster_factory, bk_factory):
    """R10, R21, R9: with one ensemble bookie paused, a ledger recovered by a second client makes the
    first writer's later adds (single, async and bulk) fail with LedgerClosedError / LedgerFencedError
    within the bound, never hang."""
    cluster = cluster_factory(4)
    writer = bk_factory(cluster.metadata_service_uri, addEntryTimeoutSec=TIMEOUT)
    lh = writer.create_ledger(3, 3, 2)
    index = _pause_one(cluster, lh)
    try:
        paused_at = time.monotonic()
        assert lh.add_entry_async(b"before").result(10) == 0          # Qa = 2: the two others ack it
        recoverer = bk_factory(cluster.metadata_service_uri, readTimeout=1.0, fenceTimeout=1.0,
                               speculativeReadTimeout=100)
        recovered = recoverer.open_ledger(lh.ledger_id, recovery=True)
        assert recovered.metadata.last_entry_id == 0
        _past_the_add_timeout(paused_at)
        started = time.monotonic()
        with pytest.raises((LedgerClosedError, LedgerFencedError)):
            lh.add_entry_async(b"after").result(timeout=SETTLE)
        with pytest.raises((LedgerClosedError, LedgerFencedError)):
            lh.add_entry(b"after again", timeout=SETTLE)
        with pytest.raises((LedgerClosedError, LedgerFencedError)):
            lh.add_entries(b"abcdef", [0, 2, 4, 6]).result(timeout=SETTLE)
        assert time.monotonic() - started < SETTLE
    finally:
        cluster.signal_bookie(index, signal.SIGCONT)


def test_r21_r28_log_append_after_takeover_raises_log_fenced(cluster_factory, bk_factory):
    """R21, R28: the log-level form. A log writer with one ensemble bookie paused appends; a second
    client opens a writer of the same log (fencing and recovering the first one's ledger); once the first
    writer's add timeout has passed, its append raises LogFencedError within the bound instead of hanging."""
    cluster = cluster_factory(4)
    first = bk_factory(cluster.metadata_service_uri, addEntryTimeoutSec=TIMEOUT)
    old = first.open_log_writer("taken-over", ensemble_size=3, write_quorum=3, ack_quorum=2)
    old.append(b"warm-up", timeout=10)
    index = _pause_one(cluster, first.open_ledger(old.ledger_id, password=None, recovery=False))
    try:
        paused_at = time.monotonic()
        old.append(b"before", timeout=10)
        second = bk_factory(cluster.metadata_service_uri, readTimeout=1.0, fenceTimeout=1.0,
                            speculativeReadTimeout=100)
        second.open_log_writer("taken-over", create=False, ensemble_size=3, write_quorum=3, ack_quorum=2)
        _past_the_add_timeout(paused_at)
        with pytest.raises(LogFencedError):
            old.append(b"after", timeout=SETTLE)
    finally:
        cluster.signal_bookie(index, signal.SIGCONT)


def test_r6_waits_that_expire_raise_a_typed_timeout(cluster_factory, bk_factory):
    """R6: with two of three bookies paused (Qa = 2 cannot be met), a blocking add and a log append whose
    wait expires raise ClientTimeoutError (a BKError and a TimeoutError), not a bare TimeoutError."""
    cluster = cluster_factory(3)
    bk = bk_factory(cluster.metadata_service_uri, addEntryTimeoutSec=30.0)
    lh = bk.create_ledger(3, 3, 2)
    writer = bk.open_log_writer("waits", ensemble_size=3, write_quorum=3, ack_quorum=2)
    writer.append(b"warm-up", timeout=10)
    for index in (0, 1):
        cluster.signal_bookie(index, signal.SIGSTOP)
    try:
        with pytest.raises(ClientTimeoutError):
            lh.add_entry(b"stuck", timeout=0.5)
        with pytest.raises(ClientTimeoutError):
            writer.append(b"stuck", timeout=0.5)
    finally:
        for index in (0, 1):
            cluster.signal_bookie(index, signal.SIGCONT)


def test_cancelling_an_add_future_cancels_nothing_and_fails_nothing(cluster_factory, bk_factory):
    """A caller's `future.cancel()` on queued adds (a hostile or careless caller): the adds are on their
    way, so cancel() answers False and each future still gets its entry id; the writer goes on. (A future
    that could be cancelled made the writer's completion raise and fail every add of the ledger.)"""
    cluster = cluster_factory(3)
    lh = bk_factory(cluster.metadata_service_uri).create_ledger(3, 3, 2)
    futures = [lh.add_entry_async(b"entry %d" % i) for i in range(200)]
    assert not any(f.cancel() for f in futures)
    assert [f.result(30) for f in futures] == list(range(200))
    assert lh.add_entry(b"after") == 200
    assert bytes(list(lh.read_entries(0, 200))[-1].payload) == b"after"
