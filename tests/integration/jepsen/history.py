"""Histories as Jepsen keeps them: one JSON object per line, appended and flushed per event, so a worker
killed with -9 leaves every event it wrote. An operation is `invoke`d, then completes `ok` (it happened),
`fail` (it definitely did not) or `info` (unknown: it may or may not have happened). An invoke with no
completion (the worker was killed or never heard back) counts as `info`: never as lost, never as failed.

Events carry `worker` (the worker's stable name), `incarnation` (how many times it was restarted),
`type` (invoke, ok, fail, info), `f` (send, txn, process, ack) and what the operation was about."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

Event = dict[str, Any]


class History:
    """An append-only history file of one worker incarnation; thread-safe."""

    def __init__(self, path: Path, worker: str, incarnation: int) -> None:
        self._file: IO[str] = open(path, "a", encoding="utf-8")   # noqa: SIM115 - kept open for the worker's life
        self._lock = threading.Lock()
        self.worker = worker
        self.incarnation = incarnation

    def write(self, kind: str, f: str, **fields: Any) -> None:
        event = {"worker": self.worker, "incarnation": self.incarnation, "type": kind, "f": f,
                 "time": time.time(), **fields}
        line = json.dumps(event, sort_keys=True)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_histories(paths: list[Path]) -> list[Event]:
    """Every event of the files, in file order; a torn last line (a kill -9 mid-write) is skipped."""
    return [event for path in paths for event in _events(path)]


def _events(path: Path) -> Iterator[Event]:
    if not path.exists():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event
