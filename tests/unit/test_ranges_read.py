"""Reads of many ledgers at once: which entries one bookie is asked for (`held_run`), what a bookie's
ReadRanges answers (`bookie.ranges_read`), and a bookie without the call (UNIMPLEMENTED, from a real gRPC
server) leaving every read to the usual path; groups of reads asked for ahead of their use (`chunks_ahead`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import struct
from pathlib import Path

import grpc
import pytest

from bkledger.bookie import ranges_read
from bkledger.bookie.ranges_read import Failed, Packed, Range
from bkledger.bookie.storage import LedgerStorage
from bkledger.client.bookie_client import BookieClient
from bkledger.client.context import NoRanges
from bkledger.client.protocol.metadata import Fragment, LedgerMetadata
from bkledger.client.protocol.reads import held_run
from bkledger.client.protocol.speculative import BookieHealth, SpeculativePolicy
from bkledger.client.protocol.transforms import new_ledger_metadata
from bkledger.client.protocol.write_set import write_set
from bkledger.client.ranges_reader import RangeRead, read_ranges
from bkledger.client.read_ahead import chunks_ahead
from bkledger.client.reader import ReadChunk
from bkledger.proto import bookie_pb2 as pb

BOOKIES = ("b0:1", "b1:1", "b2:1")


def metadata(e: int, qw: int, fragments: tuple[int, ...] = (0,), bookies: tuple[str, ...] = BOOKIES
             ) -> LedgerMetadata:
    md = new_ledger_metadata(7, list(bookies[:e]), e, qw, qw, "crc32c", b"", 0)
    return dataclasses.replace(md, fragments=tuple(Fragment(first, bookies[:e]) for first in fragments))


@pytest.mark.parametrize("e, qw", [(3, 3), (3, 2), (3, 1), (2, 2)])
@pytest.mark.parametrize("first", [0, 1, 2, 5])
def test_held_run_is_the_longest_run_from_first_the_bookie_holds(e: int, qw: int, first: int) -> None:
    md = metadata(e, qw)
    for index in write_set(first, e, qw):
        hi = held_run(md, BOOKIES[index], first, 20, cap=8)
        assert first <= hi <= min(20, first + 7)
        assert all(index in write_set(x, e, qw) for x in range(first, hi + 1))
        assert hi == min(20, first + 7) or index not in write_set(hi + 1, e, qw)


def test_held_run_stops_at_the_fragment_end_and_the_cap() -> None:
    md = metadata(3, 3, fragments=(0, 4))
    assert held_run(md, BOOKIES[0], 1, 10, cap=100) == 3
    assert held_run(md, BOOKIES[0], 5, 10, cap=3) == 7


def entry(ledger_id: int, entry_id: int, size: int = 100) -> bytes:
    body = bytes([(ledger_id * 31 + entry_id) % 251]) * size
    return struct.pack(">qqqq", ledger_id, entry_id, -1, len(body)) + body


def storage_with(tmp_path: Path, ledgers: dict[int, list[int]]) -> LedgerStorage:
    st = LedgerStorage([tmp_path / "l0"], entry_log_size_limit=1 << 20)
    for ledger_id, ids in ledgers.items():
        entries = [entry(ledger_id, e) for e in ids]
        st.add_batch(ledger_id, ids, [len(x) for x in entries], b"".join(entries))
    return st


def test_a_bookie_answers_ranges_in_order_packed_together(tmp_path: Path) -> None:
    """Held entries of each range from its first id (at most max_entries), tagged with their ledgers;
    ENOLEDGER for a ledger never known, nothing for one known but empty, and the batch sent before a
    failed range so that order holds."""
    st = storage_with(tmp_path, {1: [0], 2: [0, 1, 2, 3], 3: [1, 2]})
    try:
        ranges = [Range(1, 0, 0, 0), Range(2, 1, 3, 2), Range(9, 0, 0, 0), Range(4, 0, 0, 0), Range(3, 0, 5, 0)]
        items = list(ranges_read.answer(st, lambda ledger_id: ledger_id == 4, ranges, 1 << 20))
    finally:
        st.close()
    assert [type(i) for i in items] == [Packed, Failed, Packed]
    first, failed, last = items
    assert isinstance(first, Packed) and isinstance(failed, Failed) and isinstance(last, Packed)
    assert first.ledger_ids.tolist() == [1, 2, 2] and first.entry_ids.tolist() == [0, 1, 2]
    assert first.data == entry(1, 0) + entry(2, 1) + entry(2, 2) and first.sizes.tolist() == [132] * 3
    assert (failed.ledger_id, failed.status) == (9, pb.ENOLEDGER)
    assert last.ledger_ids.tolist() == [3, 3] and last.entry_ids.tolist() == [1, 2]


def test_a_bookie_sends_its_first_batch_soon_and_then_one_every_so_many_ranges(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ranges_read, "FIRST_BATCH_RANGES", 1)
    monkeypatch.setattr(ranges_read, "RANGES_PER_BATCH", 2)
    st = storage_with(tmp_path, {i: [0] for i in range(1, 6)})
    try:
        items = list(ranges_read.answer(st, lambda _: False, [Range(i, 0, 0, 0) for i in range(1, 6)], 1 << 20))
    finally:
        st.close()
    assert [p.ledger_ids.tolist() for p in items if isinstance(p, Packed)] == [[1], [2, 3], [4, 5]]


def test_a_bookie_without_read_ranges_leaves_every_read_to_the_usual_path() -> None:
    """A real gRPC server that serves nothing answers UNIMPLEMENTED: each read is then read alone (here a
    stand-in for the usual path), and the bookie is remembered so it is not asked again."""

    async def scenario() -> tuple[list[ReadChunk], set[str]]:
        server = grpc.aio.server()
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        address = f"127.0.0.1:{port}"
        client = BookieClient(address, address)
        health = BookieHealth()
        md = metadata(1, 1, bookies=(address,))

        class Reader:
            ledger_id = 7

            def __init__(self) -> None:
                self.md = md
                self.ctx = type("Ctx", (), {"health": health})()

        async def alone() -> ReadChunk:
            return ReadChunk([0], [b"alone"])

        async def ask(_: str) -> BookieClient:
            return client

        reads = [RangeRead(Reader(), 0, 0, alone, concurrent.futures.Future())]   # type: ignore[arg-type]
        no_ranges = NoRanges()
        try:
            await read_ranges(reads, no_ranges, ask, SpeculativePolicy(0.2, 0.2), 5.0)
        finally:
            await client.close()
            await server.stop(None)
        return [r.future.result(0) for r in reads], no_ranges.bookies

    chunks, without = asyncio.run(scenario())
    assert [bytes(p) for p in chunks[0].payloads] == [b"alone"]
    assert len(without) == 1 and next(iter(without)).startswith("127.0.0.1:")


def test_chunks_ahead_asks_two_groups_ahead_lazily_and_cancels_what_was_not_handed_over():
    asked: list[list[int]] = []
    made: list[concurrent.futures.Future[ReadChunk]] = []

    def read_chunks_async(reads):
        asked.append([first for _, first, _ in reads])
        out = [concurrent.futures.Future() for _ in reads]
        made.extend(out)
        return out

    called: list[int] = []

    def reads_of(number: int):
        called.append(number)
        return [(None, number * 10 + i, 0) if i != 1 else None for i in range(3)]

    ahead = chunks_ahead(read_chunks_async, 4, reads_of)
    first = next(ahead)
    assert called == [0, 1, 2] and asked == [[0, 2], [10, 12], [20, 22]]   # group 2 asked as group 0 starts
    assert first is made[0] and next(ahead) is None and next(ahead) is made[1]
    assert next(ahead) is made[2] and called == [0, 1, 2, 3]
    ahead.close()
    assert [f.cancelled() for f in made] == [False] * 3 + [True] * 5       # the rest of group 1, groups 2-3
    assert list(chunks_ahead(read_chunks_async, 0, reads_of)) == []


def one_by_one(st: LedgerStorage, ranges: list[tuple[int, int, int, int]], max_bytes: int) -> list:
    out = []
    for ledger_id, first, last, most in ranges:
        got = next(st.read_range(ledger_id, first, last, max_bytes, most), None) if st.has_ledger(ledger_id) else None
        out.append(None if got is None else (got[0].tolist(), got[1].tolist(), bytes(got[2])))
    return out


def together(got: list | None) -> list:
    assert got is not None
    return [None if g is None else (g[0].tolist(), g[1].tolist(), bytes(g[2])) for g in got]


def test_first_batches_read_together_what_each_range_read_gives_first(tmp_path: Path) -> None:
    """One index pass and one read for many ranges: each range's batch is the first one `read_range`
    gives (its entry cap, its byte limit, nothing for a ledger absent or holding nothing of the range),
    and the answer stops after the range that brings the total to the byte limit."""
    st = storage_with(tmp_path, {1: [0], 2: [0, 1, 2, 3], 3: [1, 2], 4: list(range(10)), 5: [0]})
    try:
        ranges = [(1, 0, 0, 1 << 31), (2, 1, 3, 2), (9, 0, 0, 1), (3, 0, 5, 1 << 31), (2, 7, 9, 5),
                  (4, 0, 9, 1 << 31), (5, 0, 0, 1)]
        assert together(st.first_batches(ranges, 1 << 20)) == one_by_one(st, ranges, 1 << 20)
        small = together(st.first_batches(ranges, 500))               # 132 bytes an entry
        assert small == one_by_one(st, ranges[:len(small)], 500) and len(small) == 4
        assert small[1] is not None and small[1][0] == [1, 2] and small[3] is not None and small[3][0] == [1, 2]
        assert st.first_batches([(9, 0, 0, 1), (1, 5, 9, 1)], 1 << 20) == [None, None]
    finally:
        st.close()


def test_ranges_in_several_ledger_directories_are_answered_one_by_one(tmp_path: Path) -> None:
    st = LedgerStorage([tmp_path / "l0", tmp_path / "l1"], entry_log_size_limit=1 << 20)
    try:
        for ledger_id in range(1, 7):
            data = entry(ledger_id, 0)
            st.add_batch(ledger_id, [0], [len(data)], data)
        ranges = [Range(i, 0, 0, 0) for i in range(1, 7)]
        assert st.first_batches([(r.ledger_id, 0, 0, 1) for r in ranges], 1 << 20) is None
        items = list(ranges_read.answer(st, lambda _: False, ranges, 1 << 20))
    finally:
        st.close()
    assert [i.ledger_ids.tolist() for i in items if isinstance(i, Packed)] == [[1, 2, 3, 4, 5, 6]]
    assert b"".join(i.data for i in items if isinstance(i, Packed)) == b"".join(entry(i, 0) for i in range(1, 7))


def test_a_failed_check_of_ranges_read_together_sends_them_to_the_one_by_one_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries read together whose headers do not match the index (a compaction moved one meanwhile, or
    the disk is bad): no batch from that pass; `answer` reads those ranges one by one (which looks the
    entries up again) and still answers each as written."""
    st = storage_with(tmp_path, {i: [0] for i in range(1, 5)})
    real = LedgerStorage._read_runs
    calls: list[int] = []

    def shifted_once(logger, slots):
        calls.append(len(slots))
        blob = real(logger, slots)
        return blob if len(calls) > 1 else b"\0" * 16 + bytes(blob)[16:]

    monkeypatch.setattr(LedgerStorage, "_read_runs", staticmethod(shifted_once))
    try:
        items = list(ranges_read.answer(st, lambda _: False, [Range(i, 0, 0, 0) for i in range(1, 5)], 1 << 20))
    finally:
        st.close()
    assert calls[0] == 4 and len(calls) == 5                      # one pass for all, then one read each
    assert b"".join(i.data for i in items if isinstance(i, Packed)) == b"".join(entry(i, 0) for i in range(1, 5))


def test_an_unreadable_index_while_reading_ranges_together_fails_only_its_own_range(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index page that cannot be read (an I/O error) in the pass over many ranges: the ranges are then
    read one by one, and only the range whose page fails gets EIO; the others are answered."""
    from bkledger.bookie import storage as storage_module

    written = storage_with(tmp_path, {i: [0] for i in range(1, 5)})
    written.flush()                                                           # the index pages on disk
    written.close()
    st = LedgerStorage([tmp_path / "l0"], entry_log_size_limit=1 << 20)       # no index page cached
    real = storage_module.read_slots

    def failing(path, first_slot, count):
        if path.name.startswith(f"{3:x}."):
            raise storage_module.StorageError(f"index file {path.name}: input/output error")
        return real(path, first_slot, count)

    monkeypatch.setattr(storage_module, "read_slots", failing)
    try:
        items = list(ranges_read.answer(st, lambda _: False, [Range(i, 0, 0, 0) for i in range(1, 5)], 1 << 20))
    finally:
        st.close()
    assert [(i.ledger_id, i.status) for i in items if isinstance(i, Failed)] == [(3, pb.EIO)]
    assert sorted(x for i in items if isinstance(i, Packed) for x in i.ledger_ids.tolist()) == [1, 2, 4]
