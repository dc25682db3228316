"""LedgerWriter's add queue with fake bookie connections: entries go to their write sets, acks complete
adds in entry order (R6), the window of maxOutstandingAdds bounds what is queued or in flight."""

from __future__ import annotations

import asyncio
import types
from typing import Any

from client.add_future import AddFuture
from client.config import ClientConfig
from client.metrics import NO_METRICS
from client.protocol.digest import make_digest, unpack_entry
from client.protocol.pending_adds import Resend
from client.protocol.transforms import new_ledger_metadata
from client.writer import LedgerWriter
from proto import bookie_pb2 as pb


class FakeBookie:
    failed = False

    def __init__(self) -> None:
        self.sent: list[tuple[list[int], list[int], bytes]] = []

    def register(self, ledger_id: int, handler: object) -> None:
        pass

    def unregister(self, ledger_id: int) -> None:
        pass

    def send_add(self, ledger_id: int, key: bytes, entry_ids: list[int], sizes: list[int], data: bytes,
                 **flags: Any) -> None:
        self.sent.append((list(entry_ids), list(sizes), bytes(data)))


class Runtime:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def call_soon(self, fn: Any, *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)


def _writer(e: int, qw: int, qa: int, window: int) -> tuple[LedgerWriter, dict[str, FakeBookie]]:
    bookies = {f"b{i}": FakeBookie() for i in range(e)}
    md = new_ledger_metadata(7, list(bookies), e, qw, qa, "crc32c", b"pw", 1234, {}, "")
    pool = types.SimpleNamespace(cached=bookies.get)
    ctx = types.SimpleNamespace(runtime=Runtime(asyncio.get_running_loop()), pool=pool, writers=set(),
                                config=ClientConfig(maxOutstandingAdds=window), metrics=NO_METRICS)
    return LedgerWriter(ctx, md, 0, b"pw"), bookies  # type: ignore[arg-type]


def _ack(writer: LedgerWriter, bookie_id: str, *entry_ids: int) -> None:
    writer.on_ack(bookie_id, pb.AddAck(ledger_id=7, status=pb.EOK, entry_ids=entry_ids))


def _submit(writer: LedgerWriter, payload: bytes, block: bool = False) -> AddFuture | None:
    future = AddFuture()
    return future if writer.submit(payload, future, block=block) else None


def test_entries_go_to_their_write_sets_and_complete_in_order() -> None:
    async def scenario() -> None:
        writer, bookies = _writer(3, 2, 2, window=3)
        futures = [_submit(writer, b"p%d" % i) for i in range(3)]
        assert _submit(writer, b"late") is None                 # the window is full: nothing queued
        await asyncio.sleep(0)
        digest = make_digest("crc32c", b"pw")
        held = {b: [e for sent in bookie.sent for e in sent[0]] for b, bookie in bookies.items()}
        assert held == {"b0": [0, 2], "b1": [0, 1], "b2": [1, 2]}
        ids, sizes, data = bookies["b2"].sent[0]
        assert unpack_entry(digest, 7, 2, data[sizes[0]:]).payload == b"p2"
        _ack(writer, "b1", 1)
        _ack(writer, "b2", 1)
        assert not any(f.done() for f in futures if f)           # entry 0 is not acknowledged yet
        _ack(writer, "b0", 0)
        _ack(writer, "b1", 0)
        assert [f.result(0) for f in futures[:2] if f] == [0, 1]
        assert writer.pending.last_add_confirmed == 1 and writer.lac_length == 4
        assert _submit(writer, b"now") is not None               # two slots came free

    asyncio.run(scenario())


def test_a_blocked_add_proceeds_once_an_add_completes() -> None:
    async def scenario() -> None:
        writer, bookies = _writer(3, 3, 2, window=2)
        first = [_submit(writer, b"x"), _submit(writer, b"y")]
        await asyncio.sleep(0)
        assert [sent[0] for sent in bookies["b0"].sent] == [[0, 1]]    # E == Qw: one blob for all
        assert bookies["b0"].sent == bookies["b1"].sent == bookies["b2"].sent
        blocked = asyncio.ensure_future(asyncio.to_thread(_submit, writer, b"z", True))
        await asyncio.sleep(0.05)
        assert not blocked.done()
        _ack(writer, "b0", 0, 1)
        _ack(writer, "b2", 0, 1)
        third = await asyncio.wait_for(blocked, 30)
        assert third is not None and [f.result(0) for f in first if f] == [0, 1]
        await asyncio.sleep(0)
        _ack(writer, "b1", 2)
        _ack(writer, "b0", 2)
        assert third.result(0) == 2 and writer.lac_length == 3

    asyncio.run(scenario())


def test_resends_carry_the_packaged_entries_of_any_drain() -> None:
    """After an ensemble change each pending entry is resent as first packaged, whichever drain it was in."""
    async def scenario() -> None:
        writer, bookies = _writer(3, 3, 2, window=100)
        for drain in range(5):
            for i in range(drain + 1):
                _submit(writer, b"d%d-%d" % (drain, i))
            await asyncio.sleep(0)
        originals = {}
        for ids, sizes, data in bookies["b1"].sent:
            offset = 0
            for entry_id, size in zip(ids, sizes, strict=True):
                originals[entry_id] = data[offset : offset + size]
                offset += size
        assert sorted(originals) == list(range(15))
        bookies["b1"].sent.clear()
        writer._execute([Resend(e, (1,)) for e in (14, 0, 7, 3)])
        resent = {ids[0]: data for ids, _, data in bookies["b1"].sent}
        assert resent == {e: originals[e] for e in (14, 0, 7, 3)}

    asyncio.run(scenario())
