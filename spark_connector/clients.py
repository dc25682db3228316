"""BookKeeper clients of the connector: one per metadata service URI per Python process, reused.

Spark reuses its Python worker processes across tasks (spark.python.worker.reuse), so a task finds the
client (ZooKeeper session, bookie connections, event loop thread) that an earlier task of the same
process opened, like a Kafka consumer pool on executors. The driver-side planning code opens a
short-lived client with `planning_client` instead, closed when planning is done. Clients are never
pickled: readers and writers carry only options and call `shared_client` where they run.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Iterator

from client import BookKeeper

_lock = threading.Lock()
_clients: dict[str, BookKeeper] = {}


def shared_client(uri: str) -> BookKeeper:
    """This process's client for `uri` (opened on first use, closed at exit)."""
    with _lock:
        bk = _clients.get(uri)
        if bk is None:
            bk = BookKeeper(uri)
            _clients[uri] = bk
        return bk


def drop_client(uri: str) -> None:
    """Close and forget the cached client (after it broke), so the next task opens a fresh one."""
    with _lock:
        bk = _clients.pop(uri, None)
    if bk is not None:
        with contextlib.suppress(Exception):
            bk.close()


@contextlib.contextmanager
def planning_client(uri: str) -> Iterator[BookKeeper]:
    """A client for driver-side planning or commit, closed afterwards."""
    bk = BookKeeper(uri)
    try:
        yield bk
    finally:
        with contextlib.suppress(Exception):
            bk.close()


@atexit.register
def _close_all() -> None:
    for uri in list(_clients):
        drop_client(uri)
