"""R9 on real bookies: a silent ensemble bookie is replaced after addEntryTimeoutSec even though the ack
quorum keeps the adds completing (E=3 Qw=3 Qa=2), as BookKeeper's per-request add timeout does.

One bookie of the ensemble is SIGSTOPped (a long GC pause, a hung disk; the same as its answers being
dropped by a partition): the adds go on with the other two, and once its oldest unanswered add request
is older than addEntryTimeoutSec the writer replaces it in a new fragment starting at LAC + 1."""

from __future__ import annotations

import signal
import time

import pytest

pytestmark = pytest.mark.integration

TIMEOUT = 1.0        # addEntryTimeoutSec of the writer
BOUND = 10.0         # seconds of adds before the replacement must have happened (about 10 timeouts)


def payload(i: int) -> bytes:
    return b"silent-%06d-" % i + bytes([i % 251]) * (i % 100)


def test_r9_silent_bookie_is_replaced_although_the_ack_quorum_is_met(cluster_factory, bk_factory):
    """R9: 4 bookies, ledger E=3 Qw=3 Qa=2, one ensemble bookie paused. Every add keeps succeeding; within
    a few addEntryTimeoutSec the stored metadata has a new fragment, starting at LAC + 1 of the moment of
    the change, without the paused bookie; every acknowledged entry reads back (R11, R13)."""
    cluster = cluster_factory(4)
    writer = bk_factory(cluster.metadata_service_uri, addEntryTimeoutSec=TIMEOUT)
    lh = writer.create_ledger(3, 3, 2)
    acked = 0
    for future in [lh.add_entry_async(payload(i)) for i in range(20)]:
        assert future.result(10) == acked
        acked += 1
    silent = lh.metadata.last_fragment.ensemble[1]
    index = next(b.index for b in cluster.bookies if b.bookie_id == silent)
    cluster.signal_bookie(index, signal.SIGSTOP)
    try:
        paused_at = time.monotonic()
        replaced_after = None
        while time.monotonic() - paused_at < BOUND:
            assert lh.add_entry(payload(acked)) == acked       # Qa = 2 is met by the two others
            acked += 1
            if replaced_after is None and silent not in lh.metadata.last_fragment.ensemble:
                replaced_after = time.monotonic() - paused_at
                more = acked + 20                              # and adds go on with the new ensemble
            if replaced_after is not None and acked >= more:
                break
        assert replaced_after is not None, f"bookie {silent} still in the ensemble after {BOUND}s of adds"
        assert replaced_after >= TIMEOUT * 0.9, f"replaced after {replaced_after:.2f}s, before the timeout"

        reader = bk_factory(cluster.metadata_service_uri, speculativeReadTimeout=100)
        rh = reader.open_ledger(lh.ledger_id, recovery=False)
        md = rh.metadata
        assert len(md.fragments) == 2
        first, last = md.fragments
        assert silent in first.ensemble and silent not in last.ensemble
        assert set(first.ensemble) - {silent} < set(last.ensemble)     # only the silent bookie replaced
        assert 20 <= last.first_entry_id < acked                         # from LAC + 1 of the change
        assert rh.last_add_confirmed >= last.first_entry_id - 1
        lh.close()
        closed = reader.open_ledger(lh.ledger_id, recovery=False)
        assert closed.metadata.last_entry_id == acked - 1
        got = [en.payload for en in closed.read_entries(0, acked - 1)]
        assert got == [payload(i) for i in range(acked)]
    finally:
        cluster.signal_bookie(index, signal.SIGCONT)


def test_r9_no_free_bookie_keeps_adding_with_the_ack_quorum_then_replaces_once_one_is(cluster_factory,
                                                                                        bk_factory):
    """R9 with no bookie free: the spare bookie is stopped, so the silent one cannot be replaced; the
    writer does not fail (every write set keeps Qa = 2 bookies): the adds go on without it, the fragment
    stays. Once the spare bookie is back, the retry replaces the silent one in a new fragment."""
    cluster = cluster_factory(4)
    writer = bk_factory(cluster.metadata_service_uri, addEntryTimeoutSec=TIMEOUT)
    lh = writer.create_ledger(3, 3, 2)
    ensemble = lh.metadata.last_fragment.ensemble
    spare = next(b for b in cluster.bookies if b.bookie_id not in ensemble)
    cluster.stop_bookie(spare.index)
    with cluster.metadata_store() as store:
        deadline = time.monotonic() + 10
        while spare.bookie_id in store.writable_bookies():
            assert time.monotonic() < deadline, f"stopped bookie {spare.bookie_id} still registered"
            time.sleep(0.05)
    silent = ensemble[1]
    index = next(b.index for b in cluster.bookies if b.bookie_id == silent)
    acked = 0
    cluster.signal_bookie(index, signal.SIGSTOP)
    try:
        paused_at = time.monotonic()
        while time.monotonic() - paused_at < 3 * TIMEOUT:
            assert lh.add_entry(payload(acked)) == acked
            acked += 1
        assert lh.metadata.fragments == (lh.metadata.fragments[0],)       # nobody to replace it with
        assert lh.metadata.last_fragment.ensemble == ensemble

        cluster.start_bookie(spare.index)
        cluster.wait_registered(timeout=20, ids=[spare.bookie_id])
        back_at = time.monotonic()
        while silent in lh.metadata.last_fragment.ensemble:
            assert time.monotonic() - back_at < BOUND, f"{silent} not replaced {BOUND}s after a bookie was free"
            assert lh.add_entry(payload(acked)) == acked
            acked += 1
        assert lh.add_entry(payload(acked)) == acked
        acked += 1
        assert lh.metadata.last_fragment.ensemble == tuple(spare.bookie_id if b == silent else b for b in ensemble)
        lh.close()
        reader = bk_factory(cluster.metadata_service_uri, speculativeReadTimeout=100)
        closed = reader.open_ledger(lh.ledger_id, recovery=False)
        got = [en.payload for en in closed.read_entries(0, acked - 1)]
        assert got == [payload(i) for i in range(acked)]
    finally:
        cluster.signal_bookie(index, signal.SIGCONT)
