"""The read side of a ledger handle: LAC reads, long polls and range reads with fallback (R11-R13).

Mirrors BookKeeper's ReadLastConfirmedOp, the long-poll LAC reader and PendingReadOp. A range inside
one fragment is streamed from one bookie when every bookie holds every entry (E == Qw), or from a
set of bookies that covers every write set in parallel (E > Qw). An entry a bookie did not return,
or returned with a bad digest, is read from the other bookies of its write set in turn; the read
fails only if none has it. Nothing above the bound of R11 is ever asked for. Runs on the client loop.
Range batches are verified in bulk (numpy) and, uncompressed, handed on as `Spans` (where each payload
sits in the received buffers) rather than one memoryview per entry. numpy is imported where used, not
with this module: the bookie imports the client and blocks its stop signals before any thread exists,
and numpy's import starts (BLAS) threads that would take SIGTERM with the default action.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import google_crc32c
import grpc
import lz4.block

from bkledger.client.errors import BKError, BookieUnavailableError, DigestMismatchError
from bkledger.client.protocol import quorum
from bkledger.client.protocol.digest import HEADER_LENGTH, MAC_LENGTHS, DigestManager, master_key, unpack_entry
from bkledger.client.protocol.metadata import DigestType, Fragment, LedgerMetadata
from bkledger.client.protocol.reads import (
    DEFAULT_READER_RULES,
    ReaderRules,
    fragment_ranges,
    lac_read_fences,
    read_error,
    read_order,
    received_entry,
)
from bkledger.client.protocol.speculative import SequenceRead, stall_deadline, stalled
from bkledger.client.protocol.status import StatusCode
from bkledger.client.protocol.write_set import write_set
from bkledger.client.speculative_read import probe_connections, run_speculative
from bkledger.proto import bookie_pb2 as pb
from bkledger.wire.native import NATIVE

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    I64 = npt.NDArray[np.int64]
    from bkledger.client.context import ClientContext

log = logging.getLogger("bkledger.client.reader")
STRIPE_CHUNK = 4096         # entries of a striped piece until the entry size is known; then max_bytes of them
RANGE_BATCH_BYTES = 4 << 20  # most bytes a bookie puts in one message of a range read: 1 MiB cost bookies 15%
                             # more CPU (more messages, preads and thread hops for the same bytes)
FILL_PARALLELISM = 64       # entry reads in flight when filling what a given-up striped stream did not send
Found = dict[int, "memoryview | bytes"]
Spare = dict[int, memoryview]
Buffer = bytes | memoryview    # a range batch's data: a view of the received message (range_batch) or bytes
Segment = tuple[Buffer, "I64", "I64", "I64"]   # a range batch's data, entry ids, packaged entries' (start, end)


def _nothing() -> None:
    """No progress report wanted."""


@dataclasses.dataclass
class Spans:
    """Verified payloads left where they arrived: payload i is buffers[buffer[i]][start[i]:end[i]] (range
    batches' data, with the headers and digests between payloads). No Python object per entry: a bulk
    reader gathers them in one native pass (the Spark connector: an Arrow binary-view array cast to
    binary); `views` makes the memoryviews for everyone else."""

    buffers: list[Buffer]
    buffer: I64
    start: I64
    end: I64

    def views(self) -> list[memoryview]:
        whole = [memoryview(b) for b in self.buffers]
        return [whole[i][a:b] for i, a, b in zip(self.buffer.tolist(), self.start.tolist(), self.end.tolist(),
                                                  strict=True)]

    @property
    def nbytes(self) -> int:
        return int((self.end - self.start).sum())

    @staticmethod
    def joined(parts: list[Spans]) -> Spans:
        """The parts' payloads one after the other."""
        import numpy as np  # not at import: see the module docstring
        first = np.cumsum([0] + [len(p.buffers) for p in parts[:-1]]).tolist()
        return Spans([b for p in parts for b in p.buffers],
                     np.concatenate([p.buffer + k for p, k in zip(parts, first, strict=True)]),
                     np.concatenate([p.start for p in parts]), np.concatenate([p.end for p in parts]))


class ReadChunk:
    """Entries first..first+len-1 of a ledger, in order: ids and payloads (memoryviews, decompressed).
    Uncompressed range reads give `spans` instead, from which `payloads` is made on first use."""

    __slots__ = ("entry_ids", "_payloads", "spans")

    def __init__(self, entry_ids: list[int], payloads: list[memoryview | bytes] | None = None,
                 spans: Spans | None = None) -> None:
        self.entry_ids = entry_ids
        self._payloads = payloads if payloads is not None or spans is not None else []
        self.spans = spans

    @property
    def payloads(self) -> list[memoryview | bytes]:
        if self._payloads is None:
            assert self.spans is not None
            self._payloads = list(self.spans.views())
        return self._payloads

    @property
    def nbytes(self) -> int:
        """Payload bytes."""
        if self._payloads is None and self.spans is not None:
            return self.spans.nbytes
        return sum(map(len, self.payloads))

    @property
    def packed(self) -> Spans | None:
        """The spans if the payloads were never made (a bulk reader's fast path), else None."""
        return self.spans if self._payloads is None else None

    @staticmethod
    def joined(parts: list[ReadChunk]) -> ReadChunk:
        """The parts' entries one after the other (spans kept if every part has them)."""
        if len(parts) == 1:
            return parts[0]
        ids = [e for p in parts for e in p.entry_ids]
        spans = [p.packed for p in parts]
        if parts and all(s is not None for s in spans):
            return ReadChunk(ids, spans=Spans.joined([s for s in spans if s is not None]))
        return ReadChunk(ids, [x for p in parts for x in p.payloads])


class LedgerReader:
    """`password`: the ledger's, whose master key goes only with LAC reads that fence (R12: none, unless
    `rules` say so). `rules`: the reader's protocol switches (R7, R11, R12; `reads.ReaderRules`), the
    defaults but in tests."""

    def __init__(self, ctx: ClientContext, md: LedgerMetadata, digest: DigestManager, password: bytes = b"",
                 rules: ReaderRules = DEFAULT_READER_RULES):
        self.ctx = ctx
        self.md = md
        self.digest = digest
        self.password = password
        self.rules = rules
        self.ledger_id = md.ledger_id
        self._entry_bytes = 1024.0          # average packaged entry size seen, to size range requests
        self._entry_bytes_seen = False      # striped pieces: STRIPE_CHUNK entries until a piece was read
        self._ahead: tuple[int, int, int, asyncio.Task[ReadChunk]] | None = None

    # ---- LAC -----------------------------------------------------------------------------
    async def _lac_from(self, bookie_id: str, request: pb.ReadRequest, timeout: float) -> tuple[int, int]:
        """(status, LAC known to the bookie); transport errors are a client-side UNAVAILABLE."""
        try:
            client = await self.ctx.pool.get(bookie_id)
            response = await client.read(request, timeout)
        except (grpc.aio.AioRpcError, BKError, OSError):
            return StatusCode.UNAVAILABLE, -1
        lac = response.max_lac
        if response.status == pb.EOK and response.body:
            try:
                lac = max(lac, received_entry(self.digest, self.ledger_id, None, response.body, self.rules).lac)
            except DigestMismatchError:
                return StatusCode.DIGEST_MISMATCH, -1
        return response.status, lac

    async def read_lac(self) -> int:
        """Ask every bookie of the last fragment for its last entry; the LAC is the highest seen once
        the answers cover every write set (BookKeeper's readLastConfirmed)."""
        fragment = self.md.last_fragment
        request = self.lac_request()
        tasks = {asyncio.ensure_future(self._lac_from(b, request, self.ctx.config.readTimeout)): i
                 for i, b in enumerate(fragment.ensemble)}
        responded: set[int] = set()
        best = -1
        mismatched = 0
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                status, lac = task.result()
                mismatched += status == StatusCode.DIGEST_MISMATCH
                if status in (pb.EOK, pb.ENOENTRY, pb.ENOLEDGER):
                    responded.add(tasks[task])
                    best = max(best, lac)
            if quorum.covered(responded, self.md.ensemble_size, self.md.write_quorum, self.md.ack_quorum):
                break
        for task in pending:
            task.cancel()
        if not responded and mismatched:
            raise DigestMismatchError(f"ledger {self.ledger_id}: the last entry of {mismatched} bookie(s) of "
                                      f"{list(fragment.ensemble)} failed digest verification and no other answered: "
                                      "forged or corrupt copies, or the wrong password/digest type")
        if not responded:
            raise BookieUnavailableError(f"ledger {self.ledger_id}: no bookie of {list(fragment.ensemble)} answered")
        return best

    def lac_request(self, previous: int | None = None, timeout_ms: int = 0) -> pb.ReadRequest:
        """A LAC read (entry -1) of this reader, a long poll past `previous` if given: without the fence flag
        (R12, `reads.lac_read_fences`)."""
        request = pb.ReadRequest(ledger_id=self.ledger_id, entry_id=-1)
        if previous is not None:
            request.has_previous_lac = True
            request.previous_lac = previous
            request.timeout_ms = timeout_ms
        if lac_read_fences(self.rules):
            request.fence = True
            request.master_key = master_key(self.password)
        return request

    async def wait_lac(self, previous: int, timeout: float) -> int:
        """Long poll: the first LAC above `previous` any bookie of the last fragment reports, or
        `previous` when none does within `timeout`."""
        request = self.lac_request(previous, int(timeout * 1000))
        tasks = [asyncio.ensure_future(self._lac_from(b, request, timeout + 5)) for b in self.md.last_fragment.ensemble]
        best = previous
        try:
            for next_done in asyncio.as_completed(tasks, timeout=timeout + 5):
                _, lac = await next_done
                if lac > best:
                    best = lac
                    break
        except TimeoutError:
            pass
        finally:
            for task in tasks:
                task.cancel()
        return best

    # ---- entries -------------------------------------------------------------------------
    def _payload(self, view: memoryview) -> memoryview | bytes:
        if self.md.compression == "lz4":
            return lz4.block.decompress(view)
        return view

    def _payloads(self, views: list[memoryview]) -> list[memoryview | bytes]:
        if self.md.compression == "lz4":
            return [lz4.block.decompress(v) for v in views]
        return list(views)

    def chunk_of(self, ids: I64, data: Buffer, starts: I64, ends: I64) -> ReadChunk:
        """Verified packaged entries data[starts[i]:ends[i]] as a chunk: spans of their payloads, or the
        payloads decompressed."""
        import numpy as np  # not at import: see the module docstring
        overhead = HEADER_LENGTH + self.digest.mac_length
        spans = Spans([data], np.zeros(len(ids), dtype=np.int64), starts + overhead, ends)
        if self.md.compression == "lz4":
            return ReadChunk(ids.tolist(), self._payloads(spans.views()))
        return ReadChunk(ids.tolist(), spans=spans)

    def _order(self, bookies: tuple[str, ...]) -> tuple[str, ...]:
        """reorderReadSequenceEnabled: bookies slow or failed recently (client-wide history) go last."""
        return self.ctx.health.order(bookies, asyncio.get_running_loop().time())

    def _sequence(self, bookies: tuple[str, ...]) -> SequenceRead:
        now = asyncio.get_running_loop().time()
        return SequenceRead(self._order(bookies), self.ctx.speculative, self.ctx.health.quiet(bookies, now))

    async def read_entry(self, entry_id: int) -> memoryview | bytes:
        """R13: ask the bookies of the entry's write set one at a time; after speculativeReadTimeout
        without an answer also the next one; the first copy whose digest verifies wins."""
        order = read_order(self.md, entry_id)
        await probe_connections(self.ctx.pool, self.ctx.health, order, self.ctx.speculative)
        read = self._sequence(order)
        body = await run_speculative(read, lambda bookie_id, _: self._read_one(bookie_id, entry_id),
                                     self.ctx.health)
        self.ctx.metrics.speculative_reads.inc(read.speculations)
        if body is None:
            raise read_error(self.ledger_id, entry_id, read.bookies, read.errors)
        self.ctx.metrics.reads.inc()
        return self._payload(body)

    async def _read_one(self, bookie_id: str, entry_id: int) -> tuple[int, memoryview | None]:
        request = pb.ReadRequest(ledger_id=self.ledger_id, entry_id=entry_id)
        try:
            client = await self.ctx.pool.get(bookie_id)
            response = await client.read(request, self.ctx.config.readTimeout)
        except (grpc.aio.AioRpcError, BKError, OSError):
            return StatusCode.UNAVAILABLE, None
        if response.status != pb.EOK:
            return response.status, None
        try:
            return pb.EOK, received_entry(self.digest, self.ledger_id, entry_id, response.body, self.rules).payload
        except DigestMismatchError:
            log.warning("ledger %d entry %d from %s: digest mismatch", self.ledger_id, entry_id, bookie_id)
            return StatusCode.DIGEST_MISMATCH, None

    async def read_chunk(self, first: int, last: int, max_bytes: int) -> ReadChunk:
        """Entries from `first` on, in order, up to `last` or about max_bytes (at least one entry).
        The next chunk of a sequential read is fetched in the background while the caller works."""
        ahead = self._ahead
        self._ahead = None
        if ahead is not None and ahead[:3] == (first, last, max_bytes):
            chunk = await ahead[3]
        else:
            if ahead is not None:
                ahead[3].cancel()
            chunk = await self._fetch_chunk(first, last, max_bytes)
        self.ctx.metrics.reads.inc(len(chunk.entry_ids))
        if chunk.entry_ids and chunk.entry_ids[-1] < last:
            following = chunk.entry_ids[-1] + 1
            task = asyncio.get_running_loop().create_task(self._fetch_chunk(following, last, max_bytes))
            task.add_done_callback(_retrieve)     # an abandoned read-ahead must not log a lost error
            self._ahead = (following, last, max_bytes, task)
        return chunk

    async def _fetch_chunk(self, first: int, last: int, max_bytes: int) -> ReadChunk:
        if first == last:        # one entry (a one-entry ledger): one unary read of one bookie (R13)
            return ReadChunk([first], [await self.read_entry(first)])
        parts: list[ReadChunk] = []
        size = 0
        for lo, hi, fragment in fragment_ranges(self.md, first, last):
            await probe_connections(self.ctx.pool, self.ctx.health, fragment.ensemble, self.ctx.speculative)
            if self.md.ensemble_size == self.md.write_quorum:
                got = await self._read_piece_streamed(lo, hi, fragment, max_bytes - size)
            else:
                got = await self._read_piece_striped(lo, min(hi, lo + self._stripe_entries(max_bytes) - 1), fragment)
                self._learn_entry_bytes(got)
            parts.append(got)
            size += got.nbytes
            if size >= max_bytes or not got.entry_ids or got.entry_ids[-1] < hi:
                break
        return ReadChunk.joined(parts) if parts else ReadChunk([], [])

    def _stripe_entries(self, max_bytes: int) -> int:
        """Entries of one striped piece: about max_bytes of them at the average entry size seen so far
        (STRIPE_CHUNK before any was read). Each piece costs two range RPCs per covering bookie, so small
        entries read in pieces of a few thousand spent a quarter of the reader's CPU starting them."""
        if self._entry_bytes_seen:
            return max(16, int(max_bytes / self._entry_bytes))
        return STRIPE_CHUNK

    def _learn_entry_bytes(self, chunk: ReadChunk) -> None:
        if chunk.entry_ids:
            self._entry_bytes = chunk.nbytes / len(chunk.entry_ids)
            self._entry_bytes_seen = True

    async def _read_piece_streamed(self, lo: int, hi: int, fragment: Fragment, max_bytes: int) -> ReadChunk:
        """E == Qw: stream the chunk from one bookie; if it has not delivered a batch within
        speculativeReadTimeout, ask the next one too; the first to deliver the chunk wins. A bookie that
        streams nothing (gap, error, bad digest) hands over to the next at once. Whatever run of entries
        from `lo` the winner sent is the chunk: the caller asks for the rest."""
        read = self._sequence(tuple(b for b in read_order(self.md, lo) if b in fragment.ensemble))

        async def attempt(bookie_id: str, progress: Callable[[], None]) -> tuple[int, ReadChunk | None]:
            got, status = await self._stream_from(bookie_id, lo, hi, max_bytes, progress)
            return (pb.EOK, got) if got.entry_ids else (status, None)

        chunk = await run_speculative(read, attempt, self.ctx.health)
        self.ctx.metrics.speculative_reads.inc(read.speculations)
        if chunk is not None:
            return chunk
        # no bookie streamed entry `lo`: R13 per-entry fallback decides (and raises if none has it)
        return ReadChunk([lo], [await self.read_entry(lo)])

    async def _stream_from(self, bookie_id: str, lo: int, hi: int, max_bytes: int,
                           progress: Callable[[], None] = _nothing) -> tuple[ReadChunk, int]:
        """The run of consecutive entries from `lo` that this bookie streams back, verified, and the
        status that stopped it short of `lo` (EOK when it sent anything)."""
        parts: list[ReadChunk] = []
        status: int = pb.ENOENTRY
        size = 0
        expected = lo
        hi = min(hi, lo + max(16, int(max_bytes / self._entry_bytes)) - 1)   # ask only for what fits
        try:
            client = await self.ctx.pool.get(bookie_id)
            stream = client.read_range_views(self.ledger_id, lo, hi, timeout=self.ctx.config.readTimeout * 4,
                                             max_batch_bytes=min(max(max_bytes, 1 << 16), RANGE_BATCH_BYTES))
            async for batch in stream:
                if batch.status != pb.EOK:
                    status = batch.status
                    break
                progress()
                ids = batch.entry_ids
                contiguous = _contiguous_run(ids, expected)
                if contiguous == 0:
                    break
                data = batch.data
                starts, ends = entry_bounds(batch.sizes)
                if len(ends) != len(ids) or int(ends[-1]) != len(data):
                    raise DigestMismatchError(f"ledger {self.ledger_id}: malformed range batch from {bookie_id}")
                verify_entries(self.digest, self.ledger_id, ids[:contiguous], starts[:contiguous], ends[:contiguous],
                               data, self.rules)
                parts.append(self.chunk_of(ids[:contiguous], data, starts[:contiguous], ends[:contiguous]))
                expected += contiguous
                size += len(data)
                self._entry_bytes = 0.8 * self._entry_bytes + 0.2 * (len(data) / len(ids))
                if contiguous < len(ids) or size >= max_bytes:
                    break
        except DigestMismatchError as exc:
            log.warning("ledger %d: range read from %s stopped at %d: %s", self.ledger_id, bookie_id, expected, exc)
            status = StatusCode.DIGEST_MISMATCH
        except (grpc.aio.AioRpcError, BKError, OSError) as exc:
            log.info("ledger %d: range read from %s stopped at %d: %s", self.ledger_id, bookie_id, expected, exc)
            status = StatusCode.UNAVAILABLE
        chunk = ReadChunk.joined(parts) if parts else ReadChunk([], [])
        return chunk, (pb.EOK if chunk.entry_ids else status)

    async def _read_piece_striped(self, lo: int, hi: int, fragment: Fragment) -> ReadChunk:
        """E > Qw: range-read from a covering set of bookies in parallel, each asked only for the entries it
        is the first covering holder of (`owned_residues`), then stream what a given-up bookie left out
        from a covering set without it, then fill what is still missing entry by entry. Each entry is
        verified once; copies a bookie sends along anyway (one that predates residue_mask) are kept
        unverified and checked only if their owner did not deliver."""
        import numpy as np  # not at import: see the module docstring
        overhead = HEADER_LENGTH + self.digest.mac_length
        delivered: list[Segment] = []
        extras: list[list[Segment]] = []
        wanted = np.arange(lo, hi + 1, dtype=np.int64)
        for round_no in range(2):    # a second round, past the bookies the first found slow, for what they left out
            slow = self._slow_indices(fragment)
            indices = covering_indices(self.md.ensemble_size, self.md.write_quorum, slow)
            owner = np.array(first_holders(self.md.ensemble_size, self.md.write_quorum, indices), dtype=np.int64)
            results = await self._covering_streams([fragment.ensemble[i] for i in indices],
                                                   int(wanted[0]), int(wanted[-1]), owner, eager=round_no == 0)
            delivered += [_only(segment, wanted) for got, _ in results for segment in got]
            extras += [extra for _, extra in results]
            spans = in_order(delivered, lo, hi - lo + 1, overhead) if self.md.compression != "lz4" else None
            if spans is not None:                # the usual case: every entry came from its first holder
                return ReadChunk(list(range(lo, hi + 1)), spans=spans)
            wanted = np.setdiff1d(wanted, np.concatenate([s[1] for s in delivered]) if delivered else wanted[:0])
            if not len(wanted) or self._slow_indices(fragment) == slow:
                break                            # nothing new is known: fill entry by entry (R13)
        found: Found = {}
        for data, ids, starts, ends in delivered:
            view = memoryview(data)
            found.update(zip(ids.tolist(), self._payloads([view[a + overhead:b] for a, b in
                                                           zip(starts.tolist(), ends.tolist(), strict=True)]),
                             strict=True))
        spare: Spare = {}
        for extra in extras:
            for data, ids, starts, ends in extra:
                view = memoryview(data)
                for entry_id, a, b in zip(ids.tolist(), starts.tolist(), ends.tolist(), strict=True):
                    spare.setdefault(entry_id, view[a:b])
        missing = []
        for entry_id in range(lo, hi + 1):
            if entry_id not in found:
                payload = self._spare(entry_id, spare.get(entry_id))
                if payload is None:
                    missing.append(entry_id)
                else:
                    found[entry_id] = payload
        for start in range(0, len(missing), FILL_PARALLELISM):     # R13 entry by entry, speculating
            part = missing[start:start + FILL_PARALLELISM]
            found.update(zip(part, await asyncio.gather(*(self.read_entry(e) for e in part)), strict=True))
        return ReadChunk(list(range(lo, hi + 1)), [found[e] for e in range(lo, hi + 1)])

    def _slow_indices(self, fragment: Fragment) -> dict[int, float]:
        """reorderReadSequenceEnabled: ensemble indices of bookies slow or failed recently (with when),
        which a striped read leaves out of its covering set when it can (else each chunk waits out a
        stalled stream)."""
        health = self.ctx.health
        if not health.reorder:
            return {}
        now = asyncio.get_running_loop().time()
        return {i: at for i, b in enumerate(fragment.ensemble) if (at := health.failed_at(b, now)) is not None}

    async def _covering_streams(self, bookies: list[str], lo: int, hi: int, owner: I64, eager: bool
                                ) -> list[tuple[list[Segment], list[Segment]]]:
        """Each covering bookie's stream, in parallel. A stream that delivered nothing for
        speculativeReadTimeout is given up (its bookie marked slow): what it did send is kept, the
        rest is read from the other bookies of the write sets. `eager`: a quiet bookie's first batch is
        awaited only the quiet wait (a paused bookie is passed over in tens of milliseconds). The second
        round is not eager: a healthy bookie's first batch can take longer than that (a cold read from
        disk, a busy CPU), and giving up on it there too left 1,365 of the first 4,096 entries of a cold
        healthy read (E=3 Qw=2) to be read one unary call at a time."""
        loop = asyncio.get_running_loop()
        policy = self.ctx.speculative
        results: list[tuple[list[Segment], list[Segment]]] = [([], []) for _ in bookies]
        heard = [loop.time()] * len(bookies)
        quiet_now = self.ctx.health.quiet(bookies, heard[0]) if eager else frozenset()
        quiet = [b in quiet_now for b in bookies]     # their first batch is waited for only the quiet wait
        answered: asyncio.Future[float] = loop.create_future()   # when the first stream's first batch came

        def progress(position: int) -> Callable[[], None]:
            def report() -> None:
                heard[position] = loop.time()
                quiet[position] = False
                if not answered.done():
                    answered.set_result(heard[position])    # the quiet streams' deadlines move up
                self.ctx.health.on_heard(bookies[position], heard[position])
            return report

        tasks = {asyncio.ensure_future(self._stream_all(b, lo, hi, owner, p, results[p], progress(p))): p
                 for p, b in enumerate(bookies)}
        try:
            while tasks:
                first = answered.result() if answered.done() else None
                due = [d for d in (stall_deadline(heard[p], policy, quiet[p], first) for p in tasks.values())
                       if d is not None]
                timeout = max(0.0, min(due) - loop.time()) if due else None
                waits: list[asyncio.Future[Any]] = [*tasks, answered] if not answered.done() else list(tasks)
                done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task in tasks:
                        del tasks[task]
                        task.result()
                now = loop.time()
                first = answered.result() if answered.done() else None
                for task, position in list(tasks.items()):
                    if stalled(heard[position], now, policy, quiet[position], first):
                        log.info("ledger %d: range read from %s stalled; reading its entries elsewhere",
                                 self.ledger_id, bookies[position])
                        self.ctx.health.on_slow(bookies[position], now)
                        self.ctx.metrics.speculative_reads.inc()
                        task.cancel()
                        del tasks[task]
        finally:
            for task in tasks:
                task.cancel()
        return results

    def _spare(self, entry_id: int, body: memoryview | None) -> memoryview | bytes | None:
        """A copy another covering bookie sent along, if it verifies."""
        if body is None:
            return None
        try:
            return self._payload(received_entry(self.digest, self.ledger_id, entry_id, body, self.rules).payload)
        except DigestMismatchError:
            return None

    async def _stream_all(self, bookie_id: str, lo: int, hi: int, owner: I64, position: int,
                          into: tuple[list[Segment], list[Segment]], progress: Callable[[], None]) -> None:
        """Fill `into` with (the verified entries this bookie is the first covering holder of, the packaged
        entries it sent that another covering bookie is to deliver, unverified), batch by batch: where
        they sit in the batch's data, no object per entry."""
        out, spare = into
        try:
            client = await self.ctx.pool.get(bookie_id)
            async for batch in client.read_range_views(self.ledger_id, lo, hi,
                                                       timeout=self.ctx.config.readTimeout * 4,
                                                       max_batch_bytes=RANGE_BATCH_BYTES,
                                                       residues=owned_residues(owner, position)):
                if batch.status != pb.EOK:
                    break
                progress()
                ids = batch.entry_ids
                data = batch.data
                starts, ends = entry_bounds(batch.sizes)
                if len(ends) != len(ids) or (len(ends) and int(ends[-1]) != len(data)):
                    break
                mine = owner[ids % self.md.ensemble_size] == position
                try:
                    verify_entries(self.digest, self.ledger_id, ids[mine], starts[mine], ends[mine], data, self.rules)
                except DigestMismatchError:
                    break
                out.append((data, ids[mine], starts[mine], ends[mine]))
                spare.append((data, ids[~mine], starts[~mine], ends[~mine]))
        except (grpc.aio.AioRpcError, BKError, OSError):
            self.ctx.health.on_slow(bookie_id, asyncio.get_running_loop().time())


def _only(segment: Segment, wanted: I64) -> Segment:
    """The entries of `segment` whose ids are in `wanted` (sorted)."""
    import numpy as np  # not at import: see the module docstring
    data, ids, starts, ends = segment
    if len(ids) and len(wanted) == int(wanted[-1]) - int(wanted[0]) + 1 \
            and int(ids.min()) >= int(wanted[0]) and int(ids.max()) <= int(wanted[-1]):
        return segment                           # wanted is a whole range holding all of them
    keep = np.isin(ids, wanted, assume_unique=True)
    return data, ids[keep], starts[keep], ends[keep]


def _retrieve(task: asyncio.Task[ReadChunk]) -> None:
    if not task.cancelled():
        task.exception()


def _contiguous_run(ids: I64, expected: int) -> int:
    """How many of `ids` from the first on are expected, expected + 1, ..."""
    import numpy as np  # not at import: see the module docstring
    gaps = np.flatnonzero(ids != np.arange(expected, expected + len(ids), dtype=np.int64))
    return int(gaps[0]) if len(gaps) else len(ids)


def entry_bounds(sizes: I64) -> tuple[I64, I64]:
    """(start, end) offsets of entries of these sizes laid back to back."""
    import numpy as np  # not at import: see the module docstring
    ends = np.cumsum(sizes, dtype=np.int64)
    return ends - sizes, ends


def in_order(segments: list[Segment], lo: int, n: int, overhead: int) -> Spans | None:
    """The payloads of entries lo..lo+n-1 from verified segments, in entry order; None unless each of
    them is in the segments exactly once."""
    import numpy as np  # not at import: see the module docstring
    if not segments:
        return None
    ids = np.concatenate([s[1] for s in segments])
    if len(ids) != n:
        return None
    position = ids - lo
    if int(position.min()) < 0 or int(position.max()) >= n:
        return None
    order = np.full(n, -1, dtype=np.int64)
    order[position] = np.arange(n, dtype=np.int64)
    if int(order.min()) < 0:
        return None
    buffer = np.repeat(np.arange(len(segments), dtype=np.int64), [len(s[1]) for s in segments])
    return Spans([s[0] for s in segments], buffer[order], np.concatenate([s[2] for s in segments])[order] + overhead,
                 np.concatenate([s[3] for s in segments])[order])


def verified_payloads(digest: DigestManager, ledger_id: int, entry_ids: I64, starts: I64, ends: I64,
                      data: Buffer) -> list[memoryview]:
    """The payloads of the packaged entries data[starts[i]:ends[i]], each verified (`verify_entries`)."""
    verify_entries(digest, ledger_id, entry_ids, starts, ends, data)
    view = memoryview(data)
    overhead = HEADER_LENGTH + digest.mac_length
    return [view[a + overhead:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def verify_entries(digest: DigestManager, ledger_id: int, entry_ids: I64, starts: I64, ends: I64,
                   data: Buffer, rules: ReaderRules = DEFAULT_READER_RULES) -> None:
    """Verify the packaged entries data[starts[i]:ends[i]] as `unpack_entry` does (ledger id, entry id,
    digest); their payloads are data[starts[i] + header + digest length:ends[i]]. For CRC32C the ids are
    checked with numpy and the digests with one native call for all (`_crc32c_entries`); any doubt, and
    the other digest types, go entry by entry through `unpack_entry`, which raises DigestMismatchError
    with the reason. R7 is `rules.verify_digest` (`reads.received_entry` for a single copy)."""
    if not rules.verify_digest:
        return
    if digest.digest_type is DigestType.CRC32C and len(entry_ids):
        ok = crc32c_verified(ledger_id, entry_ids, starts, ends, data)
        if ok is not None and bool(ok.all()):
            return
    view = memoryview(data)
    for e, a, b in zip(entry_ids.tolist(), starts.tolist(), ends.tolist(), strict=True):
        unpack_entry(digest, ledger_id, e, view[a:b])


def crc32c_verified(ledger_ids: int | I64, entry_ids: I64, starts: I64, ends: I64, data: Buffer
                    ) -> npt.NDArray[np.bool_] | None:
    """Per packaged entry data[starts[i]:ends[i]] of a CRC32C ledger: whether its header names ledger
    `ledger_ids` (one id, or one per entry) and entry `entry_ids[i]` and its digest matches (one native
    call for all). None if an entry is too short to hold a header or lies outside `data` (then check
    entry by entry, `unpack_entry`, which says why). With the native module, one call checks the headers
    and the digests together (picking each header's fields with numpy index arrays cost as much as
    the checksums)."""
    import numpy as np  # not at import: see the module docstring
    n = len(entry_ids)
    overhead = HEADER_LENGTH + MAC_LENGTHS[DigestType.CRC32C]
    if not n or int((ends - starts).min()) < overhead or int(starts.min()) < 0 or int(ends.max()) > len(data):
        return None
    if NATIVE is not None:
        ledgers = np.full(1, ledger_ids, dtype=np.int64) if isinstance(ledger_ids, int) else ledger_ids
        return np.frombuffer(NATIVE.verify_crc32c(data, *(np.ascontiguousarray(a, dtype=np.int64) for a in (
            starts, ends, ledgers, entry_ids))), dtype=np.bool_)
    raw = np.frombuffer(data, dtype=np.uint8)
    header_ids = raw[starts[:, None] + np.arange(16)].view(">i8").reshape(n, 2)
    received = raw[starts[:, None] + np.arange(HEADER_LENGTH, overhead)].view(">u4").reshape(n)
    computed = _crc32c_entries(data, starts, ends, overhead)
    return (header_ids[:, 0] == ledger_ids) & (header_ids[:, 1] == entry_ids) & (computed == received)


def _crc32c_entries(data: Buffer, starts: I64, ends: I64, overhead: int) -> npt.NDArray[np.uint32]:
    """The CRC32C of header + payload of each packaged entry: one native call where the module was
    built, else one google-crc32c call per entry."""
    import numpy as np  # not at import: see the module docstring
    if NATIVE is not None:
        out = NATIVE.crc32c_entries(data, np.ascontiguousarray(starts, dtype=np.int64),
                                    np.ascontiguousarray(ends, dtype=np.int64), HEADER_LENGTH, overhead - HEADER_LENGTH)
        return np.frombuffer(out, dtype=np.uint32)
    value, extend = google_crc32c.value, google_crc32c.extend
    bounds = zip(starts.tolist(), ends.tolist(), strict=True)
    return np.fromiter((extend(value(data[a:a + HEADER_LENGTH]), data[a + overhead:b]) for a, b in bounds),
                       dtype=np.uint32, count=len(starts))


def covering_indices(ensemble_size: int, write_quorum: int, avoid: Mapping[int, float] | None = None) -> list[int]:
    """Ensemble indices whose bookies together hold every entry: bookie j holds the entries whose
    write set starts at j-Qw+1..j (mod E), so taking j = Qw-1, 2Qw-1, ... covers every start. Indices in
    `avoid` (bookies slow or failed recently, with when) are passed over wherever another member of the
    write set can stand in (always, when fewer than Qw are avoided); where every member is avoided, the
    one that failed longest ago is taken (the likeliest to have recovered, as BookieHealth.order does)."""
    avoid = avoid or {}
    covered: set[int] = set()
    chosen: list[int] = []
    for start in range(ensemble_size):
        if start in covered:
            continue
        members = [(start + write_quorum - 1 - k) % ensemble_size for k in range(write_quorum)]  # latest first
        index = next((m for m in members if m not in avoid), None)
        if index is None:
            index = min(members, key=lambda m: avoid[m])
        chosen.append(index)
        covered.update((index - k) % ensemble_size for k in range(write_quorum))
    return chosen


def owned_residues(owner: I64, position: int) -> tuple[int, int]:
    """(E, mask of the entry ids mod E whose first covering holder is `position`): what a covering bookie
    is asked to send (ReadRangeRequest.residue_*). (0, 0), all of them, past 64 bookies."""
    if len(owner) > 64:
        return 0, 0
    return len(owner), sum(1 << r for r, p in enumerate(owner.tolist()) if p == position)


def first_holders(ensemble_size: int, write_quorum: int, covering: list[int]) -> list[int]:
    """For each entry id mod E: the position in `covering` of the first bookie that holds such entries."""
    return [next(p for p, index in enumerate(covering) if index in write_set(start, ensemble_size, write_quorum))
            for start in range(ensemble_size)]


def holders(entry_id: int, md: LedgerMetadata) -> tuple[int, ...]:
    return write_set(entry_id, md.ensemble_size, md.write_quorum)
