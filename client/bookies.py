"""The client's bookie connections: bookie id -> BookieClient, resolved through the registry.

Mirrors BookKeeper's BookieClient pool. A connection whose add stream broke is replaced by a fresh
one the next time it is asked for, so a restarted bookie is used again. Lives on the client loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from bkledger.client.bookie_client import BookieClient
from bkledger.client.errors import (
    BKError,
    BookieTlsError,
    BookieUnavailableError,
    LedgerRecoveryError,
    NotEnoughBookiesError,
)
from bkledger.client.meta.store import MetadataStore
from bkledger.client.tls import TlsSettings, channel_credentials
from bkledger.wire.add_stream import REGISTRATION_PROPERTY

log = logging.getLogger("bkledger.client")


_NO_BOOKIES = (NotEnoughBookiesError, BookieUnavailableError, LedgerRecoveryError)


class BookiePool:
    def __init__(self, store: MetadataStore, max_add_requests_in_flight: int = 0, tls: TlsSettings | None = None,
                 max_add_bulk_bytes_in_flight: int = 0, add_pipeline_min_bytes: int = 0,
                 use_add_port: bool = False):
        """`tls`: the client's TLS keys; credentials are loaded once, here (InvalidOptionError if unusable).
        The bounds on adds in flight per connection: see client.bookie_client. `use_add_port`: add over a
        bookie's add port when its registration names one and TLS is off (client.add_port)."""
        self.store = store
        self.max_add_requests_in_flight = max_add_requests_in_flight
        self.max_add_bulk_bytes_in_flight = max_add_bulk_bytes_in_flight
        self.add_pipeline_min_bytes = add_pipeline_min_bytes
        self.tls = tls or TlsSettings()
        self.credentials = channel_credentials(self.tls)
        self.use_add_port = use_add_port and self.credentials is None
        self._clients: dict[str, BookieClient] = {}
        self._addresses: dict[str, str] = {}
        self._add_ports: dict[str, int] = {}      # bookie id -> its add port (registered; 0: none)
        self._closing: set[asyncio.Task[None]] = set()

    async def address(self, bookie_id: str) -> str:
        address = self._addresses.get(bookie_id)
        if address is None:
            info = await asyncio.to_thread(self.store.bookie_info, bookie_id)
            self._add_ports[bookie_id] = _add_port(info) if self.use_add_port else 0
            if info is not None and info.get("host") and info.get("port"):
                address = f"{info['host']}:{info['port']}"
            elif ":" in bookie_id:
                address = bookie_id          # a bookie id is host:port unless set otherwise
            else:
                raise BookieUnavailableError(f"bookie {bookie_id} is not registered and its id is no address",
                                             bookie_id=bookie_id)
            self._addresses[bookie_id] = address
        return address

    def cached(self, bookie_id: str) -> BookieClient | None:
        client = self._clients.get(bookie_id)
        return None if client is None or client.failed else client

    async def get(self, bookie_id: str) -> BookieClient:
        client = self._clients.get(bookie_id)
        if client is not None and not client.failed:
            return client
        if client is not None:
            self._retire(client)
            self._addresses.pop(bookie_id, None)     # a restarted bookie may have another add port
        address = await self.address(bookie_id)
        client = BookieClient(bookie_id, address, self.max_add_requests_in_flight,
                              self.credentials, self.tls, self.max_add_bulk_bytes_in_flight,
                              self.add_pipeline_min_bytes, self._add_ports.get(bookie_id, 0))
        existing = self._clients.get(bookie_id)
        if existing is not None and not existing.failed:   # another task connected meanwhile
            await client.close()
            return existing
        self._clients[bookie_id] = client
        return client

    async def dedicated(self, bookie_id: str) -> BookieClient:
        """A new connection of its own to the bookie (the caller closes it), with the pool's TLS settings."""
        address = await self.address(bookie_id)
        return BookieClient(bookie_id, address, 0, self.credentials, self.tls,
                            add_port=self._add_ports.get(bookie_id, 0))

    def tls_error(self, bookie_id: str) -> BookieTlsError | None:
        """The TLS rejection that broke the last connection to this bookie, if that is what happened."""
        client = self._clients.get(bookie_id)
        return client.tls_error if client is not None else None

    def explain(self, error: BKError, bookie_ids: Iterable[str]) -> BKError:
        """`error`, or the TLS rejection behind it when running out of bookies was caused by TLS."""
        if isinstance(error, _NO_BOOKIES) and not isinstance(error, BookieTlsError):
            for bookie_id in bookie_ids:
                tls_error = self.tls_error(bookie_id)
                if tls_error is not None:
                    return tls_error
        return error

    def _retire(self, client: BookieClient) -> None:
        task = asyncio.get_running_loop().create_task(client.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        clients = list(self._clients.values())
        self._clients.clear()
        await asyncio.gather(*(c.close() for c in clients), *self._closing, return_exceptions=True)


def _add_port(info: dict[str, str] | None) -> int:
    """The add port a bookie's registration names (wire.add_stream.REGISTRATION_PROPERTY); 0: none, or
    a value that is no port (logged: the bookie's adds then go over gRPC)."""
    text = (info or {}).get(REGISTRATION_PROPERTY, "")
    if not text:
        return 0
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        log.warning("a bookie registered %s=%r, which is no port: adding to it over gRPC", REGISTRATION_PROPERTY, text)
        return 0
    return port
