"""ZooKeeper trouble as one line: kazoo's reconnect chatter goes to DEBUG, the session says what happened.

kazoo logs every failed connection attempt at WARNING ("Connection dropped: socket connection error:
Connection refused", "Transition to CONNECTING", "Connection time-out", "Failed connecting to Zookeeper
within the connection retry policy."): 17 to 41 lines before a command could say that ZooKeeper was not
there. `KazooChatter` is the logger a `ZkSession` hands to kazoo: kazoo's own lines keep their text but
go to DEBUG (seen with a verbose CLI or `logging.getLogger("kazoo").setLevel(logging.DEBUG)`); errors
with a traceback (a bug in kazoo's loop) keep their level. What they say feeds a `ZkTrouble`, which
logs ONE warning when an established session loses ZooKeeper (host, what failed, what to check) and one
line when it is back, and gives the last reason to the error of a connection that never came up. A long
outage adds an INFO line after 2, 4, 8, 16, ... failed attempts (a daemon's log shows it goes on; a few
lines an hour, not one per attempt).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import MutableMapping
from typing import Any

log = logging.getLogger("bkledger.zookeeper")

_REASONS = {                       # kazoo's message prefix -> how the reason reads (None: not trouble)
    "Connection dropped: ": "",
    "Connection time-out: ": "connection timed out: ",
    "Cannot resolve ": "cannot resolve ",
    "Session has expired": "session expired (its ephemeral znodes are gone)",
    "AUTH_FAILED closing: ": "authentication failed: ",
}


def reason_of(text: str) -> str | None:
    """The trouble a kazoo log line reports, in a few words; None for a line that reports none."""
    for prefix, said in _REASONS.items():
        if text.startswith(prefix):
            return (said + text[len(prefix):]).strip() or prefix.rstrip(": ")
    return None


class ZkTrouble:
    """What went wrong with one session's connection, logged once per outage."""

    def __init__(self, hosts: str, session_timeout: float) -> None:
        self.hosts = hosts
        self.session_timeout = session_timeout
        self.last_reason: str | None = None
        self._connected_once = False
        self._since: float | None = None
        self._attempts = 0                 # failed attempts in the current outage
        self._lock = threading.Lock()

    def noted(self, text: str) -> None:
        """A line of kazoo's: if it reports trouble, remember it and, for an established session's first
        trouble since it was last connected, log one warning."""
        reason = reason_of(text)
        if reason is None:
            return
        with self._lock:
            self.last_reason = reason
            first = self._connected_once and self._since is None
            if first:
                self._since = time.monotonic()
            self._attempts += 1
            attempts, since = self._attempts, self._since
        if since is not None and not first and attempts & (attempts - 1) == 0:
            log.info("ZooKeeper at %s: still unreachable after %d attempts in %.1fs (%s)", self.hosts, attempts,
                     time.monotonic() - since, reason)
        if first:
            log.warning("ZooKeeper at %s: %s; retrying for up to %gs (kazoo's lines at DEBUG): check that "
                        "ZooKeeper runs and that this host reaches it", self.hosts, reason,
                        self.session_timeout)

    def connected(self) -> None:
        """The session is connected (again): one line if it had been in trouble."""
        with self._lock:
            since, self._since = self._since, None
            self._connected_once = True
            self._attempts = 0
        if since is not None:
            log.warning("ZooKeeper at %s: connected again after %.1fs", self.hosts, time.monotonic() - since)

    def why(self) -> str:
        """" (last: <reason>)" for an error message, or "" if nothing was reported."""
        return f" (last: {self.last_reason})" if self.last_reason else ""


class KazooChatter(logging.LoggerAdapter[logging.Logger]):
    """The logger kazoo gets: its lines below ERROR go to DEBUG of logger "kazoo.client" and feed `trouble`."""

    def __init__(self, trouble: ZkTrouble) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.trouble = trouble

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level < logging.ERROR:
            try:
                text = str(msg) % args if args else str(msg)
            except (TypeError, ValueError):
                text = str(msg)
            self.trouble.noted(text)
            level = min(level, logging.DEBUG)
        if self.logger.isEnabledFor(level):
            self.logger.log(level, msg, *args, **kwargs)

    def warn(self, msg: object, *args: Any, **kwargs: Any) -> None:    # kazoo still calls it; 3.13 has none
        self.log(logging.WARNING, msg, *args, **kwargs)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return msg, kwargs
