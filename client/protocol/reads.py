"""What a reader may read and whom it asks (R11, R13).

Mirrors the read-side checks of BookKeeper's LedgerHandle / ReadOnlyLedgerHandle (reads bounded by the LAC
of an open ledger or the last entry id of a closed one) and the bookie ordering of PendingReadOp with
`reorderReadSequenceEnabled` (the write set in order, bookies known to be failing tried last). Also
`EntryReadAttempt`, the "try each bookie of the write set in turn" state of one entry read.

`ReaderRules` are the reader's protocol switches (R7, R11, R12), taken by the functions that decide them
(`read_bound`, `check_read_range`, `lac_read_fences`, `received_entry`); the real reader (client.reader,
client.ranges_reader, client.ledger_handle) and the simulated one pass theirs. Anything but the defaults
is a known bug, injected only by the simulation's mutants (tests.sim.mutations) and their tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator

from bkledger.client.errors import (
    BadPasswordError,
    BKError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadBeyondLastEntryError,
    error_for_status,
)
from bkledger.client.protocol.digest import Buffer, DigestManager, Entry, parse_entry, unpack_entry
from bkledger.client.protocol.metadata import Fragment, LedgerMetadata, LedgerState
from bkledger.client.protocol.status import StatusCode
from bkledger.client.protocol.write_set import write_set

#: The bound of an open ledger a reader without R11 reads up to: whatever its bookies hold.
UNBOUNDED = 2**63 - 1


@dataclasses.dataclass(frozen=True)
class ReaderRules:
    """Protocol switches of a reader. Anything but the defaults is a known bug, for simulation tests only."""

    lac_bound: bool = True        # R11: an open ledger is read up to its LAC (False: whatever bookies hold)
    open_never_fences: bool = True  # R12: the LAC reads of an open without recovery carry no fence flag
    verify_digest: bool = True    # R7: a received copy is returned only once its digest verified


DEFAULT_READER_RULES = ReaderRules()


def read_bound(md: LedgerMetadata, lac: int, rules: ReaderRules = DEFAULT_READER_RULES) -> int:
    """R11: the highest entry id a reader may return: the last entry id when CLOSED, else the LAC."""
    if md.state is LedgerState.CLOSED:
        return md.last_entry_id
    return lac if rules.lac_bound else UNBOUNDED


def check_read_range(md: LedgerMetadata, lac: int, first_entry_id: int, last_entry_id: int,
                     rules: ReaderRules = DEFAULT_READER_RULES) -> None:
    """R11: refuse a range that reaches above read_bound (ReadBeyondLastEntryError) or is malformed."""
    if first_entry_id < 0 or last_entry_id < first_entry_id:
        raise ValueError(f"bad entry range [{first_entry_id}, {last_entry_id}]: need 0 <= first <= last")
    bound = read_bound(md, lac, rules)
    if last_entry_id > bound:
        what = "last entry id" if md.state is LedgerState.CLOSED else "last add confirmed (LAC)"
        raise ReadBeyondLastEntryError(
            f"ledger {md.ledger_id}: entry {last_entry_id} is above the {what} {bound}; read up to {bound}"
            + ("" if md.state is LedgerState.CLOSED else " or refresh the LAC first"))


def lac_read_fences(rules: ReaderRules = DEFAULT_READER_RULES) -> bool:
    """R12: whether a reader's LAC reads (the open without recovery, a LAC refresh) carry the fence flag:
    never; only recovery fences (R14)."""
    return not rules.open_never_fences


def received_entry(digest: DigestManager, ledger_id: int, entry_id: int | None, body: Buffer,
                   rules: ReaderRules = DEFAULT_READER_RULES) -> Entry:
    """R7: a copy a bookie sent, as the reader may use it: verified by `unpack_entry` (DigestMismatchError
    on a wrong ledger or entry id, a truncated body or a bad digest; read another replica). With
    `rules.verify_digest` off (a known bug: the no-digest-check mutant) its fields are taken unchecked."""
    if rules.verify_digest:
        return unpack_entry(digest, ledger_id, entry_id, body)
    return parse_entry(digest, body)


def read_order(md: LedgerMetadata, entry_id: int, slow: Collection[str] = ()) -> tuple[str, ...]:
    """R13: the bookies to try for entry_id: its write set in order, bookies in `slow` moved last."""
    ensemble = md.fragment_for(entry_id).ensemble
    members = [ensemble[i] for i in write_set(entry_id, md.ensemble_size, md.write_quorum)]
    if not slow:
        return tuple(members)
    return tuple([b for b in members if b not in slow] + [b for b in members if b in slow])


def fragment_ranges(md: LedgerMetadata, first_entry_id: int,
                    last_entry_id: int) -> Iterator[tuple[int, int, Fragment]]:
    """Split [first_entry_id, last_entry_id] by fragment: (first, last, fragment) for each piece, in order."""
    fragments = md.fragments
    for pos, fragment in enumerate(fragments):
        end = fragments[pos + 1].first_entry_id - 1 if pos + 1 < len(fragments) else last_entry_id
        lo = max(first_entry_id, fragment.first_entry_id)
        hi = min(last_entry_id, end)
        if lo <= hi:
            yield lo, hi, fragment


class EntryReadAttempt:
    """R13: read one entry by trying the bookies of its write set in turn; fail only if none has it."""

    def __init__(self, ledger_id: int, entry_id: int, bookies: tuple[str, ...]) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self._bookies = bookies
        self._pos = 0
        self._errors: dict[str, int] = {}

    def next_bookie(self) -> str | None:
        """The next bookie to ask, or None when every bookie of the write set has been asked."""
        if self._pos >= len(self._bookies):
            return None
        bookie = self._bookies[self._pos]
        self._pos += 1
        return bookie

    def on_failure(self, bookie_id: str, status: int) -> str | None:
        """That bookie gave no valid copy; returns the next bookie to try, or None if none is left."""
        self._errors[bookie_id] = status
        return self.next_bookie()

    def error(self) -> BKError:
        """The error once every bookie failed: NoSuchEntry/NoSuchLedger if all said so, else the worst one."""
        return read_error(self.ledger_id, self.entry_id, self._bookies, self._errors)


def read_error(ledger_id: int, entry_id: int, bookies: Collection[str], errors: dict[str, int]) -> BKError:
    """The error of a read every bookie failed (`errors`: bookie -> status): NoSuchEntry/NoSuchLedger if
    all said so, else the worst one (R13)."""
    what = f"ledger {ledger_id} entry {entry_id}, bookies {list(bookies)}"
    statuses = set(errors.values())
    if statuses == {StatusCode.ENOLEDGER}:
        return NoSuchLedgerError(f"{NoSuchLedgerError.default_message} ({what})")
    if statuses and statuses <= {StatusCode.ENOENTRY, StatusCode.ENOLEDGER}:
        return NoSuchEntryError(f"{NoSuchEntryError.default_message} ({what})")
    if StatusCode.EUA in statuses:
        return BadPasswordError()
    for status in statuses:
        if status not in (StatusCode.ENOENTRY, StatusCode.ENOLEDGER):
            return error_for_status(status, what=what)
    return NoSuchEntryError(f"{NoSuchEntryError.default_message} ({what})")


def held_run(md: LedgerMetadata, bookie_id: str, first: int, last: int, cap: int) -> int:
    """The last entry of the run from `first` (at most `cap` entries, not past `last` or first's fragment)
    that `bookie_id` holds: a read of many ledgers asks one bookie for each ledger's run (ReadRanges).
    With E == Qw every bookie of the fragment holds every entry; striped (E > Qw), a run of Qw at most."""
    fragment = md.fragment_for(first)
    following = [f.first_entry_id for f in md.fragments if f.first_entry_id > fragment.first_entry_id]
    end = min(last, first + cap - 1, following[0] - 1 if following else last)
    if md.ensemble_size == md.write_quorum:
        return end
    index = fragment.ensemble.index(bookie_id)
    entry = first
    while entry < end and index in write_set(entry + 1, md.ensemble_size, md.write_quorum):
        entry += 1
    return entry
