"""bkledger's client: ledgers replicated over ensembles of bookies, metadata in ZooKeeper.

    from bkledger.client import BookKeeper
    bk = BookKeeper("zk://127.0.0.1:2181/ledgers")
    w = bk.open_log_writer("orders"); pos = w.append(b"...")     # logs made of ledgers (client.log.logs)

The errors are imported at once; every other name on first use (PEP 562): a process that imports only a
part of the client (`bkledger.client.meta.store` in a bookie, `bkledger.client.errors`) does not load the
whole of it, which costs half a CPU-second at every start of a bookie or a command.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bkledger.client.errors import (
    BadPasswordError,
    BKError,
    BookieTlsError,
    CursorLostError,
    CursorNotFoundError,
    DataLossError,
    DigestMismatchError,
    EntryTooLargeError,
    InvalidBulkError,
    InvalidOptionError,
    InvalidPositionError,
    InvalidQuorumError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerRecoveryError,
    LedgerSquattedError,
    LiveLogWriterError,
    LogFencedError,
    LogNotFoundError,
    LogWriterClosedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    ReadBeyondLastEntryError,
)

if TYPE_CHECKING:
    from bkledger.client.bookkeeper import BookKeeper
    from bkledger.client.ledger_handle import LedgerEntry, LedgerHandle
    from bkledger.client.log.core.meta import LogMetadata, Position
    from bkledger.client.log.logs import append_ledgers, append_ledgers_to_logs
    from bkledger.client.log.reader import LogReader, LogRecord
    from bkledger.client.log.writer import LogWriter

#: name -> the module that defines it, imported on first use
_LAZY = {
    "BookKeeper": "bkledger.client.bookkeeper",
    "LedgerEntry": "bkledger.client.ledger_handle",
    "LedgerHandle": "bkledger.client.ledger_handle",
    "LogMetadata": "bkledger.client.log.core.meta",
    "Position": "bkledger.client.log.core.meta",
    "append_ledgers": "bkledger.client.log.logs",
    "append_ledgers_to_logs": "bkledger.client.log.logs",
    "LogReader": "bkledger.client.log.reader",
    "LogRecord": "bkledger.client.log.reader",
    "LogWriter": "bkledger.client.log.writer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value                  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "BKError",
    "BadPasswordError",
    "BookKeeper",
    "BookieTlsError",
    "CursorLostError",
    "CursorNotFoundError",
    "DataLossError",
    "DigestMismatchError",
    "EntryTooLargeError",
    "InvalidBulkError",
    "InvalidOptionError",
    "InvalidPositionError",
    "InvalidQuorumError",
    "LedgerClosedError",
    "LedgerEntry",
    "LedgerFencedError",
    "LedgerHandle",
    "LedgerRecoveryError",
    "LedgerSquattedError",
    "LiveLogWriterError",
    "LogFencedError",
    "LogMetadata",
    "LogNotFoundError",
    "LogReader",
    "LogRecord",
    "LogWriter",
    "LogWriterClosedError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "Position",
    "ReadBeyondLastEntryError",
    "append_ledgers",
    "append_ledgers_to_logs",
]
