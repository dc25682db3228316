"""Transactions across logs and cursors (issue 44 item 4): the pure rules.

A transaction (`client.log.transaction`) writes each log's records to a ledger of its own and, on commit,
stores every log's new ledger list, every cursor's acknowledgement and a marker znode named by the
transaction's id in ONE ZooKeeper multi-operation. These functions decide, without I/O:

- `check_transaction_id`: what may name a transaction (its marker znode's name);
- `Phase` / `next_phase`: the life of a transaction (open -> committing -> committed | aborted), and which
  calls each phase allows (TransactionStateError otherwise);
- `merged_ack`: several acks of one cursor in one transaction keep the furthest (never moving back);
- `after_failed_commit`: what to do when the multi failed (re-home late ledgers, re-read and retry, give up);
- `outcome_after_unknown`: a commit whose answer was lost is decided by whether its marker exists.
"""

from __future__ import annotations

import enum
import string
from collections.abc import Mapping, Sequence

from bkledger.client.errors import BKError
from bkledger.client.log.core.meta import Position

MAX_TRANSACTION_ID = 64
COMMIT_ATTEMPTS = 20           # rounds of "a log or cursor moved meanwhile: re-read (re-home), try again"
_ID_CHARS = frozenset(string.ascii_letters + string.digits + "-_.")


class TransactionStateError(BKError):
    """A call the transaction's phase does not allow (append after commit, commit after abort, ...)."""


class Phase(enum.Enum):
    OPEN = "open"
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABORTED = "aborted"


class Event(enum.Enum):
    WRITE = "append or ack"
    COMMIT = "commit"
    COMMITTED = "committed"
    FAILED = "commit failed"
    ABORT = "abort"


_MOVES: Mapping[tuple[Phase, Event], Phase] = {
    (Phase.OPEN, Event.WRITE): Phase.OPEN,
    (Phase.OPEN, Event.COMMIT): Phase.COMMITTING,
    (Phase.OPEN, Event.ABORT): Phase.ABORTED,
    (Phase.COMMITTING, Event.COMMITTED): Phase.COMMITTED,
    (Phase.COMMITTING, Event.FAILED): Phase.ABORTED,
    (Phase.ABORTED, Event.ABORT): Phase.ABORTED,        # abort twice: nothing more to do
}


def next_phase(phase: Phase, event: Event, txid: str) -> Phase:
    """The phase after `event`, or TransactionStateError naming what was attempted and why not."""
    got = _MOVES.get((phase, event))
    if got is None:
        raise TransactionStateError(f"transaction {txid}: cannot {event.value} a transaction that is "
                                    f"{phase.value}; start a new one with bk.transaction()")
    return got


def check_transaction_id(txid: object) -> str:
    """`txid` if it can name a transaction (1-64 letters, digits, '-', '_', '.'; not '.' or '..'), else
    ValueError saying why."""
    if not isinstance(txid, str) or not txid or len(txid) > MAX_TRANSACTION_ID:
        raise ValueError(f"a transaction id is a string of 1 to {MAX_TRANSACTION_ID} characters, got {txid!r}")
    if not set(txid) <= _ID_CHARS or txid in (".", ".."):
        raise ValueError(f"a transaction id has letters, digits, '-', '_' and '.' only, got {txid!r}")
    return txid


class CursorMovedBackError(BKError):
    """A transaction's acknowledgement would move a cursor back: the transaction fails, nothing of it
    is applied (acknowledge forward only; `reader.ack(backwards=True)` outside a transaction rewinds)."""

    def __init__(self, message: str, *, log: str = "", cursor: str = "") -> None:
        super().__init__(message)
        self.log = log
        self.cursor = cursor


def merged_ack(earlier: Position | None, later: Position, log: str, cursor: str) -> Position:
    """The position a transaction acknowledges for a cursor it acks again: the later one, which may not be
    behind the earlier (CursorMovedBackError)."""
    if earlier is not None and later < earlier:
        raise CursorMovedBackError(f"cursor {cursor!r} of log {log!r}: this transaction acknowledged {earlier} "
                                   f"already; it cannot go back to {later}", log=log, cursor=cursor)
    return later


def check_forward(stored: Position | None, position: Position, log: str, cursor: str) -> None:
    """CursorMovedBackError if acknowledging `position` would move the cursor back from `stored`."""
    if stored is not None and position < stored:
        raise CursorMovedBackError(f"cursor {cursor!r} of log {log!r} is at {stored}: a transaction cannot move "
                                   f"it back to {position}; nothing of the transaction was applied",
                                   log=log, cursor=cursor)


class Step(enum.Enum):
    REHOME = "copy the late ledgers above their log's tail, then try again"
    RETRY = "re-read the logs and cursors, then try again"
    GIVE_UP = "give up: nothing of the transaction is applied"


def after_failed_commit(attempt: int, late: Mapping[str, Sequence[int]], version_moved: bool) -> Step:
    """What follows a multi that was refused: `late` are the transaction's ledgers that another commit left
    below their log's tail (R27), `version_moved` that a log's head or a cursor changed since read."""
    if attempt + 1 >= COMMIT_ATTEMPTS:
        return Step.GIVE_UP
    if any(late.values()):
        return Step.REHOME
    return Step.RETRY if version_moved else Step.GIVE_UP


class Outcome(enum.Enum):
    COMMITTED = "committed"
    NOT_COMMITTED = "not committed"


def outcome_after_unknown(marker_exists: bool) -> Outcome:
    """A commit whose answer was lost (the connection broke): its marker znode was created by the same multi
    as everything else, so it exists if and only if the transaction was applied."""
    return Outcome.COMMITTED if marker_exists else Outcome.NOT_COMMITTED
