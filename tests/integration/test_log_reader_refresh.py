"""A log reader keeps up with many producers (issue 44, found by the Jepsen test): each producer commits a
ledger per batch, so a reader moves to a new ledger every few records. Each move re-reads the log from the
reader's ledger on, not the whole log, and a log that changes under every read of it is "not yet" for the
reader (it reads again within its deadline), never LogUpdateConflictError. Real bookies and ZooKeeper."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from bkledger.client import BookKeeper
from bkledger.client.log.core import stored as st
from bkledger.client.log.core.meta import LogMetadata
from bkledger.client.log.reader import LogRecord
from bkledger.client.log.store import log_path, update_log
from bkledger.client.meta.store import MetadataStore
from tests.integration.conftest import start_cluster

PRODUCERS = 3
PRODUCE_S = 8.0          # how long the producers send
CATCH_UP_S = 10.0        # the reader has read every record this long after the producers stopped
SEGMENT = 8              # ledgers per segment here: a log of many segments within seconds


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator:
    made = start_cluster(tmp_path_factory.mktemp("reader-refresh"), zookeeper, 3)
    try:
        yield made
    finally:
        made.down()


@pytest.fixture
def name() -> str:
    return f"refresh-{uuid.uuid4().hex[:8]}"


class SegmentReads:
    """Counts the log's segment znodes one client reads: per multi-read (the loads' segments) and single
    reads (a load's binary search for the reader's segment)."""

    def __init__(self, store: MetadataStore, path: str) -> None:
        self.loads: list[int] = []
        self.singles = 0
        prefix = path + "/"
        get_many, get = store.get_many, store.get

        def counted_many(paths: list[str], per_request: int = 64) -> list[tuple[bytes, int] | None]:
            self.loads.append(sum(p.startswith(prefix) for p in paths))
            return get_many(paths, per_request)

        def counted(path_: str) -> tuple[bytes, int] | None:
            self.singles += path_.startswith(prefix)
            return get(path_)

        store.get_many = counted_many          # type: ignore[method-assign]
        store.get = counted                    # type: ignore[method-assign,assignment]


def produce(bk: BookKeeper, name: str, index: int, until: float, sent: list[bytes],
            errors: list[BaseException]) -> None:
    try:
        with bk.open_log_producer(name, f"p{index}", max_records=5, linger_ms=0) as producer:
            i = 0
            while time.monotonic() < until:
                values = [b"p%d-%06d" % (index, i + k) for k in range(5)]
                for future in [producer.send(v) for v in values]:     # a batch or two of 5 at a time
                    future.result(30)
                sent.extend(values)
                i += 5
    except BaseException as exc:
        errors.append(exc)


def test_a_cursor_reader_keeps_up_with_many_producers(cluster, name: str, monkeypatch: pytest.MonkeyPatch):
    """R11: 3 producers commit a ledger per few records while a cursor reader reads and acknowledges;
    it has read every record, once and in each producer's order, soon after they stop. Its refreshes
    read the segments from its ledger on (as many as it is behind), never the whole log; reopened at its
    cursor it reads a few segments, not all."""
    monkeypatch.setattr(st, "SEGMENT_LEDGERS", SEGMENT)
    uri = cluster.metadata_service_uri
    clients = [BookKeeper(uri) for _ in range(PRODUCERS + 1)]
    try:
        with clients[0].open_log_producer(name, "first") as first:
            first.send(b"first").result(30)
        reads = SegmentReads(clients[PRODUCERS].store, log_path(clients[PRODUCERS].store, name))
        reader = clients[PRODUCERS].open_log_reader(name, cursor="keeps-up")
        got: list[LogRecord] = []
        more = threading.Condition()
        stop = threading.Event()
        failures: list[BaseException] = []

        def read() -> None:
            try:
                while not stop.is_set():
                    batch = reader.read_batch(100, timeout=0.2)
                    if batch:
                        reader.ack()
                    with more:
                        got.extend(batch)
                        more.notify_all()
            except BaseException as exc:
                failures.append(exc)
                with more:
                    more.notify_all()

        sent: list[list[bytes]] = [[] for _ in range(PRODUCERS)]
        errors: list[BaseException] = []
        until = time.monotonic() + PRODUCE_S
        threads = [threading.Thread(target=produce, args=(clients[i], name, i, until, sent[i], errors))
                   for i in range(PRODUCERS)]
        reading = threading.Thread(target=read)
        for t in [reading, *threads]:
            t.start()
        for t in threads:
            t.join(60)
            assert not t.is_alive()
        assert errors == []
        total = 1 + sum(len(s) for s in sent)
        behind = total - len(got)
        with more:
            caught_up = more.wait_for(lambda: len(got) >= total or bool(failures), CATCH_UP_S)
        stop.set()
        reading.join(30)
        assert failures == [] and not reading.is_alive()
        assert caught_up, f"the reader read {len(got)} of {total} records {CATCH_UP_S} s after the producers " \
                          f"stopped ({behind} behind then)"
        values = [r.value for r in got]
        assert len(values) == len(set(values)) == total
        for index in range(PRODUCERS):
            assert [v for v in values if v.startswith(b"p%d-" % index)] == sent[index]
        meta: LogMetadata = clients[0].log_metadata(name)
        segments = -(-len(meta.ledgers) // SEGMENT)
        assert segments >= 20, f"only {len(meta.ledgers)} ledgers: the test did not make a long log"
        loads = reads.loads[1:]                  # the first: the open, of a log of one ledger
        assert len(loads) >= len(meta.ledgers) // 2
        assert max(loads) < segments and sum(loads) / len(loads) <= segments / 3, (segments, loads)
        end = reader.position
        reader.close()
        before = len(reads.loads), reads.singles
        with clients[PRODUCERS].open_log_reader(name, cursor="keeps-up") as again:    # resumes at its cursor
            assert again.position == end
            assert again.read_batch(10, timeout=0.5) == []
        opened = reads.loads[before[0]:]
        assert sum(opened) <= 4 and reads.singles - before[1] <= 3 * segments.bit_length(), (opened, segments)
    finally:
        for c in clients:
            c.close()


def test_a_log_changing_under_every_read_is_not_yet_for_a_reader(cluster, name: str):
    """R27: while the log's head moves under every read of it (a commit lands between the reader's reads
    of the head and of its segments), read_batch returns what it has at its deadline, never
    LogUpdateConflictError; once the log holds still for a moment the reader goes on."""
    uri = cluster.metadata_service_uri
    with BookKeeper(uri) as bk, BookKeeper(uri) as other:
        for batch in range(2):
            with bk.open_log_producer(name, f"b{batch}", max_records=5, linger_ms=50) as producer:
                futures = [producer.send(b"%d-%d" % (batch, i)) for i in range(5)]
                [f.result(30) for f in futures]
        reader = bk.open_log_reader(name)
        meddling = threading.Event()
        meddling.set()
        ticks = [0]
        get_many = bk.store.get_many

        def moved_under(paths: list[str], per_request: int = 64) -> list[tuple[bytes, int] | None]:
            if meddling.is_set():
                ticks[0] += 1
                update_log(other.store, name, lambda m: _ticked(m, ticks[0]))
            return get_many(paths, per_request)

        bk.store.get_many = moved_under          # type: ignore[method-assign]
        first = reader.read_batch(100, timeout=1.0)
        assert [r.value for r in first] == [b"0-%d" % i for i in range(5)]
        started = time.monotonic()
        assert reader.read_batch(100, timeout=1.0) == []
        assert time.monotonic() - started < 1.0 + 5.0          # bounded: returns at (about) its deadline
        assert ticks[0] > 20                                    # more changes than one load's attempts
        meddling.clear()
        assert [r.value for r in reader.read_batch(100, timeout=10.0)] == [b"1-%d" % i for i in range(5)]
        reader.close()


def _ticked(meta: LogMetadata, tick: int) -> LogMetadata:
    return dataclasses.replace(meta, properties={**meta.properties, "tick": str(tick)})
