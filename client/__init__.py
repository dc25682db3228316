"""bkledger's client: ledgers replicated over ensembles of bookies, metadata in ZooKeeper.

    from client import BookKeeper
    bk = BookKeeper("zk://127.0.0.1:2181/ledgers")
"""

from client.bookkeeper import BookKeeper
from client.errors import (
    BadPasswordError,
    BKError,
    DigestMismatchError,
    EntryTooLargeError,
    InvalidOptionError,
    InvalidQuorumError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerRecoveryError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    ReadBeyondLastEntryError,
)
from client.ledger_handle import LedgerEntry, LedgerHandle

__all__ = [
    "BKError",
    "BadPasswordError",
    "BookKeeper",
    "DigestMismatchError",
    "EntryTooLargeError",
    "InvalidOptionError",
    "InvalidQuorumError",
    "LedgerClosedError",
    "LedgerEntry",
    "LedgerFencedError",
    "LedgerHandle",
    "LedgerRecoveryError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NotEnoughBookiesError",
    "ReadBeyondLastEntryError",
]
