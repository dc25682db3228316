"""BookKeeper: the client facade (create, open, delete and list ledgers; later logs).

Mirrors org.apache.bookkeeper.client.BookKeeper. One instance owns a ZooKeeper session (through the
metadata store), a pool of bookie connections and an event loop thread. Blocking methods are safe
from any thread; `acreate_ledger` / `aopen_ledger` are the asyncio flavour.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any

from client.bookies import BookiePool
from client.config import ClientConfig
from client.errors import BadPasswordError, ClientClosedError, InvalidOptionError
from client.ledger_handle import LedgerHandle
from client.logs import LogsMixin
from client.meta.store import MetadataStore
from client.placement import PlacementPolicy, RandomPlacementPolicy
from client.protocol import transforms
from client.protocol.metadata import DigestType, LedgerMetadata, LedgerState
from client.protocol.recovery import DEFAULT_RULES, RecoveryRules
from client.protocol.speculative import BookieHealth, SpeculativePolicy
from client.reader import LedgerReader
from client.recovery_driver import RecoveryRun
from client.runtime import EventLoopThread
from client.writer import LedgerWriter

log = logging.getLogger("bkledger.client")
COMPRESSIONS = ("", "none", "lz4")


@dataclasses.dataclass
class ClientContext:
    """What the drivers of one BookKeeper instance share."""

    runtime: EventLoopThread
    store: MetadataStore
    pool: BookiePool
    config: ClientConfig
    placement: PlacementPolicy
    writers: set[LedgerWriter] = dataclasses.field(default_factory=set)
    health: BookieHealth = dataclasses.field(default_factory=BookieHealth)   # failure history for read order

    @property
    def speculative(self) -> SpeculativePolicy:
        return SpeculativePolicy.from_ms(self.config.speculativeReadTimeout, self.config.maxSpeculativeReadTimeout)


class BookKeeper(LogsMixin):
    def __init__(self, metadata_service_uri: str, *, config: ClientConfig | None = None,
                 placement: PlacementPolicy | None = None, **options: Any):
        self.metadata_service_uri = metadata_service_uri
        self.config = config or ClientConfig.from_options(options)
        store = MetadataStore(metadata_service_uri, session_timeout=self.config.zkTimeout).start()
        runtime = EventLoopThread()
        self._ctx = ClientContext(runtime, store, BookiePool(store, self.config.maxAddRequestsInFlight), self.config,
                                  placement or RandomPlacementPolicy(),
                                  health=BookieHealth(self.config.bookieFailureHistoryExpirationMSec / 1000.0,
                                                      self.config.reorderReadSequenceEnabled))
        self._closed = False

    @property
    def store(self) -> MetadataStore:
        return self._ctx.store

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("this BookKeeper client is closed")

    # ---- create -----------------------------------------------------------------------------
    def create_ledger(self, ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2, *,
                      digest_type: str | DigestType = "crc32c", password: bytes = b"",
                      custom_metadata: Mapping[str, bytes] | None = None, compression: str = "") -> LedgerHandle:
        """A new OPEN ledger on E writable bookies (R1: E >= Qw >= Qa >= 1)."""
        self._check_open()
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
        ensemble = self._ctx.placement.new_ensemble(e, writable)
        ledger_id = await asyncio.to_thread(store.new_ledger_id)
        md = transforms.new_ledger_metadata(
            ledger_id, ensemble, e, qw, qa, digest, password, int(time.time() * 1000), dict(custom or {}),
            "" if compression == "none" else compression)
        version = await asyncio.to_thread(store.create_ledger, md)
        writer = LedgerWriter(self._ctx, md, version, password)
        await writer.start()
        self._ctx.writers.add(writer)
        log.debug("created ledger %d on %s (E=%d Qw=%d Qa=%d)", ledger_id, ensemble, e, qw, qa)
        return LedgerHandle(self._ctx, md, version, password, writer)

    # ---- open -------------------------------------------------------------------------------
    def open_ledger(self, ledger_id: int, password: bytes = b"", recovery: bool = True,
                    rules: RecoveryRules = DEFAULT_RULES) -> LedgerHandle:
        """recovery=True fences the writer and closes the ledger (R14-R20); False never fences and
        never writes metadata (R12): the handle reads up to the LAC found now, and can refresh it."""
        self._check_open()
        return self._ctx.runtime.run(self._open(ledger_id, password, recovery, rules),
                                     self.config.fenceTimeout * 15 + 30)

    async def aopen_ledger(self, ledger_id: int, password: bytes = b"", recovery: bool = True) -> LedgerHandle:
        self._check_open()
        return await self._ctx.runtime.wrap(self._open(ledger_id, password, recovery, DEFAULT_RULES))

    async def _open(self, ledger_id: int, password: bytes, recovery: bool, rules: RecoveryRules) -> LedgerHandle:
        md, version = await asyncio.to_thread(self._ctx.store.read_ledger, ledger_id)
        check_password(md, password)
        if recovery and md.state is not LedgerState.CLOSED:
            md, version = await RecoveryRun(self._ctx, md, password, rules).run()
        lac = md.last_entry_id
        if md.state is not LedgerState.CLOSED:
            from client.protocol.digest import make_digest

            lac = await LedgerReader(self._ctx, md, make_digest(md.digest_type, password)).read_lac()
        return LedgerHandle(self._ctx, md, version, password, lac=lac)

    # ---- the rest ---------------------------------------------------------------------------
    def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata; bookies reclaim its space later (garbage collection)."""
        self._check_open()
        self._ctx.store.read_ledger(ledger_id)          # NoSuchLedgerError with a clear message if absent
        self._ctx.store.delete_ledger(ledger_id)

    def list_ledgers(self) -> list[int]:
        self._check_open()
        return self._ctx.store.list_ledgers()

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        self._check_open()
        return self._ctx.store.read_ledger(ledger_id)[0]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._ctx.runtime.run(self._shutdown(), 15)
        finally:
            self._ctx.runtime.stop()
            self._ctx.store.close()

    async def _shutdown(self) -> None:
        for writer in list(self._ctx.writers):
            writer.shutdown()
        self._ctx.writers.clear()
        await self._ctx.pool.close()

    def __enter__(self) -> BookKeeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_password(md: LedgerMetadata, password: bytes) -> None:
    if md.password != password:
        raise BadPasswordError(
            f"wrong password for ledger {md.ledger_id}: open it with the password used to create it")
