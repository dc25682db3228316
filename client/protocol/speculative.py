"""Speculative reads: when to also ask another bookie, which one, and whom to ask last (R13).

Mirrors BookKeeper's DefaultSpeculativeRequestExecutionPolicy (`speculativeReadTimeout`, backoff up to
`maxSpeculativeReadTimeout`), the SequenceReadRequest of PendingReadOp (one replica at a time; after the
timeout the same request also goes to the next replica; the first valid answer wins and the others
are cancelled; an error moves on at once when nothing else is outstanding) and the failure history
behind `reorderReadSequenceEnabled` (a bookie that was slow or failed within
`bookieFailureHistoryExpirationMSec` is read from last).

Pure: time comes in as `now` (seconds, any monotonic origin); the driver sends, cancels and arms its
timer as the returned actions say. A request may be one entry, one chunk of a range read or any other
read that several bookies can answer alike. Nothing here decides what an answer means for recovery:
an unanswered bookie is only "not answered yet", never a negative answer (R18).

One addition to BookKeeper's policy: a read's first answer from a *quiet* bookie (nothing heard from it for
QUIET_AFTER) is waited for only `quiet_timeout` (a fifth of speculativeReadTimeout, at most QUIET_WAIT).
A paused bookie (SIGSTOP, a long GC pause, a hung host) keeps its TCP connections open, so unlike a killed
one nothing tells the client; a healthy bookie on a LAN starts answering within a few milliseconds. Once
a bookie answers, the full timeout applies again. A false alarm costs one duplicate read, as any
speculation does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

#: A bookie not heard from for this long (seconds) is quiet: a read's first answer from it is awaited
#: only `SpeculativePolicy.quiet_timeout`.
QUIET_AFTER = 0.02
#: The most a read waits for a quiet bookie's first answer before also asking the next bookie.
QUIET_WAIT = 0.05
#: A quiet parallel stream is given up once it lags its first answering peer this many times over ...
PEER_FACTOR = 4.0
#: ... but never before this (seconds).
QUIET_FLOOR = 0.01


@dataclasses.dataclass(frozen=True)
class SpeculativePolicy:
    """When to speculate: `first_timeout` after a send without an answer, then backing off by
    `multiplier` up to `max_timeout` (all seconds). A first timeout <= 0 disables speculation.
    `quiet_timeout` (0: no such rule) is the wait for the first answer of a quiet bookie."""

    first_timeout: float
    max_timeout: float = 0.0
    multiplier: float = 2.0
    quiet_timeout: float = 0.0

    @classmethod
    def from_ms(cls, first_ms: float, max_ms: float = 0.0, multiplier: float = 2.0) -> SpeculativePolicy:
        """From BookKeeper's settings in milliseconds; max 0 means "same as the first"."""
        first = first_ms / 1000.0
        return cls(first, (max_ms or first_ms) / 1000.0, multiplier, min(QUIET_WAIT, first / 5))

    @property
    def enabled(self) -> bool:
        return self.first_timeout > 0

    def first_wait(self, quiet: bool) -> float:
        """How long to wait for a bookie's first answer: shorter if it is quiet (see the module doc)."""
        if quiet and self.quiet_timeout > 0:
            return min(self.first_timeout, self.quiet_timeout)
        return self.first_timeout

    def next_timeout(self, previous: float) -> float:
        """The wait before the following speculation: previous * multiplier, capped at max_timeout."""
        cap = max(self.max_timeout, self.first_timeout)
        return min(cap, previous * self.multiplier)


DISABLED = SpeculativePolicy(0.0)


def stalled(last_progress: float, now: float, policy: SpeculativePolicy, quiet: bool = False,
            peer_first: float | None = None) -> bool:
    """A parallel streamed read (E > Qw) that has delivered nothing for the speculative timeout (if its
    bookie was quiet and has sent nothing yet: `quiet_wait`) is given up on: its entries are then read
    from the other bookies of their write sets."""
    deadline = stall_deadline(last_progress, policy, quiet, peer_first)
    return deadline is not None and now >= deadline


def stall_deadline(last_progress: float, policy: SpeculativePolicy, quiet: bool = False,
                   peer_first: float | None = None) -> float | None:
    """When `stalled` turns true for a stream last heard from at `last_progress` (None: never)."""
    if not policy.enabled:
        return None
    return last_progress + (quiet_wait(last_progress, peer_first, policy) if quiet else policy.first_timeout)


def quiet_wait(started: float, peer_first: float | None, policy: SpeculativePolicy) -> float:
    """How long a parallel stream to a quiet bookie, started at `started`, may go without a first batch:
    the quiet timeout, or less once a peer stream of the same read has answered (at `peer_first`):
    PEER_FACTOR times what that took, at least QUIET_FLOOR. Bookies of one read answer alike; one that
    is far behind its peers from the start is likely stopped."""
    wait = policy.first_wait(quiet=True)
    if peer_first is not None:
        wait = min(wait, max(QUIET_FLOOR, PEER_FACTOR * (peer_first - started)))
    return wait


class BookieHealth:
    """Failure history of the bookies one client reads from: bookie -> when it was last slow or failed.

    `order` puts bookies with a recent failure last (oldest failure first among them: the likeliest to
    have recovered); a failure older than `expiry` seconds is forgotten. With `reorder` False (BookKeeper's
    `reorderReadSequenceEnabled=false`) the order is left alone, but failures are still recorded.
    It also remembers when each bookie last answered, to tell which are quiet (QUIET_AFTER)."""

    def __init__(self, expiry: float = 60.0, reorder: bool = True, quiet_after: float = QUIET_AFTER) -> None:
        self.expiry = expiry
        self.reorder = reorder
        self.quiet_after = quiet_after
        self._failed_at: dict[str, float] = {}
        self._heard_at: dict[str, float] = {}

    def on_heard(self, bookie_id: str, now: float) -> None:
        """The bookie answered a read (or sent part of a streamed answer)."""
        self._heard_at[bookie_id] = now

    def quiet(self, bookies: Iterable[str], now: float) -> frozenset[str]:
        """Those of `bookies` not heard from within quiet_after."""
        return frozenset(b for b in bookies if now - self._heard_at.get(b, float("-inf")) >= self.quiet_after)

    def on_slow(self, bookie_id: str, now: float) -> None:
        """The bookie did not answer within the speculative timeout, or failed a read."""
        self._failed_at[bookie_id] = now

    def on_slow_all(self, bookie_ids: Iterable[str], now: float) -> None:
        for bookie_id in bookie_ids:
            self.on_slow(bookie_id, now)

    def is_slow(self, bookie_id: str, now: float) -> bool:
        at = self._failed_at.get(bookie_id)
        if at is None:
            return False
        if now - at >= self.expiry:
            del self._failed_at[bookie_id]
            return False
        return True

    def failed_at(self, bookie_id: str, now: float) -> float | None:
        """When the bookie was last slow or failed, if that is recent."""
        return self._failed_at[bookie_id] if self.is_slow(bookie_id, now) else None

    def slow_bookies(self, now: float) -> frozenset[str]:
        return frozenset(b for b in list(self._failed_at) if self.is_slow(b, now))

    def order(self, bookies: Sequence[str], now: float) -> tuple[str, ...]:
        """`bookies` (a write set, in order) with the recently failed ones moved last, if reordering."""
        if not self.reorder:
            return tuple(bookies)
        healthy = [b for b in bookies if not self.is_slow(b, now)]
        if len(healthy) == len(bookies):
            return tuple(bookies)
        failed = sorted((b for b in bookies if b not in healthy), key=lambda b: self._failed_at[b])
        return tuple(healthy + failed)


# ---- actions -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SendRead:
    """Send the request to this bookie (the first one, a speculative one or the next after an error)."""

    bookie_id: str
    speculative: bool = False


@dataclasses.dataclass(frozen=True)
class MarkSlow:
    """These bookies have not answered within the timeout: remember it (BookieHealth.on_slow)."""

    bookie_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class CancelReads:
    """Another bookie answered: cancel what is still outstanding at these bookies."""

    bookie_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ReadDone:
    """This bookie's answer passed the checks: it is the result."""

    bookie_id: str


@dataclasses.dataclass(frozen=True)
class ReadFailed:
    """Every bookie was asked and none gave a valid answer: `errors` holds each one's status."""

    errors: tuple[tuple[str, int], ...]


SpeculativeAction = SendRead | MarkSlow | CancelReads | ReadDone | ReadFailed


class SequenceRead:
    """One read request tried on `bookies` in order, one at a time, speculating after a timeout.

    Events: `start(now)`, `on_timer(now)` (call it at `deadline`), `on_progress(bookie, now)` (part of a
    streamed answer arrived: the bookie is alive, so the timer starts again), `on_success(bookie)` (an
    answer passed the digest check), `on_failure(bookie, status)` (an error, a digest mismatch, a
    broken connection or the request's own hard timeout). Late answers after the end are ignored.
    The first answer of a bookie in `quiet` (BookieHealth.quiet) is awaited only the policy's quiet
    timeout."""

    def __init__(self, bookies: Sequence[str], policy: SpeculativePolicy, quiet: Iterable[str] = ()) -> None:
        if not bookies:
            raise ValueError("a read needs at least one bookie to ask")
        self.bookies = tuple(bookies)
        self.policy = policy
        self._quiet = set(quiet)
        self._next = 0
        self._outstanding: list[str] = []
        self._errors: dict[str, int] = {}
        self._timeout = policy.first_timeout
        self.deadline: float | None = None
        self.speculations = 0
        self.winner: str | None = None
        self.finished = False

    @property
    def outstanding(self) -> tuple[str, ...]:
        return tuple(self._outstanding)

    def start(self, now: float) -> list[SpeculativeAction]:
        if self._next:
            return []
        return self._send_next(now, speculative=False)

    def _send_next(self, now: float, speculative: bool) -> list[SpeculativeAction]:
        if self._next >= len(self.bookies):
            self.deadline = None
            return []
        bookie_id = self.bookies[self._next]
        self._next += 1
        self._outstanding.append(bookie_id)
        self._arm(now)
        return [SendRead(bookie_id, speculative)]

    def _arm(self, now: float) -> None:
        more = self._next < len(self.bookies)
        wait = self._timeout
        if self._outstanding and self._outstanding[-1] in self._quiet:
            wait = min(wait, self.policy.first_wait(quiet=True))
        self.deadline = now + wait if self.policy.enabled and more and not self.finished else None

    def on_timer(self, now: float) -> list[SpeculativeAction]:
        """The timer fired: if the deadline passed with no answer, mark the outstanding bookies slow
        and send the same request to the next bookie; the following wait backs off."""
        if self.finished or self.deadline is None or now < self.deadline:
            return []
        slow = MarkSlow(tuple(self._outstanding))
        self._timeout = self.policy.next_timeout(self._timeout)
        self.speculations += 1
        return [slow, *self._send_next(now, speculative=True)]

    def on_progress(self, bookie_id: str, now: float) -> None:
        """A streamed answer is arriving from this bookie: wait a full timeout again before speculating."""
        self._quiet.discard(bookie_id)
        if not self.finished and bookie_id in self._outstanding:
            self._arm(now)

    def on_success(self, bookie_id: str) -> list[SpeculativeAction]:
        if self.finished or bookie_id not in self._outstanding:
            return []
        self.finished = True
        self.winner = bookie_id
        self.deadline = None
        others = tuple(b for b in self._outstanding if b != bookie_id)
        self._outstanding.clear()
        actions: list[SpeculativeAction] = [CancelReads(others)] if others else []
        return [*actions, ReadDone(bookie_id)]

    def on_failure(self, bookie_id: str, status: int, now: float) -> list[SpeculativeAction]:
        """That bookie gave no valid answer. With nothing else outstanding, ask the next one at once;
        with nothing left to ask, the read failed (the caller picks the error from `errors`)."""
        if self.finished or bookie_id not in self._outstanding:
            return []
        self._outstanding.remove(bookie_id)
        self._errors[bookie_id] = status
        if self._outstanding:
            return []
        actions = self._send_next(now, speculative=False)
        if actions:
            return actions
        self.finished = True
        self.deadline = None
        return [ReadFailed(tuple(self._errors.items()))]

    @property
    def errors(self) -> dict[str, int]:
        return dict(self._errors)
