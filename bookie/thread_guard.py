"""What the bookie's background threads do with an exception they did not expect: never die silently.

Every long-lived thread of a bookie (journal, storage, checkpoint, gc, registrar) runs its rounds under
`ThreadFailures.guard`: an exception is logged with its traceback and counted per thread (the metric
`bookie_THREAD_FAILURES{thread=...}`), and the thread goes on with its next round. A failure for want of
file descriptors (EMFILE, ENFILE: a flood of connections, a low `ulimit -n`) is not a bug to trace: it
is logged in one line, at most once per OUT_OF_DESCRIPTORS_LOG_INTERVAL_S per thread (bookie.log_limit),
with how many were left out, and counted like any other (a checkpoint every 200 ms wrote a traceback
each). Whether the failure also turns the bookie read-only is the thread's owner's call (a failed
journal or repeated failed checkpoints do, as BookKeeper does on a failed disk).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator

from bkledger.bookie.core import decisions
from bkledger.bookie.log_limit import LogLimit, left_out_note

log = logging.getLogger("bkledger.bookie")
OUT_OF_DESCRIPTORS_LOG_INTERVAL_S = 10.0


class ThreadFailures:
    """Unexpected exceptions per thread name, since the process started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._descriptor_lines: dict[str, LogLimit] = {}

    def record(self, thread: str, what: str) -> None:
        """Log the exception being handled (with its traceback) and count it for `thread`."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError) and decisions.out_of_descriptors(exc.errno):
            self._out_of_descriptors(thread, what, exc)
        else:
            log.exception("%s thread: %s failed", thread, what)
        with self._lock:
            self._counts[thread] = self._counts.get(thread, 0) + 1

    def _out_of_descriptors(self, thread: str, what: str, exc: OSError) -> None:
        with self._lock:
            limit = self._descriptor_lines.setdefault(thread, LogLimit(OUT_OF_DESCRIPTORS_LOG_INTERVAL_S))
            left_out = limit.allow()
        if left_out is not None:
            log.warning("%s thread: %s failed: out of file descriptors (%s; too many connections?), tried again "
                        "next round%s", thread, what, exc, left_out_note(left_out))

    @contextlib.contextmanager
    def guard(self, thread: str, what: str) -> Iterator[None]:
        """Run a round of `thread`'s work: an Exception from it is recorded, not raised."""
        try:
            yield
        except Exception:  # noqa: BLE001 - the point: a background thread never dies of one round
            self.record(thread, what)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


THREADS = ("journal", "storage", "checkpoint", "gc", "registrar", "disk-check")   # disk-check: a task on the loop
FAILURES = ThreadFailures()     # one bookie per process: its threads count here
