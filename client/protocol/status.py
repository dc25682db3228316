"""Status codes a bookie (or the client transport) reports for one request.

Mirrors BookKeeper's `BookkeeperProtocol.StatusCode` (same numbers as `proto/bookie.proto`), plus a few
client-side outcomes that never travel on the wire (a timeout, a broken connection, a digest that did not
verify). The pure core classifies responses by these values; the drivers translate wire enums into them.
"""

from __future__ import annotations

import enum


class StatusCode(enum.IntEnum):
    EOK = 0
    ENOLEDGER = 402
    ENOENTRY = 403
    EBADREQ = 404
    EIO = 501
    EUA = 502
    EBADVERSION = 503
    EFENCED = 504
    EREADONLY = 505
    ETOOMANYREQUESTS = 506
    EUNKNOWNLEDGERSTATE = 507
    # Client-side outcomes (not bookie answers).
    TIMEOUT = 1001
    UNAVAILABLE = 1002
    DIGEST_MISMATCH = 1003


#: Explicit "this bookie does not have it" answers: the only ones that count as negative (R18).
NEGATIVE_STATUSES = frozenset({StatusCode.ENOENTRY, StatusCode.ENOLEDGER})


def as_status(code: int | StatusCode) -> StatusCode:
    """The StatusCode for a raw int; unknown numbers map to EIO (never to a negative answer)."""
    try:
        return StatusCode(code)
    except ValueError:
        return StatusCode.EIO
