"""The BookKeeper client as the log layer uses it (`BookKeeperFacade`), so that no module of `client.log`
imports `client.bookkeeper`: `BookKeeper` takes the log layer in as mixins (`LogsMixin`, `TransactionsMixin`)
and is what is passed wherever a `BookKeeperFacade` is asked for."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from bkledger.client.config import ClientConfig
from bkledger.client.context import ClientContext
from bkledger.client.ledger_handle import LedgerHandle
from bkledger.client.meta.store import MetadataStore
from bkledger.client.protocol.metadata import DigestType, LedgerMetadata
from bkledger.client.reader import ReadChunk


class BookKeeperFacade(Protocol):
    """What `client.bookkeeper.BookKeeper` offers the log layer (its methods there say what each does)."""

    config: ClientConfig
    metrics_registry: Any
    _ctx: ClientContext

    @property
    def store(self) -> MetadataStore: ...

    def _check_open(self) -> None: ...

    def create_ledger(self, ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2, *,
                      digest_type: str | DigestType = "crc32c", password: bytes = b"",
                      custom_metadata: Mapping[str, bytes] | None = None, compression: str = "") -> LedgerHandle: ...

    def open_ledger(self, ledger_id: int, password: bytes | None = b"", recovery: bool = True) -> LedgerHandle: ...

    def open_ledgers(self, ledger_ids: Iterable[int], password: bytes | None = b"", recovery: bool = False
                     ) -> dict[int, LedgerHandle]: ...

    def handles_for(self, found: Iterable[tuple[LedgerMetadata, int]], password: bytes | None = b"",
                    recovery: bool = False) -> dict[int, LedgerHandle]: ...

    def read_chunks_async(self, reads: Sequence[tuple[LedgerHandle, int, int]]
                          ) -> list[concurrent.futures.Future[ReadChunk]]: ...

    def delete_ledger(self, ledger_id: int) -> None: ...

    def delete_ledgers(self, ledger_ids: Iterable[int]) -> list[int]: ...

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata: ...

    def list_logs(self) -> list[str]: ...

    def apply_log_retention(self, name: str) -> list[int]: ...
