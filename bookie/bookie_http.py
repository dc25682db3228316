"""The bookie's HTTP endpoints put together: the metrics server and the admin server with their routes
(`bookie.http_admin`'s handlers, the status page of `bookie.status_page`, the scrape-time state of
`bookie.collectors`), started by `bookie.service` when the configuration asks for them."""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from bkledger.bookie.collectors import BookieCollector
from bkledger.bookie.http_admin import (
    AdminHttpServer,
    HttpError,
    Reply,
    Route,
    _put_read_only,
    bookie_info,
    bookie_state,
    http_limits,
    metrics_routes,
)
from bkledger.bookie.metrics import ServerStats, new_registry
from bkledger.bookie.status_page import status_routes

if TYPE_CHECKING:
    from bkledger.bookie.serving import BookieServerView as BookieServer


def _autorecovery_routes(server: BookieServer) -> dict[str, Route]:
    from bkledger.client.meta.underreplication import UnderReplicationManager

    def ur() -> UnderReplicationManager:
        return UnderReplicationManager(server.store)

    def under_replicated(_q: dict[str, str], _b: Any) -> Reply:
        marks = ur().list_marked()
        return HTTPStatus.OK, {"ledgers": [{"ledgerId": m.ledger_id, "missingReplicas": list(m.replicas),
                                            "ctimeMs": m.ctime_ms} for m in marks], "count": len(marks)}

    return {
        "/api/v1/autorecovery/status": Route(get=lambda _q, _b: (HTTPStatus.OK, {"enabled": ur().is_enabled()})),
        "/api/v1/autorecovery/who_is_auditor": Route(get=lambda _q, _b: (HTTPStatus.OK, {"auditor": ur().auditor()})),
        "/api/v1/autorecovery/list_under_replicated_ledger": Route(get=under_replicated),
    }


def _slow_adds(server: BookieServer) -> dict[str, Any]:
    """The slow-add log (bookie.add_trace): the add batches over slowAddThresholdMs and their stages."""
    if server.service is None:
        raise HttpError(HTTPStatus.SERVICE_UNAVAILABLE, "the bookie is not serving yet")
    return server.service.tracer.describe()


def bookie_routes(server: BookieServer, render: Callable[[], bytes], content_type: str) -> dict[str, Route]:
    def list_bookies(query: dict[str, str], _b: Any) -> Reply:
        kind = query.get("type", "all")
        if kind not in ("rw", "ro", "all"):
            raise HttpError(HTTPStatus.BAD_REQUEST, "type must be rw, ro or all")
        store = server.store
        out = {} if kind == "ro" else {b: "rw" for b in store.writable_bookies()}
        if kind != "rw":
            out.update({b: "ro" for b in store.readonly_bookies()})
        return HTTPStatus.OK, out

    return {
        **metrics_routes(render, content_type),
        "/api/v1/bookie/info": Route(get=lambda _q, _b: (HTTPStatus.OK, bookie_info(server))),
        "/api/v1/bookie/state": Route(get=lambda _q, _b: (HTTPStatus.OK, bookie_state(server))),
        "/api/v1/bookie/state/readonly": Route(
            get=lambda _q, _b: (HTTPStatus.OK, {"readOnly": bookie_state(server)["readOnly"]}),
            put=lambda _q, body: _put_read_only(server, body), protected=True),
        "/api/v1/bookie/list_bookies": Route(get=list_bookies),
        "/api/v1/bookie/slow_adds": Route(get=lambda _q, _b: (HTTPStatus.OK, _slow_adds(server))),
        **_autorecovery_routes(server),
        **status_routes(server),           # the read-only HTML status page (bookie.status_page)
    }


def start_bookie_http(server: BookieServer) -> list[AdminHttpServer]:
    """Start what the configuration asks for (nothing by default) and hook the metrics into the bookie."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    cfg = server.config
    if not cfg.prometheusStatsHttpPort and not cfg.httpServerEnabled:
        return []
    registry = new_registry()
    stats = ServerStats(registry)
    registry.register(BookieCollector(server))
    assert server.service is not None and server.bookie.journal is not None
    server.service.stats = stats
    server.bookie.journal.on_sync = stats.journal_sync
    server.bookie.journal.on_group = stats.journal_group
    server.service.tracer.histograms = stats.add_stages

    def render() -> bytes:
        return bytes(generate_latest(registry))

    started: list[AdminHttpServer] = []
    try:
        if cfg.prometheusStatsHttpPort:
            started.append(AdminHttpServer(cfg.listenAddress, cfg.prometheusStatsHttpPort,
                                           metrics_routes(render, CONTENT_TYPE_LATEST), name="metrics-http",
                                           **http_limits(cfg)).start())
        if cfg.httpServerEnabled:
            routes = bookie_routes(server, render, CONTENT_TYPE_LATEST)
            started.append(AdminHttpServer(cfg.listenAddress, cfg.httpServerPort, routes, cfg.httpServerAdminToken,
                                           name="admin-http", **http_limits(cfg)).start())
    except OSError:
        for http in started:
            http.stop()
        raise
    return started
