"""Is the writer of a log alive? Leases held by LogWriters, checked before anyone seals a log's tail.

A `LogWriter` holds a lease (an ephemeral znode, `client.meta.log_leases`) on each ledger it appends to,
taken right after creating the ledger and so BEFORE the ledger enters the log's list, and dropped once the
ledger is closed (roll, close) or discarded. So while a log's last ledger is open and its writer process
lives, that ledger has a lease; when the process dies, its ZooKeeper session expires and the lease goes.

`check_live_writer` is what `append_ledgers` (the Spark append and the streaming sink's commit) runs before
fencing the tail (R28 step 2): an open last ledger with a lease means a live writer, and appending would
fence it silently, so it raises LiveLogWriterError unless the caller asked for a takeover. An open last
ledger without a lease is a dead writer's: it is recovered as before. A LogWriter opening over a live one
still fences it (R28: there is one writer, the newest).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING

from bkledger.client.errors import BKError, LiveLogWriterError
from bkledger.client.meta import log_leases
from bkledger.client.protocol.metadata import LedgerState

if TYPE_CHECKING:
    from bkledger.client.log.core.meta import LogMetadata
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper

log = logging.getLogger("bkledger.logs")


class WriterLeases:
    """The leases one LogWriter holds (at most two during a roll). Best effort: a lease that cannot be
    taken leaves the writer unprotected (as without leases), never stops it."""

    def __init__(self, bk: BookKeeper, name: str) -> None:
        self._bk = bk
        self._name = name
        self._held: set[int] = set()
        self._lock = threading.Lock()

    def hold(self, ledger_id: int) -> None:
        info: dict[str, str | int] = {"host": socket.gethostname(), "pid": os.getpid(),
                                      "since_ms": int(time.time() * 1000)}
        try:
            log_leases.hold(self._bk.store, self._name, ledger_id, info)
        except BKError as exc:
            log.warning("log %r: could not take the writer lease of ledger %d (a Spark append could fence "
                        "this writer): %s", self._name, ledger_id, exc)
            return
        with self._lock:
            self._held.add(ledger_id)

    def release(self, ledger_id: int) -> None:
        with self._lock:
            if ledger_id not in self._held:
                return
            self._held.discard(ledger_id)
        try:
            log_leases.release(self._bk.store, self._name, ledger_id)
        except BKError as exc:      # it ends with the session anyway, and a closed ledger's lease is ignored
            log.warning("log %r: could not drop the writer lease of ledger %d: %s", self._name, ledger_id, exc)

    def release_all(self) -> None:
        with self._lock:
            held = sorted(self._held)
        for ledger_id in held:
            self.release(ledger_id)


def live_writer(bk: BookKeeper, meta: LogMetadata) -> dict[str, str] | None:
    """The holder of the lease on the log's last ledger if that ledger is open (a live writer), else None."""
    if not meta.ledgers or meta.ledgers[-1].sealed:
        return None
    tail = meta.ledgers[-1].ledger_id
    holder = log_leases.holder(bk.store, meta.name, tail)
    if holder is None:
        return None
    try:
        if bk.ledger_metadata(tail).state is LedgerState.CLOSED:
            return None                       # closed, not yet recorded as sealed: nothing to fence
    except BKError:
        pass
    return {**holder, "ledger_id": str(tail)}


def check_live_writer(bk: BookKeeper, meta: LogMetadata, fence_live_writer: bool) -> None:
    """LiveLogWriterError if sealing the log's tail would fence a live writer, unless `fence_live_writer`."""
    holder = live_writer(bk, meta)
    if holder is None:
        return
    who = f"{holder.get('host', '?')} pid {holder.get('pid', '?')}"
    if fence_live_writer:
        log.warning("log %r: fencing the live writer of ledger %s (%s) as asked (fenceLiveWriter)",
                    meta.name, holder["ledger_id"], who)
        return
    raise LiveLogWriterError(
        f"log {meta.name!r}: its last ledger {holder['ledger_id']} is open and its writer ({who}) is alive; "
        "appending would fence that writer. Close the writer first (or let it die: its lease ends with its "
        "ZooKeeper session), or take over explicitly with option fenceLiveWriter=true "
        "(append_ledgers(..., fence_live_writer=True)); the writer's next append then fails with LogFencedError")
