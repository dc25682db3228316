"""BookKeeper clients of the connector: one per metadata service URI per Python process, reused.

Spark reuses its Python worker processes across tasks (spark.python.worker.reuse), so a task finds the
client (ZooKeeper session, bookie connections, event loop thread) that an earlier task of the same
process opened, like a Kafka consumer pool on executors. The driver-side planning and commit code
(`planning_client`) runs in Python workers too and uses the same shared client. Clients are never
pickled: readers and writers carry only options and call `shared_client` where they run. Security
settings (TLS, ZooKeeper credentials) given as options travel with them and key the cache with the URI;
settings in the file named by BKLEDGER_CLIENT_CONF apply underneath (client.config). The first client of a
process also sets glibc's heap to keep freed large buffers for reuse (`wire.heap`).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Iterator

from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig
from bkledger.client.connector import MetadataStoreError
from bkledger.client.errors import ClientClosedError
from bkledger.wire import heap

Settings = tuple[tuple[str, str], ...]
_lock = threading.Lock()
_clients: dict[tuple[str, Settings], BookKeeper] = {}


def open_client(uri: str, settings: Settings = ()) -> BookKeeper:
    """A new client (the caller closes it) with the query's security settings over BKLEDGER_CLIENT_CONF's."""
    return BookKeeper(uri, config=ClientConfig.from_environment(dict(settings)))


def shared_client(uri: str, settings: Settings = ()) -> BookKeeper:
    """This process's client for `uri` and `settings` (opened on first use, closed at exit)."""
    with _lock:
        bk = _clients.get((uri, settings))
        if bk is None:
            heap.keep_large_buffers()    # Spark's Python workers: freed chunk buffers are reused, not unmapped
            bk = open_client(uri, settings)
            _clients[(uri, settings)] = bk
        return bk


def drop_client(uri: str, settings: Settings = ()) -> None:
    """Close and forget the cached client (after it broke), so the next task opens a fresh one."""
    with _lock:
        bk = _clients.pop((uri, settings), None)
    if bk is not None:
        with contextlib.suppress(Exception):
            bk.close()


@contextlib.contextmanager
def planning_client(uri: str, settings: Settings = ()) -> Iterator[BookKeeper]:
    """The client for driver-side planning or commit: the process's shared one too (these run in Python
    workers that Spark reuses, so a read's schema and planning steps no longer open and close a ZooKeeper
    session each). A client that failed with a client or metadata-store error is dropped, not reused."""
    bk = shared_client(uri, settings)
    try:
        yield bk
    except (ClientClosedError, MetadataStoreError):
        drop_client(uri, settings)
        raise


@atexit.register
def close_all() -> None:
    """Close every cached client of this process (at exit; tests call it when a module is done)."""
    for uri, settings in list(_clients):
        drop_client(uri, settings)
