"""LedgerWriter's add queue with fake bookie connections: entries go to their write sets, acks complete
adds in entry order (R6), the window of maxOutstandingAdds bounds what is queued or in flight."""

from __future__ import annotations

import asyncio
import time
import types
from typing import Any

from bkledger.client.add_future import AddFuture
from bkledger.client.config import ClientConfig
from bkledger.client.errors import LedgerFencedError
from bkledger.client.metrics import NO_METRICS
from bkledger.client.protocol.bulk import check_bulk
from bkledger.client.protocol.digest import make_digest, unpack_entry
from bkledger.client.protocol.pending_adds import Resend
from bkledger.client.protocol.transforms import new_ledger_metadata
from bkledger.client.writer import LedgerWriter
from bkledger.proto import bookie_pb2 as pb


class FakeBookie:
    failed = False
    saturated = False            # maxAddRequestsInFlight reached (set by a test)

    def __init__(self) -> None:
        self.sent: list[tuple[list[int], list[int], bytes]] = []
        self.on_free: list[Any] = []

    def when_free(self, callback: Any) -> None:
        self.on_free.append(callback)

    def free(self) -> None:
        self.saturated = False
        callbacks, self.on_free = self.on_free, []
        for callback in callbacks:
            callback()

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
        self.wakeups = 0
        self.forked = False         # as EventLoopThread.forked: not a fork child

    def call_soon(self, fn: Any, *args: Any) -> None:
        self.wakeups += 1
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


def test_adds_wait_without_waking_the_loop_while_every_bookie_is_saturated() -> None:
    """Parked: with every bookie at maxAddRequestsInFlight an add could only join the next request, so a
    submit does not wake the loop; the first freed slot drains them all, in order, as one batch, and they
    complete in entry order (R6)."""
    async def scenario() -> None:
        writer, bookies = _writer(3, 3, 2, window=100)
        runtime: Runtime = writer.ctx.runtime  # type: ignore[assignment]
        for bookie in bookies.values():
            bookie.saturated = True
        first = _submit(writer, b"a")
        await asyncio.sleep(0)
        assert runtime.wakeups == 1 and bookies["b0"].sent[-1][0] == [0]       # sent; now parked
        later = [_submit(writer, b"b"), _submit(writer, b"c"), _submit(writer, b"d")]
        await asyncio.sleep(0)
        assert runtime.wakeups == 1 and len(bookies["b0"].sent) == 1           # queued, no wake-up
        bookies["b1"].free()                                                   # one slot of one bookie,
        bookies["b1"].saturated = True                                         # taken by the drain's request
        await asyncio.sleep(0)
        assert [sent[0] for sent in bookies["b0"].sent] == [[0], [1, 2, 3]]
        assert bookies["b0"].sent == bookies["b1"].sent == bookies["b2"].sent
        for entry in range(4):
            _ack(writer, "b0", entry)
            _ack(writer, "b2", entry)
        assert first is not None and [f.result(0) for f in [first, *later] if f] == [0, 1, 2, 3]
        assert _submit(writer, b"e") is not None and runtime.wakeups == 1     # parked again after that drain
        await asyncio.sleep(0)
        bookies["b2"].failed = True
        bookies["b2"].free()                                                   # a failure unparks too
        await asyncio.sleep(0)
        assert bookies["b0"].sent[-1][0] == [4]

    asyncio.run(scenario())


def test_a_saturated_bookie_beside_a_free_one_does_not_park() -> None:
    async def scenario() -> None:
        writer, bookies = _writer(3, 3, 2, window=100)
        runtime: Runtime = writer.ctx.runtime  # type: ignore[assignment]
        bookies["b0"].saturated = bookies["b1"].saturated = True
        _submit(writer, b"a")
        await asyncio.sleep(0)
        _submit(writer, b"b")
        await asyncio.sleep(0)
        assert runtime.wakeups == 2 and [sent[0] for sent in bookies["b2"].sent] == [[0], [1]]

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


def _entries(sent: list[tuple[list[int], list[int], bytes]]) -> dict[int, bytes]:
    digest = make_digest("crc32c", b"pw")
    out: dict[int, bytes] = {}
    for ids, sizes, data in sent:
        offset = 0
        for entry_id, size in zip(ids, sizes, strict=True):
            out[entry_id] = bytes(unpack_entry(digest, 7, entry_id, data[offset:offset + size]).payload)
            offset += size
    return out


def test_a_bulk_between_single_adds_gets_consecutive_ids_and_one_future() -> None:
    """A bulk takes the next ids in submission order, goes to each entry's write set (E > Qw too), and
    its single future completes with its last entry id once every earlier entry is acknowledged (R6)."""
    async def scenario() -> None:
        writer, bookies = _writer(3, 2, 2, window=100)
        before = _submit(writer, b"first")
        bulk_future = AddFuture()
        writer.submit_bulk(check_bulk(b"aabbbc", [0, 2, 5, 5, 6], 100), bulk_future)
        after = _submit(writer, b"last")
        await asyncio.sleep(0)
        held = {b: _entries(bookie.sent) for b, bookie in bookies.items()}
        assert held["b1"] == {0: b"first", 1: b"aa", 3: b"", 4: b"c"}
        assert {**held["b0"], **held["b1"], **held["b2"]} == {
            0: b"first", 1: b"aa", 2: b"bbb", 3: b"", 4: b"c", 5: b"last"}
        for entry_id in range(0, 4):
            for b in ("b0", "b1", "b2"):
                if entry_id in held[b]:
                    _ack(writer, b, entry_id)
        assert before is not None and before.result(0) == 0
        assert not bulk_future.done()                             # entry 4 of the bulk is pending
        _ack(writer, "b1", 4)
        _ack(writer, "b2", 4)
        assert bulk_future.result(0) == 4 and after is not None and not after.done()
        assert writer.lac_length == len(b"first" + b"aabbbc")

    asyncio.run(scenario())


def test_a_failure_inside_a_bulk_fails_it_and_everything_after() -> None:
    """EFENCED on an entry in the middle of a bulk: the entries before it that completed stay
    completed, the bulk's future and every later add fail with LedgerFencedError (R21)."""
    async def scenario() -> None:
        writer, bookies = _writer(3, 3, 2, window=100)
        before = _submit(writer, b"x")
        bulk_future = AddFuture()
        writer.submit_bulk(check_bulk(b"0123456789", list(range(11)), 100), bulk_future)
        after = _submit(writer, b"y")
        await asyncio.sleep(0)
        _ack(writer, "b0", 0, 1, 2)
        _ack(writer, "b1", 0, 1, 2)
        assert before is not None and before.result(0) == 0
        writer.on_ack("b2", pb.AddAck(ledger_id=7, status=pb.EFENCED, entry_ids=[5]))
        assert isinstance(bulk_future.exception(0), LedgerFencedError)
        assert after is not None and isinstance(after.exception(0), LedgerFencedError)
        assert writer.pending.last_add_confirmed == 2
        assert writer._in_window == 0                              # every slot came back

    asyncio.run(scenario())


def test_a_bulk_larger_than_the_window_takes_half_of_it() -> None:
    async def scenario() -> None:
        writer, bookies = _writer(3, 3, 2, window=4)
        singles = [_submit(writer, b"s%d" % i) for i in range(3)]
        await asyncio.sleep(0)
        bulk = check_bulk(bytes(10), list(range(11)), 100)
        waiting = asyncio.ensure_future(asyncio.to_thread(writer.submit_bulk, bulk, AddFuture()))
        await asyncio.sleep(0.05)
        assert not waiting.done()                 # 1 slot free: a bulk takes half the window (2)...
        _ack(writer, "b0", 0)
        _ack(writer, "b1", 0)
        await asyncio.wait_for(waiting, 30)       # ...which it gets once one single add completed
        assert singles[0] is not None and singles[0].result(0) == 0
        assert writer._in_window == 4

    asyncio.run(scenario())


def test_an_exception_in_the_drain_fails_the_adds_it_held_and_every_later_one() -> None:
    """Issue 46: a loop callback that raises (here a bookie connection's send) fails the adds it took from
    the queue, typed, instead of escaping to the loop with them unsettled; later adds fail at once."""
    from bkledger.client.errors import BKError, ClientInternalError

    async def scenario() -> None:
        writer, bookies = _writer(3, 3, 2, window=100)

        def broken(*args: Any, **flags: Any) -> None:
            raise RuntimeError("a bug in the send path")

        bookies["b1"].send_add = broken  # type: ignore[method-assign]
        futures = [_submit(writer, b"p%d" % i) for i in range(3)]
        await asyncio.sleep(0)
        for future in futures:
            assert future is not None and isinstance(future.exception(0), ClientInternalError)
        later = _submit(writer, b"later")
        assert later is not None and isinstance(later.exception(0), BKError)

    asyncio.run(scenario())


def test_adds_pending_past_the_settle_bound_fail_typed() -> None:
    """Issue 46: adds pending with none completing for the bound (addEntryTimeoutSec x (attempts + 1))
    fail with AddEntryQuorumTimeoutError, maybe written, and the handle takes no more adds."""
    from bkledger.client.errors import AddEntryQuorumTimeoutError
    from bkledger.client.protocol.add_timeouts import add_settle_bound

    async def scenario() -> None:
        writer, _ = _writer(3, 3, 2, window=100)
        future = _submit(writer, b"never answered")
        await asyncio.sleep(0)
        config = writer.ctx.config
        bound = add_settle_bound(config.addEntryTimeoutSec, config.ensembleChangeMaxAttempts)
        now = time.monotonic()
        writer._tick_once(now)
        assert future is not None and not future.done()               # within the bound: still pending
        writer._tick_once(now + bound + 1)                            # the bound passed with no completion
        assert isinstance(future.exception(0), AddEntryQuorumTimeoutError)
        later = _submit(writer, b"later")
        assert later is not None and isinstance(later.exception(0), AddEntryQuorumTimeoutError)

    asyncio.run(scenario())


def test_r21_a_late_efenced_of_an_acknowledged_entry_fails_the_next_adds() -> None:
    """R21 (issue 46): EFENCED from the third bookie for an entry the two others acknowledged arrives with
    nothing pending; the adds after it fail with LedgerFencedError at once instead of waiting for ever."""
    async def scenario() -> None:
        writer, _ = _writer(3, 3, 2, window=100)
        first = _submit(writer, b"acknowledged")
        await asyncio.sleep(0)
        _ack(writer, "b0", 0)
        _ack(writer, "b1", 0)
        assert first is not None and first.result(0) == 0
        writer.on_ack("b2", pb.AddAck(ledger_id=7, status=pb.EFENCED, entry_ids=[0]))
        later = _submit(writer, b"after")
        await asyncio.sleep(0)
        assert later is not None and isinstance(later.exception(0), LedgerFencedError)

    asyncio.run(scenario())


def test_issue46_an_effect_the_driver_does_not_know_fails_the_adds_instead_of_being_dropped() -> None:
    """The writer's effects are a closed union run by a match ending in assert_never: an unknown one (a
    machine newer than its driver) fails the adds it concerned, typed, instead of leaving them pending."""
    from bkledger.client.errors import ClientInternalError

    async def scenario() -> None:
        writer, _ = _writer(3, 3, 2, window=100)
        future = _submit(writer, b"x")
        await asyncio.sleep(0)
        writer.machine.on_acks = lambda *args: [object()]  # type: ignore[method-assign]
        _ack(writer, "b0", 0)
        assert future is not None and isinstance(future.exception(0), ClientInternalError)

    asyncio.run(scenario())


def test_issue46_the_recovery_driver_refuses_an_event_it_does_not_know() -> None:
    """The recovery driver's events are typed too: an unknown one is an error, never a silent drop."""
    import pytest

    from bkledger.client.protocol.recovery import LedgerRecovery
    from bkledger.client.recovery_driver import FenceAnswer, RecoveryRun

    md = new_ledger_metadata(7, ["b0", "b1", "b2"], 3, 3, 2, "crc32c", b"pw", 1234, {}, "")
    run = RecoveryRun(types.SimpleNamespace(config=ClientConfig()), md, b"pw")  # type: ignore[arg-type]
    machine = LedgerRecovery(md, run.digest)
    machine.start()
    assert run._dispatch(machine, FenceAnswer(0, pb.EOK, -1)) == []      # one fenced bookie: no coverage yet
    with pytest.raises(AssertionError):
        run._dispatch(machine, ("fence", (0, pb.EOK, -1)))  # type: ignore[arg-type]


class FakeStore:
    """The metadata store as far as a writer uses it: the writable bookies and the CAS update loop."""

    def __init__(self, md: Any, writable: list[str]) -> None:
        self.md, self.version, self.writable = md, 0, writable

    def writable_bookies(self) -> list[str]:
        return list(self.writable)

    def update_ledger(self, ledger_id: int, fn: Any, *, max_attempts: int) -> tuple[Any, int]:
        new = fn(self.md)
        if new is not None:
            self.md, self.version = new, self.version + 1
        return self.md, self.version


def _changing_writer(spare: str) -> tuple[LedgerWriter, dict[str, FakeBookie], FakeStore]:
    """A writer E=3 Qw=3 Qa=2 whose context also has a store, a placement policy and a pool to connect with."""
    from bkledger.client.placement import RandomPlacementPolicy

    writer, bookies = _writer(3, 3, 2, window=100)
    bookies[spare] = FakeBookie()
    store = FakeStore(writer.md, list(bookies))

    async def get(bookie_id: str) -> FakeBookie:
        return bookies[bookie_id]

    writer.ctx.pool = types.SimpleNamespace(cached=bookies.get, get=get, tls_error=lambda bookie_id: None)  # type: ignore[assignment]
    writer.ctx.store = store  # type: ignore[assignment]
    writer.ctx.placement = RandomPlacementPolicy(seed=1)
    return writer, bookies, store


async def _changes_done(writer: LedgerWriter) -> None:
    """Wait (bounded) for the ensemble change's steps: each may start the next."""
    while writer._change_task is not None and not writer._change_task.done():
        await asyncio.wait_for(asyncio.gather(writer._change_task), 10)


def test_r9_the_driver_runs_the_machines_ensemble_change_steps() -> None:
    """R9 through LedgerWriter: a failed bookie -> the machine's FindReplacements (writable bookies listed)
    -> StoreEnsembleChange (the CAS through the store) -> resends to the replacement, whose acks complete
    the adds; the failed bookie, though still listed writable, is never picked back."""
    async def scenario() -> None:
        writer, bookies, store = _changing_writer("b3")
        futures = [_submit(writer, b"p%d" % i) for i in range(2)]
        await asyncio.sleep(0)
        _ack(writer, "b0", 0, 1)
        writer.on_bookie_failed("b1")
        await _changes_done(writer)
        assert store.md.last_fragment.ensemble == ("b0", "b3", "b2") and writer.md is store.md
        assert [e for sent in bookies["b3"].sent for e in sent[0]] == [0, 1]
        _ack(writer, "b3", 0, 1)
        assert [f.result(0) for f in futures if f] == [0, 1]

    asyncio.run(scenario())


def test_r9_no_free_bookie_below_the_ack_quorum_fails_the_adds_through_the_driver() -> None:
    """Two bookies of E=3 Qw=3 Qa=2 fail and the only writable one outside the ensemble failed before: the
    machine decides NotEnoughBookiesError, the driver fails the adds with it and refuses the next."""
    from bkledger.client.errors import NotEnoughBookiesError

    async def scenario() -> None:
        writer, _, store = _changing_writer("b3")
        future = _submit(writer, b"x")
        await asyncio.sleep(0)
        writer.machine.bad_bookies.add("b3")
        writer.on_bookie_failed("b1")
        writer.on_bookie_failed("b2")
        await _changes_done(writer)
        assert future is not None and isinstance(future.exception(0), NotEnoughBookiesError)
        assert store.version == 0
        later = _submit(writer, b"later")
        assert later is not None and isinstance(later.exception(0), NotEnoughBookiesError)

    asyncio.run(scenario())


def test_r10_a_close_that_times_out_fails_the_pending_adds_closed_and_closes_at_the_lac() -> None:
    """R10 through LedgerWriter: the close's wait runs out with an add unanswered; the machine fails it with
    LedgerClosedError and the CAS closes the ledger at the LAC (entry 0 acknowledged, entry 1 not)."""
    from bkledger.client.errors import LedgerClosedError
    from bkledger.client.protocol.metadata import LedgerState

    async def scenario() -> None:
        writer, _, store = _changing_writer("b3")
        done = _submit(writer, b"acked")
        await asyncio.sleep(0)
        _ack(writer, "b0", 0)
        _ack(writer, "b1", 0)
        stuck = _submit(writer, b"never answered")
        await asyncio.sleep(0)
        md = await asyncio.wait_for(writer.close(0.05), 10)
        assert done is not None and done.result(0) == 0
        assert stuck is not None and isinstance(stuck.exception(0), LedgerClosedError)
        assert "closed with adds pending" in str(stuck.exception(0))          # the machine's decision
        assert md.state is LedgerState.CLOSED and md.last_entry_id == 0 and store.md is md

    asyncio.run(scenario())
