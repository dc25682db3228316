"""The simulated world: one seeded random source, an integer clock and an ordered event queue.

Mirrors the event loop of a deterministic simulator (tigerbeetle's VOPR, FoundationDB's sim2): every
effect is an event scheduled at a simulated time; events at the same time run in scheduling order, so one
seed always yields the same run. Each executed event is one "step"; its label goes into the trace, whose
hash proves two runs identical.
"""

from __future__ import annotations

import collections
import hashlib
import heapq
import random
from collections.abc import Callable


class Event:
    """A scheduled callback; `cancel()` turns it into a no-op that is neither traced nor counted."""

    __slots__ = ("time", "seq", "label", "fn", "cancelled")

    def __init__(self, time: int, seq: int, label: str, fn: Callable[[], None]) -> None:
        self.time = time
        self.seq = seq
        self.label = label
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: Event) -> bool:
        return (self.time, self.seq) < (other.time, other.seq)


class World:
    """Clock, queue, randomness and trace of one simulated run."""

    def __init__(self, seed: int, *, verbose: bool = False, keep_trace: int = 40) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self.steps = 0
        self.verbose = verbose
        self._queue: list[Event] = []
        self._seq = 0
        self._hash = hashlib.sha256()
        self.recent: collections.deque[str] = collections.deque(maxlen=keep_trace)
        self.on_hazard: Callable[[str, object], None] | None = None
        self.timeout = 40       # clients' request timeout (the scenario fits it to the seed's world)

    # ---- scheduling -----------------------------------------------------------------------------
    def at(self, delay: int, label: str, fn: Callable[[], None]) -> Event:
        """Run `fn` `delay` time units from now (delay >= 0)."""
        if delay < 0:
            raise ValueError(f"negative delay {delay}")
        self._seq += 1
        event = Event(self.now + delay, self._seq, label, fn)
        heapq.heappush(self._queue, event)
        return event

    def pending(self) -> int:
        return len(self._queue)

    def step(self) -> bool:
        """Run the next live event. False when the queue is empty."""
        while self._queue:
            event = heapq.heappop(self._queue)
            if event.cancelled:
                continue
            self.now = event.time
            self.steps += 1
            self.note(event.label)
            event.fn()
            return True
        return False

    def hazard(self, point: str, subject: object) -> None:
        """A dangerous point of the protocol was reached (swarm.HAZARDS): the faults may strike here."""
        if self.on_hazard is not None:
            self.on_hazard(point, subject)

    # ---- trace ------------------------------------------------------------------------------------
    def note(self, text: str) -> None:
        """Add one line to the trace (hashed; printed when verbose)."""
        line = f"{self.now:6d} {text}"
        self._hash.update(line.encode())
        self._hash.update(b"\n")
        self.recent.append(line)
        if self.verbose:
            print(line)

    @property
    def trace_hash(self) -> str:
        return self._hash.hexdigest()

    # ---- randomness helpers ----------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return p > 0 and self.rng.random() < p

    def between(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)
