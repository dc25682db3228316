"""Ledger recovery as a pure state machine (R15-R20): fence, find the end, write back, close.

Mirrors BookKeeper's LedgerRecoveryOp + ReadLastConfirmedOp + the recovery reads of PendingReadOp. The
driver has already CAS'd the metadata to IN_RECOVERY (R14) and hands the stored metadata in.

1. Fencing (R15, R16): a fencing LAC read goes to every bookie of the last fragment. Fencing is complete
   as soon as the bookies that answered cover the ensemble (no ack quorum left unfenced); slower bookies
   are never waited for. Error answers count as "not responded".
2. Reading forward (R17, R18): from max(highest LAC returned, last fragment's first entry - 1). The entry at
   that start point is read first only to learn the ledger length there. Each following entry is read from
   its whole write set with the fence flag and classified as soon as a threshold is reached: positive (one
   copy whose digest verifies), negative (Qw - Qa + 1 explicit NoSuchEntry / NoSuchLedger), unknown (all
   answered, neither). Unknown aborts recovery without closing; the first negative ends the ledger at the
   entry before it. Several entries may be read at once (`read_window`); outcomes are used in entry order.
3. Write-back (R19): each positive entry is written, byte for byte, to its whole write set with the
   recovery flag through a PendingAdds pipeline; bookie failures become ensemble changes kept locally.
4. Close (R20): once every recovered entry is back on an ack quorum, a single CloseLedger action carries the
   last entry id, the length and the fragments made during recovery, for one closing CAS
   (`transforms.close_after_recovery`; on conflict `transforms.decide_recovery_close_conflict`).

`RecoveryRules` holds switches that deliberately break the protocol, so a simulator can show it catches the
resulting bugs. Production code uses DEFAULT_RULES.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

from bkledger.client.errors import BadPasswordError, BKError, DigestMismatchError, LedgerRecoveryError
from bkledger.client.protocol.digest import DigestManager, unpack_entry
from bkledger.client.protocol.metadata import Fragment, LedgerMetadata, LedgerState
from bkledger.client.protocol.pending_adds import (
    AddAction,
    CompleteAdds,
    FailAdds,
    NeedEnsembleChange,
    PendingAdds,
    Resend,
    SendAdd,
)
from bkledger.client.protocol.quorum import coverage_threshold, covered
from bkledger.client.protocol.status import NEGATIVE_STATUSES, StatusCode
from bkledger.client.protocol.transforms import with_ensemble_change
from bkledger.client.protocol.write_set import write_set


@dataclasses.dataclass(frozen=True)
class RecoveryRules:
    """Protocol switches. Anything but the defaults is a known bug, for simulation tests only."""

    fence_reads: bool = True           # R18: recovery reads carry the fence flag (BookKeeper PR #2616)
    fencing_coverage: bool = True      # R16: fencing waits for quorum coverage (False: first answer suffices)
    unknown_as_negative: bool = False  # R18: an unknown answer is never a negative one
    write_back: bool = True            # R19: recovered entries are written back before the close
    start_at_fragment: bool = True     # R17: start no lower than the last fragment's first entry - 1
    adopt_stored_close: bool = True    # R20: a close that lost to another recoverer's adopts the stored one
    #                                    (False: overwrites it, `transforms.decide_recovery_close_conflict`)


DEFAULT_RULES = RecoveryRules()
#: Fencing answers that prove the bookie is fenced (ENOENTRY/ENOLEDGER: fenced, holds no entry; EFENCED:
#: already fenced). Every other answer counts as "not responded".
FENCED_STATUSES = frozenset({StatusCode.EOK, StatusCode.ENOENTRY, StatusCode.ENOLEDGER, StatusCode.EFENCED})


@dataclasses.dataclass(frozen=True)
class SendFenceRead:
    """Send a fencing LAC read (fence flag, master key) to the bookie at `index` of the last fragment."""

    index: int
    bookie_id: str


@dataclasses.dataclass(frozen=True)
class SendRecoveryRead:
    """Read entry_id from the bookie at `index` of the entry's fragment (with the fence flag if `fence`)."""

    entry_id: int
    index: int
    bookie_id: str
    fence: bool


@dataclasses.dataclass(frozen=True)
class WriteBack:
    """Write the packaged entry `body` with the recovery flag to these indices/bookies (R19)."""

    entry_id: int
    body: bytes
    indices: tuple[int, ...]
    bookie_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class CloseLedger:
    """Everything is recovered: CAS the metadata to CLOSED with these values (R20)."""

    last_entry_id: int
    length: int
    new_fragments: tuple[Fragment, ...]


@dataclasses.dataclass(frozen=True)
class RecoveryFailed:
    """Recovery stopped without closing the ledger; it may be retried (R18)."""

    error: BKError


RecoveryAction = (SendFenceRead | SendRecoveryRead | WriteBack | NeedEnsembleChange | CloseLedger
                  | RecoveryFailed)


class Phase(enum.Enum):
    FENCING = "fencing"
    READING = "reading"
    WRITING = "writing"    # the end is known; waiting for write-backs
    CLOSING = "closing"    # CloseLedger was emitted
    FAILED = "failed"


class Outcome(enum.Enum):
    POSITIVE = "positive"
    NEGATIVE = "negative"
    UNKNOWN = "unknown"


class _EntryRead:
    __slots__ = ("members", "responded", "negatives", "outcome", "body", "length")

    def __init__(self, members: tuple[int, ...]) -> None:
        self.members = members
        self.responded: set[int] = set()
        self.negatives: set[int] = set()
        self.outcome: Outcome | None = None
        self.body = b""
        self.length = 0


class LedgerRecovery:
    """Recovers one ledger; create it from the stored IN_RECOVERY metadata, then call start()."""

    def __init__(self, md: LedgerMetadata, digest: DigestManager, rules: RecoveryRules = DEFAULT_RULES,
                 read_window: int = 8) -> None:
        if md.state is LedgerState.CLOSED:
            raise ValueError(f"ledger {md.ledger_id} is closed: use its metadata, nothing to recover (R14)")
        if read_window < 1:
            raise ValueError("read_window must be at least 1")
        self._md = md
        self._local = md
        self._digest = digest
        self._rules = rules
        self._window = read_window
        self._e, self._qw, self._qa = md.ensemble_size, md.write_quorum, md.ack_quorum
        self._fence_ensemble = md.last_fragment.ensemble
        self._fenced: set[int] = set()
        self._fence_failed: set[int] = set()
        self._max_lac = -1
        self.phase = Phase.FENCING
        self.start_entry_id = -1
        self._cursor = 0
        self._next_read = 0
        self._reads: dict[int, _EntryRead] = {}
        self._last_entry_id = -1
        self._length = 0
        self._writer: PendingAdds | None = None
        self._bodies: dict[int, bytes] = {}
        self._new_fragments: list[Fragment] = []

    # ---- views ------------------------------------------------------------------------------------
    @property
    def local_metadata(self) -> LedgerMetadata:
        """The metadata with the ensemble changes made during write-back (not stored until the close)."""
        return self._local

    @property
    def last_entry_id(self) -> int:
        return self._last_entry_id

    @property
    def fenced_indices(self) -> frozenset[int]:
        return frozenset(self._fenced)

    # ---- phase 1: fencing ---------------------------------------------------------------------------
    def start(self) -> list[RecoveryAction]:
        return [SendFenceRead(i, b) for i, b in enumerate(self._fence_ensemble)]

    def on_fence_response(self, index: int, status: int, lac: int = -1) -> list[RecoveryAction]:
        """Answer of the fencing LAC read to bookie `index`: a FENCED_STATUSES answer means fenced, with the
        bookie's LAC (-1 if it has none); any other status counts as not responded (R16)."""
        if self.phase is not Phase.FENCING or index in self._fenced or index in self._fence_failed:
            return []
        if status == StatusCode.EUA:
            return self._fail(BadPasswordError(
                f"bookie {self._fence_ensemble[index]} refused to fence ledger {self._md.ledger_id}: wrong "
                "password; open the ledger with the password used to create it"))
        if status in FENCED_STATUSES:
            self._fenced.add(index)
            self._max_lac = max(self._max_lac, lac)
        else:
            self._fence_failed.add(index)
        if self._fencing_complete():
            return self._begin_reading()
        if len(self._fenced) + len(self._fence_failed) == self._e:
            return self._fail(LedgerRecoveryError(
                f"could not fence ledger {self._md.ledger_id}: only bookies {sorted(self._fenced)} of "
                f"{list(self._fence_ensemble)} answered, which leaves an ack quorum unfenced (R16); bring "
                "bookies back and retry the recovery"))
        return []

    def _fencing_complete(self) -> bool:
        if not self._rules.fencing_coverage:
            return bool(self._fenced)
        return covered(self._fenced, self._e, self._qw, self._qa)

    # ---- phase 2: reading forward -------------------------------------------------------------------
    def _begin_reading(self) -> list[RecoveryAction]:
        self.phase = Phase.READING
        start = self._max_lac
        if self._rules.start_at_fragment:
            start = max(start, self._md.last_fragment.first_entry_id - 1)
        self.start_entry_id = start
        self._last_entry_id = start
        self._writer = PendingAdds(self._local.last_fragment.ensemble, self._qw, self._qa, start,
                                   recovery=True)
        # The start entry itself is read (when there is one) only to learn the ledger length there.
        self._cursor = self._next_read = max(start, 0)
        return list(self._issue_reads())

    def _issue_reads(self) -> list[RecoveryAction]:
        actions: list[RecoveryAction] = []
        fence = self._rules.fence_reads
        while self._next_read < self._cursor + self._window:
            entry_id = self._next_read
            self._next_read += 1
            members = write_set(entry_id, self._e, self._qw)
            ensemble = self._md.fragment_for(entry_id).ensemble
            self._reads[entry_id] = _EntryRead(members)
            actions.extend(SendRecoveryRead(entry_id, i, ensemble[i], fence) for i in members)
        return actions

    def on_read_response(self, entry_id: int, index: int, status: int,
                         body: bytes | None = None) -> list[RecoveryAction]:
        """Answer of a recovery read: EOK with the packaged entry, or an error status (R18)."""
        if self.phase is not Phase.READING:
            return []
        read = self._reads.get(entry_id)
        if read is None or read.outcome is not None or index not in read.members or index in read.responded:
            return []
        read.responded.add(index)
        if status == StatusCode.EOK and body is not None:
            try:
                entry = unpack_entry(self._digest, self._md.ledger_id, entry_id, body)
            except DigestMismatchError:
                self._classify_unknown(read, index)
            else:
                read.outcome = Outcome.POSITIVE
                read.body = bytes(body)
                read.length = entry.length
        elif status in NEGATIVE_STATUSES:
            read.negatives.add(index)
        else:
            self._classify_unknown(read, index)
        if read.outcome is None:
            if len(read.negatives) >= coverage_threshold(self._qw, self._qa):
                read.outcome = Outcome.NEGATIVE
            elif len(read.responded) == len(read.members):
                read.outcome = Outcome.UNKNOWN
        return self._advance() if read.outcome is not None else []

    def _classify_unknown(self, read: _EntryRead, index: int) -> None:
        if self._rules.unknown_as_negative:
            read.negatives.add(index)

    def _advance(self) -> list[RecoveryAction]:
        actions: list[RecoveryAction] = []
        while self.phase is Phase.READING:
            read = self._reads.get(self._cursor)
            if read is None or read.outcome is None:
                break
            entry_id = self._cursor
            if read.outcome is Outcome.UNKNOWN:
                return actions + self._fail(self._unknown_error(entry_id, read))
            if entry_id == self.start_entry_id:
                if read.outcome is Outcome.NEGATIVE:
                    return actions + self._fail(LedgerRecoveryError(
                        f"ledger {self._md.ledger_id}: bookies {sorted(read.negatives)} report entry "
                        f"{entry_id} missing although it is confirmed (LAC); a bookie lost acknowledged "
                        "data (R22); "
                        "recovery stopped without closing"))
                self._length = read.length
            elif read.outcome is Outcome.POSITIVE:
                self._last_entry_id = entry_id
                self._length = read.length
                actions.extend(self._write_back(entry_id, read.body))
            else:
                self._reads.clear()
                self.phase = Phase.WRITING
                return actions + self._maybe_close()
            del self._reads[entry_id]
            self._cursor += 1
            actions.extend(self._issue_reads())
        return actions

    def _unknown_error(self, entry_id: int, read: _EntryRead) -> LedgerRecoveryError:
        return LedgerRecoveryError(
            f"ledger {self._md.ledger_id}: cannot tell whether entry {entry_id} exists (bookies "
            f"{sorted(read.members)} answered, only {sorted(read.negatives)} said it is missing; "
            f"{coverage_threshold(self._qw, self._qa)} needed); recovery stopped without closing: bring the "
            "bookies back and retry")

    # ---- phase 3: write-back --------------------------------------------------------------------------
    def _write_back(self, entry_id: int, body: bytes) -> list[RecoveryAction]:
        if not self._rules.write_back:
            return []
        assert self._writer is not None
        send = self._writer.on_add()
        if send.entry_id != entry_id:
            raise AssertionError(f"write-back of entry {entry_id} got id {send.entry_id}")
        self._bodies[entry_id] = body
        return [self._to_write_back(send)]

    def _to_write_back(self, action: SendAdd | Resend) -> WriteBack:
        ensemble = self._local.last_fragment.ensemble
        return WriteBack(action.entry_id, self._bodies[action.entry_id], action.indices,
                         tuple(ensemble[i] for i in action.indices))

    def on_write_ack(self, entry_id: int, bookie_id: str) -> list[RecoveryAction]:
        """`bookie_id` acknowledged a write-back. Bookies replaced meanwhile are ignored."""
        if self._writer is None or self.phase not in (Phase.READING, Phase.WRITING):
            return []
        return self._translate(self._writer.on_ack_from(entry_id, bookie_id))

    def on_write_error(self, entry_id: int, bookie_id: str, status: int) -> list[RecoveryAction]:
        """`bookie_id` failed a write-back: it will be replaced locally (R19)."""
        if self._writer is None or self.phase not in (Phase.READING, Phase.WRITING):
            return []
        return self._translate(self._writer.on_error_from(entry_id, bookie_id, status))

    def on_bookie_failed(self, bookie_id: str) -> list[RecoveryAction]:
        """A write-back bookie is gone (connection lost)."""
        if self._writer is None or self.phase not in (Phase.READING, Phase.WRITING):
            return []
        index = self._writer.index_of(bookie_id)
        return [] if index is None else self._translate(self._writer.on_bookie_failed(index))

    def on_ensemble_changed(self, new_ensemble: Sequence[str]) -> list[RecoveryAction]:
        """The driver chose replacements after NeedEnsembleChange; kept locally until the close (R19)."""
        assert self._writer is not None
        old = self._local.last_fragment.ensemble
        replacements = {i: b for i, b in enumerate(new_ensemble) if b != old[i]}
        first = self._writer.last_add_confirmed + 1
        self._local = with_ensemble_change(self._local, first, replacements, recovery=True)
        fragment = self._local.last_fragment
        if self._new_fragments and self._new_fragments[-1].first_entry_id == fragment.first_entry_id:
            self._new_fragments[-1] = fragment
        else:
            self._new_fragments.append(fragment)
        return self._translate(self._writer.on_ensemble_changed(new_ensemble, first))

    def _translate(self, actions: list[AddAction]) -> list[RecoveryAction]:
        out: list[RecoveryAction] = []
        for action in actions:
            if isinstance(action, Resend | SendAdd):
                out.append(self._to_write_back(action))
            elif isinstance(action, NeedEnsembleChange):
                out.append(action)
            elif isinstance(action, CompleteAdds):
                for entry_id in action.entry_ids:
                    self._bodies.pop(entry_id, None)
            elif isinstance(action, FailAdds):
                return out + self._fail(LedgerRecoveryError(
                    f"ledger {self._md.ledger_id}: writing back recovered entries failed ({action.error}); "
                    "the ledger was not closed; retry the recovery"))
        if self.phase is Phase.WRITING:
            out.extend(self._maybe_close())
        return out

    # ---- phase 4: close -------------------------------------------------------------------------------
    def _maybe_close(self) -> list[RecoveryAction]:
        writer = self._writer
        assert writer is not None
        behind = writer.last_add_confirmed < self._last_entry_id or writer.changing_ensemble
        if self._rules.write_back and behind:
            return []
        self.phase = Phase.CLOSING
        return [CloseLedger(self._last_entry_id, self._length, tuple(self._new_fragments))]

    def _fail(self, error: BKError) -> list[RecoveryAction]:
        self.phase = Phase.FAILED
        self._reads.clear()
        self._bodies.clear()
        return [RecoveryFailed(error)]
