"""A TCP proxy in front of ZooKeeper that loses one answer: once armed, it forwards the next multi
(transaction) request to the server, swallows the server's reply, runs a callback, and closes the client's
connection. The transaction is applied but the client sees a connection loss: ZooKeeper's ambiguous
answer, for real (the client reconnects through the proxy and resumes its session).

Jute framing: every packet is a 4-byte big-endian length and a body; after the connect handshake a
request body starts with xid (int32) and type (int32; 14 = multi), a reply with xid, zxid and err.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable

MULTI = 14


def _packets(buffer: bytearray) -> list[bytes]:
    out = []
    while len(buffer) >= 4:
        (length,) = struct.unpack(">i", buffer[:4])
        if len(buffer) < 4 + length:
            break
        out.append(bytes(buffer[:4 + length]))
        del buffer[:4 + length]
    return out


class DropProxy:
    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.armed: Callable[[], None] | None = None
        self.dropped = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, callback: Callable[[], None]) -> None:
        """Lose the reply of the next multi; run `callback` before the client's connection closes."""
        self.armed = callback

    def close(self) -> None:
        self.server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            pending: dict[str, int | None] = {"xid": None}
            threading.Thread(target=self._up, args=(client, upstream, pending), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client, pending), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, pending: dict[str, int | None]) -> None:
        buffer, first = bytearray(), True
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                buffer += data
                for packet in _packets(buffer):
                    if not first and len(packet) >= 12 and self.armed is not None and pending["xid"] is None:
                        xid, kind = struct.unpack(">ii", packet[4:12])
                        if kind == MULTI:
                            pending["xid"] = xid
                    first = False
                    upstream.sendall(packet)
        _close(client, upstream)

    def _down(self, upstream: socket.socket, client: socket.socket, pending: dict[str, int | None]) -> None:
        buffer, first = bytearray(), True
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                buffer += data
                for packet in _packets(buffer):
                    if not first and pending["xid"] is not None and len(packet) >= 8 \
                            and struct.unpack(">i", packet[4:8])[0] == pending["xid"]:
                        callback, self.armed = self.armed, None
                        if callback is not None:
                            callback()
                        self.dropped.set()
                        _close(client, upstream)
                        return
                    first = False
                    client.sendall(packet)
        _close(client, upstream)


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            s.close()
