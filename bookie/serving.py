"""A serving bookie as its HTTP endpoints and scrape-time metrics see it (`BookieServerView`), so that
`bookie.http_admin`, `bookie.status_page`, `bookie.collectors` and `bookie.bookie_http` need not import
`bookie.service`, which starts them: `bookie.service.BookieServer` is what is passed for it."""

from __future__ import annotations

import asyncio
from typing import Protocol

from bkledger.bookie.bookie import Bookie
from bkledger.bookie.config import BookieConfig
from bkledger.bookie.gc import GarbageCollector
from bkledger.bookie.registration import Registrar
from bkledger.bookie.server import BookieService
from bkledger.client.meta.store import MetadataStore


class BookieServerView(Protocol):
    """What `bookie.service.BookieServer` offers its HTTP endpoints (its methods there say what each does)."""

    config: BookieConfig
    store: MetadataStore
    bookie: Bookie
    service: BookieService | None
    gc: GarbageCollector | None
    registrar: Registrar
    admin_read_only: bool

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None: ...

    @property
    def shutting_down(self) -> bool: ...

    def set_admin_read_only(self, read_only: bool) -> None: ...

    def status_code(self) -> int: ...

    def state_name(self) -> str: ...
