"""bkledger's client: ledgers replicated over ensembles of bookies, metadata in ZooKeeper.

    from bkledger.client import BookKeeper
    bk = BookKeeper("zk://127.0.0.1:2181/ledgers")
    w = bk.open_log_writer("orders"); pos = w.append(b"...")     # logs made of ledgers (client.log.logs)
"""

from bkledger.client.bookkeeper import BookKeeper
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
from bkledger.client.ledger_handle import LedgerEntry, LedgerHandle
from bkledger.client.log.core.meta import LogMetadata, Position
from bkledger.client.log.logs import append_ledgers, append_ledgers_to_logs
from bkledger.client.log.reader import LogReader, LogRecord
from bkledger.client.log.writer import LogWriter

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
