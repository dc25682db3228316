"""R13 for reads of many ledgers at once (`BookKeeper.read_chunks_async`, the bookies' ReadRanges): the
chunks one read per ledger would give, from a few calls per bookie, and the same outcome when a bookie is
down or paused (what a call leaves unanswered is read ledger by ledger, with speculative reads)."""

from __future__ import annotations

import time

import pytest

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client.bookie_client import BookieClient
from tests.integration.test_speculative_reads import paused

pytestmark = pytest.mark.integration

SPECULATIVE = {"speculativeReadTimeout": 200, "readTimeout": 5.0}
BOUND = 5.0          # seconds: without speculation a paused bookie holds a read for readTimeout x 4 = 20 s
SHAPES = [(3, 3, 2), (3, 2, 2), (2, 2, 2)]      # (E, Qw, Qa): mirrored and striped ledgers


def payload(ledger_index: int, entry: int) -> bytes:
    return b"ranges-%04d-%03d-" % (ledger_index, entry) + bytes([entry % 251]) * ((ledger_index * 37 + entry) % 300)


def small_ledgers(bk, count: int) -> list[tuple[int, int]]:
    """(ledger id, entries) of `count` closed ledgers of 1-5 entries, in the shapes above."""
    made = []
    for i in range(count):
        e, qw, qa = SHAPES[i % len(SHAPES)]
        lh = bk.create_ledger(e, qw, qa)
        entries = 1 + i % 5
        for future in [lh.add_entry_async(payload(i, n)) for n in range(entries)]:
            future.result(30)
        lh.close()
        made.append((lh.ledger_id, entries))
    return made


def read_all(bk, made: list[tuple[int, int]], first: int = 0) -> dict[int, list[bytes]]:
    """Each ledger's entries from `first` on: the first chunk from read_chunks_async, the rest read on."""
    handles = bk.open_ledgers([ledger_id for ledger_id, _ in made])
    wanted = [(handles[ledger_id], min(first, n - 1), n - 1) for ledger_id, n in made]
    futures = bk.read_chunks_async(wanted)
    out: dict[int, list[bytes]] = {}
    for (rh, lo, hi), future in zip(wanted, futures, strict=True):
        chunk = future.result(60)
        assert chunk.entry_ids[0] == lo and chunk.entry_ids == list(range(lo, lo + len(chunk.entry_ids)))
        got = [bytes(p) for p in chunk.payloads]
        position = chunk.entry_ids[-1] + 1
        while position <= hi:
            more = rh.read_chunk(position, hi)
            got += [bytes(p) for p in more.payloads]
            position = more.entry_ids[-1] + 1
        out[rh.ledger_id] = got
    return out


def expected(made: list[tuple[int, int]], first: int = 0) -> dict[int, list[bytes]]:
    return {ledger_id: [payload(i, n) for n in range(min(first, entries - 1), entries)]
            for i, (ledger_id, entries) in enumerate(made)}


@pytest.fixture
def cluster(registered3: LocalCluster) -> LocalCluster:
    """The module's shared bookies (conftest's shared3): the tests here neither kill nor reconfigure one."""
    return registered3


class CallCounts:
    """Counts the calls a client makes (the calls themselves go to the bookies as usual)."""

    def __init__(self, monkeypatch) -> None:
        self.ranges = self.reads = self.range_reads = 0
        for name, field in (("read_ranges_views", "ranges"), ("read", "reads"), ("read_range_views", "range_reads")):
            original = getattr(BookieClient, name)
            monkeypatch.setattr(BookieClient, name, self._counting(original, field))

    def _counting(self, original, field: str):
        def counted(client, *args, **kwargs):
            setattr(self, field, getattr(self, field) + 1)
            return original(client, *args, **kwargs)
        return counted


def test_r13_many_ledgers_read_at_once_give_what_one_read_each_gives(cluster, bk_factory, monkeypatch):
    """90 closed ledgers of 1-5 entries (mirrored and striped): their first chunks come from a few
    ReadRanges calls (at most one per bookie here) and no call per ledger, and every entry is the one
    written, from entry 0 and from entry 2 on. No speculation: on a loaded machine one bookie's answer
    took over the 500 ms speculative timeout, and a second round asked the other two (5 calls); the
    rounds are the speculative-read tests' to check."""
    made = small_ledgers(bk_factory(cluster.metadata_service_uri), 90)
    reader = bk_factory(cluster.metadata_service_uri, speculativeReadTimeout=0)
    handles = reader.open_ledgers([ledger_id for ledger_id, _ in made])
    calls = CallCounts(monkeypatch)
    futures = reader.read_chunks_async([(handles[ledger_id], 0, n - 1) for ledger_id, n in made])
    chunks = [future.result(60) for future in futures]
    assert 1 <= calls.ranges <= 3 and calls.reads == calls.range_reads == 0
    for i, ((_, n), chunk) in enumerate(zip(made, chunks, strict=True)):
        e, qw, _ = SHAPES[i % len(SHAPES)]
        assert len(chunk.entry_ids) == min(n, n if e == qw else qw), "a ledger comes whole, or its first Qw entries"
    assert read_all(reader, made) == expected(made)
    assert read_all(reader, made, first=2) == expected(made, first=2)
    assert not reader._ctx.no_ranges.bookies


def test_r13_a_killed_bookie_leaves_its_ledgers_to_the_others(cluster3, bk_factory):
    """One bookie of three killed: the ledgers it would have answered are read from the other bookies of
    their write sets, whole and correct."""
    made = small_ledgers(bk_factory(cluster3.metadata_service_uri), 30)
    cluster3.kill_bookie(0)
    reader = bk_factory(cluster3.metadata_service_uri)
    assert read_all(reader, made) == expected(made)


def test_r13_a_paused_bookie_does_not_stall_a_read_of_many_ledgers(cluster, bk_factory):
    """A bookie SIGSTOPped: its share of the ledgers is read elsewhere after the speculative timeout (200
    ms), not after the call's timeout (20 s); the bookie is then remembered as slow."""
    made = small_ledgers(bk_factory(cluster.metadata_service_uri), 30)
    reader = bk_factory(cluster.metadata_service_uri, **SPECULATIVE)
    start = time.monotonic()
    assert read_all(reader, made) == expected(made)
    healthy = time.monotonic() - start
    victim = cluster.bookies[0].bookie_id
    reader = bk_factory(cluster.metadata_service_uri, **SPECULATIVE)
    with paused(cluster, victim):
        start = time.monotonic()
        assert read_all(reader, made) == expected(made)
        elapsed = time.monotonic() - start
        assert reader._ctx.health.is_slow(victim, reader._ctx.runtime.loop.time())
    assert elapsed < healthy + BOUND, f"the read waited for the paused bookie: {elapsed:.1f}s (healthy {healthy:.2f}s)"


def test_r7_a_bad_digest_in_a_batch_sends_only_that_ledger_alone(cluster, bk_factory, monkeypatch):
    """A ReadRanges batch whose entry of one ledger has a flipped payload byte (as a bad disk or wire would
    give): the batch's other ledgers are taken from it (their digests checked together), and that ledger
    is read on its own, correctly, from a bookie of its write set."""
    made = small_ledgers(bk_factory(cluster.metadata_service_uri), 12)
    victim = made[4][0]
    original = BookieClient.read_ranges_views
    flipped: list[int] = []

    async def corrupting(client, *args, **kwargs):
        async for batch in original(client, *args, **kwargs):
            hits = [i for i, ledger in enumerate(batch.ledger_ids.tolist()) if ledger == victim]
            if hits and not flipped:
                data = bytearray(batch.data)
                data[int(batch.sizes[: hits[0] + 1].sum()) - 1] ^= 0xFF       # the entry's last payload byte
                batch.data = memoryview(bytes(data))
                flipped.append(victim)
            yield batch

    monkeypatch.setattr(BookieClient, "read_ranges_views", corrupting)
    reader = bk_factory(cluster.metadata_service_uri)
    calls = CallCounts(monkeypatch)
    assert read_all(reader, made) == expected(made)
    assert flipped == [victim] and calls.reads + calls.range_reads >= 1      # the victim, read alone
