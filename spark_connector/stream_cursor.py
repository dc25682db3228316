"""One log as the streaming source's driver sees it: its ledgers now, cached views of CLOSED ones, where a
batch may start, and the pieces of a range. The source (`spark_connector.stream_source`) keeps one per log.

CLOSED ledgers are immutable, so their views are cached; OPEN ones are looked at again each time (opened
without recovery, R12). A ledger offloaded since it was cached is seen again as its file (`seam`), at the
same positions, so offsets in checkpoints written before an offload resolve after it. A start position
whose ledger is gone from the log is data loss.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from bkledger.client import BookKeeper, DataLossError, LogNotFoundError
from bkledger.client.log.core.meta import logical_ledgers, time_spans
from bkledger.spark_connector.batch_reader import ledger_view, recorded_view
from bkledger.spark_connector.narrowing import first_at_or_after
from bkledger.spark_connector.options import ReadOptions
from bkledger.spark_connector.planning import LedgerPartition, LedgerView, plan_partitions
from bkledger.spark_connector.seam import offloaded_views
from bkledger.spark_connector.stream_positions import BEFORE_ANY, Pos, Segment, ranges, readable_end
from bkledger.spark_connector.time_seek import TimeProbe

log = logging.getLogger("bkledger.spark.stream")

SAMPLE_ENTRIES = 32          # entries read to estimate the entry size of an OPEN ledger with no sealed sibling


class LogCursor:
    """The driver's view of one log of a stream (`opts` are the read options for that log)."""

    def __init__(self, name: str, opts: ReadOptions, bk: Callable[[], BookKeeper]) -> None:
        self.name = name
        self.opts = opts
        self._bk = bk
        self._closed_views: dict[int, LedgerView] = {}
        self._closed_sizes: dict[int, int] = {}
        self._sampled: dict[int, float] = {}
        self._spans: dict[int, tuple[int, int, bool]] = {}     # recorded time spans, as last listed

    def ledger_ids(self, from_ledger: int | None = None) -> list[int]:
        """The log's ledgers (positions' ids), [] if there is no such log (yet): all, or from
        `from_ledger`'s segment on (all if the log begins after it, so a truncated start is still seen as
        one): a trigger does not read a long log whole."""
        try:
            meta = self._bk().log_metadata(self.name, from_ledger=from_ledger)
        except LogNotFoundError:
            return []
        located = logical_ledgers(meta)            # positions' ledger ids (compaction keeps them)
        self._spans.update(time_spans(meta))
        offloaded = offloaded_views(meta)          # offloaded history: read from the files this listing names
        for led in located:                        # small CLOSED ledgers: the log's records are enough
            cached = self._closed_views.get(led.ledger_id)
            fresh = offloaded.get(led.ledger_id)
            moved = cached is not None and (cached.offloaded != fresh.offloaded if fresh is not None
                                            else led.compacted and cached.physical != led.physical)
            if (cached is None or moved) and (view := fresh or recorded_view(led, self.opts)):
                self._closed_views[led.ledger_id] = view
                self._closed_sizes[led.ledger_id] = view.size or 0
        return [led.ledger_id for led in located]

    def view(self, ledger_id: int) -> LedgerView:
        """The ledger as planning sees it (batch_reader.ledger_view); CLOSED ones are cached (immutable)."""
        cached = self._closed_views.get(ledger_id)
        if cached is not None:
            return cached
        view = ledger_view(self._bk(), ledger_id, self.opts.source)
        if view.closed:
            self._closed_views[ledger_id] = view
            self._closed_sizes[ledger_id] = view.size or 0
        return view

    def segments(self, from_ledger: int, ids: Sequence[int] | None = None) -> list[Segment]:
        """The log's ledgers at or after `from_ledger`, as readable now."""
        out = []
        for ledger_id in self.ledger_ids() if ids is None else ids:
            if ledger_id < from_ledger:
                continue
            view = self.view(ledger_id)
            out.append(Segment(ledger_id, view.last_entry_id + 1, view.closed, self._closed_sizes.get(ledger_id)))
        return out

    def avg_bytes(self, segments: Sequence[Segment]) -> dict[int, float]:
        known = [s.avg_entry_bytes for s in segments if s.avg_entry_bytes is not None]
        fallback = sum(known) / len(known) if known else None
        out: dict[int, float] = {}
        for seg in segments:
            avg = seg.avg_entry_bytes if seg.avg_entry_bytes is not None else fallback
            out[seg.ledger_id] = avg if avg is not None else self._sample(seg)
        return out

    def _sample(self, seg: Segment) -> float:
        """Average size of the first entries of an OPEN ledger (read once; used only for maxBytes)."""
        if seg.ledger_id not in self._sampled and seg.end > 0:
            rh = self._bk().open_ledger(seg.ledger_id, self.opts.source.password or None, recovery=False)
            chunk = rh.read_chunk(0, min(seg.end, SAMPLE_ENTRIES) - 1)
            self._sampled[seg.ledger_id] = sum(len(p) for p in chunk.payloads) / max(1, len(chunk.payloads))
        return self._sampled.get(seg.ledger_id, 1.0)

    def checked_start(self, start: Pos, ids: Sequence[int]) -> Pos:
        """`start`, or, if its ledger is gone from the log (truncated), DataLossError or the log's
        earliest position (failOnDataLoss=false)."""
        if start.ledger == -1 or start.ledger in ids:
            return start
        if ids and start.ledger < ids[0]:
            what = f"ledger {start.ledger} was truncated from log {self.name!r} (first ledger now {ids[0]})"
        else:
            what = f"ledger {start.ledger} is not in log {self.name!r} (ledgers {list(ids)[:5]}...)"
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{what}; set failOnDataLoss=false to continue from the earliest record, or "
                                "start a new query (new checkpoint)")
        log.warning("%s; continuing from the earliest record", what)
        return Pos(ids[0], 0) if ids else BEFORE_ANY

    def end_now(self) -> Pos:
        """Where the log's readable records end now."""
        ids = self.ledger_ids()
        return readable_end(self.segments(ids[0], ids), Pos(ids[0], 0)) if ids else BEFORE_ANY

    def initial(self, starting: str, at: Pos | None, time_ms: int | None) -> Pos:
        """Where a new query starts in this log: a time (first record at or after it, else the end: Kafka's
        startingOffsetsByTimestampStrategy=latest), a position, "earliest" or "latest"."""
        if at is not None and time_ms is None:
            return at
        ids = self.ledger_ids()
        if not ids:
            return BEFORE_ANY
        if time_ms is not None:
            segments = self.segments(ids[0], ids)
            end = readable_end(segments, Pos(ids[0], 0))
            spans = [(lid, lo, hi) for lid, (lo, hi) in sorted(ranges(segments, Pos(ids[0], 0), end).items())]
            probe = TimeProbe(self._bk(), [self.view(lid) for lid, _, _ in spans], self.opts.source.password or None,
                              self.name)
            found = first_at_or_after(spans, probe, time_ms * 1000, self._spans)
            return Pos(*found) if found is not None else end
        if starting == "earliest":
            return Pos(ids[0], 0)
        return readable_end(self.segments(ids[0], ids), Pos(ids[0], 0))

    def pieces(self, begin: Pos, stop: Pos) -> tuple[list[LedgerView], list[LedgerPartition]]:
        """The views and planned pieces of the records in [begin, stop) (a range Spark logged)."""
        if stop <= begin:
            return [], []
        ids = self.ledger_ids(begin.ledger if begin.ledger >= 0 else None)
        begin = self.checked_start(begin, ids)
        if stop.ledger not in ids:
            self.checked_start(stop, ids)              # the whole range is gone
            return [], []
        views = [self.view(i) for i in ids if begin.ledger <= i <= stop.ledger]
        segments = [Segment(v.ledger_id, v.last_entry_id + 1, v.closed) for v in views]
        for seg in segments[:-1]:
            if not seg.closed:
                raise AssertionError(f"ledger {seg.ledger_id} of log {self.name!r} is still OPEN but a "
                                     f"batch ends after it ({stop}): offsets not made by this source?")
        bounds = ranges(segments, begin, stop)
        return views, plan_partitions(self.name, views, bounds, self.opts.max_entries_per_partition,
                                      self.opts.target_partition_bytes)
