"""The writer's add pipeline as a pure state machine (R5, R6, R9, R21).

Mirrors BookKeeper's PendingAddOp queue inside LedgerHandle: every add gets the next entry id and is sent
to its write set (R5); it completes once Qa bookies of its write set acknowledged it and every lower entry
completed (R6), which advances the LAC (it only grows). A bookie failure asks for an ensemble change (R9):
while it runs no add completes; once the new ensemble is known, the acks of replaced bookies are dropped
and each pending add is resent to the replacement bookies only. A failure of an entry the other bookies
already completed (Qa < Qw) counts too for a writer (BookKeeper's notifyWriteFailed). When no bookie is free, the adds
go on without the failed ones while every write set keeps Qa bookies. EFENCED never triggers an ensemble change:
it fails every pending add with LedgerFencedError, "maybe written" (R21).

Events are method calls; the returned actions are small frozen dataclasses the driver executes. Bookies
are named by ensemble index; replies are best fed by bookie id (`on_ack_from`, `on_error_from`), which maps
them through the current ensemble: a bookie that was replaced has no index any more, and its late replies
must not be credited to (or blamed on) its replacement.
"""

from __future__ import annotations

import dataclasses
import itertools
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bkledger.client.errors import BadPasswordError, BKError, LedgerFencedError
from bkledger.client.protocol.status import StatusCode
from bkledger.client.protocol.write_set import all_write_sets, write_set

if TYPE_CHECKING:
    import numpy as np


@dataclasses.dataclass(frozen=True)
class SendAdds:
    """Send entries first_entry_id .. first_entry_id + count - 1, each to its write set minus the
    ensemble indices in `skip` (bookies known to have failed; usually none)."""

    first_entry_id: int
    count: int
    skip: frozenset[int]
    recovery: bool = False

    @property
    def entry_ids(self) -> range:
        return range(self.first_entry_id, self.first_entry_id + self.count)

    def targets(self, ensemble_size: int, write_quorum: int) -> list[tuple[int, tuple[int, ...]]]:
        """(entry id, ensemble indices to send it to) for each entry."""
        skip = self.skip
        return [(e, tuple(i for i in write_set(e, ensemble_size, write_quorum) if i not in skip))
                for e in self.entry_ids]


@dataclasses.dataclass(frozen=True)
class SendAdd:
    """Send entry `entry_id` to these ensemble indices (its write set minus bookies known to have failed)."""

    entry_id: int
    indices: tuple[int, ...]
    recovery: bool = False


@dataclasses.dataclass(frozen=True)
class CompleteAdds:
    """Entries first_entry_id..last_add_confirmed are acknowledged, in order; LAC = last_add_confirmed."""

    first_entry_id: int
    last_add_confirmed: int

    @property
    def entry_ids(self) -> range:
        return range(self.first_entry_id, self.last_add_confirmed + 1)


@dataclasses.dataclass(frozen=True)
class NeedEnsembleChange:
    """Replace the bookies at `failed_indices` in a new fragment starting at `first_entry_id` (LAC + 1)."""

    failed_indices: tuple[int, ...]
    first_entry_id: int


@dataclasses.dataclass(frozen=True)
class Resend:
    """After an ensemble change: send pending entry `entry_id` again, to the replacement bookies only."""

    entry_id: int
    indices: tuple[int, ...]
    recovery: bool = False


@dataclasses.dataclass(frozen=True)
class FailAdds:
    """These pending adds failed with `error`; the pipeline accepts no more adds."""

    entry_ids: tuple[int, ...]
    error: BKError


AddAction = SendAdd | CompleteAdds | NeedEnsembleChange | Resend | FailAdds

#: A batched ack of at least this many entries, or a drain over at least this many pending adds, is done
#: with numpy over the masks' buffer (no Python int per entry); fewer are cheaper one by one (two acks
#: of n entries, E=3 Qw=3 Qa=2: 16 us one by one against 18 us with numpy at n=71, 25 against 21 at 128).
VECTOR_MIN = 128

#: Masks are kept in an array of unsigned 64-bit ints up to this ensemble size, in a list above it.
_ARRAY_ENSEMBLE_MAX = 64

#: Statuses that fail the whole pipeline instead of replacing the bookie.
_FATAL: dict[int, type[BKError]] = {StatusCode.EFENCED: LedgerFencedError, StatusCode.EUA: BadPasswordError}
SQUATTED_ADD = ("a bookie refused the master key this ledger was created with (EUA): another client claimed the "
                "ledger id on that bookie before its first add (squatted); create a new ledger")


class PendingAdds:
    """Pending adds of one ledger handle (or of a recovery's write-back when `recovery` is set)."""

    def __init__(self, ensemble: Sequence[str], write_quorum: int, ack_quorum: int,
                 last_add_confirmed: int = -1, *, recovery: bool = False, in_order: bool = True) -> None:
        if not 1 <= ack_quorum <= write_quorum <= len(ensemble):
            raise ValueError(f"need E={len(ensemble)} >= Qw={write_quorum} >= Qa={ack_quorum} >= 1")
        self._ensemble = tuple(ensemble)
        self._index = {b: i for i, b in enumerate(self._ensemble)}
        self._e = len(ensemble)
        self._qw = write_quorum
        self._write_sets = all_write_sets(self._e, write_quorum)   # by entry_id mod E
        self._qa = ack_quorum
        self._lac = last_add_confirmed
        self._next = last_add_confirmed + 1
        # The pending adds are always the entries LAC + 1, LAC + 2, ... (they complete in order; a failure
        # fails them all): one bit mask each of the ensemble indices that acked it, oldest first.
        self._masks: array[int] | list[int] = array("Q") if self._e <= _ARRAY_ENSEMBLE_MAX else []
        self._failed: set[int] = set()
        self._changing = False
        self._error: BKError | None = None
        self._recovery = recovery
        self._in_order = in_order      # R6 (False: a known bug, for the simulation's mutant only)

    # ---- read-only views ------------------------------------------------------------------
    @property
    def last_add_confirmed(self) -> int:
        return self._lac

    @property
    def next_entry_id(self) -> int:
        return self._next

    @property
    def ensemble(self) -> tuple[str, ...]:
        return self._ensemble

    @property
    def changing_ensemble(self) -> bool:
        return self._changing

    @property
    def failed_indices(self) -> frozenset[int]:
        return frozenset(self._failed)

    @property
    def error(self) -> BKError | None:
        return self._error

    @property
    def pending_entry_ids(self) -> tuple[int, ...]:
        first = self._lac + 1
        return tuple(range(first, first + len(self._masks)))

    def acked_indices(self, entry_id: int) -> frozenset[int]:
        mask = self._mask_of(entry_id) or 0
        return frozenset(i for i in range(self._e) if mask >> i & 1)

    def index_of(self, bookie_id: str) -> int | None:
        """The ensemble index of bookie_id in the current ensemble, or None (e.g. it was replaced)."""
        return self._index.get(bookie_id)

    # ---- events -----------------------------------------------------------------------------
    def on_add(self) -> SendAdd:
        """A new add: allocate the next entry id. Raises the pipeline's error once it has failed."""
        if self._error is not None:
            raise self._error
        entry_id = self._next
        self._next += 1
        members = self._write_sets[entry_id % self._e]
        self._masks.append(0)
        failed = self._failed
        indices = tuple(i for i in members if i not in failed) if failed else members
        return SendAdd(entry_id, indices, self._recovery)

    def on_adds(self, count: int) -> SendAdds:
        """`count` new adds at once: the same as `count` calls of on_add, as one action."""
        if self._error is not None:
            raise self._error
        if count < 1:
            raise ValueError(f"on_adds needs at least one add, got {count}")
        first = self._next
        self._next = first + count
        masks = self._masks
        if isinstance(masks, array):
            masks.frombytes(bytes(masks.itemsize * count))
        else:
            masks.extend(itertools.repeat(0, count))
        return SendAdds(first, count, frozenset(self._failed), self._recovery)

    def on_ack(self, entry_id: int, index: int) -> list[AddAction]:
        """Bookie `index` acknowledged entry_id (R6). Late or foreign acks are ignored."""
        position = entry_id - self._lac - 1
        if not 0 <= position < len(self._masks) or index in self._failed or not self._holds(index, entry_id):
            return []
        mask = self._masks[position] | 1 << index
        self._masks[position] = mask
        if self._changing or (position != 0 and self._in_order) or mask.bit_count() < self._qa:
            return []
        return self._drain()

    def on_ack_from(self, entry_id: int, bookie_id: str) -> list[AddAction]:
        """on_ack by bookie id; a bookie no longer in the ensemble (replaced) is ignored."""
        index = self._index.get(bookie_id)
        return [] if index is None else self.on_ack(entry_id, index)

    def on_acks_from(self, entry_ids: Sequence[int] | np.ndarray, bookie_id: str) -> list[AddAction]:
        """Many acks of one bookie at once (a batched reply): the same outcome as on_ack_from for each
        in turn, with the completions merged into at most one CompleteAdds."""
        index = self._index.get(bookie_id)
        if index is None or index in self._failed:
            return []
        masks = self._masks
        if len(entry_ids) >= VECTOR_MIN and isinstance(masks, array):
            _mark_acked(masks, entry_ids, self._lac + 1, index, self._e, self._qw)
        else:
            first, count = self._lac + 1, len(masks)
            bit, e, qw = 1 << index, self._e, self._qw
            for entry_id in entry_ids:
                position = entry_id - first
                if 0 <= position < count and (qw == e or (index - entry_id) % e < qw):
                    masks[position] |= bit
        if self._changing:
            return []
        return self._drain()

    def on_error_from(self, entry_id: int, bookie_id: str, status: int) -> list[AddAction]:
        """on_error by bookie id; a bookie no longer in the ensemble only matters for EFENCED / EUA."""
        index = self._index.get(bookie_id)
        if index is None:
            return self.fail_all(self._fatal(status)) if status in _FATAL else []
        return self.on_error(entry_id, index, status)

    def on_error(self, entry_id: int, index: int, status: int) -> list[AddAction]:
        """Bookie `index` failed entry_id with `status` (R9, R21)."""
        if status in _FATAL:
            return self.fail_all(self._fatal(status))
        if not self._holds(index, entry_id):
            return []  # not its write set: a stale answer
        if self._mask_of(entry_id) is None and (entry_id > self._lac or self._recovery):
            return []  # failed already or never sent; or a recovery write-back, done once its Qa acked (R19)
        # pending, or completed through the others' acks (Qa < Qw): as BookKeeper's notifyWriteFailed, a
        # writer replaces a bookie that failed an entry it holds, so later entries are not under-replicated
        return self.on_bookie_failed(index)

    def _fatal(self, status: int) -> BKError:
        """The error of a status that fails the pipeline. EUA to a writer: it created the ledger with this
        very key, so the bookie had the id from someone else first (squatted, issue 41); say so."""
        if status == StatusCode.EUA and not self._recovery:
            return BadPasswordError(SQUATTED_ADD)
        return _FATAL[status]()

    def on_bookie_failed(self, index: int) -> list[AddAction]:
        """The bookie at `index` failed (connection lost, timeout, write error): change the ensemble."""
        if self._error is not None or index in self._failed or not 0 <= index < self._e:
            return []
        self._failed.add(index)
        if self._changing:
            return []  # asked for again once the running change is applied
        self._changing = True
        return [NeedEnsembleChange(tuple(sorted(self._failed)), self._lac + 1)]

    def on_ensemble_changed(self, new_ensemble: Sequence[str], first_entry_id: int) -> list[AddAction]:
        """The new fragment is stored: drop replaced bookies' acks, resend to the replacements (R9)."""
        if not self._changing:
            raise ValueError("on_ensemble_changed without a pending NeedEnsembleChange")
        if first_entry_id != self._lac + 1:
            raise ValueError(f"new fragment starts at {first_entry_id}, expected LAC + 1 = {self._lac + 1}")
        if len(new_ensemble) != self._e:
            raise ValueError(f"new ensemble has {len(new_ensemble)} bookies, expected {self._e}")
        replaced = {i for i in range(self._e) if new_ensemble[i] != self._ensemble[i]}
        self._ensemble = tuple(new_ensemble)
        self._index = {b: i for i, b in enumerate(self._ensemble)}
        self._failed -= replaced
        actions: list[AddAction] = []
        if self._error is not None:
            return actions
        keep = (1 << self._e) - 1 - sum(1 << i for i in replaced)
        masks = self._masks
        first = self._lac + 1
        for position in range(len(masks)):
            masks[position] &= keep
            entry_id = first + position
            targets = tuple(i for i in self._write_sets[entry_id % self._e] if i in replaced)
            if targets:
                actions.append(Resend(entry_id, targets, self._recovery))
        if self._failed:
            actions.append(NeedEnsembleChange(tuple(sorted(self._failed)), self._lac + 1))
            return actions
        self._changing = False
        actions.extend(self._drain())
        return actions

    def on_ensemble_change_failed(self, error: BKError) -> list[AddAction]:
        """The running ensemble change found no replacement for the failed bookies (none is free).

        As BookKeeper's client with `delayEnsembleChange`: while every write set still has Qa bookies that
        did not fail, the adds go on with the bookies left (each write set minus the failed ones; their
        entries stay under-replicated until `retry_ensemble_change` succeeds), so a silent bookie does not
        stop a ledger whose ack quorum is met. Otherwise every pending add fails with `error`."""
        if not self._changing:
            raise ValueError("on_ensemble_change_failed without a pending NeedEnsembleChange")
        if self._error is not None:
            return []
        if not self.ack_quorum_left:
            return self.fail_all(error)
        self._changing = False
        return self._drain()

    def retry_ensemble_change(self) -> list[AddAction]:
        """Ask again to replace the bookies that failed but could not be replaced (a bookie may be free now)."""
        if self._error is not None or self._changing or not self._failed:
            return []
        self._changing = True
        return [NeedEnsembleChange(tuple(sorted(self._failed)), self._lac + 1)]

    @property
    def ack_quorum_left(self) -> bool:
        """Whether every write set still has at least Qa bookies that have not failed."""
        failed = self._failed
        return all(sum(i not in failed for i in members) >= self._qa for members in self._write_sets)

    def fail_all(self, error: BKError) -> list[AddAction]:
        """Fail every pending add with `error` (fenced, closed, no bookies...) and refuse further adds.

        The first failure is announced even when no add is pending (a late EFENCED for an entry the others
        acknowledged, an ensemble change that finds the ledger closed): the driver must learn that the
        pipeline is dead, or the adds it takes next would wait for ever."""
        first = self._error is None
        if first:
            self._error = error
        failed = self.pending_entry_ids
        del self._masks[:]
        return [FailAdds(failed, error)] if failed or first else []

    # ---- internals --------------------------------------------------------------------------
    def _holds(self, index: int, entry_id: int) -> bool:
        """Whether ensemble `index` is in the write set of entry_id (R5)."""
        return (index - entry_id) % self._e < self._qw

    def _mask_of(self, entry_id: int) -> int | None:
        """The ack mask of a pending add; None if entry_id is not pending."""
        position = entry_id - self._lac - 1
        return self._masks[position] if 0 <= position < len(self._masks) else None

    def _drain(self) -> list[AddAction]:
        """Complete the pending adds from the oldest on while each has Qa acks (R6)."""
        masks, qa = self._masks, self._qa
        if not self._in_order:      # the bug: the LAC jumps to the highest add with Qa acks
            done = 1 + max((i for i, mask in enumerate(masks) if mask.bit_count() >= qa), default=-1)
        elif not masks or masks[0].bit_count() < qa:
            return []
        elif len(masks) >= VECTOR_MIN and isinstance(masks, array):
            done = _complete_prefix(masks, qa)
        else:
            done = 1
            for mask in itertools.islice(masks, 1, None):
                if mask.bit_count() < qa:
                    break
                done += 1
        if not done:
            return []
        del masks[:done]
        first = self._lac + 1
        self._lac += done
        return [CompleteAdds(first, self._lac)]


def _masks_view(masks: array[int]) -> np.ndarray:
    import numpy as np  # imported where used: the pure core loads without it (a writer imports it at creation)

    return np.frombuffer(masks, dtype=np.uint64)


def _mark_acked(masks: array[int], entry_ids: Any, first: int, index: int, e: int, qw: int) -> None:
    """Set bit `index` in the masks of those entry_ids that are pending (first .. first + len(masks) - 1)
    and whose write set holds `index` (R5); the rest are late or foreign acks, ignored."""
    import numpy as np

    if isinstance(entry_ids, np.ndarray):
        ids = entry_ids.astype(np.int64, copy=False)
    else:
        ids = np.fromiter(entry_ids, np.int64, len(entry_ids))
    positions = ids - first
    keep = (positions >= 0) & (positions < len(masks))
    if qw != e:
        keep &= (index - ids) % e < qw
    view = _masks_view(masks)
    view[positions[keep]] |= np.uint64(1 << index)


def _complete_prefix(masks: array[int], qa: int) -> int:
    """How many masks from the oldest on have at least Qa bits set (the view is released on return,
    so the array may be resized after)."""
    import numpy as np

    complete = np.bitwise_count(_masks_view(masks)) >= qa
    return len(complete) if complete.all() else int(complete.argmin())
