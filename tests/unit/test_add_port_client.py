"""The client's end of an add port (client.add_port) against a scripted server on a local socket: every way
the other end can fail the stream is an AddPortError that says which bookie and why, the connection's
ledgers hear that the bookie failed, and a registration's add port is read as a bookie may have written it."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Awaitable, Callable

import pytest

from bkledger.client.add_port import AddPortCall, AddPortError
from bkledger.client.bookie_client import BookieClient
from bkledger.client.bookies import _add_port
from bkledger.proto import bookie_pb2 as pb
from bkledger.wire.add_stream import HEADER_SIZE, MAGIC, REFUSED, REQUEST, RESPONSE, frame, header, unpack_header

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
WAIT_S = 10.0


def _run(script: Script, client: Callable[[int], Awaitable[object]]) -> object:
    async def go() -> object:
        server = await asyncio.start_server(script, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await asyncio.wait_for(client(port), WAIT_S)
        finally:
            server.close()

    return asyncio.run(go())


async def _responses(port: int) -> list[pb.AddResponse]:
    call = AddPortCall("b1", "127.0.0.1", port, max_response=1000)
    await call.open(WAIT_S)
    await call.write(b"request")
    try:
        return [response async for response in call]
    finally:
        call.close()


def _ack_body(entry_id: int) -> bytes:
    return pb.AddResponse(acks=[pb.AddAck(ledger_id=7, entry_ids=[entry_id], status=pb.EOK)]).SerializeToString()


def test_requests_leave_after_the_preamble_and_responses_come_back_until_the_bookie_closes() -> None:
    seen: list[bytes] = []

    async def bookie(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readexactly(len(MAGIC)))
        size, kind = unpack_header(await reader.readexactly(HEADER_SIZE))
        seen.append(bytes([kind]) + await reader.readexactly(size))
        writer.write(frame(RESPONSE, _ack_body(0)) + frame(RESPONSE, _ack_body(1)))
        writer.close()

    got = _run(bookie, _responses)
    assert seen == [MAGIC, bytes([REQUEST]) + b"request"]
    assert [list(r.acks[0].entry_ids) for r in got] == [[0], [1]]      # type: ignore[attr-defined]


@pytest.mark.parametrize(("sent", "why"), [
    (frame(REFUSED, b"the AddRequest does not parse"), "refused the add stream: the AddRequest does not parse"),
    (frame(REQUEST, b"x"), "a frame of kind 1 (request), where a response was due"),
    (header(RESPONSE, 1001), "a frame of 1001 bytes, over the 1000 taken"),
    (header(RESPONSE, 10) + b"abc", "the stream ended inside a frame"),
    (b"\x00\x00", "inside a frame's header"),
    (frame(RESPONSE, b"\xff\xff\xff"), "a response that does not parse"),
])
def test_each_way_the_bookie_ends_the_stream_badly_is_an_error_naming_it(sent: bytes, why: str) -> None:
    async def bookie(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(len(MAGIC) + HEADER_SIZE + len(b"request"))    # all the client sends
        writer.write(sent)
        writer.close()

    with pytest.raises(AddPortError, match="bookie b1") as raised:
        _run(bookie, _responses)
    assert why in str(raised.value)


def test_a_port_nobody_listens_on_says_how_to_add_over_grpc_instead() -> None:
    async def closed_port() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        await AddPortCall("b1", "127.0.0.1", port, 1000).open(WAIT_S)

    with pytest.raises(AddPortError, match="cannot reach its add port .*useAddStreamPort=false"):
        asyncio.run(closed_port())


class _Handler:
    def __init__(self) -> None:
        self.failed = asyncio.Event()
        self.acked: list[int] = []

    def on_ack(self, bookie_id: str, ack: pb.AddAck) -> None:
        self.acked += ack.entry_ids

    def on_bookie_failed(self, bookie_id: str) -> None:
        self.failed.set()


def _refusing(answer_first: bool) -> Script:
    """A bookie that reads one request, answers it (or not), then refuses the stream."""
    async def bookie(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(len(MAGIC))
        size, _ = unpack_header(await reader.readexactly(HEADER_SIZE))
        await reader.readexactly(size)
        if answer_first:
            writer.write(frame(RESPONSE, _ack_body(0)))
        writer.write(frame(REFUSED, b"no"))
        writer.close()
    return bookie


async def _add_until_failed(port: int) -> list[int]:
    """One add on a connection whose gRPC port (127.0.0.1:1) nobody listens on; the entries acknowledged
    before the connection failed."""
    connection = BookieClient("b1", "127.0.0.1:1", add_port=port)
    handler = _Handler()
    connection.register(7, handler)
    connection.send_add(7, b"k" * 20, [0], [3], b"abc")
    await handler.failed.wait()
    await connection.close()
    assert connection.failed
    return handler.acked


def test_a_stream_refused_after_an_answer_fails_the_connection_and_its_ledgers_hear_it(
        caplog: pytest.LogCaptureFixture) -> None:
    """R9: the bookie may have taken what it did not answer, so its ledgers treat it as failed."""
    with caplog.at_level(logging.WARNING, logger="bkledger.client.bookie"):
        assert _run(_refusing(answer_first=True), _add_until_failed) == [0]
    messages = [r.getMessage() for r in caplog.records]
    assert any("refused the add stream: no" in m for m in messages), messages
    assert not any("over bookiePort (gRPC) instead" in m for m in messages), messages


def _resetting() -> Script:
    """A bookie that reads one request and resets the connection (what a client writing to a bookie that
    refused it and closed may see instead of the refusal)."""
    async def bookie(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(len(MAGIC) + HEADER_SIZE)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
    return bookie


@pytest.mark.parametrize(("script", "how"), [
    (_refusing(answer_first=False), "bookie b1 refused the add stream: no"),
    (_resetting(), "bookie b1: the add stream on 127.0.0.1:"),
])
def test_a_stream_that_ends_before_any_answer_goes_over_grpc_instead(script: Script, how: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The bookie answered none of the requests: the connection sends them again over gRPC (here unreachable,
    so the ledgers hear the bookie failed only then)."""
    with caplog.at_level(logging.WARNING, logger="bkledger.client.bookie"):
        assert _run(script, _add_until_failed) == []
    messages = [r.getMessage() for r in caplog.records]
    fallbacks = [m for m in messages if "this connection adds over bookiePort (gRPC) instead" in m]
    assert len(fallbacks) == 1 and f"its add port ended the stream before answering anything ({how}" in fallbacks[0], \
        messages
    assert any("add stream to b1 failed: UNAVAILABLE" in m for m in messages), messages


@pytest.mark.parametrize(("info", "port"), [
    ({"addStreamPort": "3182"}, 3182), ({}, 0), (None, 0), ({"addStreamPort": ""}, 0),
    ({"addStreamPort": "x"}, 0), ({"addStreamPort": "0"}, 0), ({"addStreamPort": "70000"}, 0),
    ({"addStreamPort": "-5"}, 0),
])
def test_a_registrations_add_port_is_taken_only_when_it_is_a_port(info: dict[str, str] | None, port: int) -> None:
    assert _add_port(info) == port
