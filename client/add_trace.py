"""Where a client's adds spend their time: stage timestamps, stage histograms, the slow-add log.

One add in `addTraceSampleEvery` (per ledger handle, counted at `add_entry`; 0: none) carries an
`AddTrace`, stamped with `time.perf_counter_ns` (CLOCK_MONOTONIC) at each hand-off: enqueued (the
caller's thread queues it), drained (the client loop gives it its entry id and packages it), sent to
each bookie (the request holding it is written to that bookie's add stream), acknowledged by each
bookie, completed (the LAC passed it and its future is about to be set, in entry order: R6). Stages are
taken along the path that decided the add: the bookie whose acknowledgement made the ack quorum.

| stage       | from -> to                                 | what it holds                                      |
|-------------|--------------------------------------------|----------------------------------------------------|
| `queue`     | enqueued -> drained                        | the add queue: waiting for the client loop         |
| `send_wait` | drained -> sent (deciding bookie)          | the connection: in-flight bound (Nagle), encoding  |
| `bookie`    | sent -> acknowledged (deciding bookie)     | network both ways and the bookie (bookie.add_trace) |
| `complete`  | acknowledged (quorum) -> completed         | earlier entries still pending (R6)                 |

Finished traces are observed into `bookkeeper_client_ADD_ENTRY_STAGE` (label `stage`, ms) when the
client has a metrics registry, and those whose total reaches `slowAddThresholdMs` are kept in a bounded
flight recorder (`slowAddLogSize` newest) that `BookKeeper.slow_adds()` returns. Bulks (`add_entries`)
are not traced.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Protocol

STAGES = ("queue", "send_wait", "bookie", "complete")


class StageObserver(Protocol):
    def observe(self, amount: float) -> None: ...


class AddTrace:
    """The stamps (ns, CLOCK_MONOTONIC) of one add; per bookie: when it was sent and acknowledged."""

    __slots__ = ("ledger_id", "entry_id", "ack_quorum", "enqueued", "drained", "sent", "acked", "completed",
                 "wall")

    def __init__(self, ledger_id: int, entry_id: int, ack_quorum: int, enqueued: int, drained: int) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        self.ack_quorum = ack_quorum
        self.enqueued = enqueued
        self.drained = drained
        self.sent: dict[str, int] = {}
        self.acked: dict[str, int] = {}
        self.completed = 0
        self.wall = 0.0

    def deciding_bookie(self) -> str | None:
        """The bookie whose acknowledgement made the ack quorum (the last to answer, with fewer)."""
        if not self.acked:
            return None
        order = sorted(self.acked, key=self.acked.__getitem__)
        return order[min(self.ack_quorum, len(order)) - 1]

    def stages_ns(self) -> tuple[int, ...]:
        """The four stage durations in STAGES order (a missing stamp takes the one before it)."""
        bookie = self.deciding_bookie()
        sent = self.sent.get(bookie, 0) if bookie is not None else 0
        acked = self.acked.get(bookie, 0) if bookie is not None else 0
        stamps = [self.enqueued]
        for stamp in (self.drained, sent, acked, self.completed):
            stamps.append(stamp or stamps[-1])
        return tuple(b - a for a, b in zip(stamps, stamps[1:], strict=False))

    @property
    def total_ns(self) -> int:
        return (self.completed or self.enqueued) - self.enqueued

    def kept(self) -> tuple[Any, ...]:
        """This trace as one flat tuple of numbers and strings, the form the flight recorder keeps: the
        garbage collector stops tracking such a tuple at its first collection, so a long log of kept adds
        adds nothing to the collections of the caller's process (an AddTrace and its two dicts are three
        tracked objects; 82,000 of them kept over a 10 s run made full collections of 0.6 s). The bookies'
        stamps follow the seven fields: how many were sent, then (bookie, ns) of the sends, then of the acks."""
        return (self.ledger_id, self.entry_id, self.ack_quorum, self.enqueued, self.drained, self.completed,
                self.wall, len(self.sent), *_flat(self.sent), *_flat(self.acked))

    @classmethod
    def from_kept(cls, kept: tuple[Any, ...]) -> AddTrace:
        ledger_id, entry_id, ack_quorum, enqueued, drained, completed, wall, sends = kept[:8]
        trace = cls(ledger_id, entry_id, ack_quorum, enqueued, drained)
        trace.completed, trace.wall = completed, wall
        sent, acked = kept[8:8 + 2 * sends], kept[8 + 2 * sends:]
        trace.sent = dict(zip(sent[::2], sent[1::2], strict=True))
        trace.acked = dict(zip(acked[::2], acked[1::2], strict=True))
        return trace

    def as_dict(self) -> dict[str, Any]:
        stages = self.stages_ns()
        start = self.enqueued
        deciding = self.deciding_bookie()
        return {
            "ledger_id": self.ledger_id,
            "entry_id": self.entry_id,
            "time": self.wall,
            "total_ms": self.total_ns / 1e6,
            "stages_ms": {name: ns / 1e6 for name, ns in zip(STAGES, stages, strict=True)},
            "slowest_stage": STAGES[max(range(len(STAGES)), key=lambda i: stages[i])],
            "deciding_bookie": deciding,
            "sent_ns": self.sent.get(deciding, 0) if deciding is not None else 0,     # CLOCK_MONOTONIC
            "acked_ns": self.acked.get(deciding, 0) if deciding is not None else 0,
            "bookies": {b: {"sent_ms": (self.sent[b] - start) / 1e6 if b in self.sent else None,
                            "acked_ms": (self.acked[b] - start) / 1e6 if b in self.acked else None}
                        for b in sorted(set(self.sent) | set(self.acked))},
        }


class SlowAddLog:
    """The client's flight recorder and stage histograms, shared by its ledger handles."""

    def __init__(self, sample_every: int, slow_threshold_ms: float, capacity: int,
                 histograms: tuple[StageObserver, ...] | None = None) -> None:
        self.sample_every = max(0, sample_every)
        self.slow_threshold_ns = int(slow_threshold_ms * 1e6)
        self.histograms = histograms
        self._slow: collections.deque[tuple[Any, ...]] = collections.deque(maxlen=max(1, capacity))
        self._lock = threading.Lock()
        self.slow_total = 0

    def finish(self, traces: list[AddTrace], completed: int) -> None:
        """These adds completed at `completed` (on the client loop)."""
        histograms = self.histograms
        threshold = self.slow_threshold_ns
        for trace in traces:
            trace.completed = completed
            if histograms is not None:
                for histogram, ns in zip(histograms, trace.stages_ns(), strict=True):
                    histogram.observe(ns / 1e6)
            if completed - trace.enqueued >= threshold:
                trace.wall = time.time()
                kept = trace.kept()
                with self._lock:
                    self._slow.append(kept)
                    self.slow_total += 1

    def slow_adds(self) -> list[dict[str, Any]]:
        """The adds over the threshold, oldest first, each with its stages."""
        with self._lock:
            kept = list(self._slow)
        return [AddTrace.from_kept(t).as_dict() for t in kept]

    def clear(self) -> None:
        with self._lock:
            self._slow.clear()


def _flat(stamps: dict[str, int]) -> tuple[str | int, ...]:
    """{bookie: ns} as (bookie, ns, bookie, ns, ...)."""
    return tuple(item for pair in stamps.items() for item in pair)


def stamp_sent(traces: list[AddTrace], bookie_id: str) -> None:
    now = time.perf_counter_ns()
    for trace in traces:
        trace.sent.setdefault(bookie_id, now)
