"""The client on real bookies and a real ZooKeeper: round trips, ensemble change, tailing, bad input."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from bkledger.client import (
    BadPasswordError,
    EntryTooLargeError,
    InvalidQuorumError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    ReadBeyondLastEntryError,
)
from bkledger.client.errors import ClientClosedError, LedgerClosedError
from bkledger.client.protocol.metadata import LedgerState
from tests.integration.bookie_util import wait_for

pytestmark = pytest.mark.integration


def payload(i: int) -> bytes:
    return b"entry-%06d-" % i + bytes([i % 251]) * (i % 300)


def closed_ledger(bk, ensemble: int, write_quorum: int, ack_quorum: int, count: int):
    """A ledger of entries payload(0..count-1), written, acknowledged and closed."""
    lh = bk.create_ledger(ensemble, write_quorum, ack_quorum)
    for future in [lh.add_entry_async(payload(i)) for i in range(count)]:
        future.result(30)
    lh.close()
    return lh


@contextlib.contextmanager
def bookies_paused(cluster) -> Iterator[None]:
    """Every bookie of the cluster SIGSTOPped (nothing gets an answer) until the block ends."""
    for index in range(len(cluster.bookies)):
        cluster.signal_bookie(index, signal.SIGSTOP)
    try:
        yield
    finally:
        for index in range(len(cluster.bookies)):
            cluster.signal_bookie(index, signal.SIGCONT)


@pytest.mark.parametrize("quorum", [(1, 1, 1), (3, 2, 2), (3, 3, 2), (5, 3, 2)])
def test_round_trip(shared_cluster5, bk_factory, quorum):
    """R5/R6/R11: every acknowledged entry reads back byte for byte, in order, after close."""
    bk = bk_factory(shared_cluster5.metadata_service_uri)
    e, qw, qa = quorum
    lh = bk.create_ledger(e, qw, qa, password=b"secret")
    futures = [lh.add_entry_async(payload(i)) for i in range(2000)]
    assert [f.result(30) for f in futures] == list(range(2000))
    assert lh.last_add_confirmed == 1999
    lh.close()
    md = bk.ledger_metadata(lh.ledger_id)
    assert md.state is LedgerState.CLOSED and md.last_entry_id == 1999
    assert md.length == sum(len(payload(i)) for i in range(2000))
    rh = bk.open_ledger(lh.ledger_id, b"secret", recovery=False)
    got = [(en.entry_id, en.payload) for en in rh.read_entries(0, 1999)]
    assert got == [(i, payload(i)) for i in range(2000)]


@pytest.mark.parametrize("digest", ["crc32", "hmac", "dummy"])
def test_digest_types_and_lz4(shared_cluster5, bk_factory, digest):
    """R7: every digest type round-trips; lz4 is recorded in metadata so readers decompress unasked."""
    bk = bk_factory(shared_cluster5.metadata_service_uri)
    lh = bk.create_ledger(3, 2, 2, digest_type=digest, password=b"p", compression="lz4")
    data = [b"abc" * 500 + str(i).encode() for i in range(50)]
    for d in data:
        lh.add_entry(d)
    lh.close()
    reader = bk_factory(shared_cluster5.metadata_service_uri)
    rh = reader.open_ledger(lh.ledger_id, b"p", recovery=False)
    assert rh.metadata.compression == "lz4"
    assert [en.payload for en in rh.read_entries(0, 49)] == data


@pytest.mark.parametrize("scheme", ["zk+flat", "zk+hierarchical", "zk+longhierarchical"])
def test_every_ledger_manager(cluster_factory, bk_factory, scheme):
    """R3: flat, hierarchical and long-hierarchical managers all store, list and delete ledgers."""
    cluster = cluster_factory(3, scheme=scheme)
    bk = bk_factory(cluster.metadata_service_uri)
    ids = []
    for _ in range(3):
        lh = bk.create_ledger(3, 2, 2)
        lh.add_entry(b"x")
        lh.close()
        ids.append(lh.ledger_id)
    assert set(ids) <= set(bk.list_ledgers())
    assert [en.payload for en in bk.open_ledger(ids[0]).read_entries(0, 0)] == [b"x"]
    bk.delete_ledger(ids[1])
    assert ids[1] not in bk.list_ledgers()
    with pytest.raises(NoSuchLedgerError):
        bk.open_ledger(ids[1])
    watermark = bk.ledger_id_watermark()      # every older ledger below it, every newer one above
    later = bk.create_ledger(3, 2, 2)
    later.close()
    assert max(bk.list_ledgers()) == later.ledger_id and max(ids) < watermark < later.ledger_id
    assert bk.list_ledgers(above=watermark) == [later.ledger_id]
    assert bk.list_ledgers(above=ids[0]) == [ids[2], later.ledger_id]


def test_bookie_killed_mid_stream_changes_the_ensemble(cluster_factory, bk_factory):
    """R9: a bookie killed while a writer streams adds is replaced; writing goes on; nothing
    acknowledged is lost; the metadata gains a fragment that no longer names the dead bookie."""
    cluster = cluster_factory(4)
    bk = bk_factory(cluster.metadata_service_uri)
    lh = bk.create_ledger(3, 3, 2)
    victim = lh.metadata.last_fragment.ensemble[1]
    index = next(b.index for b in cluster.bookies if b.bookie_id == victim)
    futures = [lh.add_entry_async(payload(i)) for i in range(3000)]
    futures[1000].result(30)
    cluster.kill_bookie(index)
    futures += [lh.add_entry_async(payload(i)) for i in range(3000, 6000)]
    acked = [f.result(60) for f in futures]
    assert acked == list(range(6000))
    lh.close()
    md = bk.ledger_metadata(lh.ledger_id)
    assert len(md.fragments) >= 2
    assert victim not in md.last_fragment.ensemble
    assert md.fragments[1].first_entry_id > md.fragments[0].first_entry_id
    rh = bk.open_ledger(lh.ledger_id, recovery=False)
    assert [en.payload for en in rh.read_entries(0, 5999)] == [payload(i) for i in range(6000)]


def test_tailing_reader_never_sees_beyond_the_lac(shared_cluster5, bk_factory):
    """R11/R12: a reader opened without recovery while the writer runs never reads above the LAC,
    its LAC never goes backwards, and it does not disturb (fence) the writer."""
    bk = bk_factory(shared_cluster5.metadata_service_uri)
    lh = bk.create_ledger(3, 3, 2)
    lh.add_entry(payload(0))
    reader = bk_factory(shared_cluster5.metadata_service_uri)
    rh = reader.open_ledger(lh.ledger_id, recovery=False)
    stop = threading.Event()

    def write() -> None:
        i = 1
        while not stop.is_set() and i < 4000:
            lh.add_entry_async(payload(i))
            i += 1
            if i % 200 == 0:
                time.sleep(0.01)

    writer = threading.Thread(target=write)
    writer.start()
    seen, last_lac = 0, -1
    deadline = time.monotonic() + 20
    while seen < 3000 and time.monotonic() < deadline:
        lac = rh.wait_for_lac(seen - 1, timeout=2)
        assert lac >= last_lac
        assert lac <= lh.last_add_confirmed                 # never above what the writer confirmed
        last_lac = lac
        if lac >= seen:
            got = list(rh.read_entries(seen, lac))
            assert [en.entry_id for en in got] == list(range(seen, lac + 1))
            assert all(en.payload == payload(en.entry_id) for en in got)
            seen = lac + 1
        with pytest.raises(ReadBeyondLastEntryError):
            list(rh.read_entries(lac + 1, lac + 1))
    stop.set()
    writer.join(30)
    assert seen >= 3000
    assert lh.add_entry(b"still writing") > 0                # the writer was never fenced
    lh.close()
    assert rh.refresh().state is LedgerState.CLOSED


def test_bad_input_gets_typed_errors(shared_cluster5, bk_factory):
    """R1/R26 and the brief: quorums, bookie count, password, unknown ledger, entry size, range."""
    bk = bk_factory(shared_cluster5.metadata_service_uri, maxEntrySize=1024)
    with pytest.raises(InvalidQuorumError, match="ensemble"):
        bk.create_ledger(2, 3, 2)
    with pytest.raises(InvalidQuorumError):
        bk.create_ledger(3, 2, 3)
    with pytest.raises(NotEnoughBookiesError, match="start more bookies"):
        bk.create_ledger(7, 3, 2)
    lh = bk.create_ledger(3, 2, 2, password=b"right")
    with pytest.raises(EntryTooLargeError, match="maxEntrySize"):
        lh.add_entry(b"x" * 2000)
    lh.add_entry(b"ok")
    lh.close()
    with pytest.raises(BadPasswordError):
        bk.open_ledger(lh.ledger_id, b"wrong")
    with pytest.raises(NoSuchLedgerError):
        bk.open_ledger(987654321)
    rh = bk.open_ledger(lh.ledger_id, b"right")
    with pytest.raises(ReadBeyondLastEntryError, match="read up to 0"):
        list(rh.read_entries(0, 5))


def test_open_ledgers_reads_many_small_ledgers_at_once(shared_cluster5, bk_factory):
    """open_ledgers: one handle per existing ledger (closed ones bounded by their last entry, an open one
    by its LAC, never fenced: R12), a missing ledger left out, a wrong password refused; many
    read_chunk_async reads in flight at once return each ledger's entries, digests checked."""
    bk = bk_factory(shared_cluster5.metadata_service_uri)
    closed = []
    for i, quorum in enumerate([(3, 2, 2), (3, 3, 2), (1, 1, 1), (5, 3, 2)] * 5):
        lh = bk.create_ledger(*quorum, password=b"pw", digest_type="crc32c" if i % 2 else "mac")
        for k in range(1 + i % 3):
            lh.add_entry(payload(i * 10 + k))
        lh.close()
        closed.append((lh.ledger_id, [payload(i * 10 + k) for k in range(1 + i % 3)]))
    writer = bk.create_ledger(3, 2, 2, password=b"pw")
    for k in range(5):
        writer.add_entry(payload(k))
    missing = 987654321
    ids = [lid for lid, _ in closed] + [writer.ledger_id, missing]
    handles = bk.open_ledgers(ids, b"pw")
    assert set(handles) == set(ids) - {missing}
    futures = {lid: handles[lid].read_chunk_async(0, len(want) - 1) for lid, want in closed}
    for lid, want in closed:
        assert handles[lid].is_closed and handles[lid].last_entry_id == len(want) - 1
        assert [bytes(p) for p in futures[lid].result(30).payloads] == want
    tail = handles[writer.ledger_id]
    assert not tail.is_closed and tail.last_add_confirmed >= 3       # the LAC lags the last add by one
    assert writer.add_entry(b"after") == 5                           # not fenced (R12)
    writer.close()
    with pytest.raises(BadPasswordError):
        bk.open_ledgers(ids, b"wrong")
    assert bk.open_ledgers([missing]) == {}


def test_asyncio_api_and_many_threads(shared_cluster5, bk_factory):
    """The asyncio flavour works from the caller's own loop; the blocking API from many threads."""
    bk = bk_factory(shared_cluster5.metadata_service_uri)
    lh = bk.create_ledger(3, 2, 2)

    async def go() -> list[int]:
        return list(await asyncio.gather(*(lh.add(payload(i)) for i in range(300))))

    assert sorted(asyncio.run(go())) == list(range(300))
    results: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(100):
            eid = lh.add_entry(b"t")
            with lock:
                results.append(eid)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == list(range(300, 900))
    lh.close()
    rh = asyncio.run(_open_async(bk, lh.ledger_id))
    assert rh.last_entry_id == 899


async def _open_async(bk, ledger_id):
    return await bk.aopen_ledger(ledger_id)


def test_tailing_reader_across_a_bookie_restart(cluster_factory, bk_factory):
    """Scenario: a tailing reader during writes and a bookie restart: the LAC it sees never goes
    backwards, it never reads above it, and it reads every entry exactly once, in order."""
    cluster = cluster_factory(4)
    bk = bk_factory(cluster.metadata_service_uri)
    lh = bk.create_ledger(3, 3, 2)
    lh.add_entry(payload(0))
    rh = bk_factory(cluster.metadata_service_uri).open_ledger(lh.ledger_id, recovery=False)
    member = lh.metadata.last_fragment.ensemble[2]
    index = next(b.index for b in cluster.bookies if b.bookie_id == member)
    seen, last_lac, total = 0, -1, 3000
    restarted = False
    deadline = time.monotonic() + 60
    next_write = 1
    while seen < total:
        assert time.monotonic() < deadline, f"reader stuck at {seen}"
        if next_write < total:
            batch = range(next_write, min(total, next_write + 100))
            for i in batch:
                lh.add_entry_async(payload(i))
            next_write = batch[-1] + 1
        if not restarted and seen > 1000:
            cluster.kill_bookie(index)
            cluster.start_bookie(index)
            restarted = True
        lac = rh.wait_for_lac(seen - 1, timeout=2)
        assert lac >= last_lac and lac <= lh.last_add_confirmed
        last_lac = lac
        if lac >= seen:
            got = list(rh.read_entries(seen, lac))
            assert [en.entry_id for en in got] == list(range(seen, lac + 1))
            assert all(en.payload == payload(en.entry_id) for en in got)
            seen = lac + 1
    lh.close()


@pytest.mark.parametrize("stopped", [0, 1, 2])
def test_striped_read_with_a_covering_bookie_down(cluster_factory, bk_factory, stopped):
    """E > Qw: each entry is verified from one covering bookie; with any one bookie of the ensemble
    killed, the copies the others sent along (or per-entry reads) still give every entry, in order."""
    cluster = cluster_factory(3)
    bk = bk_factory(cluster.metadata_service_uri)
    lh = closed_ledger(bk, 3, 2, 2, 5000)
    rh = bk.open_ledger(lh.ledger_id, recovery=False)
    assert [en.payload for en in rh.read_entries(0, 4999)] == [payload(i) for i in range(5000)]
    victim = lh.metadata.last_fragment.ensemble[stopped]
    cluster.kill_bookie(next(b.index for b in cluster.bookies if b.bookie_id == victim))
    rh = bk.open_ledger(lh.ledger_id, recovery=False)
    assert [en.payload for en in rh.read_entries(0, 4999)] == [payload(i) for i in range(5000)]


def test_r13_a_read_on_a_connection_retired_under_it_fails_with_a_typed_error(cluster_factory):
    """When the pool replaces a failed connection it closes the old channel, which cancels the calls still
    on it. Those calls must fail as BookieUnavailableError (a reader then reads elsewhere, R13), not as a
    bare CancelledError that ends the caller (a Spark task) without saying why."""
    from bkledger.client import BookKeeper
    from bkledger.client.errors import BookieUnavailableError

    cluster = cluster_factory(1)
    bookie_id = cluster.bookies[0].bookie_id
    with BookKeeper(cluster.metadata_service_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"pw")
        for i in range(2000):
            lh.add_entry_async(bytes([i % 251]) * 1024)
        lh.close()
        pool = bk._ctx.pool

        async def retire_mid_stream() -> tuple[int, BaseException | None]:
            client = await pool.get(bookie_id)
            stream = client.read_range(lh.ledger_id, 0, 1999, timeout=30, max_batch_bytes=8 * 1024)
            got = len((await stream.__anext__()).entry_ids)      # the call is under way
            client.failed = True
            await pool.get(bookie_id)                             # replaces it: the old channel is closed
            await asyncio.gather(*pool._closing)
            try:
                async for batch in stream:
                    got += len(batch.entry_ids)
            except BaseException as exc:                          # noqa: BLE001 - the test looks at which
                return got, exc
            return got, None

        got, error = bk._ctx.runtime.run(retire_mid_stream(), 60)
        assert got == 2000 or isinstance(error, BookieUnavailableError), (got, repr(error))


def test_numpy_is_imported_when_a_ledger_is_created_not_at_the_first_large_ack(shared_cluster5):
    """Batched acks of 128 entries or more are marked with numpy (R6, client.protocol.pending_adds). A
    process that had not imported it stalled its client loop for the import (50-150 ms at 100,000
    adds/s) when the first large ack came; create_ledger imports it, off the loop."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from bkledger.client import BookKeeper\n"
        "with BookKeeper(sys.argv[1]) as bk:\n"
        "    before = 'numpy' in sys.modules\n"
        "    lh = bk.create_ledger(3, 3, 2, password=b'pw')\n"
        "    print(before, 'numpy' in sys.modules)\n"
        "    lh.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", script, shared_cluster5.metadata_service_uri],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("bulk", [False, True])
def test_r10_close_sends_the_adds_queued_before_it_and_waits_for_them(registered3, bk_factory, bulk):
    """R10 with adds still queued in the writer: every add submitted before close() is sent and
    acknowledged, and the ledger is closed after the last of them; none fails because of the close.
    All bookies are paused (SIGSTOP) after one add is sent, so its request stays unanswered and the
    adds after it wait in the writer's queue (Nagle's rule) when close() begins; the bookies are let go
    once the close has started. A log roll closes its old ledger the same way, under load."""
    cluster = registered3
    bk = bk_factory(cluster.metadata_service_uri, addEntryTimeoutSec=30.0)
    lh = bk.create_ledger(3, 3, 2)
    lh.add_entry(payload(0))
    writer = lh._writer
    assert writer is not None
    with bookies_paused(cluster):
        futures = []

        def one_more_add() -> bool:
            futures.append(lh.add_entry_async(payload(len(futures) + 1)))
            return writer._parked

        wait_for(one_more_add, 10, "the writer to park behind unanswered requests", step=0.01)
        first = len(futures) + 1
        if bulk:
            blob = b"".join(payload(i) for i in range(first, 300))
            offsets = [0, *itertools.accumulate(len(payload(i)) for i in range(first, 300))]
            futures.append(lh.add_entries(blob, offsets))
        else:
            futures += [lh.add_entry_async(payload(i)) for i in range(first, 300)]
        assert writer._incoming, "the adds after the first wait in the writer's queue"
        closing = concurrent.futures.ThreadPoolExecutor(1).submit(lh.close)
        wait_for(lambda: writer.closing, 10, "close() begins", step=0.01)
    closing.result(60)
    expected = list(range(1, first)) + ([299] if bulk else list(range(first, 300)))
    assert [f.result(30) for f in futures] == expected
    assert lh.metadata.state is LedgerState.CLOSED and lh.metadata.last_entry_id == 299
    rh = bk.open_ledger(lh.ledger_id, recovery=False)
    assert [en.payload for en in rh.read_entries(0, 299)] == [payload(i) for i in range(300)]


def test_closing_the_client_fails_pending_adds_and_releases_blocked_callers(registered3, bk_factory):
    """bk.close() with adds in flight, queued, and a caller blocked on a full window (maxOutstandingAdds):
    as BookKeeper's client does, every one fails with ClientClosedError and the blocked caller returns;
    none is left waiting forever. All bookies are paused so that nothing is acknowledged meanwhile."""
    cluster = registered3
    bk = bk_factory(cluster.metadata_service_uri, addEntryTimeoutSec=30.0, maxOutstandingAdds=50)
    lh = bk.create_ledger(3, 3, 2)
    lh.add_entry(payload(0))
    writer = lh._writer
    assert writer is not None
    with bookies_paused(cluster):
        futures = [lh.add_entry_async(payload(i)) for i in range(1, 51)]
        blocked = concurrent.futures.ThreadPoolExecutor(1).submit(lh.add_entry_async, payload(51))
        wait_for(lambda: writer._window_waiters, 10, "a caller blocked on the full window", step=0.01)
        bk.close()
        futures.append(blocked.result(10))
        for future in futures:
            with pytest.raises(ClientClosedError, match="close each ledger"):
                future.result(10)


def test_closing_the_client_under_a_blocking_read_fails_it_with_a_typed_error(registered3, bk_factory):
    """A blocking read, and a read_chunk_async future, in flight when bk.close() runs (every bookie paused,
    so neither can finish) end with ClientClosedError, not a bare CancelledError from the stopped loop."""
    cluster = registered3
    lh = closed_ledger(bk_factory(cluster.metadata_service_uri), 3, 3, 2, 100)
    bk = bk_factory(cluster.metadata_service_uri, readTimeout=30.0, speculativeReadTimeout=0)
    rh = bk.open_ledger(lh.ledger_id, recovery=False)
    other = bk.open_ledger(lh.ledger_id, recovery=False)
    with bookies_paused(cluster):
        reading = concurrent.futures.ThreadPoolExecutor(1).submit(lambda: list(rh.read_entries(0, 99)))
        chunk = other.read_chunk_async(0, 99)
        with pytest.raises(concurrent.futures.TimeoutError):
            reading.result(0.5)                 # the read is under way, waiting for the paused bookies
        bk.close()
        with pytest.raises(ClientClosedError, match="closed while this call ran"):
            reading.result(15)
        with pytest.raises(ClientClosedError, match="closed while this call ran"):
            chunk.result(15)


def test_handles_used_after_a_close_raise_typed_errors(shared_cluster5, bk_factory):
    """An add to a ledger closed by its writer is LedgerClosedError (BookKeeper's LedgerClosedException);
    anything done through a closed client, a read, a close or an add, is ClientClosedError saying what
    to do, never the stopped event loop's RuntimeError."""
    bk = bk_factory(shared_cluster5.metadata_service_uri)
    lh = bk.create_ledger(3, 3, 2)
    lh.add_entry(payload(0))
    lh.close()
    with pytest.raises(LedgerClosedError, match="create a new ledger"):
        lh.add_entry(payload(1))
    with pytest.raises(LedgerClosedError, match="create a new ledger"):
        lh.add_entries(payload(1), [0, len(payload(1))]).result(10)
    rh = bk.open_ledger(lh.ledger_id, recovery=False)
    still_open = bk.create_ledger(3, 3, 2)
    bk.close()
    with pytest.raises(ClientClosedError, match="create a new client"):
        list(rh.read_entries(0, 0))
    with pytest.raises(ClientClosedError, match="close each ledger"):
        still_open.add_entry(payload(2))
    with pytest.raises(ClientClosedError, match="create a new client"):
        still_open.close()
