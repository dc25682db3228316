"""The bookie's admin HTTP API and the plain metrics endpoint: standard-library HTTP in a daemon thread.

Mirrors BookKeeper's `bookkeeper-http` routes (`HttpRouter`): `/heartbeat`, `/metrics` (Prometheus text)
and, under `/api/v1`, `bookie/info`, `bookie/state`, `bookie/state/readonly`, `bookie/list_bookies`,
`bookie/slow_adds` (read-only: the slow-add log of bookie.add_trace),
`autorecovery/status`, `autorecovery/who_is_auditor`, `autorecovery/list_under_replicated_ledger`.
Answers are JSON. The only endpoint that changes state, `PUT /api/v1/bookie/state/readonly`, needs
`Authorization: Bearer <httpServerAdminToken>`; with no token configured it is refused (403).
`httpServerEnabled` + `httpServerPort` start the admin server; `prometheusStatsHttpPort` starts a server
with only `/metrics` and `/heartbeat` (the autorecovery daemon uses that one too). Both bind listenAddress.
Both distrust their clients: a connection idle for `httpServerSocketTimeoutMs` is closed, at most
`httpServerMaxConnections` are open at once (one more is answered 503 and closed, without a thread), and
a malformed request (a bad Content-Length, a body that is not JSON, a target that is not a path) is
answered 400 with a JSON error and a log line, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import shutil
import sys
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from bkledger.bookie.thread_guard import FAILURES

if TYPE_CHECKING:
    from bkledger.bookie.config import BookieConfig
    from bkledger.bookie.serving import BookieServerView as BookieServer

log = logging.getLogger("bkledger.http")
REGISTRATION_WAIT_S = 10.0   # a mode change through the admin API waits this long for ZooKeeper to show it

# a handler gets the query parameters and the JSON body (PUT/POST) and returns (status, body)
Reply = tuple[int, Any]
Handler = Callable[[dict[str, str], Any], Reply]


class HttpError(Exception):
    """An answer other than 200, with a message for the caller."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Route:
    def __init__(self, get: Handler | None = None, put: Handler | None = None, protected: bool = False,
                 content_type: str = "application/json") -> None:
        self.get = get
        self.put = put
        self.protected = protected      # PUT needs the admin token
        self.content_type = content_type


class Router:
    """Requests to answers: the route by path, the method, the admin token (no I/O here)."""

    def __init__(self, routes: dict[str, Route], admin_token: str = "") -> None:
        self.routes = routes
        self.admin_token = admin_token

    def authorized(self, header: str | None) -> None:
        """Raise unless `header` carries the admin token (refuse everything when none is configured)."""
        if not self.admin_token:
            raise HttpError(HTTPStatus.FORBIDDEN, "state-changing endpoints are off: set httpServerAdminToken "
                                                  "in the bookie's configuration to enable them")
        scheme, _, given = (header or "").partition(" ")
        if scheme != "Bearer" or not hmac.compare_digest(given.strip().encode(), self.admin_token.encode()):
            raise HttpError(HTTPStatus.UNAUTHORIZED, "missing or wrong admin token: send "
                                                     "'Authorization: Bearer <httpServerAdminToken>'")

    def dispatch(self, method: str, target: str, auth: str | None, body: bytes) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request."""
        parts = urlsplit(target)
        route = self.routes.get(parts.path.rstrip("/") or "/")
        try:
            if route is None:
                raise HttpError(HTTPStatus.NOT_FOUND, f"no endpoint {parts.path}; endpoints: "
                                                      + ", ".join(sorted(self.routes)))
            handler = route.get if method == "GET" else route.put if method == "PUT" else None
            if handler is None:
                raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed on {parts.path}")
            if method != "GET" and route.protected:
                self.authorized(auth)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            status, out = handler(query, _json_body(body) if method != "GET" else None)
        except HttpError as exc:
            return exc.status, "application/json", _dumps({"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - an endpoint failure is a 500 answer, never a dead server
            log.exception("%s %s failed", method, parts.path)
            return HTTPStatus.INTERNAL_SERVER_ERROR, "application/json", _dumps({"error": str(exc)})
        if isinstance(out, bytes):
            return status, route.content_type, out
        if isinstance(out, str):
            return status, "text/plain; charset=utf-8", out.encode()
        return status, "application/json", _dumps(out)


class _BoundedHttpServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them; one more is answered 503 and closed."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int,
                 name: str) -> None:
        self.max_connections = max_connections
        self.name = name
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("%s: refused a connection from %s: %d connections open (httpServerMaxConnections)",
                        self.name, client_address[0], self.max_connections)
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(TOO_MANY_CONNECTIONS)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed (reset, timed out mid-request) is one log line, not a traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            log.info("%s: connection from %s ended: %s", self.name, client_address[0], exc)
        else:
            log.exception("%s: request from %s failed", self.name, client_address[0])


_BUSY = b'{"error": "too many connections to this server; retry later"}\n'
TOO_MANY_CONNECTIONS = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                        b"Connection: close\r\nContent-Length: " + str(len(_BUSY)).encode() + b"\r\n\r\n" + _BUSY)


class AdminHttpServer:
    """A ThreadingHTTPServer on (address, port) in a daemon thread, answering through a Router; idle
    connections time out after `socket_timeout` seconds, at most `max_connections` are open."""

    def __init__(self, address: str, port: int, routes: dict[str, Route], admin_token: str = "",
                 name: str = "admin-http", socket_timeout: float = 10.0, max_connections: int = 64) -> None:
        self.router = Router(routes, admin_token)
        self.name = name
        handler = _make_handler(self.router, socket_timeout)
        try:
            self.httpd = _BoundedHttpServer((address, port), handler, max_connections, name)
        except OSError as exc:
            raise OSError(f"cannot serve {name} on {address}:{port}: {exc.strerror or exc}") from None
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name=name, daemon=True)

    def start(self) -> AdminHttpServer:
        self._thread.start()
        log.info("%s serving on port %d", self.name, self.port)
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self.httpd.shutdown()
            self._thread.join(timeout=5)
        self.httpd.server_close()


def _dumps(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, default=str) + "\n").encode()


def _json_body(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        raise HttpError(HTTPStatus.BAD_REQUEST, "the request body must be JSON") from None


MAX_BODY_BYTES = 1 << 20


def _body_length(header: str | None) -> int:
    """The Content-Length of a request: 0 when absent; HttpError 400 / 413 when it cannot be used."""
    raw = (header or "0").strip()
    if not (raw.isascii() and raw.isdigit()):   # refuses a sign, spaces inside, several values, "²"
        raise HttpError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {raw[:40]!r}: expected a byte count")
    length = int(raw)
    if length > MAX_BODY_BYTES:
        raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a body of {length} bytes is over {MAX_BODY_BYTES}")
    return length


def _make_handler(server: Router, socket_timeout: float) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = socket_timeout          # StreamRequestHandler: applied to the connection's socket

        def _answer(self, method: str) -> None:
            try:
                length = _body_length(self.headers.get("Content-Length"))
                if not self.path.startswith("/"):
                    raise HttpError(HTTPStatus.BAD_REQUEST, f"bad request target {self.path[:80]!r}: expected a path")
            except HttpError as exc:
                log.warning("%s: %s %s from %s refused with %d: %s", server_name(self), method, self.path[:80],
                            self.client_address[0], exc.status, exc)
                self.close_connection = True      # what is left of the request cannot be read reliably
                self._send(exc.status, "application/json", _dumps({"error": str(exc)}))
                return
            body = self.rfile.read(length) if length > 0 else b""
            status, content_type, out = server.dispatch(method, self.path, self.headers.get("Authorization"), body)
            if status == HTTPStatus.BAD_REQUEST:
                log.warning("%s: %s %s from %s refused with 400: %s", server_name(self), method, self.path[:80],
                            self.client_address[0], " ".join(out[:200].decode(errors="replace").split()))
            self._send(status, content_type, out)

        def _send(self, status: int, content_type: str, out: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(out)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(out)

        def do_GET(self) -> None:  # noqa: N802 - the http.server naming
            self._answer("GET")

        def do_PUT(self) -> None:  # noqa: N802
            self._answer("PUT")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def do_DELETE(self) -> None:  # noqa: N802
            self._answer("DELETE")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            log.debug("%s %s", self.address_string(), format % args)

    return _Handler


def server_name(handler: BaseHTTPRequestHandler) -> str:
    return str(getattr(handler.server, "name", "http"))


def metrics_routes(render: Callable[[], bytes], content_type: str) -> dict[str, Route]:
    """`/metrics` and `/heartbeat`: what every bkledger HTTP server offers."""
    return {
        "/heartbeat": Route(get=lambda _q, _b: (HTTPStatus.OK, "OK\n")),
        "/metrics": Route(get=lambda _q, _b: (HTTPStatus.OK, render()), content_type=content_type),
    }


# ---- the bookie's endpoints ------------------------------------------------------------------------


def _disk(path: Any) -> dict[str, Any]:
    usage = shutil.disk_usage(path)
    return {"freeSpace": usage.free, "totalSpace": usage.total,
            "usage": round(usage.used / usage.total, 4) if usage.total else 1.0}


def bookie_info(server: BookieServer) -> dict[str, Any]:
    cfg = server.config
    storage = server.bookie.storage
    dirs: list[dict[str, Any]] = [{"kind": "journal", "path": str(cfg.journal_dir), **_disk(cfg.journal_dir)}]
    for path, log_bytes, index_bytes, _ in (storage.directory_stats() if storage is not None else []):
        disk = _disk(path)
        dirs.append({"kind": "ledger", "path": str(path), **disk, "entryLogBytes": log_bytes,
                     "indexBytes": index_bytes, "writable": disk["usage"] < cfg.diskUsageThreshold})
    ledger_dirs = [d for d in dirs if d["kind"] == "ledger"]
    return {
        "bookieId": cfg.bookie_id, "state": server.state_name(),
        "freeSpace": sum(d["freeSpace"] for d in ledger_dirs), "totalSpace": sum(d["totalSpace"] for d in ledger_dirs),
        "ledgers": len(storage.ledgers()) if storage is not None else 0, "directories": dirs,
    }


def bookie_state(server: BookieServer) -> dict[str, Any]:
    service = server.service
    read_only = service is not None and service.read_only
    return {
        "running": server.status_code() >= 0, "readOnly": read_only, "shuttingDown": server.shutting_down,
        "availableForHighPriorityWrites": not server.bookie.journal_failed,
        "forceReadOnly": server.config.forceReadOnlyBookie, "adminReadOnly": server.admin_read_only,
        "journalFailed": server.bookie.journal_failed, "state": server.state_name(),
        **bookie_health(server),
    }


def bookie_health(server: BookieServer) -> dict[str, Any]:
    """Checkpoints and background threads (bookie.thread_guard), for the state answer and `local status`."""
    bookie = server.bookie
    return {
        "storageFailed": bookie.storage_failed, "checkpointFailures": bookie.checkpoint_failures,
        "lastCheckpointTime": bookie.last_checkpoint_time, "threadFailures": FAILURES.counts(),
    }


def _put_read_only(server: BookieServer, body: Any) -> Reply:
    if not isinstance(body, dict) or not isinstance(body.get("readOnly"), bool):
        raise HttpError(HTTPStatus.BAD_REQUEST, 'send a JSON body {"readOnly": true} or {"readOnly": false}')
    loop = server.loop
    if loop is None or server.service is None:
        raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "the bookie is not serving yet")

    async def apply() -> None:
        server.set_admin_read_only(body["readOnly"])

    asyncio.run_coroutine_threadsafe(apply(), loop).result(30)
    if not server.registrar.wait_settled(REGISTRATION_WAIT_S):
        mode = "read-only" if server.service.read_only else "writable"
        raise HttpError(HTTPStatus.GATEWAY_TIMEOUT,
                        f"the bookie is now {mode}, but ZooKeeper did not take the new registration within "
                        f"{REGISTRATION_WAIT_S:.0f} s; it will once it answers")
    return HTTPStatus.OK, {"readOnly": server.service.read_only}


def http_limits(cfg: BookieConfig) -> dict[str, Any]:
    """AdminHttpServer's limits from the configuration (httpServerSocketTimeoutMs, httpServerMaxConnections)."""
    return {"socket_timeout": cfg.httpServerSocketTimeoutMs / 1000.0, "max_connections": cfg.httpServerMaxConnections}
