"""The client's end of a bookie's add port (`addStreamPort`; framing: wire.add_stream; bookie.add_port).

`AddPortCall` has the shape of the gRPC AddStream call that client.bookie_client drives (`write`,
`done_writing`, iteration over the AddResponses), so the connection's Nagle rule, its accounting of
requests in flight and its failure handling are the same over either. A bookie advertises its add port
in its registration; a client uses it unless `useAddStreamPort=false` or the client speaks TLS (the add
port is plaintext).

Failures are AddPortError (an OSError): the connection could not be made or broke, the bookie refused
the stream (its REFUSED frame's reason), or it sent bytes that are not this framing.
`AddPortCall.responses` counts the responses received: a stream that ends before any (a bookie refuses a
connection past its `addStreamPortMaxConnections` before reading from it) goes on over gRPC in
client.bookie_client.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

from google.protobuf.message import DecodeError

from bkledger.proto import bookie_pb2 as pb
from bkledger.wire.add_stream import HEADER_SIZE, KINDS, MAGIC, REFUSED, REQUEST, RESPONSE, header, unpack_header

__all__ = ["AddPortCall", "AddPortError"]

KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES = 10, 5, 3   # a silent peer is dead after ~25 s
USER_TIMEOUT_MS = 25_000      # ... and one that does not acknowledge what was sent to it, after 25 s


class AddPortError(OSError):
    """The add port's stream failed: why, and which bookie."""


class AddPortCall:
    """One add stream over a bookie's add port. `max_response`: the largest response frame taken."""

    def __init__(self, bookie_id: str, host: str, port: int, max_response: int) -> None:
        self.bookie_id = bookie_id
        self.host, self.port = host, port
        self.max_response = max_response
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.responses = 0     # AddResponses received on this stream

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    async def open(self, timeout: float) -> None:
        """Connect and send the preamble; AddPortError if the port cannot be reached within `timeout` s."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), timeout)
        except (OSError, TimeoutError) as exc:
            raise AddPortError(f"bookie {self.bookie_id}: cannot reach its add port {self.where} (addStreamPort in "
                               f"its registration): {exc!r}; with it unreachable from here, set useAddStreamPort="
                               "false to add over bookiePort") from exc
        _tune(writer.get_extra_info("socket"))
        writer.write(MAGIC)
        self._reader, self._writer = reader, writer

    async def write(self, data: bytes) -> None:
        """Send one serialized AddRequest (waits while the socket's buffer is full)."""
        await self.write_frame(self.frame_head(len(data)) + data)

    @staticmethod
    def frame_head(size: int) -> bytes:
        """The header of a request frame whose AddRequest has `size` bytes."""
        return header(REQUEST, size)

    async def write_frame(self, frame: bytes) -> None:
        """Send one request frame, `frame_head(n)` followed by an AddRequest of n bytes, built by the caller
        in one piece (a frame written as two would be joined by the transport: one more copy of it)."""
        writer = self._stream_writer()
        try:
            writer.write(frame)
            await writer.drain()
        except OSError as exc:
            raise AddPortError(f"bookie {self.bookie_id}: writing to its add port {self.where} failed: {exc!r}") \
                from exc

    async def done_writing(self) -> None:
        """No more requests: the bookie answers those sent, then closes."""
        writer = self._stream_writer()
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def __aiter__(self) -> AsyncIterator[pb.AddResponse]:
        return self._responses()

    async def _responses(self) -> AsyncIterator[pb.AddResponse]:
        """The bookie's AddResponses until it closes the stream; AddPortError if it ends it otherwise."""
        reader = self._reader
        assert reader is not None, "open() first"
        while True:
            kind, body = await self._frame(reader)
            if kind is None:
                return
            if kind == REFUSED:
                raise AddPortError(f"bookie {self.bookie_id} refused the add stream: "
                                   f"{body.decode('utf-8', 'replace')}")
            try:
                response = pb.AddResponse.FromString(body)
            except DecodeError as exc:
                raise self._broken(f"a response that does not parse: {exc}") from exc
            self.responses += 1
            yield response

    async def _frame(self, reader: asyncio.StreamReader) -> tuple[int | None, bytes]:
        try:
            head = await reader.readexactly(HEADER_SIZE)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise self._broken("it closed the stream inside a frame's header") from exc
            return None, b""
        except OSError as exc:
            raise self._broken(repr(exc)) from exc
        size, kind = unpack_header(head)
        if kind not in (RESPONSE, REFUSED):
            raise self._broken(f"a frame of kind {kind} ({KINDS.get(kind, 'unknown')}), where a response was due")
        if size > self.max_response:
            raise self._broken(f"a frame of {size} bytes, over the {self.max_response} taken")
        try:
            return kind, await reader.readexactly(size)
        except (asyncio.IncompleteReadError, OSError) as exc:
            raise self._broken(f"the stream ended inside a frame: {exc!r}") from exc

    def _broken(self, why: str) -> AddPortError:
        return AddPortError(f"bookie {self.bookie_id}: the add stream on {self.where} broke: {why}")

    def _stream_writer(self) -> asyncio.StreamWriter:
        assert self._writer is not None, "open() first"
        return self._writer


def _tune(sock: socket.socket | None) -> None:
    """No Nagle delay (requests leave as they are written); keepalive probes and a user timeout find a
    peer that went away silently, as gRPC's keepalive pings do on bookiePort."""
    if sock is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPALIVE_PROBES)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT_MS)
