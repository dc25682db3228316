"""The bookie's add port (`addStreamPort`): AddStream's requests over plain TCP (framing: wire.add_stream).

Each connection is an asyncio Protocol on the bookie's event loop: the bytes read are cut into frames,
each AddRequest is parsed and checked as AddStream's are (bookie.request_guard.parse_add_stream) and its
batches go to `BookieService.submit_batch`, the same decision (bookie.core.machine) and the same journal
as over gRPC; acks are written as they come, those ready together in one AddResponse frame. What breaks
the framing or does not parse is refused as AddStream refuses it: the batches read before it are answered,
then one REFUSED frame says why, the connection is closed and nothing after it is read; the bookie logs a
warning and counts it (`bookie_ADD_PORT_REFUSED`). A client that stops reading its acks stops being read
(the transport's write buffer is the bound, as HTTP/2's flow control is gRPC's). At most
`addStreamPortMaxConnections` connections are open at once (bookie.service keeps it under a quarter of the
open-file limit): one more gets a REFUSED frame and the close before anything is read, counted the same
way and logged once per REFUSAL_LOG_INTERVAL_S (bookie.log_limit), so that a client opening connections
at will can neither take the descriptors the journal and the entry logs need nor flood the log.

There is no TLS on this port: a bookie that serves TLS refuses `addStreamPort` (bookie.config). The port
the bookie listens on is in its registration (`addStreamPort`), which is how clients find it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import TYPE_CHECKING, Any

from bkledger.bookie.log_limit import LogLimit, left_out_note
from bkledger.bookie.request_guard import parse_add_stream
from bkledger.bookie.server import add_response_bytes
from bkledger.wire.add_stream import MAGIC, REFUSED, REQUEST, RESPONSE, FrameError, FrameReader, frame, header

if TYPE_CHECKING:
    from bkledger.bookie.server import BookieService

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 2.0      # at shutdown: how long open connections are given to take their last acks
REFUSAL_LOG_INTERVAL_S = 10.0   # at most one line per this for connections refused past the limit


class AddPortConnection(asyncio.Protocol):
    """One client's add stream on the add port."""

    def __init__(self, service: BookieService, connections: set[AddPortConnection], max_connections: int,
                 refusals: LogLimit) -> None:
        self.service = service
        self.connections = connections
        self.max_connections = max_connections
        self.refusals = refusals
        self.reader = FrameReader(frozenset({REQUEST}), service.max_message_bytes, MAGIC)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.outstanding = 0              # batches submitted and not yet answered
        self.refused: str | None = None   # why the stream is refused; sent once `outstanding` is 0
        self._acks: list[bytes] = []
        self._flush_scheduled = False
        self._eof = False                 # the client sent all it will send

    # ---- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if len(self.connections) >= self.max_connections:
            self._refuse_connection()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections.add(self)
        log.debug("add port: connection from %s", self.peer)

    def _refuse_connection(self) -> None:
        """One connection past addStreamPortMaxConnections: a REFUSED frame saying why, then the close,
        before anything is read; counted, and logged at most once per REFUSAL_LOG_INTERVAL_S."""
        self.service.stats.request("add_port_refused")
        self.refused = (f"too many connections: {len(self.connections)} open (addStreamPortMaxConnections); "
                        "try again later or over bookiePort (useAddStreamPort=false)")
        left_out = self.refusals.allow()
        if left_out is not None:
            log.warning("add port: refused a connection from %s: %d connections open (addStreamPortMaxConnections)%s",
                        self.peer, len(self.connections), left_out_note(left_out))
        self._end()

    def data_received(self, data: bytes) -> None:
        if self.refused is not None:
            return
        try:
            frames = self.reader.feed(data)
        except FrameError as exc:
            self._refuse(str(exc))
            return
        for _kind, body in frames:       # the reader takes REQUEST frames only
            request = parse_add_stream(body)
            if not isinstance(request, list):
                self._refuse(request.why)
                return
            for batch in request:
                self.outstanding += 1
                self.service.submit_batch(batch, self._reply, self.peer)

    def eof_received(self) -> bool:
        """The client has sent all its requests (its done_writing): answer them, then close."""
        self._eof = True
        if self.outstanding == 0 and not self._acks and self.transport is not None and self.refused is None:
            self.transport.close()
        return True     # keep the connection open for the acks still to come

    def pause_writing(self) -> None:
        """The client does not read its acks: stop reading its requests until it does."""
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and self.refused is None and not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if exc is not None:
            log.info("add port: connection from %s lost: %s", self.peer, exc)
        else:
            log.debug("add port: connection from %s closed", self.peer)

    # ---- acks -------------------------------------------------------------------------------
    def _reply(self, ack: bytes) -> None:
        """A batch's ack (on the loop): written with the others ready in the same turn of the loop."""
        self.outstanding -= 1
        self._acks.append(ack)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        acks, self._acks = self._acks, []
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        body = add_response_bytes(acks)
        transport.writelines((header(RESPONSE, len(body)), body))
        if self.outstanding == 0 and self.refused is not None:
            self._end()
        elif self.outstanding == 0 and self._eof:
            transport.close()

    def _refuse(self, why: str) -> None:
        """Read nothing more; answer what was read, then say why and close (see the module doc)."""
        self.service.stats.request("add_port_refused")
        log.warning("add port: stream from %s refused: %s", self.peer, why)
        self.refused = why
        if self.transport is not None:
            self.transport.pause_reading()
        if self.outstanding == 0 and not self._acks:
            self._end()

    def _end(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(frame(REFUSED, (self.refused or "").encode()[:4096]))
        transport.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class AddPort:
    """The listening add port and its connections."""

    def __init__(self, server: asyncio.Server, connections: set[AddPortConnection]) -> None:
        self.server = server
        self.connections = connections

    @property
    def port(self) -> int:
        sockets: Any = self.server.sockets
        return int(sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening; give open connections CLOSE_WAIT_S to take their last acks, then close them."""
        self.server.close()
        deadline = asyncio.get_running_loop().time() + CLOSE_WAIT_S
        while any(c.outstanding for c in self.connections) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            connection.close()


async def open_add_port(service: BookieService, host: str, port: int, max_connections: int) -> AddPort:
    """Listen on host:port (0: a port the system picks) for add streams, at most `max_connections` open at
    once; OSError if it cannot be bound."""
    connections: set[AddPortConnection] = set()
    refusals = LogLimit(REFUSAL_LOG_INTERVAL_S)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: AddPortConnection(service, connections, max_connections, refusals),
                                      host, port, reuse_address=True)
    return AddPort(server, connections)
