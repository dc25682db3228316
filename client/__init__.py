"""bkledger's client: ledgers replicated over ensembles of bookies, metadata in ZooKeeper.

    from client import BookKeeper
    bk = BookKeeper("zk://127.0.0.1:2181/ledgers")
    w = bk.open_log_writer("orders"); pos = w.append(b"...")     # logs made of ledgers (client.log.logs)
"""

from client.bookkeeper import BookKeeper
from client.errors import (
    BadPasswordError,
    BKError,
    BookieTlsError,
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
    LiveLogWriterError,
    LogFencedError,
    LogNotFoundError,
    LogWriterClosedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    ReadBeyondLastEntryError,
)
from client.ledger_handle import LedgerEntry, LedgerHandle
from client.log.core.meta import LogMetadata, Position
from client.log.logs import append_ledgers, append_ledgers_to_logs
from client.log.reader import LogReader, LogRecord
from client.log.writer import LogWriter

__all__ = [
    "BKError",
    "BadPasswordError",
    "BookKeeper",
    "BookieTlsError",
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
