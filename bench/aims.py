"""Figures measured in several runs, each run printed with its aim and whether it met it, then the spread.

The rule of the bench (issue 44 item 6, issue 42 item 7): a target is a ratio to a limit measured in the
same run (or, where the issue says so, a value: entries behind, disk bytes per payload byte), never a
timed assertion in a test; every run is reported with the spread of the runs, never the best draw.
`aim_rows` prints one row per run (value, limit, ratio and "aim ... met / NOT met") and one spread row
(min / median / max and how many runs met the aim); `latency_rows` does the same for p50/p99 latencies.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from bench.core import Row


@dataclasses.dataclass(frozen=True)
class Aim:
    """`ratio >= 0.8` (on="ratio": value / limit) or `value <= 0` (on="value")."""

    op: str                 # ">=" or "<="
    target: float
    on: str = "ratio"

    def judged(self, value: float, limit: float | None) -> float | None:
        if self.on == "value":
            return value
        return None if limit is None or limit <= 0 else value / limit

    def met(self, value: float, limit: float | None) -> bool | None:
        got = self.judged(value, limit)
        if got is None:
            return None
        return got >= self.target if self.op == ">=" else got <= self.target

    @property
    def text(self) -> str:
        return f"aim {self.on} {self.op} {self.target:g}"

    def verdict(self, value: float, limit: float | None) -> str:
        met = self.met(value, limit)
        return f"{self.text}: " + ("no limit" if met is None else "met" if met else "NOT met")


def _g(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def aim_rows(benchmark: str, figure: str, unit: str, runs: Sequence[tuple[float, float | None]],
             aim: Aim, why: str) -> list[Row]:
    """One row per run (value, limit of that same run) saying whether it met `aim`, then the spread."""
    rows = [Row(benchmark, f"{figure}: run {k}", value, unit, limit, f"{why}; {aim.verdict(value, limit)}")
            for k, (value, limit) in enumerate(runs, 1)]
    judged = [aim.judged(v, lim) for v, lim in runs]
    known = sorted(j for j in judged if j is not None)
    values = sorted(v for v, _ in runs)
    met = sum(1 for v, lim in runs if aim.met(v, lim))
    spread = (f"{aim.on} min {_g(known[0])} / median {_g(statistics.median(known))} / max {_g(known[-1])}; "
              if known and aim.on == "ratio" else "")
    rows.append(Row(benchmark, f"{figure}: spread", statistics.median(values), unit, None,
                    f"{spread}value min {_g(values[0])} / median {_g(statistics.median(values))} / max "
                    f"{_g(values[-1])} {unit} over {len(runs)} runs; {aim.text} met in {met} of {len(runs)} runs"))
    return rows


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of sorted values."""
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def latency_rows(benchmark: str, figure: str, runs: Sequence[Sequence[float]], why: str) -> list[Row]:
    """Each run's p50/p99 (seconds in, ms out; the row's value is the p99), then the spread of each."""
    rows: list[Row] = []
    by_run = [sorted(r) for r in runs]
    for k, seconds in enumerate(by_run, 1):
        p50, p99 = (percentile(seconds, f) * 1000 for f in (0.5, 0.99))
        rows.append(Row(benchmark, f"{figure}: run {k} p99", p99, "ms", None,
                        f"p50 {p50:.2f}, p99 {p99:.2f} ms ({len(seconds)} timed); {why}"))
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        values = [percentile(s, fraction) * 1000 for s in by_run]
        ordered = sorted(values)
        rows.append(Row(benchmark, f"{figure}: {name} spread", statistics.median(values), "ms", None,
                        f"min {ordered[0]:.2f} / median {statistics.median(values):.2f} / max {ordered[-1]:.2f} "
                        f"ms over {len(values)} runs: " + ", ".join(f"{v:.1f}" for v in values)))
    return rows
