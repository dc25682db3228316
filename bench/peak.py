"""The peak add_latency's loads are fractions of, and the search that caps it at what an open loop sustains.

The closed loops' median (bench.client_add `_peak`) varied 93k-135k adds/s between passes on this machine,
and an open loop at 80% of a high draw fell behind (at 108,373 adds/s 86,838 were acknowledged, p99 2.5 s):
a closed loop keeps 20,000 adds in flight and submits in bursts, while the open loop's timer thread wakes
per due add and competes with the client for the GIL. So the peak is the closed loops' median only when an
open loop in the latency runs' own conditions keeps up at it; otherwise the search steps down below what the
last probe acknowledged while behind, a few probes at most, and the peak is the highest rate that kept up.
This module is the pure part: which rate to probe next and what the peak is, from the probes so far.
"""

from __future__ import annotations

import dataclasses
import statistics

KEPT_UP = 0.97       # a probe keeps up when it acknowledges at least this share of its scheduled rate
BELOW_ACKED = 0.95   # the next probe's rate, as a share of what a probe that fell behind acknowledged


@dataclasses.dataclass(frozen=True)
class Probe:
    """One open-loop run of the search: the rate scheduled and the rate acknowledged, entries/s."""

    rate: float
    achieved: float

    @property
    def kept_up(self) -> bool:
        return self.achieved >= KEPT_UP * self.rate


@dataclasses.dataclass
class Peak:
    """The closed loops' entries/s (`runs`), the open-loop probes after them, and the rate they settle."""

    runs: list[float]                 # entries/s of each closed-loop run
    group_bytes: float | None         # the bookies' average journal group in the median closed run
    probes: list[Probe] = dataclasses.field(default_factory=list)

    @property
    def closed(self) -> float:
        return statistics.median(self.runs)

    @property
    def rate(self) -> float:
        """The highest probe rate that kept up; with no probe, the closed loops' median; with none that kept
        up, the rate the next probe would have had (said so by `describe`)."""
        kept = [p.rate for p in self.probes if p.kept_up]
        if kept:
            return max(kept)
        return _below(self.probes[-1]) if self.probes else self.closed


def next_probe(peak: Peak, limit: int) -> float | None:
    """The rate of the next open-loop probe, or None once one kept up or `limit` probes have run."""
    if len(peak.probes) >= limit or any(p.kept_up for p in peak.probes):
        return None
    return _below(peak.probes[-1]) if peak.probes else peak.closed


def _below(probe: Probe) -> float:
    return min(probe.rate, probe.achieved) * BELOW_ACKED


def describe(peak: Peak) -> str:
    """The probes as a row's words: each rate with the share of it acknowledged, and the outcome."""
    if not peak.probes:
        return "no open-loop probe ran: the closed loops' median"
    probes = ", ".join(f"{p.rate:,.0f} ({p.achieved / p.rate:.2f} acknowledged)" for p in peak.probes)
    if any(p.kept_up for p in peak.probes):
        return f"open loops at {probes}: the highest that kept up (>= {KEPT_UP:.2f})"
    return (f"open loops at {probes}: none kept up (>= {KEPT_UP:.2f}), so {BELOW_ACKED:.2f} of what the last "
            "acknowledged, not confirmed")
