"""LedgerHandle: the application's view of one ledger, for writing (create) or reading (open).

Mirrors BookKeeper's LedgerHandle / ReadHandle. The blocking methods are safe from any thread and
wait with a bound; the asyncio ones (`add`, `read`, `aclose`) may be awaited from any event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import lz4.block

from bkledger.client.add_future import AddFuture
from bkledger.client.errors import (
    BKError,
    ClientClosedError,
    ClientTimeoutError,
    EntryTooLargeError,
    LedgerClosedError,
    ReadTimeoutError,
)
from bkledger.client.protocol.add_timeouts import add_settle_bound
from bkledger.client.protocol.digest import Buffer, make_digest
from bkledger.client.protocol.metadata import LedgerMetadata, LedgerState
from bkledger.client.protocol.reads import check_read_range
from bkledger.client.ranges_reader import RangeRead
from bkledger.client.reader import LedgerReader, ReadChunk
from bkledger.client.runtime import bounded
from bkledger.client.writer import LedgerWriter

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from bkledger.client.context import ClientContext
    from bkledger.client.protocol.bulk import Bulk


@dataclasses.dataclass(frozen=True)
class LedgerEntry:
    ledger_id: int
    entry_id: int
    payload: bytes


class LedgerHandle:
    def __init__(self, ctx: ClientContext, md: LedgerMetadata, version: int, password: bytes,
                 writer: LedgerWriter | None = None, lac: int = -1):
        self._ctx = ctx
        self._md = md
        self._version = version
        self._password = password
        self._writer = writer
        self._reader = LedgerReader(ctx, md, make_digest(md.digest_type, password), password)
        self._lac = md.last_entry_id if md.state is LedgerState.CLOSED else lac
        self._closed_handle = False
        self._lz4 = md.compression == "lz4"        # a ledger's compression never changes
        self._max_entry = ctx.config.maxEntrySize

    # ---- state ------------------------------------------------------------------------------
    @property
    def ledger_id(self) -> int:
        return self._md.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._writer.md if self._writer is not None else self._md

    @property
    def last_add_confirmed(self) -> int:
        if self._writer is not None:
            return self._writer.pending.last_add_confirmed
        return self._lac

    @property
    def is_closed(self) -> bool:
        return self.metadata.state is LedgerState.CLOSED

    @property
    def last_entry_id(self) -> int:
        """The last entry id of a closed ledger, else the LAC known to this handle."""
        md = self.metadata
        return md.last_entry_id if md.state is LedgerState.CLOSED else self.last_add_confirmed

    @property
    def length(self) -> int:
        if self._writer is not None:
            return self._writer.lac_length
        return self._md.length

    # ---- writing ----------------------------------------------------------------------------
    def _prepare(self, payload: bytes | bytearray | memoryview) -> bytes:
        if self._writer is None:
            raise LedgerClosedError(f"ledger {self.ledger_id} was opened for reading; create a ledger to write")
        data = bytes(payload)
        if len(data) > self._max_entry:
            raise EntryTooLargeError(f"entry of {len(data)} bytes exceeds maxEntrySize={self._max_entry}; split it")
        if self._lz4:
            data = lz4.block.compress(data, store_size=True)
        return data

    def add_entry_async(self, payload: bytes | bytearray | memoryview) -> concurrent.futures.Future[int]:
        """Queue an add; the future gives its entry id once acknowledged (R6). Blocks while too many
        adds are in flight (maxOutstandingAdds)."""
        data = self._prepare(payload)
        future = AddFuture()
        assert self._writer is not None
        self._writer.submit(data, future)
        return future

    def add_entries(self, data: Buffer | npt.NDArray[np.uint8], offsets: Sequence[int] | npt.NDArray[np.integer],
                    *, copy: bool = True) -> concurrent.futures.Future[int]:
        """Add n entries at once: entry i is data[offsets[i]:offsets[i + 1]] (`offsets` holds the start of
        each entry and then the end of the last: n + 1 non-decreasing integers, a list or a numpy array).
        The future gives the entry id of the LAST entry once every entry is acknowledged; the ids are
        consecutive, so the first is that id - n + 1. Same ordering, durability and failure semantics as n
        calls of add_entry_async (a failure fails that entry and every later one, so the future fails),
        with no Python object per entry. Bad offsets raise InvalidBulkError and an entry over maxEntrySize
        raises EntryTooLargeError, before anything is queued. `data` is copied once unless it is bytes or
        `copy=False` is given: then it is read in place, and the caller must not change it until the future
        is done (an Arrow buffer, say, which nobody changes). Blocks while the window is full
        (maxOutstandingAdds; a bulk takes one slot per entry)."""
        if self._writer is None:
            raise LedgerClosedError(f"ledger {self.ledger_id} was opened for reading; create a ledger to write")
        from bkledger.client.protocol.bulk import check_bulk  # numpy: imported on first use, not with the client

        bulk = check_bulk(data, offsets, self._ctx.config.maxEntrySize, copy=copy)
        if self.metadata.compression == "lz4":
            bulk = _compress_bulk(bulk)
        future = AddFuture()
        self._writer.submit_bulk(bulk, future)
        return future

    def add_entry(self, payload: bytes | bytearray | memoryview, timeout: float | None = None) -> int:
        config = self._ctx.config       # by default, past the writer's own bound: its typed error comes first
        bound = add_settle_bound(config.addEntryTimeoutSec, config.ensembleChangeMaxAttempts)
        wait = timeout or bound + config.addEntryTimeoutSec
        try:
            return self.add_entry_async(payload).result(wait)
        except TimeoutError as exc:
            if isinstance(exc, BKError):
                raise
            raise ClientTimeoutError(f"ledger {self.ledger_id}: the add was not acknowledged within {wait}s; it is "
                                     "still pending and may complete") from None

    async def add(self, payload: bytes | bytearray | memoryview) -> int:
        data = self._prepare(payload)
        future = AddFuture()
        assert self._writer is not None
        if not self._writer.submit(data, future, block=False):
            await asyncio.to_thread(self._writer.submit, data, future, True)
        return await asyncio.wrap_future(future)

    # ---- reading ----------------------------------------------------------------------------
    def _bound_reader(self) -> LedgerReader:
        self._reader.md = self.metadata
        return self._reader

    def read_entries(self, first: int, last: int) -> Iterator[LedgerEntry]:
        """Entries first..last in order; refuses to go above the LAC (open) or last entry id (R11)."""
        check_read_range(self.metadata, self.last_add_confirmed, first, last, self._reader.rules)
        position = first
        while position <= last:
            chunk = self._ctx.runtime.run(self._chunk(position, last), self._ctx.config.readTimeout * 12)
            for entry_id, payload in zip(chunk.entry_ids, chunk.payloads, strict=True):
                yield LedgerEntry(self.ledger_id, entry_id, bytes(payload))
            position = chunk.entry_ids[-1] + 1

    async def _chunk(self, first: int, last: int) -> ReadChunk:
        try:
            chunk = await self._bound_reader().read_chunk(first, last, self._ctx.config.readBatchBytes)
        except BKError as exc:    # all replicas failed: say so if TLS was why (client.tls)
            explained = self._ctx.pool.explain(exc, {b for f in self.metadata.fragments for b in f.ensemble})
            if explained is exc:
                raise
            raise explained from exc
        if not chunk.entry_ids or chunk.entry_ids[0] != first:
            raise AssertionError(f"read of ledger {self.ledger_id} from {first} returned nothing")
        return chunk

    def read_chunk(self, first: int, last: int) -> ReadChunk:
        """One chunk of entries from `first` (bounded by readBatchBytes): the fast path for bulk readers."""
        check_read_range(self.metadata, self.last_add_confirmed, first, last, self._reader.rules)
        return self._ctx.runtime.run(self._chunk(first, last), self._ctx.config.readTimeout * 12)

    def read_chunk_async(self, first: int, last: int) -> concurrent.futures.Future[ReadChunk]:
        """`read_chunk` without waiting: the read runs on the client loop (bounded like read_chunk) and
        the future gives the chunk. Reads of many ledgers can be in flight at once with no thread each
        (a reader of many small ledgers); one at a time per handle."""
        check_read_range(self.metadata, self.last_add_confirmed, first, last, self._reader.rules)
        bound = self._ctx.config.readTimeout * 12
        what = f"the read of ledger {self.ledger_id} from entry {first}"
        return self._ctx.runtime.submit(bounded(self._chunk(first, last), bound, what, ReadTimeoutError))

    def range_read(self, first: int, last: int) -> RangeRead:
        """This read as one of many (`BookKeeper.read_chunks_async`): its future gives what read_chunk_async
        would give."""
        check_read_range(self.metadata, self.last_add_confirmed, first, last, self._reader.rules)
        return RangeRead(self._bound_reader(), first, last, functools.partial(self._chunk, first, last),
                         concurrent.futures.Future())

    async def read(self, first: int, last: int) -> list[LedgerEntry]:
        check_read_range(self.metadata, self.last_add_confirmed, first, last, self._reader.rules)
        out: list[LedgerEntry] = []
        position = first
        while position <= last:
            what = f"the read of ledger {self.ledger_id} from entry {position}"
            chunk = await self._ctx.runtime.wrap(bounded(self._chunk(position, last),
                                                         self._ctx.config.readTimeout * 12, what, ReadTimeoutError))
            out += [LedgerEntry(self.ledger_id, e, bytes(p)) for e, p in zip(chunk.entry_ids, chunk.payloads,
                                                                               strict=True)]
            position = chunk.entry_ids[-1] + 1
        return out

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies for the LAC (readers); a writer knows its own. It never goes backwards."""
        if self._writer is not None or self.is_closed:
            return self.last_add_confirmed
        lac = self._ctx.runtime.run(self._bound_reader().read_lac(), self._ctx.config.readTimeout * 3)
        self._lac = max(self._lac, lac)
        return self._lac

    def wait_for_lac(self, previous: int, timeout: float = 5.0) -> int:
        """Long poll: return once the LAC passes `previous` (or after `timeout`, with the LAC known)."""
        if self._writer is not None or self.is_closed:
            return self.last_add_confirmed
        lac = self._ctx.runtime.run(self._bound_reader().wait_lac(previous, timeout), timeout + 10)
        self._lac = max(self._lac, lac)
        return self._lac

    def refresh(self) -> LedgerMetadata:
        """Re-read the metadata (a reader learns that the ledger was closed, and its last entry id)."""
        if self._writer is not None:
            return self.metadata
        md, version = self._ctx.store.read_ledger(self.ledger_id)
        self._md, self._version = md, version
        if md.state is LedgerState.CLOSED:
            self._lac = md.last_entry_id
        return md

    # ---- close ------------------------------------------------------------------------------
    def close(self) -> None:
        """Writer: wait for pending adds, then CAS the ledger CLOSED at the LAC (R10). Reader: no-op."""
        if self._closed_handle:
            return
        self._closed_handle = True
        if self._writer is not None:
            timeout = self._ctx.config.addEntryTimeoutSec * 4
            self._md = self._ctx.runtime.run(self._writer.close(timeout), timeout + 30)

    async def aclose(self) -> None:
        if self._closed_handle:
            return
        self._closed_handle = True
        if self._writer is not None:
            self._md = await self._ctx.runtime.wrap(self._writer.close(self._ctx.config.addEntryTimeoutSec * 4))

    def __enter__(self) -> LedgerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ClientClosedError):
            self.close()


def _compress_bulk(bulk: Bulk) -> Bulk:
    """lz4 compresses each entry on its own (a reader decompresses entry by entry): one pass per entry."""
    import numpy as np

    from bkledger.client.protocol.bulk import Bulk

    parts = []
    bounds = bulk.offsets.tolist()
    data = bulk.data
    for start, end in zip(bounds, bounds[1:]):  # noqa: B905 (bounds[1:] is one shorter)
        parts.append(lz4.block.compress(data[start:end], store_size=True))
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return Bulk(b"".join(parts), offsets)
