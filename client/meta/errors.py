"""Errors of the metadata layer (ZooKeeper), mirroring BookKeeper's BKException codes that come from it.

The shared ones (BKError, NoSuchLedgerError, MetadataConflictError, MetadataVersionError,
InvalidOptionError) live in `client/errors.py`; this module re-exports them and adds the ones only
the metadata layer raises: ZooKeeper unreachable or failing (MetadataStoreError, like ZKException),
unreadable znode data (MetadataFormatError), a missing or existing znode (NoSuchNodeError,
ZNodeExistsError), a value above ZooKeeper's request limit (ZNodeTooLargeError), a ledger id already
taken (LedgerExistsError), a cluster whose LAYOUT names another ledger manager (LayoutMismatchError), a
CAS loop that gave up (UpdateConflictError) and a bookie's registration given up as it stops
(RegistrationAbandonedError).
"""

from __future__ import annotations

from bkledger.client.errors import (
    BKError,
    InvalidOptionError,
    MetadataConflictError,
    MetadataVersionError,
    NoSuchLedgerError,
)


class MetadataStoreError(BKError):
    """ZooKeeper could not be reached or failed the operation (BookKeeper's ZKException)."""


class MetadataAccessDeniedError(MetadataStoreError):
    """ZooKeeper refused the operation (NoAuth): the znode's ACL does not grant it to this session's
    credentials (BookKeeper's ZKException with NOAUTH)."""


class MetadataFormatError(MetadataStoreError):
    """Znode data that cannot be parsed (not ledger metadata, unsupported format version, corrupt)."""


class RegistrationAbandonedError(MetadataStoreError):
    """A bookie's registration gave up waiting for its earlier session's node to expire: it is stopping."""


class NoSuchNodeError(MetadataStoreError):
    """The znode does not exist (ZooKeeper's NoNode), for the generic helpers."""


class ZNodeExistsError(MetadataStoreError):
    """The znode already exists (ZooKeeper's NodeExists), for the generic helpers."""


class LedgerExistsError(ZNodeExistsError):
    """A ledger with this id already has metadata (BookKeeper's LedgerExistException)."""


class LayoutMismatchError(MetadataStoreError):
    """The cluster's LAYOUT names another ledger manager than the metadata service URI asks for."""


class ZNodeTooLargeError(MetadataStoreError):
    """A value (or a multi-operation request) above what ZooKeeper accepts (`jute.maxbuffer`, 1 MiB by
    default, less a margin for the request): it was not sent, since the server would drop the connection
    and the call would only ever look like "ZooKeeper unreachable". Nothing was written."""

    def __init__(self, path: str, size: int, limit: int, why: str = "") -> None:
        self.path, self.size, self.limit = path, size, limit
        super().__init__(f"{path}: {why or 'the value'} is {size} bytes, above the {limit} bytes ZooKeeper "
                         "accepts in one request (jute.maxbuffer less a margin): not written; store less in "
                         "one znode (or raise jute.maxbuffer on every server and client)")


class UpdateConflictError(MetadataConflictError):
    """The CAS update loop lost the race `max_attempts` times in a row; nothing was written by this call."""


__all__ = [
    "BKError", "InvalidOptionError", "LayoutMismatchError", "LedgerExistsError", "MetadataAccessDeniedError",
    "MetadataConflictError", "MetadataFormatError", "MetadataStoreError", "MetadataVersionError", "NoSuchLedgerError",
    "NoSuchNodeError", "UpdateConflictError", "ZNodeExistsError", "ZNodeTooLargeError",
]
