"""What the bookie's background threads do with an exception they did not expect: never die silently.

Every long-lived thread of a bookie (journal, storage, checkpoint, gc, registrar) runs its rounds under
`ThreadFailures.guard`: an exception is logged with its traceback and counted per thread (the metric
`bookie_THREAD_FAILURES{thread=...}`), and the thread goes on with its next round. Whether the failure
also turns the bookie read-only is the thread's owner's call (a failed journal or repeated failed
checkpoints do, as BookKeeper does on a failed disk).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

log = logging.getLogger("bkledger.bookie")


class ThreadFailures:
    """Unexpected exceptions per thread name, since the process started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def record(self, thread: str, what: str) -> None:
        """Log the exception being handled (with its traceback) and count it for `thread`."""
        log.exception("%s thread: %s failed", thread, what)
        with self._lock:
            self._counts[thread] = self._counts.get(thread, 0) + 1

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
