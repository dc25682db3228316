"""bookie.http_admin's AdminHttpServer on a real socket: malformed requests get 400 (not a traceback), idle
connections time out, the number of connections is capped (issue 41, item 5)."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import pytest

from bkledger.bookie.config import ConfigError, from_mapping
from bkledger.bookie.http_admin import AdminHttpServer, Route

TIMEOUT_S = 0.5
MAX_CONNECTIONS = 3


@pytest.fixture
def admin() -> Iterator[AdminHttpServer]:
    routes = {
        "/heartbeat": Route(get=lambda _q, _b: (HTTPStatus.OK, "OK\n")),
        "/api/v1/switch": Route(put=lambda _q, body: (HTTPStatus.OK, {"on": bool(body["on"])}), protected=True),
    }
    server = AdminHttpServer("127.0.0.1", 0, routes, admin_token="t", socket_timeout=TIMEOUT_S,
                             max_connections=MAX_CONNECTIONS).start()
    yield server
    server.stop()


def raw(server: AdminHttpServer, request: bytes) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def heartbeats_at_once(server: AdminHttpServer, count: int) -> list[int]:
    """`count` connections opened first, then a GET /heartbeat on each: their statuses (0: no answer)."""
    conns = [http.client.HTTPConnection("127.0.0.1", server.port, timeout=5) for _ in range(count)]
    try:
        for conn in conns:
            conn.connect()
        statuses = []
        for conn in conns:
            try:
                conn.request("GET", "/heartbeat")
                response = conn.getresponse()
                response.read()
                statuses.append(response.status)
            except (OSError, http.client.HTTPException):
                statuses.append(0)
        return statuses
    finally:
        for conn in conns:
            conn.close()


def heartbeat(server: AdminHttpServer) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("GET", "/heartbeat")
        response = conn.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return 0
    finally:
        conn.close()


@pytest.mark.parametrize("request_bytes", [
    b"PUT /api/v1/switch HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
    b"PUT /api/v1/switch HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
    b"PUT /api/v1/switch HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n",
    "PUT /api/v1/switch HTTP/1.1\r\nContent-Length: \u00b2\r\n\r\n".encode("latin-1"),
    b"GET heartbeat HTTP/1.1\r\n\r\n",
    b"PUT /api/v1/switch HTTP/1.1\r\nAuthorization: Bearer t\r\nContent-Length: 3\r\nConnection: close\r\n\r\n{\"o",
])
def test_malformed_requests_get_400_with_a_json_error_and_a_log_line(admin: AdminHttpServer, request_bytes: bytes,
                                                                     caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING, logger="bkledger.http"):
        status, body = raw(admin, request_bytes)
    assert status == HTTPStatus.BAD_REQUEST
    assert "error" in json.loads(body)
    assert any("refused with 400" in r.getMessage() for r in caplog.records)
    assert heartbeat(admin) == HTTPStatus.OK


def test_too_large_a_body_gets_413(admin: AdminHttpServer):
    status, _ = raw(admin, b"PUT /api/v1/switch HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n")
    assert status == HTTPStatus.REQUEST_ENTITY_TOO_LARGE


def test_an_idle_connection_is_closed_after_the_socket_timeout(admin: AdminHttpServer):
    with socket.create_connection(("127.0.0.1", admin.port), timeout=10) as sock:
        started = time.monotonic()
        assert sock.recv(1) == b""                # the server closed it ...
        assert time.monotonic() - started < TIMEOUT_S + 3   # ... at its timeout, not at ours


def test_connections_past_the_cap_get_503_and_slots_come_back(admin: AdminHttpServer,
                                                             caplog: pytest.LogCaptureFixture):
    idle = [socket.create_connection(("127.0.0.1", admin.port), timeout=5) for _ in range(MAX_CONNECTIONS)]
    try:
        with caplog.at_level(logging.WARNING, logger="bkledger.http"):
            deadline = time.monotonic() + 5
            while (status := heartbeat(admin)) != HTTPStatus.SERVICE_UNAVAILABLE and time.monotonic() < deadline:
                time.sleep(0.02)
        assert status == HTTPStatus.SERVICE_UNAVAILABLE
        assert any("httpServerMaxConnections" in r.getMessage() for r in caplog.records)
    finally:
        for sock in idle:
            sock.close()
    # every slot comes back: MAX_CONNECTIONS connections open at once are all served. A handler thread
    # frees its slot after its client has read the answer (and notices a closed idle connection at its
    # own pace), so on a loaded machine this holds within a bounded wait, not at the first try.
    deadline = time.monotonic() + 10
    while (statuses := heartbeats_at_once(admin, MAX_CONNECTIONS)) != [HTTPStatus.OK] * MAX_CONNECTIONS \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert statuses == [HTTPStatus.OK] * MAX_CONNECTIONS


def test_a_reset_connection_is_a_log_line_not_a_traceback(admin: AdminHttpServer, capsys: pytest.CaptureFixture[Any],
                                                          caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.INFO, logger="bkledger.http"):
        sock = socket.create_connection(("127.0.0.1", admin.port), timeout=5)
        sock.sendall(b"GET /heartbeat HTTP/1.1\r\n")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close: RST
        sock.close()
        deadline = time.monotonic() + 5
        while not any("ended:" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.02)
    assert any("Connection reset" in r.getMessage() for r in caplog.records)
    assert "Traceback" not in capsys.readouterr().err
    assert heartbeat(admin) == HTTPStatus.OK


def test_http_limits_are_checked_in_the_configuration():
    assert from_mapping({}).httpServerMaxConnections == 64
    assert from_mapping({}).httpServerSocketTimeoutMs == 10000
    for key in ("httpServerMaxConnections", "httpServerSocketTimeoutMs", "maxReadBatchBytes"):
        with pytest.raises(ConfigError):
            from_mapping({key: "0"})
