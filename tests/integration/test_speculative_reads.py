"""R13 with speculative reads on real bookies: one bookie SIGSTOPped (a long GC pause, a hung disk)
must not stall range reads, single entry reads, LAC reads, long polls or recovery.

Bounds are relative to the configured speculativeReadTimeout (200 ms) and generous, not to machine
speed: without speculation each of these reads waits for the paused bookie's request timeout
(readTimeout x 4 = 20 s for a range read)."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator

import pytest

from bkledger.bookie.local.cluster import LocalCluster

pytestmark = pytest.mark.integration

SPECULATIVE = {"speculativeReadTimeout": 200, "readTimeout": 5.0}
BOUND = 5.0          # seconds above the healthy read: about 25 speculative timeouts


def payload(i: int) -> bytes:
    return b"spec-%06d-" % i + bytes([i % 251]) * (i % 200)


@contextlib.contextmanager
def paused(cluster: LocalCluster, bookie_id: str) -> Iterator[None]:
    index = next(b.index for b in cluster.bookies if b.bookie_id == bookie_id)
    cluster.signal_bookie(index, signal.SIGSTOP)
    try:
        yield
    finally:
        cluster.signal_bookie(index, signal.SIGCONT)


@pytest.fixture
def cluster(registered3: LocalCluster) -> LocalCluster:
    """The module's shared bookies (conftest's shared3): a test only pauses a bookie within `paused`, which
    resumes it, and writes ledgers of its own."""
    return registered3


def _closed_ledger(bk, e: int, qw: int, qa: int, count: int) -> tuple[int, tuple[str, ...]]:
    lh = bk.create_ledger(e, qw, qa)
    for future in [lh.add_entry_async(payload(i)) for i in range(count)]:
        future.result(30)
    lh.close()
    return lh.ledger_id, lh.metadata.last_fragment.ensemble


def _timed_read(bk, ledger_id: int, count: int) -> float:
    start = time.monotonic()
    rh = bk.open_ledger(ledger_id, recovery=False)
    got = [en.payload for en in rh.read_entries(0, count - 1)]
    elapsed = time.monotonic() - start
    assert got == [payload(i) for i in range(count)]
    return elapsed


@pytest.mark.parametrize("reorder", [True, False])
def test_r13_range_read_with_a_paused_bookie_speculates(cluster, bk_factory, reorder):
    """800 entries of a closed ledger (E=3 Qw=3): the first bookie of the read order is paused; the
    read takes about the healthy time plus a speculative timeout, not the 20 s request timeout. The
    paused bookie is then remembered as slow and read from last (reorderReadSequenceEnabled)."""
    writer = bk_factory(cluster.metadata_service_uri)
    ledger_id, ensemble = _closed_ledger(writer, 3, 3, 2, 800)
    healthy = _timed_read(bk_factory(cluster.metadata_service_uri, **SPECULATIVE), ledger_id, 800)
    reader = bk_factory(cluster.metadata_service_uri, **SPECULATIVE, reorderReadSequenceEnabled=reorder)
    with paused(cluster, ensemble[0]):
        elapsed = _timed_read(reader, ledger_id, 800)
        health = reader._ctx.health
        assert health.is_slow(ensemble[0], reader._ctx.runtime.loop.time())
        order = health.order(ensemble, reader._ctx.runtime.loop.time())
        assert order[-1] == ensemble[0] if reorder else order == ensemble
        again = _timed_read(reader, ledger_id, 800)
    assert elapsed < healthy + BOUND, f"read with a paused bookie took {elapsed:.1f}s (healthy {healthy:.2f}s)"
    assert again < healthy + BOUND


def test_a_new_connection_to_a_paused_bookie_is_passed_over_without_waiting(cluster, bk_factory):
    """A paused bookie's kernel accepts the connection but the bookie never finishes the gRPC handshake: a
    fresh client reads past it at once (client.speculative_read.probe_connections) instead of waiting out
    speculativeReadTimeout, here 10 s so that waiting would show."""
    ledger_id, ensemble = _closed_ledger(bk_factory(cluster.metadata_service_uri), 3, 3, 2, 800)
    with paused(cluster, ensemble[0]):
        reader = bk_factory(cluster.metadata_service_uri, speculativeReadTimeout=10_000, readTimeout=30.0)
        elapsed = _timed_read(reader, ledger_id, 800)
        assert reader._ctx.health.is_slow(ensemble[0], reader._ctx.runtime.loop.time())
    assert elapsed < 5.0, f"the read waited for the paused bookie: {elapsed:.1f}s"


@pytest.mark.parametrize(("e", "qw"), [(3, 3), (3, 2)])
def test_r13_a_bookie_paused_between_reads_of_one_client_is_passed_over_without_waiting(cluster, bk_factory,
                                                                                    e, qw):
    """A reader that read from every bookie a moment ago (READY connections, as a Spark worker's shared
    client has) and then meets a paused one: the bookie has been quiet, so its first answer is awaited
    only the quiet wait (client.protocol.speculative), not speculativeReadTimeout (10 s here)."""
    from bkledger.client.protocol.speculative import QUIET_AFTER
    ledger_id, ensemble = _closed_ledger(bk_factory(cluster.metadata_service_uri), e, qw, 2, 3000)
    reader = bk_factory(cluster.metadata_service_uri, speculativeReadTimeout=10_000, readTimeout=30.0)
    health, loop = reader._ctx.health, reader._ctx.runtime.loop
    read_started = loop.time()
    _timed_read(reader, ledger_id, 3000)
    # those that answered this read (not "within QUIET_AFTER of now": on a loaded machine the caller may
    # see the read's end more than those 20 ms after the loop took its last batch)
    heard = [b for b in ensemble if health._heard_at.get(b, float("-inf")) >= read_started]
    assert heard, "the healthy read heard from no bookie"
    victim = heard[0]                                 # one the reader streamed from: it will ask it again
    deadline = time.monotonic() + 10
    while not health.quiet((victim,), loop.time()):                  # it has been quiet for QUIET_AFTER
        assert time.monotonic() < deadline
        time.sleep(QUIET_AFTER / 4)
    with paused(cluster, victim):
        elapsed = _timed_read(reader, ledger_id, 3000)
        assert health.is_slow(victim, loop.time())
    assert elapsed < 5.0, f"the read waited for the paused bookie: {elapsed:.1f}s"


def test_r13_single_entry_reads_with_a_paused_bookie(cluster, bk_factory):
    """Single entries, each from a fresh client (no failure history): every one speculates past the
    paused bookie instead of waiting for it."""
    ledger_id, ensemble = _closed_ledger(bk_factory(cluster.metadata_service_uri), 3, 3, 2, 30)
    with paused(cluster, ensemble[0]):
        for entry_id in (0, 3, 29):
            reader = bk_factory(cluster.metadata_service_uri, **SPECULATIVE)
            start = time.monotonic()
            rh = reader.open_ledger(ledger_id, recovery=False)
            got = [en.payload for en in rh.read_entries(entry_id, entry_id)]
            elapsed = time.monotonic() - start
            assert got == [payload(entry_id)]
            assert elapsed < BOUND, f"entry {entry_id} took {elapsed:.1f}s"


def test_r13_striped_read_with_a_paused_covering_bookie(cluster, bk_factory):
    """E > Qw (3, 2): the covering streams run in parallel; a paused covering bookie is given up after
    the speculative timeout and its entries come from the other bookie of each write set."""
    ledger_id, ensemble = _closed_ledger(bk_factory(cluster.metadata_service_uri), 3, 2, 2, 3000)
    healthy = _timed_read(bk_factory(cluster.metadata_service_uri, **SPECULATIVE), ledger_id, 3000)
    for victim in (ensemble[1], ensemble[2]):       # covering indices of E=3 Qw=2 are 1 and 2
        with paused(cluster, victim):
            elapsed = _timed_read(bk_factory(cluster.metadata_service_uri, **SPECULATIVE), ledger_id, 3000)
        assert elapsed < healthy + BOUND, f"striped read without {victim} took {elapsed:.1f}s"


def test_r12_lac_read_and_long_poll_with_a_paused_bookie(cluster, bk_factory):
    """R12: a tailing reader opened while a bookie of the ensemble is paused learns the LAC, and a
    long poll returns as soon as the writer's next entries are confirmed, without waiting for it."""
    writer = bk_factory(cluster.metadata_service_uri, addEntryTimeoutSec=30.0)
    lh = writer.create_ledger(3, 3, 2)
    for i in range(100):
        lh.add_entry(payload(i))
    victim = lh.metadata.last_fragment.ensemble[0]
    with paused(cluster, victim):
        reader = bk_factory(cluster.metadata_service_uri, **SPECULATIVE)
        start = time.monotonic()
        rh = reader.open_ledger(lh.ledger_id, recovery=False)
        lac = rh.read_last_add_confirmed()
        assert lac >= 98                        # entry 99 carries LAC 98 to the bookies
        assert [en.payload for en in rh.read_entries(0, lac)] == [payload(i) for i in range(lac + 1)]
        assert time.monotonic() - start < BOUND
        for i in range(100, 103):               # acked by the two running bookies (Qa=2)
            lh.add_entry(payload(i))
        start = time.monotonic()
        newer = rh.wait_for_lac(lac, timeout=20.0)
        assert newer > lac
        assert time.monotonic() - start < BOUND
        assert [en.payload for en in rh.read_entries(lac + 1, newer)] == [payload(i) for i in range(lac + 1, newer + 1)]


def test_r18_recovery_and_read_with_a_paused_bookie(cluster, bk_factory):
    """R16-R20 unchanged: with a bookie of the ensemble paused, recovery (fencing coverage, reads of
    the whole write set) closes at the last acknowledged entry, and the recovered ledger reads back
    fully within the speculative bound."""
    writer = bk_factory(cluster.metadata_service_uri)
    lh = writer.create_ledger(3, 3, 2)
    for future in [lh.add_entry_async(payload(i)) for i in range(500)]:
        future.result(30)                        # never closed: the writer is abandoned
    victim = lh.metadata.last_fragment.ensemble[0]
    with paused(cluster, victim):
        recoverer = bk_factory(cluster.metadata_service_uri, **SPECULATIVE, fenceTimeout=20.0)
        start = time.monotonic()
        rh = recoverer.open_ledger(lh.ledger_id, recovery=True)
        assert rh.is_closed and rh.last_entry_id == 499
        assert [en.payload for en in rh.read_entries(0, 499)] == [payload(i) for i in range(500)]
        assert time.monotonic() - start < 10.0


def test_r13_a_cold_healthy_striped_read_reads_no_entry_one_at_a_time(cluster, bk_factory, monkeypatch):
    """E > Qw (3, 2), every bookie healthy, a client that has not read from them yet: a bookie slow to send
    its first batch (a cold read from disk, a busy CPU) may be passed over by the quick quiet-bookie rule,
    but the second round, which streams what it left out from the others, waits the full speculative
    timeout. Before, the second round gave up on a slow first batch too, and a third of the first chunk
    (1,365 of 4,096 entries) was read entry by entry."""
    import numpy as np

    from bkledger.client.reader import LedgerReader

    count = 40_000
    sizes = (np.arange(count, dtype=np.int64) * 7919) % 900 + 100
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    data = np.random.default_rng(7).bytes(int(offsets[-1]))
    writer = bk_factory(cluster.metadata_service_uri)
    lh = writer.create_ledger(3, 2, 2)
    lh.add_entries(data, offsets).result(60)
    lh.close()
    single_reads: list[int] = []
    original = LedgerReader.read_entry

    async def counted(self: LedgerReader, entry_id: int) -> memoryview | bytes:
        single_reads.append(entry_id)
        return await original(self, entry_id)

    monkeypatch.setattr(LedgerReader, "read_entry", counted)
    rh = bk_factory(cluster.metadata_service_uri).open_ledger(lh.ledger_id, recovery=False)
    position, got = 0, []
    while position < count:
        chunk = rh.read_chunk(position, count - 1)
        got += [bytes(p) for p in chunk.payloads]
        position = chunk.entry_ids[-1] + 1
    assert b"".join(got) == data
    assert single_reads == []
