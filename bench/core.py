"""What every benchmark shares: the result row, the run's sizes (full / quick / tiny) and the context.

A benchmark is a plain function `(Context) -> list[Row]`, registered by name in `bench.run.BENCHMARKS`.
The context owns the data directory, the cleanup stacks (clusters are stopped there, always: a
benchmark's own when it ends, a shared session's after the last benchmark that uses it), the cache of
disk limits measured in this run, and a small store benchmarks use to hand results to each other
(bookie_read reads what bookie_add wrote).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

KiB = 1024
MiB = 1024 * 1024
MB = 1_000_000.0  # throughput is reported in MB/s (10^6 bytes), as disks are

TINY_ENV = "BKLEDGER_BENCH_TINY"


@dataclasses.dataclass
class Row:
    """One figure: its value, the limit it is compared to (same unit, same run) and why that limit."""

    benchmark: str
    figure: str
    value: float | None         # None: not measured (the why says so), printed as "-"
    unit: str
    limit: float | None = None
    why: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or self.limit is None or self.limit <= 0:
            return None
        return self.value / self.limit

    def as_dict(self) -> dict[str, object]:
        return {
            "benchmark": self.benchmark,
            "figure": self.figure,
            "value": self.value,
            "unit": self.unit,
            "limit": self.limit,
            "ratio": self.ratio,
            "why": self.why,
        }


@dataclasses.dataclass(frozen=True)
class Settings:
    """How long and how big: one set for the full run, one for --quick, one for the smoke test."""

    mode: str
    limit_seconds: float        # per group size of the raw append + fdatasync limit
    add_seconds: float          # per entry size of bookie_add
    window_entries: int         # entries in flight on the add stream
    group_sizes: tuple[int, ...] = (4 * KiB, 64 * KiB, 256 * KiB, MiB)
    compare_group_sizes: tuple[int, ...] = (64 * KiB, 256 * KiB, MiB)

    @staticmethod
    def pick(quick: bool) -> Settings:
        if os.environ.get(TINY_ENV, "") not in ("", "0"):
            return Settings("tiny", limit_seconds=0.2, add_seconds=0.3, window_entries=5_000)
        if quick:
            return Settings("quick", limit_seconds=0.75, add_seconds=2.0, window_entries=20_000)
        return Settings("full", limit_seconds=5.0, add_seconds=20.0, window_entries=20_000)


FsyncLimit = tuple[float, float]  # (MB/s, fsyncs/s)


class Context:
    """The state of one `bench.run` invocation, handed to every benchmark."""

    def __init__(self, data_dir: Path, settings: Settings, stack: contextlib.ExitStack) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.run_stack = stack
        self.stack = stack          # bench.run gives each benchmark a stack of its own, closed when it ends
        self.shared: dict[str, object] = {}
        self._shared_stacks: dict[str, contextlib.ExitStack] = {}
        self.kept: dict[str, Path] = {}     # shared session -> its directory, kept between benchmarks
        self.facts: dict[str, object] = {}  # extra facts for the JSON (e.g. the bookie's configuration)
        self._limits: dict[int, FsyncLimit] = {}

    def shared_stack(self, key: str, path: Path) -> contextlib.ExitStack:
        """The cleanup stack of the session `key` that several benchmarks share, living in `path`: closed
        by `release` (after the last benchmark that uses it) or at the end of the run."""
        if key not in self._shared_stacks:
            stack = contextlib.ExitStack()
            self.run_stack.callback(stack.close)
            self._shared_stacks[key] = stack
        self.kept[key] = path
        return self._shared_stacks[key]

    def release(self, key: str) -> None:
        """Stop the shared session `key` and free its disk; a later benchmark would start a new one."""
        self.shared.pop(key, None)
        self.kept.pop(key, None)
        stack = self._shared_stacks.pop(key, None)
        if stack is not None:
            stack.close()

    def fsync_limit(self, group_bytes: int, measure: Callable[[Path, int, float], FsyncLimit]) -> FsyncLimit:
        """The raw append + fdatasync limit at `group_bytes`, measured once per run and then reused."""
        if group_bytes not in self._limits:
            self._limits[group_bytes] = measure(self.data_dir, group_bytes, self.settings.limit_seconds)
        return self._limits[group_bytes]


Benchmark = Callable[[Context], list[Row]]


def size_label(nbytes: int) -> str:
    """4096 -> '4 KiB', 1048576 -> '1 MiB', 100 -> '100 B'."""
    if nbytes >= MiB and nbytes % MiB == 0:
        return f"{nbytes // MiB} MiB"
    if nbytes >= KiB and nbytes % KiB == 0:
        return f"{nbytes // KiB} KiB"
    return f"{nbytes} B"


def timer_loop(submit: Callable[[int, int], None], rate: float, count: int, start: float, tick: float,
               stopped: Callable[[], bool] = lambda: False) -> None:
    """An open loop's timer: entry i is due at `start` + i / `rate`. It sleeps until the next entry is due
    (at most `tick`) and calls `submit(first, end)` with the entries due by then, whatever the answers are
    doing, until `count` entries are submitted or `stopped()`."""
    submitted = 0
    while submitted < count and not stopped():
        now = time.perf_counter()
        due = min(count, int((now - start) * rate) + 1) if now >= start else 0
        if due > submitted:
            submit(submitted, due)
            submitted = due
        time.sleep(max(0.0, min(tick, start + submitted / rate - time.perf_counter())))
