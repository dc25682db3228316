"""Where a bookie's add batches spend their time: stage timestamps, stage histograms, the slow-add log.

One add batch in `addTraceSampleEvery` (0: none) carries a `BatchTrace` from the moment the server
takes it off the add stream to the moment its acknowledgement is queued on the stream, stamped with
`time.perf_counter_ns` (CLOCK_MONOTONIC) at each hand-off:

| stage           | from -> to                              | what it holds                                         |
|-----------------|-----------------------------------------|-------------------------------------------------------|
| `decide`        | received -> handed to storage           | the request checks and the machine's decision         |
| `handoff`       | handed to storage -> storage started    | the storage thread's queue, its wake-up and the GIL   |
| `storage`       | storage started -> journal-enqueued     | the rewrite check, the entry-log append and the index |
| `journal_queue` | journal-enqueued -> group formed        | waiting for the journal thread and its group wait     |
| `journal_write` | group formed -> fsync started           | the group's write(2)                                  |
| `fsync`         | fsync started -> fsync done             | the group's one fdatasync                             |
| `to_loop`       | fsync done -> outcome on the event loop | the journal's callback and the hop to the loop        |
| `reply`         | outcome on the loop -> replied          | the machine releasing the reply, and its encoding     |

Each finished trace is observed into the `bookie_ADD_ENTRY_STAGE` histogram (label `stage`, ms) when
metrics are on, and a trace whose total reaches `slowAddThresholdMs` is kept in a bounded flight
recorder (`slowAddLogSize` newest), read by the admin HTTP API at `/api/v1/bookie/slow_adds`; each
record carries its `receivedNs` and `repliedNs` stamps, which a client on the same host can set beside
its own (`sent_ns`, `acked_ns`) to split the network's share into the way there and the way back.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Protocol

STAGES = ("decide", "handoff", "storage", "journal_queue", "journal_write", "fsync", "to_loop", "reply")


class StageObserver(Protocol):
    def observe(self, amount: float) -> None: ...


class BatchTrace:
    """The stamps (ns, CLOCK_MONOTONIC) of one add batch; 0 where a stamp was not taken."""

    __slots__ = ("ledger_id", "first_entry", "last_entry", "entries", "received", "decided", "picked", "enqueued",
                 "grouped", "sync_start", "sync_done", "on_loop", "replied", "wall")

    def __init__(self, ledger_id: int, first_entry: int, last_entry: int, entries: int) -> None:
        self.ledger_id = ledger_id
        self.first_entry = first_entry
        self.last_entry = last_entry
        self.entries = entries
        self.received = time.perf_counter_ns()
        self.decided = self.picked = self.enqueued = self.grouped = self.sync_start = self.sync_done = 0
        self.on_loop = self.replied = 0
        self.wall = 0.0

    def stages_ns(self) -> tuple[int, ...]:
        """The stage durations in STAGES order (a missing stamp takes the one before it)."""
        stamps = [self.received]
        for stamp in (self.decided, self.picked, self.enqueued, self.grouped, self.sync_start, self.sync_done,
                      self.on_loop, self.replied):
            stamps.append(stamp or stamps[-1])
        return tuple(b - a for a, b in zip(stamps, stamps[1:], strict=False))

    @property
    def total_ns(self) -> int:
        return (self.replied or self.received) - self.received

    def as_dict(self) -> dict[str, Any]:
        return {
            "ledgerId": self.ledger_id,
            "firstEntryId": self.first_entry,
            "lastEntryId": self.last_entry,
            "entries": self.entries,
            "time": self.wall,
            "totalMs": self.total_ns / 1e6,
            "receivedNs": self.received,     # CLOCK_MONOTONIC: comparable with a client's stamps on this host
            "repliedNs": self.replied,
            "stagesMs": {name: ns / 1e6 for name, ns in zip(STAGES, self.stages_ns(), strict=True)},
            "slowestStage": slowest_stage(self.stages_ns()),
        }


def slowest_stage(stages_ns: tuple[int, ...]) -> str:
    return STAGES[max(range(len(STAGES)), key=lambda i: stages_ns[i])]


class AddTracer:
    """Samples add batches, finishes their traces: histograms (if set) and the slow-add log."""

    def __init__(self, sample_every: int, slow_threshold_ms: float, capacity: int) -> None:
        self.sample_every = max(0, sample_every)
        self.slow_threshold_ns = int(slow_threshold_ms * 1e6)
        self.capacity = max(1, capacity)
        self.histograms: tuple[StageObserver, ...] | None = None   # one per STAGE (bookie.metrics), or None
        self._count = 0
        self._slow: collections.deque[BatchTrace] = collections.deque(maxlen=self.capacity)
        self._lock = threading.Lock()
        self.slow_total = 0                 # slow batches seen since start (the log keeps the newest)

    def start(self, ledger_id: int, entry_ids: Any) -> BatchTrace | None:
        """A trace for this batch when it is sampled (on the event loop)."""
        if not self.sample_every:
            return None
        self._count += 1
        if self._count < self.sample_every:
            return None
        self._count = 0
        count = len(entry_ids)
        if not count:
            return None
        return BatchTrace(ledger_id, int(entry_ids[0]), int(entry_ids[count - 1]), count)

    def finish(self, trace: BatchTrace) -> None:
        """The batch's acknowledgement is queued: record where its time went."""
        trace.replied = time.perf_counter_ns()
        histograms = self.histograms
        if histograms is not None:
            for histogram, ns in zip(histograms, trace.stages_ns(), strict=True):
                histogram.observe(ns / 1e6)
        if trace.total_ns >= self.slow_threshold_ns:
            trace.wall = time.time()
            with self._lock:
                self._slow.append(trace)
                self.slow_total += 1

    def slow_adds(self) -> list[dict[str, Any]]:
        """The slow-add log, oldest first."""
        with self._lock:
            kept = list(self._slow)
        return [t.as_dict() for t in kept]

    def describe(self) -> dict[str, Any]:
        """The admin API's answer: the settings, the count and the log."""
        return {"sampleEvery": self.sample_every, "thresholdMs": self.slow_threshold_ns / 1e6,
                "capacity": self.capacity, "slowTotal": self.slow_total, "stages": list(STAGES),
                "slowAdds": self.slow_adds()}
