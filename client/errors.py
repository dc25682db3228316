"""Typed public errors of the bkledger client; every message says what the caller can do about it.

Mirrors BookKeeper's `BKException` family (BKLedgerFencedException, BKNotEnoughBookiesException,
BKDigestMatchException, ...). Each error carries an optional `code`: the bookie status code
(`client.protocol.status.StatusCode`) when the error came from a bookie answer. This module is pure: it
imports no transport or metadata library, so the protocol core can raise these errors.
"""

from __future__ import annotations

from bkledger.client.protocol.status import StatusCode


class BKError(Exception):
    """Base of every bkledger error. `code` is the bookie status code behind it, when there is one."""

    default_message = "bookkeeper operation failed"

    def __init__(self, message: str | None = None, *, code: int | None = None) -> None:
        super().__init__(message if message is not None else self.default_message)
        self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0])


class InvalidQuorumError(BKError, ValueError):
    default_message = (
        "invalid quorum sizes: need ensemble_size >= write_quorum >= ack_quorum >= 1; "
        "lower write_quorum/ack_quorum or raise ensemble_size"
    )


class InvalidOptionError(BKError, ValueError):
    default_message = "invalid option: check the option's name and allowed values"


class NotEnoughBookiesError(BKError):
    default_message = (
        "not enough writable bookies to form the ensemble: start more bookies, bring read-only ones "
        "back under the disk threshold, or use a smaller ensemble_size"
    )


class NoClusterError(NotEnoughBookiesError):
    """The metadata service URI points at a ZooKeeper path where no bkledger cluster lives (no
    `{root}/available` znode: no bookie ever registered there), most likely a wrong root path."""

    default_message = (
        "no bkledger cluster at this metadata service URI (nothing under its root's available znode); "
        "check the root path of metadataServiceUri"
    )


class PasswordTypeError(BKError, TypeError):
    """A ledger or log password given as something else than bytes (most often a str)."""

    default_message = "password must be bytes (b'pw'), not str: pass b'...' or encode the text ('pw'.encode())"


def checked_password(password: object) -> bytes:
    """`password` as bytes (bytes or bytearray accepted); PasswordTypeError for anything else. The message
    never repeats the password itself."""
    if isinstance(password, bytes):
        return password
    if isinstance(password, bytearray):
        return bytes(password)
    kind = type(password).__name__
    raise PasswordTypeError(f"password must be bytes (b'pw'), got {kind}: pass b'...' or "
                            f"encode the text (password.encode('utf-8'))")


def checked_optional_password(password: object) -> bytes | None:
    """`checked_password`, where None means "the password the ledger's own metadata holds"."""
    return None if password is None else checked_password(password)


class BadPasswordError(BKError):
    default_message = (
        "wrong password for this ledger (bookies answered EUA): open it with the password used to create it"
    )

    def __init__(self, message: str | None = None, *, code: int | None = StatusCode.EUA) -> None:
        super().__init__(message, code=code)


class DigestMismatchError(BKError):
    default_message = (
        "entry failed digest verification: the copy is corrupt or the digest type/password differ; "
        "read another replica or open the ledger with the right digest type and password"
    )

    def __init__(self, message: str | None = None, *, code: int | None = StatusCode.DIGEST_MISMATCH) -> None:
        super().__init__(message, code=code)


class NoSuchLedgerError(BKError):
    default_message = "no such ledger: it was never created or has been deleted; check the ledger id"

    def __init__(self, message: str | None = None, *, code: int | None = StatusCode.ENOLEDGER) -> None:
        super().__init__(message, code=code)


class NoSuchEntryError(BKError):
    default_message = (
        "no bookie of the entry's write set has the entry; it was never confirmed or all copies are lost"
    )

    def __init__(self, message: str | None = None, *, code: int | None = StatusCode.ENOENTRY) -> None:
        super().__init__(message, code=code)


class LedgerFencedError(BKError):
    default_message = (
        "ledger is fenced: another client opened it with recovery, so this writer may no longer add. "
        "The failed add was maybe written (like a timeout): read the ledger after recovery to find out, "
        "and write further data to a new ledger"
    )

    def __init__(self, message: str | None = None, *, code: int | None = StatusCode.EFENCED) -> None:
        super().__init__(message, code=code)


class LedgerClosedError(BKError):
    default_message = "ledger is closed: no more adds are possible; create a new ledger to write more"


class LedgerInRecoveryError(LedgerFencedError):
    default_message = (
        "ledger is being recovered by another client (state IN_RECOVERY): this writer is fenced out; "
        "wait for the recovery to close the ledger and write to a new ledger"
    )


class LedgerRecoveryError(BKError):
    default_message = (
        "ledger recovery could not finish (not enough bookies answered to decide safely); the ledger was "
        "not closed; bring bookies back and retry opening it with recovery"
    )


class EntryTooLargeError(BKError):
    default_message = "entry too large: split the payload or raise the size limit on client and bookies"


class InvalidBulkError(BKError, ValueError):
    """A bulk add (`add_entries` / `append_many`) whose buffer or offsets do not describe entries."""

    default_message = (
        "invalid bulk add: pass a bytes-like buffer and its entry offsets (the start of each entry plus the "
        "end: n + 1 non-decreasing integers within the buffer)"
    )


class ReadBeyondLastEntryError(BKError):
    default_message = (
        "read beyond the last readable entry (the LAC of an open ledger, the last entry id of a closed one); "
        "refresh the LAC or read a lower range"
    )


class MetadataConflictError(BKError):
    default_message = (
        "ledger metadata changed concurrently (compare-and-swap lost): re-read the metadata and retry"
    )


class MetadataVersionError(MetadataConflictError):
    default_message = (
        "ledger metadata version mismatch (compare-and-swap lost): re-read the metadata and retry"
    )


class BookieUnavailableError(BKError):
    default_message = (
        "bookie unavailable (connection failed or timed out): check that it runs and is reachable"
    )

    def __init__(self, message: str | None = None, *, code: int | None = StatusCode.UNAVAILABLE,
                 bookie_id: str | None = None) -> None:
        if message is None and bookie_id is not None:
            message = f"bookie {bookie_id} unavailable (connection failed or timed out): check that it runs"
        super().__init__(message, code=code)
        self.bookie_id = bookie_id


class BookieTlsError(BookieUnavailableError):
    """TLS between this client and a bookie failed (a plaintext peer, an untrusted, missing or expired
    certificate); `reason` names the case. A kind of BookieUnavailableError: other bookies are tried."""

    default_message = "TLS with the bookie failed: check tlsTrustStore, tlsCertificatePath and tlsKeyStore"

    def __init__(self, message: str | None = None, *, reason: str = "", bookie_id: str | None = None) -> None:
        super().__init__(message or self.default_message, bookie_id=bookie_id)
        self.reason = reason


class BookieError(BKError):
    """A bookie answered with an error status not covered by a more specific error."""

    default_message = "bookie returned an error"

    def __init__(self, message: str | None = None, *, code: int | None = None,
                 bookie_id: str | None = None) -> None:
        if message is None:
            name = _status_name(code)
            where = f" from bookie {bookie_id}" if bookie_id else ""
            advice = _STATUS_ADVICE.get(code, "retry, or check the bookie log")
            message = f"bookie error {name}{where}: {advice}"
        super().__init__(message, code=code)
        self.bookie_id = bookie_id


class ClientClosedError(BKError):
    default_message = "the BookKeeper client is closed: create a new client"


class ClientTimeoutError(BKError, TimeoutError):
    """An operation of the client did not finish within its bound (derived from the client's timeouts)."""

    default_message = "the bkledger operation did not finish in time"


class AddEntryQuorumTimeoutError(ClientTimeoutError):
    """Adds stayed pending past the client's bound (a multiple of addEntryTimeoutSec) with none completing:
    they fail, "maybe written", and the ledger handle takes no more adds (as BookKeeper's
    BKAddEntryQuorumTimeoutException)."""

    default_message = "adds did not reach their ack quorum in time; they were maybe written"


class ReadTimeoutError(ClientTimeoutError):
    """A read did not complete within the client's bound (derived from readTimeout)."""

    default_message = "the read did not complete in time"


class ClientInternalError(BKError):
    """An unexpected error inside the client failed the operations it held (a bug: please report it with
    the log); the ledger handle involved takes no more adds."""


def typed_error(exc: BaseException, what: str = "the operation",
                timeout: type[ClientTimeoutError] = ClientTimeoutError) -> BKError:
    """`exc` as a BKError for a caller's future: itself if it is one; a timeout as `timeout`; anything else
    (a bug) as ClientInternalError. The original is kept as the cause."""
    if isinstance(exc, BKError):
        return exc
    error: BKError
    if isinstance(exc, TimeoutError):
        error = timeout(f"{what} did not finish in time")
    else:
        error = ClientInternalError(f"{what} failed unexpectedly ({exc!r}); please report it with the log")
    error.__cause__ = exc
    return error


class ClientForkedError(ClientClosedError):
    """This client was created in another process: after fork() its connections and event loop belong to
    the parent. Create a new BookKeeper client in the child process."""

    default_message = ("this BookKeeper client was created before fork() and cannot be used in the child "
                       "process; create a new BookKeeper client in the child")


_STATUS_ADVICE: dict[int | None, str] = {
    StatusCode.EIO: "the bookie had an I/O error; another replica may have the data",
    StatusCode.EBADREQ: "the request was malformed or too large; this is a client bug or a size limit",
    StatusCode.EREADONLY: "the bookie is read-only (disk full); writes go to other bookies",
    StatusCode.ETOOMANYREQUESTS: "the bookie is overloaded; retry later",
    StatusCode.EUNKNOWNLEDGERSTATE: "the bookie's state of this ledger is untrusted after a crash; retry",
    StatusCode.EBADVERSION: "protocol version mismatch between client and bookie; upgrade one of them",
}


def _status_name(code: int | None) -> str:
    if code is None:
        return "(unknown)"
    try:
        return StatusCode(code).name
    except ValueError:
        return str(code)


class LedgerSquattedError(BKError):
    default_message = (
        "the new ledger ids were already claimed on bookies by another client (fenced or written before their "
        "metadata existed: squatted); check which clients hold a certificate or the public key, then retry"
    )


def error_for_status(code: int, *, bookie_id: str | None = None, what: str = "") -> BKError:
    """The typed error for a bookie status code; `what` (e.g. "ledger 7 entry 3") is added to the message."""
    by_code: dict[int, type[BKError]] = {
        StatusCode.EFENCED: LedgerFencedError,
        StatusCode.EUA: BadPasswordError,
        StatusCode.ENOLEDGER: NoSuchLedgerError,
        StatusCode.ENOENTRY: NoSuchEntryError,
        StatusCode.DIGEST_MISMATCH: DigestMismatchError,
    }
    if code in (StatusCode.TIMEOUT, StatusCode.UNAVAILABLE):
        return BookieUnavailableError(code=code, bookie_id=bookie_id)
    cls = by_code.get(code)
    if cls is None:
        return BookieError(code=code, bookie_id=bookie_id)
    message = f"{cls.default_message} ({what})" if what else None
    return cls(message, code=code)


__all__ = [
    "AddEntryQuorumTimeoutError", "ClientForkedError", "ClientInternalError", "ClientTimeoutError",
    "ReadTimeoutError", "typed_error",
    "BKError", "BadPasswordError", "BookieError", "BookieTlsError", "BookieUnavailableError", "ClientClosedError",
    "DigestMismatchError", "EntryTooLargeError", "InvalidBulkError", "InvalidOptionError", "InvalidQuorumError",
    "InvalidLogNameError", "LedgerClosedError", "LedgerFencedError", "LedgerInRecoveryError", "LedgerRecoveryError",
    "LedgerSquattedError", "LiveLogWriterError", "MetadataConflictError", "MetadataVersionError", "NoClusterError",
    "NoSuchEntryError", "NoSuchLedgerError", "NotEnoughBookiesError", "PasswordTypeError", "ReadBeyondLastEntryError",
    "checked_optional_password", "checked_password", "error_for_status",
]


# ---- logs made of ledgers (R27-R30) ---------------------------------------------------------------
class LogNotFoundError(BKError):
    default_message = (
        "no such log: it was never created or has been deleted; check the name (bkledger log list) or "
        "open a log writer with create=True"
    )


class InvalidLogNameError(InvalidOptionError):
    """A log name that cannot be a log's name (`client.log.core.names`): `name` (as given), `reason`, and
    where known the offending character `char` and its `index` (counting from 0)."""

    default_message = (
        "invalid log name: 1-249 characters, no '/', not '.' or '..', and no character ZooKeeper refuses "
        "(control characters, U+D800-U+F8FF, U+FFF0-U+FFFF, characters beyond U+FFFF such as emoji)"
    )

    def __init__(self, message: str | None = None, *, name: str = "", reason: str = "", char: str | None = None,
                 index: int | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.reason = reason
        self.char = char
        self.index = index


class LogFencedError(LedgerFencedError):
    default_message = (
        "another writer took over this log (it fenced this writer's ledger or won the compare-and-swap of "
        "the ledger list): stop writing here; appends that failed were maybe written, read the log to find "
        "out, and open a new log writer only if this process should lead again"
    )


class LogWriterClosedError(LedgerClosedError):
    default_message = "this log writer is closed: open a new one with open_log_writer to append more"


class LiveLogWriterError(BKError):
    default_message = (
        "the log's last ledger is open and its writer is alive (it holds the log's writer lease): appending "
        "here would fence that writer. Close the writer first (or wait for it to die: its lease ends with its "
        "ZooKeeper session), or ask for a takeover explicitly (Spark option fenceLiveWriter=true, "
        "append_ledgers(..., fence_live_writer=True)); the writer's next append then fails with LogFencedError"
    )


class DataLossError(BKError):
    default_message = (
        "data the reader was positioned on is gone (its ledgers were truncated or removed by retention): "
        "restart from 'earliest', or open the reader with fail_on_data_loss=False to skip ahead"
    )


class CursorLostError(DataLossError):
    """Records a cursor had not acknowledged were deleted (its lag exceeded the log's cursor quota,
    `cursor_max_lag_bytes`, or a truncation ignored cursors): `log`, `cursor`, `ledgers` (the deleted ledger
    ids, where known)."""

    default_message = (
        "records this cursor had not acknowledged were deleted: reopen the reader with fail_on_data_loss=False "
        "to go on from the earliest record still in the log, or delete the cursor"
    )

    def __init__(self, message: str | None = None, *, log: str = "", cursor: str = "",
                 ledgers: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.log = log
        self.cursor = cursor
        self.ledgers = ledgers


class CursorNotFoundError(BKError):
    default_message = "no such cursor on this log: list them with bk.list_cursors(log) or bkledger log cursors LOG"


class InvalidPositionError(BKError, ValueError):
    default_message = (
        "this position is not in the log: start from 'earliest', 'latest' or a position that a reader or "
        "writer of this log returned"
    )


class InvalidLogUpdateError(BKError, ValueError):
    default_message = (
        "this change would break the log's order: its ledger ids must strictly increase, so append only "
        "CLOSED ledgers created after the log's last ledger"
    )


class LogUpdateConflictError(MetadataConflictError):
    default_message = (
        "the log's ledger list kept changing under this update (compare-and-swap lost repeatedly): retry later"
    )
