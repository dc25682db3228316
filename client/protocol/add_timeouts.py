"""Per-bookie add timeouts: which bookies of the ensemble left an add request unanswered too long (R9).

Mirrors BookKeeper's per-request `addEntryTimeoutSec` of PerChannelBookieClient: every add request to a
bookie has its own timeout, and a request that times out is a write failure of that bookie
(PendingAddOp.writeComplete -> LedgerHandle.handleBookieFailure -> ensemble change), even when the entry
already reached its ack quorum through the other bookies of its write set. Without it, a silent bookie
(paused, or its answers dropped by a partition) is never replaced while Qa < Qw keeps the adds
completing: its requests pile up and every entry since is under-replicated.

`UnansweredAdds` remembers, per bookie, when each of its unanswered add requests left, counted in
entries; `timed_out_indices` decides which ensemble members are silent. The driver supplies the clock
(send and answer times); nothing here reads it.
"""

from __future__ import annotations

import collections
from collections.abc import Collection, Mapping, Sequence


class UnansweredAdds:
    """The add requests of one ledger still unanswered by each bookie, oldest first.

    A bookie answers every entry of a request once (an ack or an error), so answers are counted in
    entries and matched to the oldest requests first; a bookie answering out of order only blurs which
    request is the oldest, never by more than the requests in flight at once."""

    def __init__(self) -> None:
        self._sent: dict[str, collections.deque[list[float]]] = {}   # bookie -> [send time, entries left]

    def on_sent(self, bookie_id: str, entries: int, now: float) -> None:
        """An add request of `entries` entries left for bookie_id at `now`."""
        if entries <= 0:
            return
        queue = self._sent.get(bookie_id)
        if queue is None:
            queue = self._sent[bookie_id] = collections.deque()
        if queue and queue[-1][0] == now:
            queue[-1][1] += entries          # sent in the same instant: one request as far as timing goes
        else:
            queue.append([now, entries])

    def on_answered(self, bookie_id: str, entries: int) -> None:
        """bookie_id answered `entries` entries (success or error): forget that many, oldest first."""
        queue = self._sent.get(bookie_id)
        if queue is None:
            return
        while entries > 0 and queue:
            head = queue[0]
            if head[1] > entries:
                head[1] -= entries
                return
            entries -= int(head[1])
            queue.popleft()
        if not queue:
            del self._sent[bookie_id]

    def forget(self, bookie_id: str) -> None:
        """Stop timing bookie_id (it failed, or was replaced: its late answers no longer matter)."""
        self._sent.pop(bookie_id, None)

    def oldest(self, bookie_id: str) -> float | None:
        """When the oldest request still unanswered by bookie_id left, or None if it owes nothing."""
        queue = self._sent.get(bookie_id)
        return queue[0][0] if queue else None

    def oldest_by_bookie(self) -> dict[str, float]:
        """Send time of the oldest unanswered request of every bookie that owes one."""
        return {bookie_id: queue[0][0] for bookie_id, queue in self._sent.items() if queue}

    def unanswered(self, bookie_id: str) -> int:
        """Entries sent to bookie_id and not answered yet."""
        return int(sum(item[1] for item in self._sent.get(bookie_id, ())))


def timed_out_indices(ensemble: Sequence[str], oldest_sent: Mapping[str, float], now: float, timeout: float,
                      failed: Collection[int] = ()) -> tuple[int, ...]:
    """The ensemble indices whose bookie has left an add request unanswered for more than `timeout`
    seconds at `now`, ascending; indices already in `failed` are not reported again."""
    out = []
    for index, bookie_id in enumerate(ensemble):
        sent = oldest_sent.get(bookie_id)
        if sent is not None and now - sent > timeout and index not in failed:
            out.append(index)
    return tuple(out)


def add_settle_bound(add_timeout: float, ensemble_change_attempts: int) -> float:
    """How long adds may stay pending with none completing before they fail (issue 46: no add hangs).

    Each add timeout may start an ensemble change of up to `ensemble_change_attempts` tries, and the
    resent adds get an add timeout of their own: past that many timeouts without one completion, nothing
    the writer would still do can complete them. As BookKeeper's addEntryQuorumTimeoutSec, but always on."""
    return add_timeout * (max(1, ensemble_change_attempts) + 1)


def adds_stalled(pending: bool, settled_at: float, now: float, bound: float) -> bool:
    """Whether adds are pending and none completed (nor started) in the last `bound` seconds."""
    return pending and now - settled_at > bound
