"""Pure transforms of ledger metadata and the decisions taken when a metadata CAS loses (R1, R4, R9, R10, R14,
R19, R20).

Mirrors the metadata side of BookKeeper's LedgerHandle / LedgerCreateOp / LedgerRecoveryOp /
MetadataUpdateLoop: each transform takes a LedgerMetadata value and returns a new one (or raises a typed
error saying why the change is refused); the metadata layer writes the result with a compare-and-swap on
the znode version. When that CAS fails, the caller re-reads the stored metadata and asks one of the
`decide_*` functions what to do next.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence

from bkledger.client.errors import (
    InvalidOptionError,
    InvalidQuorumError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerInRecoveryError,
    NotEnoughBookiesError,
)
from bkledger.client.protocol.metadata import DigestType, Fragment, LedgerMetadata, LedgerState

COMPRESSIONS = ("", "lz4")


def validate_quorum(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """R1: E >= Qw >= Qa >= 1, else InvalidQuorumError saying which size to change."""
    if ack_quorum < 1:
        raise InvalidQuorumError(f"ack_quorum={ack_quorum}: it must be at least 1")
    if write_quorum < ack_quorum:
        raise InvalidQuorumError(
            f"write_quorum={write_quorum} < ack_quorum={ack_quorum}: raise write_quorum to at least "
            f"{ack_quorum} or lower ack_quorum to at most {write_quorum}")
    if ensemble_size < write_quorum:
        raise InvalidQuorumError(
            f"ensemble_size={ensemble_size} < write_quorum={write_quorum}: raise ensemble_size to at least "
            f"{write_quorum} or lower write_quorum to at most {ensemble_size}")


def new_ledger_metadata(ledger_id: int, ensemble: Sequence[str], ensemble_size: int, write_quorum: int,
                        ack_quorum: int, digest_type: DigestType | str, password: bytes, ctime_ms: int,
                        custom: Mapping[str, bytes] | None = None, compression: str = "") -> LedgerMetadata:
    """The metadata of a new OPEN ledger with one fragment starting at entry 0 (R1, R2)."""
    validate_quorum(ensemble_size, write_quorum, ack_quorum)
    if len(set(ensemble)) != len(ensemble):
        raise InvalidOptionError(f"ensemble {list(ensemble)} names a bookie twice: pick distinct bookies")
    if len(ensemble) != ensemble_size:
        raise NotEnoughBookiesError(
            f"ensemble has {len(ensemble)} bookies but ensemble_size={ensemble_size}: start more bookies "
            "or lower ensemble_size")
    if compression not in COMPRESSIONS:
        raise InvalidOptionError(f"unknown compression {compression!r}: use '' (none) or 'lz4'")
    try:
        kind = DigestType.parse(digest_type)
    except ValueError as exc:
        raise InvalidOptionError(str(exc)) from None
    return LedgerMetadata(
        ledger_id=ledger_id, ensemble_size=ensemble_size, write_quorum=write_quorum, ack_quorum=ack_quorum,
        state=LedgerState.OPEN, last_entry_id=-1, length=0,
        fragments=(Fragment(0, tuple(ensemble)),), digest_type=kind, password=bytes(password),
        ctime_ms=ctime_ms, custom_metadata=dict(custom or {}), compression=compression)


def _refuse_unless_open(md: LedgerMetadata, action: str, *, allow_in_recovery: bool = False) -> None:
    if md.state is LedgerState.CLOSED:
        raise LedgerClosedError(f"ledger {md.ledger_id} is closed: cannot {action}; write to a new ledger")
    if md.state is LedgerState.IN_RECOVERY and not allow_in_recovery:
        raise LedgerInRecoveryError(
            f"ledger {md.ledger_id} is being recovered by another client: cannot {action}; this writer is "
            "fenced out, write to a new ledger")


def replaced_ensemble(ensemble: Sequence[str], replacements: Mapping[int, str]) -> tuple[str, ...]:
    """`ensemble` with the bookies at the given indices replaced; refuses bad indices and duplicates."""
    new = list(ensemble)
    for index, bookie in replacements.items():
        if not 0 <= index < len(new):
            raise ValueError(f"ensemble index {index} out of range 0..{len(new) - 1}")
        new[index] = bookie
    if len(set(new)) != len(new):
        raise ValueError(f"replacement bookies {dict(replacements)} would put a bookie twice in {new}")
    return tuple(new)


def with_ensemble_change(md: LedgerMetadata, first_entry_id: int, replacements: Mapping[int, str], *,
                         recovery: bool = False) -> LedgerMetadata:
    """R9: a new fragment from first_entry_id on, the last ensemble with `replacements` (index -> bookie).

    If the last fragment already starts at first_entry_id (nothing written to it yet) it is replaced in place,
    so first entry ids stay strictly increasing (R4). Refused unless the ledger is OPEN (also IN_RECOVERY when
    `recovery` is set: the recoverer's local ensemble changes, R19).
    """
    _refuse_unless_open(md, "change its ensemble", allow_in_recovery=recovery)
    if not replacements:
        raise ValueError("an ensemble change needs at least one replacement")
    last = md.last_fragment
    if first_entry_id < last.first_entry_id:
        raise ValueError(
            f"new fragment would start at entry {first_entry_id}, before the last fragment's first entry "
            f"{last.first_entry_id} (R4)")
    for bookie in replacements.values():
        if bookie in last.ensemble:
            raise ValueError(f"replacement bookie {bookie} is already in the ensemble {list(last.ensemble)}")
    fragment = Fragment(first_entry_id, replaced_ensemble(last.ensemble, replacements))
    kept = md.fragments[:-1] if first_entry_id == last.first_entry_id else md.fragments
    return dataclasses.replace(md, fragments=kept + (fragment,))


def to_in_recovery(md: LedgerMetadata) -> LedgerMetadata:
    """R14: OPEN -> IN_RECOVERY. Returns `md` itself (no write needed) when already IN_RECOVERY or CLOSED."""
    if md.state is not LedgerState.OPEN:
        return md
    return dataclasses.replace(md, state=LedgerState.IN_RECOVERY)


def _check_end(last_entry_id: int, length: int) -> None:
    if last_entry_id < -1:
        raise ValueError(f"last entry id {last_entry_id} < -1")
    if length < 0 or (last_entry_id == -1 and length != 0):
        raise ValueError(f"length {length} does not fit last entry id {last_entry_id}")


def closed(md: LedgerMetadata, last_entry_id: int, length: int) -> LedgerMetadata:
    """R10: the writer's close: OPEN -> CLOSED with last entry id = the writer's LAC and the ledger length."""
    _refuse_unless_open(md, "close it as its writer")
    _check_end(last_entry_id, length)
    return dataclasses.replace(md, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)


def close_after_recovery(md: LedgerMetadata, last_entry_id: int, length: int,
                         fragments_changed_during_recovery: Sequence[Fragment] = ()) -> LedgerMetadata:
    """R19/R20: the recoverer's single closing CAS: CLOSED, last entry id, length, and the fragments it made.

    `fragments_changed_during_recovery` are the fragments the recoverer created locally while writing back
    (in order); each replaces the last fragment when it starts at the same entry, else is appended.
    `md` is the stored metadata (IN_RECOVERY, or OPEN if the caller skipped R14); CLOSED is refused: adopt it.
    """
    if md.state is LedgerState.CLOSED:
        raise LedgerClosedError(
            f"ledger {md.ledger_id} was already closed (last entry {md.last_entry_id}): adopt the stored one")
    _check_end(last_entry_id, length)
    fragments = md.fragments
    for fragment in fragments_changed_during_recovery:
        last = fragments[-1]
        if fragment.first_entry_id == last.first_entry_id:
            fragments = fragments[:-1] + (fragment,)
        elif fragment.first_entry_id > last.first_entry_id:
            fragments = fragments + (fragment,)
        else:
            raise ValueError(
                f"fragment starting at {fragment.first_entry_id} precedes the last stored fragment "
                f"({last.first_entry_id}) (R4)")
    return dataclasses.replace(md, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length,
                               fragments=fragments)


class ConflictDecision(enum.Enum):
    """What to do after a metadata CAS lost, given the stored metadata re-read."""

    RETRY = "retry"              # re-apply the transform to the stored metadata and CAS again
    SUCCESS = "success"          # the stored metadata already says what we wanted
    ERROR = "error"              # give up with an error (see the deciding function)
    FAIL_FENCED = "fail_fenced"  # the ledger is being recovered: fail every pending add (LedgerFencedError)
    FAIL_CLOSED = "fail_closed"  # the ledger is closed: fail every pending add (LedgerClosedError)
    ADOPT = "adopt"              # another recoverer closed it: use the stored metadata, never overwrite it
    OVERWRITE = "overwrite"      # a known bug (RecoveryRules.adopt_stored_close off): write my close over it


def decide_writer_close_conflict(stored: LedgerMetadata, my_last_entry_id: int) -> ConflictDecision:
    """R10: OPEN -> RETRY; IN_RECOVERY -> ERROR; CLOSED at my last entry -> SUCCESS; other CLOSED -> ERROR."""
    if stored.state is LedgerState.OPEN:
        return ConflictDecision.RETRY
    if stored.state is LedgerState.IN_RECOVERY:
        return ConflictDecision.ERROR
    if stored.last_entry_id == my_last_entry_id:
        return ConflictDecision.SUCCESS
    return ConflictDecision.ERROR


def decide_ensemble_change_conflict(stored: LedgerMetadata,
                                    my_fragment: Fragment | None = None) -> ConflictDecision:
    """R9: OPEN -> RETRY (or SUCCESS when the stored last fragment is already mine); IN_RECOVERY ->
    FAIL_FENCED; CLOSED -> FAIL_CLOSED."""
    if stored.state is LedgerState.IN_RECOVERY:
        return ConflictDecision.FAIL_FENCED
    if stored.state is LedgerState.CLOSED:
        return ConflictDecision.FAIL_CLOSED
    if my_fragment is not None and stored.last_fragment == my_fragment:
        return ConflictDecision.SUCCESS
    return ConflictDecision.RETRY


def decide_recovery_close_conflict(stored: LedgerMetadata, adopt_stored_close: bool = True) -> ConflictDecision:
    """R20: CLOSED -> ADOPT the stored result; IN_RECOVERY -> RETRY (re-apply close_after_recovery);
    OPEN -> ERROR (someone undid IN_RECOVERY: recovery must restart). `adopt_stored_close` is the rule
    (`RecoveryRules.adopt_stored_close`); off, a known bug, CLOSED -> OVERWRITE: the recoverer CASes its own
    close over the stored one on the version it re-read."""
    if stored.state is LedgerState.CLOSED:
        return ConflictDecision.ADOPT if adopt_stored_close else ConflictDecision.OVERWRITE
    if stored.state is LedgerState.IN_RECOVERY:
        return ConflictDecision.RETRY
    return ConflictDecision.ERROR


def conflict_error(decision: ConflictDecision, stored: LedgerMetadata,
                   my_last_entry_id: int | None = None) -> LedgerFencedError | LedgerClosedError:
    """The typed error for an ERROR / FAIL_* decision, with a message saying what happened."""
    lid = stored.ledger_id
    if stored.state is LedgerState.CLOSED:
        mine = "" if my_last_entry_id is None else f", this writer had last entry {my_last_entry_id}"
        return LedgerClosedError(
            f"ledger {lid} was closed by another client at last entry {stored.last_entry_id}{mine}: "
            "adds above it are lost to readers; write to a new ledger")
    if stored.state is LedgerState.IN_RECOVERY:
        return LedgerInRecoveryError()
    return LedgerFencedError(f"ledger {lid} metadata changed unexpectedly ({decision.value}); reopen it")
