"""One log line per interval for an event a client can repeat at will (a refused connection, a failed accept).

A hostile client that opens connections as fast as it can must not fill the bookie's disk with log lines:
the first event is logged, later ones only once per interval, each saying how many were left out since.
Counting stays exact in the metrics; only the lines are limited.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class LogLimit:
    """`allow()`: None to leave this event's line out, else how many were left out before it."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last: float | None = None
        self._left_out = 0

    def allow(self) -> int | None:
        now = self._clock()
        if self._last is not None and now - self._last < self.interval_s:
            self._left_out += 1
            return None
        left_out, self._left_out, self._last = self._left_out, 0, now
        return left_out


def left_out_note(left_out: int) -> str:
    """'' or '; 12 more since the last such line' for the end of a limited line."""
    return f"; {left_out} more since the last such line" if left_out else ""
