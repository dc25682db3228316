"""BookKeeper: the client facade (create, open, delete and list ledgers; later logs).

Mirrors org.apache.bookkeeper.client.BookKeeper. One instance owns a ZooKeeper session (through the
metadata store), a pool of bookie connections and an event loop thread. Blocking methods are safe
from any thread; `acreate_ledger` / `aopen_ledger` are the asyncio flavour. `open_ledgers` opens many
(small) ledgers with pipelined metadata reads and `read_chunks_async` reads them many per bookie call, for
readers of logs made of many ledgers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import grpc

from bkledger.client.add_trace import SlowAddLog
from bkledger.client.bookies import BookiePool
from bkledger.client.config import ClientConfig
from bkledger.client.context import ClientContext
from bkledger.client.errors import (
    BadPasswordError,
    BKError,
    ClientClosedError,
    InvalidOptionError,
    LedgerSquattedError,
    ReadTimeoutError,
    checked_optional_password,
    checked_password,
    typed_error,
)
from bkledger.client.ledger_handle import LedgerHandle
from bkledger.client.log.logs import LogsMixin
from bkledger.client.log.offloader import OffloadPolicyMixin
from bkledger.client.log.transaction import TransactionsMixin
from bkledger.client.meta.cluster_root import require_cluster
from bkledger.client.meta.store import METADATA_BATCH, MetadataStore
from bkledger.client.meta.zkauth import zk_auth
from bkledger.client.metrics import client_metrics
from bkledger.client.placement import PlacementPolicy, RandomPlacementPolicy
from bkledger.client.protocol import transforms
from bkledger.client.protocol.metadata import DigestType, LedgerMetadata, LedgerState
from bkledger.client.protocol.recovery import DEFAULT_RULES, RecoveryRules
from bkledger.client.protocol.speculative import BookieHealth
from bkledger.client.ranges_reader import read_ranges
from bkledger.client.reader import LedgerReader, ReadChunk
from bkledger.client.recovery_driver import RecoveryRun
from bkledger.client.runtime import EventLoopThread
from bkledger.client.tls import channel_credentials, settings_of
from bkledger.client.writer import LedgerWriter
from bkledger.proto import bookie_pb2 as pb

log = logging.getLogger("bkledger.client")
COMPRESSIONS = ("", "none", "lz4")
CREATE_ATTEMPTS = 5        # fresh ledger ids create_ledger tries when bookies already know the new id (squatted)
SQUAT_PROBE_TIMEOUT_S = 2.0   # bound of the ReadLac that asks each bookie of a new ledger whether it knows its id
OPEN_BATCH = 1000          # ledger metadata znodes read in one pipelined batch by open_ledgers


class BookKeeper(LogsMixin, TransactionsMixin, OffloadPolicyMixin):
    def __init__(self, metadata_service_uri: str, *, config: ClientConfig | None = None,
                 placement: PlacementPolicy | None = None, metrics_registry: Any = None, **options: Any):
        self.metadata_service_uri = metadata_service_uri
        self.metrics_registry = metrics_registry     # also for per-cursor lag gauges (client.log.cursors)
        self.config = config or ClientConfig.from_environment(options)
        pool_tls = settings_of(self.config)
        channel_credentials(pool_tls)       # a bad TLS setting fails here, before any session is opened
        store = MetadataStore(metadata_service_uri, session_timeout=self.config.zkTimeout,
                              auth=zk_auth(self.config)).start()
        runtime = EventLoopThread()
        pool = BookiePool(store, self.config.maxAddRequestsInFlight, pool_tls, self.config.maxAddBulkBytesInFlight,
                          self.config.addPipelineMinBytes, self.config.useAddStreamPort)
        health = BookieHealth(self.config.bookieFailureHistoryExpirationMSec / 1000.0,
                              self.config.reorderReadSequenceEnabled)
        metrics = client_metrics(metrics_registry)
        slow_log = SlowAddLog(self.config.addTraceSampleEvery, self.config.slowAddThresholdMs,
                              self.config.slowAddLogSize, metrics.add_stages)
        self._ctx = ClientContext(runtime, store, pool, self.config, placement or RandomPlacementPolicy(),
                                  metrics=metrics, health=health, slow_log=slow_log)
        self._closed = False
        if self.config.gcFreezeOnStart:
            _freeze_heap_once()

    @property
    def store(self) -> MetadataStore:
        return self._ctx.store

    def slow_adds(self) -> list[dict[str, Any]]:
        """The slow-add log: the traced adds (1 in addTraceSampleEvery) that took slowAddThresholdMs or more,
        the newest slowAddLogSize, oldest first, each with its stages (client.add_trace)."""
        return self._ctx.slow_log.slow_adds()

    def _check_open(self) -> None:
        self._ctx.runtime.check_not_forked()
        if self._closed:
            raise ClientClosedError("this BookKeeper client is closed")

    # ---- create -----------------------------------------------------------------------------
    def create_ledger(self, ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2, *,
                      digest_type: str | DigestType = "crc32c", password: bytes = b"",
                      custom_metadata: Mapping[str, bytes] | None = None, compression: str = "") -> LedgerHandle:
        """A new OPEN ledger on E writable bookies (R1: E >= Qw >= Qa >= 1). `password` is bytes
        (PasswordTypeError otherwise)."""
        self._check_open()
        password = checked_password(password)
        coro = self._create(ensemble_size, write_quorum, ack_quorum, digest_type, password, custom_metadata,
                            compression)
        return self._ctx.runtime.run(coro, 60)

    async def acreate_ledger(self, *args: Any, **kwargs: Any) -> LedgerHandle:
        self._check_open()
        return await asyncio.to_thread(self.create_ledger, *args, **kwargs)

    async def _create(self, e: int, qw: int, qa: int, digest_type: str | DigestType, password: bytes,
                      custom: Mapping[str, bytes] | None, compression: str) -> LedgerHandle:
        transforms.validate_quorum(e, qw, qa)
        if compression not in COMPRESSIONS:
            raise InvalidOptionError(f"compression must be one of none, lz4; got {compression!r}")
        digest = DigestType.parse(digest_type)
        store = self._ctx.store
        writable = await asyncio.to_thread(store.writable_bookies)
        if not writable:       # a wrong root says so, not "0 writable bookies" (client.meta.cluster_root)
            await asyncio.to_thread(require_cluster, store)
        ensemble = self._ctx.placement.new_ensemble(e, writable)

        def metadata(ledger_id: int) -> LedgerMetadata:
            return transforms.new_ledger_metadata(
                ledger_id, ensemble, e, qw, qa, digest, password, int(time.time() * 1000), dict(custom or {}),
                "" if compression == "none" else compression)

        md, version = await self._create_metadata(ensemble, metadata)
        ledger_id = md.ledger_id
        # numpy marks batched acks (client.protocol.pending_adds); imported here, off the client loop, and not
        # on the loop when the first large ack arrives: 50-150 ms at 100,000 adds/s held every add meanwhile
        await asyncio.to_thread(importlib.import_module, "numpy")
        writer = LedgerWriter(self._ctx, md, version, password)
        await writer.start()
        self._ctx.writers.add(writer)
        log.debug("created ledger %d on %s (E=%d Qw=%d Qa=%d)", ledger_id, ensemble, e, qw, qa)
        return LedgerHandle(self._ctx, md, version, password, writer)

    async def _create_metadata(self, ensemble: Sequence[str], metadata: Callable[[int], LedgerMetadata]
                               ) -> tuple[LedgerMetadata, int]:
        """Create the metadata of a new ledger under a fresh id that no bookie of its ensemble knows yet:
        an id a bookie knows was squatted (`_claimed_on`); its metadata is deleted (so the bookies' garbage
        collection drops the squatter's state) and a fresh id is tried, CREATE_ATTEMPTS ids at most."""
        store = self._ctx.store
        squatted: list[int] = []
        while True:
            md = metadata(await asyncio.to_thread(store.new_ledger_id))
            version = await asyncio.to_thread(store.create_ledger, md)
            claimed_by = await self._claimed_on(ensemble, md.ledger_id)
            if claimed_by is None:
                return md, version
            squatted.append(md.ledger_id)
            log.warning("ledger %d was already fenced or written on bookie %s before its metadata existed "
                        "(squatted): deleted, trying a fresh id", md.ledger_id, claimed_by)
            await asyncio.to_thread(store.delete_ledger, md.ledger_id)
            if len(squatted) >= CREATE_ATTEMPTS:
                raise LedgerSquattedError(f"ledger ids {squatted} were all claimed on bookies by another client "
                                          "before their metadata existed (squatted): "
                                          f"{LedgerSquattedError.default_message}")

    async def _claimed_on(self, ensemble: Sequence[str], ledger_id: int) -> str | None:
        """A bookie of the ensemble that already knows a ledger id this client has just created, or None.
        Ids are never reused, so a bookie that knows it was fenced or written by someone else before the
        metadata existed (a fence creates an unknown ledger fenced, R15): the first add would fail with
        EFENCED or EUA. A bookie that does not answer in time is no evidence either way."""
        timeout = min(self._ctx.config.readTimeout, SQUAT_PROBE_TIMEOUT_S)

        async def knows(bookie_id: str) -> bool:
            try:
                client = await self._ctx.pool.get(bookie_id)
                answer = await client.read_lac(ledger_id, timeout)
            except (BKError, grpc.aio.AioRpcError, TimeoutError):
                return False
            return answer.status != pb.ENOLEDGER

        known = await asyncio.gather(*(knows(b) for b in dict.fromkeys(ensemble)))
        return next((b for b, k in zip(dict.fromkeys(ensemble), known, strict=True) if k), None)

    # ---- open -------------------------------------------------------------------------------
    def open_ledger(self, ledger_id: int, password: bytes | None = b"", recovery: bool = True) -> LedgerHandle:
        """recovery=True fences the writer and closes the ledger (R14-R20); False never fences and
        never writes metadata (R12): the handle reads up to the LAC found now, and can refresh it.
        password=None opens it with the password its metadata holds (which this client can read: the log
        machinery opens a log's ledgers so, whatever key each was created with)."""
        return open_ledger_with_rules(self, ledger_id, DEFAULT_RULES, password, recovery)

    async def aopen_ledger(self, ledger_id: int, password: bytes | None = b"", recovery: bool = True) -> LedgerHandle:
        self._check_open()
        password = checked_optional_password(password)
        return await self._ctx.runtime.wrap(self._open(ledger_id, password, recovery, DEFAULT_RULES))

    def open_ledgers(self, ledger_ids: Iterable[int], password: bytes | None = b"", recovery: bool = False
                     ) -> dict[int, LedgerHandle]:
        """Open many ledgers at once: {ledger id: handle}, for readers of many small ledgers.

        The metadata is read in pipelined ZooKeeper batches (OPEN_BATCH znodes per round trip) instead of
        one round trip per ledger. A CLOSED ledger's handle is built from its metadata alone (its last
        entry id is the bound: no bookie is asked); the LAC of an OPEN ledger is read from its bookies
        (recovery=False, R12: never fenced) or the ledger is recovered (recovery=True), all concurrently on
        the client loop. A ledger with no metadata is left out of the result (the caller decides whether
        that is data loss); a wrong password raises BadPasswordError as `open_ledger` does."""
        return open_ledgers_with_rules(self, ledger_ids, DEFAULT_RULES, password, recovery)

    def handles_for(self, found: Iterable[tuple[LedgerMetadata, int]], password: bytes | None = b"",
                    recovery: bool = False) -> dict[int, LedgerHandle]:
        """`open_ledgers` for ledgers whose metadata and version the caller has read already
        (`store.read_ledgers_versioned`): no ZooKeeper read for a CLOSED one."""
        return handles_for_with_rules(self, found, DEFAULT_RULES, password, recovery)

    def _handles_for(self, found: Iterable[tuple[LedgerMetadata, int]], password: bytes | None, recovery: bool,
                     rules: RecoveryRules) -> dict[int, LedgerHandle]:
        found = list(found)
        password = checked_optional_password(password)
        for md, _ in found:
            check_password(md, password)
        handles: dict[int, LedgerHandle] = {}
        unsealed = []
        for md, version in found:
            if md.state is LedgerState.CLOSED:
                handles[md.ledger_id] = LedgerHandle(self._ctx, md, version, own_password(md, password))
            else:
                unsealed.append((md, version))
        if unsealed:
            opened = self._ctx.runtime.run(self._open_all(unsealed, password, recovery, rules),
                                           self.config.fenceTimeout * 15 + 30)
            handles.update((rh.ledger_id, rh) for rh in opened)
        return handles

    def read_chunks_async(self, reads: Sequence[tuple[LedgerHandle, int, int]]
                          ) -> list[concurrent.futures.Future[ReadChunk]]:
        """`read_chunk_async` of many ledgers at once, for readers of many small ledgers: each future gives
        what `rh.read_chunk_async(first, last)` would (the entries from `first` on, at least one). The reads
        go to their bookies many ledgers per call (ReadRanges, `client.ranges_reader`) instead of one call
        each; what such a call does not answer is read the usual way, so results and errors are the same.
        One read per handle at a time; cancelling a future drops that read."""
        self._check_open()
        items = [rh.range_read(first, last) for rh, first, last in reads]
        if not items:
            return []
        bound = self.config.readTimeout * 12
        run = self._ctx.runtime.submit(asyncio.wait_for(
            read_ranges(items, self._ctx.no_ranges, self._ctx.pool.get, self._ctx.speculative,
                        self.config.readTimeout * 4), bound))

        def settle_rest(done: concurrent.futures.Future[None]) -> None:
            exc = done.exception() if not done.cancelled() else None
            error = (typed_error(exc, f"reads of {len(items)} ledgers within {bound:.1f}s", ReadTimeoutError)
                     if exc is not None else ClientClosedError("the read was stopped (client closed)"))
            for item in items:
                if not item.future.done():
                    item.future.set_exception(error)

        run.add_done_callback(settle_rest)
        return [item.future for item in items]

    async def _open_all(self, found: list[tuple[LedgerMetadata, int]], password: bytes | None, recovery: bool,
                        rules: RecoveryRules) -> list[LedgerHandle]:
        return list(await asyncio.gather(*(self._open_known(md, version, password, recovery, rules)
                                           for md, version in found)))

    async def _open(self, ledger_id: int, password: bytes | None, recovery: bool, rules: RecoveryRules
                    ) -> LedgerHandle:
        md, version = await asyncio.to_thread(self._ctx.store.read_ledger, ledger_id)
        check_password(md, password)
        return await self._open_known(md, version, password, recovery, rules)

    async def _open_known(self, md: LedgerMetadata, version: int, password: bytes | None, recovery: bool,
                          rules: RecoveryRules) -> LedgerHandle:
        try:
            return await self._open_checked(md, version, own_password(md, password), recovery, rules)
        except BKError as exc:    # no bookie answered: say so if TLS was why (client.tls)
            explained = self._ctx.pool.explain(exc, {b for f in md.fragments for b in f.ensemble})
            if explained is exc:
                raise
            raise explained from exc

    async def _open_checked(self, md: LedgerMetadata, version: int, password: bytes, recovery: bool,
                            rules: RecoveryRules) -> LedgerHandle:
        if recovery and md.state is not LedgerState.CLOSED:
            md, version = await RecoveryRun(self._ctx, md, password, rules).run()
        lac = md.last_entry_id
        if md.state is not LedgerState.CLOSED:
            from bkledger.client.protocol.digest import make_digest

            reader = LedgerReader(self._ctx, md, make_digest(md.digest_type, password), password)
            lac = await reader.read_lac()       # R12: no fence (reads.lac_read_fences)
        return LedgerHandle(self._ctx, md, version, password, lac=lac)

    # ---- the rest ---------------------------------------------------------------------------
    def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata; bookies reclaim its space later (garbage collection)."""
        self._check_open()
        self._ctx.store.read_ledger(ledger_id)          # NoSuchLedgerError with a clear message if absent
        self._ctx.store.delete_ledger(ledger_id)

    def delete_ledgers(self, ledger_ids: Iterable[int]) -> list[int]:
        """`delete_ledger` of many ledgers, METADATA_BATCH requests in flight at a time; a ledger that does
        not exist is skipped. The ids deleted, in the order given."""
        self._check_open()
        ids, gone = list(ledger_ids), []
        for start in range(0, len(ids), METADATA_BATCH):
            gone += self._ctx.store.delete_ledgers(ids[start:start + METADATA_BATCH])
        return gone

    def list_ledgers(self, above: int = -1) -> list[int]:
        """Every ledger id (only those above `above`, skipping the metadata subtrees below it), sorted."""
        self._check_open()
        return self._ctx.store.list_ledgers(above)

    def ledger_id_watermark(self) -> int:
        """An id that every ledger created before this call is below and every ledger created after it is
        above (the id generator is monotonic, R1): one ZooKeeper id allocation, where the largest id of
        `list_ledgers()` walks every ledger of the cluster. The id itself is never used for a ledger."""
        self._check_open()
        return self._ctx.store.new_ledger_id()

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        self._check_open()
        return self._ctx.store.read_ledger(ledger_id)[0]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._ctx.runtime.forked:        # a fork child: the loop, connections and ZooKeeper are the parent's
            return
        try:
            self._ctx.runtime.run(self._shutdown(), 15)
        finally:
            self._ctx.runtime.stop()
            self._ctx.store.close()

    async def _shutdown(self) -> None:
        closed = ClientClosedError("the BookKeeper client was closed with this ledger open; close each ledger "
                                   "(lh.close()) or log writer before the client to wait for its adds")
        for writer in list(self._ctx.writers):
            writer.shutdown(closed)
        self._ctx.writers.clear()
        await self._ctx.pool.close()

    def __enter__(self) -> BookKeeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_ledger_with_rules(bk: BookKeeper, ledger_id: int, rules: RecoveryRules, password: bytes | None = b"",
                           recovery: bool = True) -> LedgerHandle:
    """`bk.open_ledger` recovering with other rules than DEFAULT_RULES: how the simulation's mutants and the
    tests inject them. Internal: recovery rules are no part of the public API."""
    bk._check_open()
    password = checked_optional_password(password)
    return bk._ctx.runtime.run(bk._open(ledger_id, password, recovery, rules), bk.config.fenceTimeout * 15 + 30)


def open_ledgers_with_rules(bk: BookKeeper, ledger_ids: Iterable[int], rules: RecoveryRules,
                            password: bytes | None = b"", recovery: bool = False) -> dict[int, LedgerHandle]:
    """`bk.open_ledgers` recovering with other rules than DEFAULT_RULES (internal, as open_ledger_with_rules)."""
    bk._check_open()
    password = checked_optional_password(password)
    ids = list(dict.fromkeys(ledger_ids))
    handles: dict[int, LedgerHandle] = {}
    for start in range(0, len(ids), OPEN_BATCH):
        found = [got for got in bk._ctx.store.read_ledgers_versioned(ids[start:start + OPEN_BATCH]) if got is not None]
        handles.update(bk._handles_for(found, password, recovery, rules))
    return handles


def handles_for_with_rules(bk: BookKeeper, found: Iterable[tuple[LedgerMetadata, int]], rules: RecoveryRules,
                           password: bytes | None = b"", recovery: bool = False) -> dict[int, LedgerHandle]:
    """`bk.handles_for` recovering with other rules than DEFAULT_RULES (internal, as open_ledger_with_rules)."""
    return bk._handles_for(found, password, recovery, rules)


def own_password(md: LedgerMetadata, password: bytes | None) -> bytes:
    """The password to open the ledger with: the one given, or (None) the one its metadata holds."""
    return md.password if password is None else password


def check_password(md: LedgerMetadata, password: bytes | None) -> None:
    if password is not None and md.password != password:
        raise BadPasswordError(
            f"wrong password for ledger {md.ledger_id}: open it with the password used to create it")


_frozen = threading.Lock()
_FROZEN: list[bool] = []


def _freeze_heap_once() -> None:
    """gc.freeze() the process's heap, once per process (gcFreezeOnStart).

    A full garbage collection walks every tracked object and holds the GIL meanwhile, so the client loop
    completes no add until it ends. Right after start most of the heap is imported modules, gRPC, protobuf
    and kazoo state (about 36,000 objects for the client alone): one full collection of it took 28-90 ms on
    the loaded 2-core test machine, and full collections came every few seconds under an open-loop add
    load (55-75 ms each, logged), landing in the add latency's p99. Frozen, that state is skipped by every
    later collection (which then takes microseconds). Reference counting frees everything as before; only
    a reference cycle among objects alive at this moment would never be collected."""
    with _frozen:
        if _FROZEN:
            return
        _FROZEN.append(True)
        gc.collect()
        gc.freeze()
