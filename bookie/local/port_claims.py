"""Machine-wide claims on the ports that `free_port` hands out, so two processes are never handed one port.

A port is free when the kernel offers it to a probing socket, and it stays unbound until the server it was
picked for binds it: a bookie or ZooKeeper process started afterwards, a second or more later. The kernel
offers ports at random, so two processes that pick ports in that window (two test workers under
`pytest -n 2`, two `bkledger local up`, a test run beside a demo) can be handed the same one, and the
second server to start fails.

A claim is a Unix socket bound to the abstract name `bkledger-port-claim-<port>` (Linux): the kernel lets
one socket at a time hold a name, so of two processes claiming a port at once exactly one gets it, with no
file, lock or clean-up. The claiming process holds the socket for `CLAIM_TTL_S` (its server has bound the
port by then, or never will) and closes it at its next claim after that; a process that ends releases its
claims with it. Abstract names belong to the network namespace, as the ports do. Where such a socket
cannot be made (not Linux) every claim succeeds: ports are then unique within the process only, as before.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time

log = logging.getLogger("bkledger.local")

CLAIM_TTL_S = 120.0
NAME_PREFIX = "bkledger-port-claim-"

_lock = threading.Lock()
_held: dict[int, tuple[socket.socket, float]] = {}      # port -> (claiming socket, monotonic deadline)


def claim(port: int, ttl: float = CLAIM_TTL_S) -> bool:
    """Claim `port` for this process for `ttl` seconds; False if another process holds a claim on it."""
    with _lock:
        _release_expired(time.monotonic())
        if port in _held:
            return True
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(f"\0{NAME_PREFIX}{port}")
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                return False
            log.debug("port claims unavailable (%s): port %d is unique within this process only", exc, port)
            return True
        _held[port] = (sock, time.monotonic() + ttl)
        return True


def held() -> set[int]:
    """The ports this process holds claims on now."""
    with _lock:
        return set(_held)


def _release_expired(now: float) -> None:
    for port in [p for p, (_, deadline) in _held.items() if deadline <= now]:
        _held.pop(port)[0].close()
