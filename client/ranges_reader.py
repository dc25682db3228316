"""Reads of many ledgers at once: each ledger's first chunk, many ledgers per call to a bookie (ReadRanges).

A reader of many small ledgers (a log of one-entry ledgers, their compaction) made one call per ledger,
and gRPC's cost per call was most of its time, in the client and in the bookies. Here each read goes to
a bookie of the write set of its first entry that was not slow or failed lately (R13's order with
`BookieHealth.order`), for the run of entries that bookie holds (`held_run`), and each bookie's
reads travel in ReadRanges calls of up to MAX_RANGES ledgers. An answer is checked as a range read's is
(R11: nothing past the range asked for, which the caller checked against the LAC or last entry id; R7:
every digest verified) and becomes what `LedgerHandle.read_chunk` gives: the entries from `first` on (a
prefix of the range; the caller asks for the rest).

A range a call answers without entry `first` (a failed range, a missing entry, a bad digest) is read on
its own by the ledger's usual path (R13: the write set in turn, with speculative reads). The reads of a
call that fails as a whole (a bookie that sent nothing for the speculative timeout, then marked slow; an
unreachable one; one that predates the call, UNIMPLEMENTED, remembered and not asked again) go to the
other bookies of their write sets in one more round of calls, and then on their own. So the batching
only saves calls; what a read returns, and when it fails, is the single read's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import grpc

from bkledger.client.bookie_client import BookieClient
from bkledger.client.context import NoRanges
from bkledger.client.errors import BKError, DigestMismatchError, ReadTimeoutError, typed_error
from bkledger.client.protocol.metadata import DigestType
from bkledger.client.protocol.reads import held_run, read_order
from bkledger.client.protocol.speculative import SpeculativePolicy
from bkledger.client.reader import (
    RANGE_BATCH_BYTES,
    LedgerReader,
    ReadChunk,
    crc32c_verified,
    entry_bounds,
    verify_entries,
)
from bkledger.proto import bookie_pb2 as pb

if TYPE_CHECKING:
    from bkledger.client.reader import I64
    from bkledger.wire.range_batch import RangeBatchView

log = logging.getLogger("bkledger.client")

MAX_RANGES = 1024          # ledgers asked for in one ReadRanges call
RUN_CAP = 4096             # most entries asked of one ledger in such a call
ROUNDS = 2                 # rounds of calls before the reads a failed call left are read alone


@dataclasses.dataclass
class RangeRead:
    """One ledger's read: entries first..last through `reader`; `alone` reads it the usual way."""

    reader: LedgerReader
    first: int
    last: int
    alone: Callable[[], Awaitable[ReadChunk]]
    future: concurrent.futures.Future[ReadChunk]
    hi: int = -1                # the last entry asked of the chosen bookie


async def read_ranges(reads: Sequence[RangeRead], no_ranges: NoRanges, ask: Callable[[str], Awaitable[BookieClient]],
                      policy: SpeculativePolicy, timeout: float, rounds: int = ROUNDS) -> None:
    """Fill each read's future: from ReadRanges calls where one bookie holds the start of its range,
    else (or if that fails) from its usual read. `ask(bookie)`: that bookie's connection (BookieClient).
    The reads of a call that failed as a whole (silent, unreachable, too old) go to the other bookies in
    a further round (the failed one is now slow: `_choose` passes it over), up to `rounds` rounds; then
    alone."""
    loop = asyncio.get_running_loop()
    groups: dict[str, list[RangeRead]] = {}
    alone: list[RangeRead] = []
    for read in reads:
        if read.future.done():                     # cancelled by the caller already
            continue
        chosen = _choose(read, no_ranges, loop.time())
        if chosen is None:
            alone.append(read)
            continue
        groups.setdefault(chosen, []).append(read)
    calls = [_from_bookie(bookie, group[i:i + MAX_RANGES], no_ranges, ask, policy, timeout)
             for bookie, group in groups.items() for i in range(0, len(group), MAX_RANGES)]
    done = await asyncio.gather(*calls, *(_alone(read) for read in alone))
    rest = [read for left in done[:len(calls)] for read in (left or ()) if not read.future.done()]
    if rest and rounds > 1:
        await read_ranges(rest, no_ranges, ask, policy, timeout, rounds - 1)
    elif rest:
        await asyncio.gather(*(_alone(read) for read in rest))


def _choose(read: RangeRead, no_ranges: NoRanges, now: float) -> str | None:
    """The bookie to ask for this read (None: read it alone), its run's end set in read.hi: of the write set
    of its first entry, in R13's order, the bookies not slow lately; of those, the one holding the longest
    run from `first` (striped, E > Qw: the last of the write set holds Qw entries, the first maybe one)."""
    health = read.reader.ctx.health
    order = [b for b in health.order(read_order(read.reader.md, read.first), now) if b not in no_ranges.bookies]
    healthy = [b for b in order if not health.is_slow(b, now)] or order[:1]
    best: tuple[int, str] | None = None
    for bookie_id in healthy:
        hi = held_run(read.reader.md, bookie_id, read.first, read.last, RUN_CAP)
        if best is None or hi > best[0]:
            best = hi, bookie_id
    if best is None:
        return None
    read.hi = best[0]
    return best[1]


async def _alone(read: RangeRead) -> None:
    if read.future.done():
        return
    try:
        chunk = await read.alone()
    except Exception as exc:  # noqa: BLE001 (the caller's future tells it, typed)
        what = f"the read of ledger {read.reader.ledger_id} from entry {read.first}"
        _settle(read.future, typed_error(exc, what, ReadTimeoutError))
        return
    # cancelled: whoever cancelled the read settles its future with a typed error (read_chunks_async says
    # why: its bound passed, or the client closed); a cancellation is never put on the caller's future
    _settle(read.future, chunk)


def _settle(future: concurrent.futures.Future[ReadChunk], outcome: ReadChunk | BaseException) -> None:
    if future.done():
        return
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


async def _from_bookie(bookie_id: str, group: list[RangeRead], no_ranges: NoRanges,
                       ask: Callable[[str], Awaitable[BookieClient]], policy: SpeculativePolicy, timeout: float
                       ) -> list[RangeRead]:
    """One ReadRanges call. A range it answers without entry `first` (failed, missing, bad digest) is
    read alone at once; if the call itself fails, the reads it left are returned for another round."""
    pending: dict[int, RangeRead] = {}
    doubles: list[RangeRead] = []                 # a ledger twice: the later reads go alone
    for read in group:
        if read.reader.ledger_id in pending:
            doubles.append(read)
        else:
            pending[read.reader.ledger_id] = read
    leftovers: list[asyncio.Future[None]] = [asyncio.ensure_future(_alone(r)) for r in doubles]
    health = group[0].reader.ctx.health
    loop = asyncio.get_running_loop()
    try:
        client = await ask(bookie_id)
        ranges = [(r.reader.ledger_id, r.first, r.hi, r.hi - r.first + 1) for r in pending.values()]
        batches = client.read_ranges_views(ranges, timeout, RANGE_BATCH_BYTES)
        wait = policy.first_wait(bookie_id in health.quiet((bookie_id,), loop.time()))
        async for batch in _paced(batches, wait if policy.enabled else None, policy.first_timeout):
            health.on_heard(bookie_id, loop.time())
            for ledger_id in _answered(batch, pending, bookie_id):
                read = pending.pop(ledger_id)
                if not read.future.done():
                    leftovers.append(asyncio.ensure_future(_alone(read)))
        # the call ended normally: the bookie does not hold entry `first` of what it left out
        leftovers += [asyncio.ensure_future(_alone(read)) for read in pending.values() if not read.future.done()]
        pending.clear()
    except TimeoutError:
        log.info("ReadRanges from %s: nothing for the speculative timeout; %d ledgers asked elsewhere", bookie_id,
                 len(pending))
        health.on_slow(bookie_id, loop.time())
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            log.info("bookie %s does not know ReadRanges (an older bookie): its ledgers are read one by one",
                     bookie_id)
            no_ranges.bookies.add(bookie_id)
        else:
            log.info("ReadRanges from %s failed (%s); %d ledgers asked elsewhere", bookie_id, exc.code(), len(pending))
            health.on_slow(bookie_id, loop.time())
    except (BKError, OSError) as exc:
        log.info("ReadRanges from %s failed (%s); %d ledgers asked elsewhere", bookie_id, exc, len(pending))
        health.on_slow(bookie_id, loop.time())
    if leftovers:
        await asyncio.gather(*leftovers)
    return [read for read in pending.values() if not read.future.done()]


async def _paced(batches: AsyncIterator[RangeBatchView], first_wait: float | None, next_wait: float
                 ) -> AsyncIterator[RangeBatchView]:
    """The call's batches; TimeoutError if the first does not come within first_wait, or a later one within
    next_wait (None: no limit but the call's own deadline). Leaving early cancels the call."""
    iterator = batches.__aiter__()
    wait = first_wait
    try:
        while True:
            try:
                batch = await (asyncio.wait_for(anext(iterator), wait) if wait is not None else anext(iterator))
            except StopAsyncIteration:
                return
            yield batch
            wait = next_wait if first_wait is not None else None
    finally:
        with contextlib.suppress(Exception):
            await iterator.aclose()  # type: ignore[attr-defined]


def _answered(batch: RangeBatchView, pending: dict[int, RangeRead], bookie_id: str) -> list[int]:
    """Settle the reads this batch answers; returns the ledgers it names that must be read alone instead
    (a failed range, a run that does not start at `first`, a bad digest)."""
    if batch.status != pb.EOK:
        return [batch.ledger_id] if batch.ledger_id in pending else []
    ledgers, ids = batch.ledger_ids, batch.entry_ids
    if len(ledgers) != len(ids) or len(batch.sizes) != len(ids):
        raise DigestMismatchError(f"malformed ReadRanges batch from {bookie_id}")
    starts, ends = entry_bounds(batch.sizes)
    if len(ids) and int(ends[-1]) != len(batch.data):
        raise DigestMismatchError(f"malformed ReadRanges batch from {bookie_id}")
    import numpy as np  # not at import: the client starts no numpy threads until it reads (client.reader)
    verified = crc32c_verified(ledgers, ids, starts, ends, batch.data)    # for CRC32C ledgers, all at once
    cuts = np.flatnonzero(np.diff(ledgers)) + 1
    redo: list[int] = []
    for lo, hi in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [len(ids)])).tolist(), strict=True):
        if lo == hi:
            continue
        ledger_id = int(ledgers[lo])
        read = pending.get(ledger_id)
        if read is None:
            continue                              # not asked for (or answered already): ignored
        checked = verified is not None and read.reader.digest.digest_type is DigestType.CRC32C \
            and bool(verified[lo:hi].all())
        chunk = _chunk(read, ids[lo:hi], starts[lo:hi], ends[lo:hi], batch.data, bookie_id, checked)
        if chunk is None:
            redo.append(ledger_id)
            continue
        del pending[ledger_id]
        read.reader.ctx.metrics.reads.inc(len(chunk.entry_ids))
        _settle(read.future, chunk)
    return redo


def _chunk(read: RangeRead, ids: I64, starts: I64, ends: I64, data: memoryview,
           bookie_id: str, checked: bool = False) -> ReadChunk | None:
    """The run of entries from read.first in this answer, verified (`checked`: every one of them was,
    with the batch); None if it does not start there, or a digest fails (the read then goes alone)."""
    if len(ids) == 1:
        run = 1 if int(ids[0]) == read.first else 0
    else:
        import numpy as np  # not at import (see above)
        expected = np.arange(read.first, read.first + len(ids), dtype=np.int64)
        mismatch = np.flatnonzero(ids != expected)
        run = int(mismatch[0]) if len(mismatch) else len(ids)
    run = min(run, read.hi - read.first + 1)
    if run == 0:
        return None
    if checked:
        return read.reader.chunk_of(ids[:run], data, starts[:run], ends[:run])
    try:
        verify_entries(read.reader.digest, read.reader.ledger_id, ids[:run], starts[:run], ends[:run], data,
                       read.reader.rules)
    except DigestMismatchError as exc:
        log.warning("ledger %d: ReadRanges answer from %s: %s", read.reader.ledger_id, bookie_id, exc)
        return None
    return read.reader.chunk_of(ids[:run], data, starts[:run], ends[:run])
