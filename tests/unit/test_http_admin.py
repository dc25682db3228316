"""bookie.http_admin routing and the admin-token guard (the Router, no sockets), and the
configuration checks of the metrics / admin HTTP ports."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

import pytest

from bkledger.bookie.config import ConfigError, from_mapping
from bkledger.bookie.http_admin import Route, Router


class Switch:
    def __init__(self) -> None:
        self.on = False

    def put(self, _query: dict[str, str], body: Any) -> tuple[int, Any]:
        self.on = bool(body["on"])
        return HTTPStatus.OK, {"on": self.on}


def server(token: str, switch: Switch) -> Router:
    routes = {
        "/heartbeat": Route(get=lambda _q, _b: (HTTPStatus.OK, "OK\n")),
        "/api/v1/echo": Route(get=lambda q, _b: (HTTPStatus.OK, dict(q))),
        "/api/v1/switch": Route(get=lambda _q, _b: (HTTPStatus.OK, {"on": switch.on}), put=switch.put,
                                protected=True),
        "/api/v1/boom": Route(get=lambda _q, _b: (_ for _ in ()).throw(RuntimeError("broken"))),
    }
    return Router(routes, token)


def answer(http: Router, method: str, target: str, auth: str | None = None,
           body: object = None) -> tuple[int, Any]:
    status, content_type, out = http.dispatch(method, target, auth, json.dumps(body).encode() if body else b"")
    return status, json.loads(out) if content_type == "application/json" else out.decode()


def test_routes_json_and_errors():
    http = server("t0ken", Switch())
    assert answer(http, "GET", "/heartbeat") == (200, "OK\n")
    assert answer(http, "GET", "/api/v1/echo/?a=1&b=2") == (200, {"a": "1", "b": "2"})
    status, err = answer(http, "GET", "/nope")
    assert status == 404 and "/api/v1/echo" in err["error"]
    assert answer(http, "DELETE", "/api/v1/echo")[0] == 405
    assert answer(http, "PUT", "/heartbeat")[0] == 405
    status, err = answer(http, "GET", "/api/v1/boom")
    assert status == 500 and err == {"error": "broken"}


def test_state_change_needs_the_token():
    switch = Switch()
    http = server("t0ken", switch)
    assert answer(http, "PUT", "/api/v1/switch", None, {"on": True})[0] == 401
    assert answer(http, "PUT", "/api/v1/switch", "Bearer nope", {"on": True})[0] == 401
    assert answer(http, "PUT", "/api/v1/switch", "Bearer t0ken-and-more", {"on": True})[0] == 401
    assert answer(http, "PUT", "/api/v1/switch", "t0ken", {"on": True})[0] == 401         # no "Bearer"
    assert switch.on is False
    assert answer(http, "PUT", "/api/v1/switch", "Bearer t0ken", {"on": True}) == (200, {"on": True})
    assert switch.on is True
    status, _, _ = http.dispatch("PUT", "/api/v1/switch", "Bearer t0ken", b"{not json")
    assert status == 400


def test_no_token_configured_refuses_every_state_change():
    switch = Switch()
    http = server("", switch)
    for auth in (None, "Bearer ", "Bearer anything"):
        status, err = answer(http, "PUT", "/api/v1/switch", auth, {"on": True})
        assert status == 403 and "httpServerAdminToken" in err["error"]
    assert switch.on is False
    assert answer(http, "GET", "/api/v1/switch") == (200, {"on": False})


def test_port_settings_are_checked():
    base = {"bookiePort": "3181"}
    assert from_mapping(base).prometheusStatsHttpPort == 0 and not from_mapping(base).httpServerEnabled
    assert from_mapping({**base, "prometheusStatsHttpPort": "8000", "httpServerEnabled": "true"}).httpServerPort == 8080
    with pytest.raises(ConfigError, match="different ports"):
        from_mapping({**base, "prometheusStatsHttpPort": "3181"})
    with pytest.raises(ConfigError, match="different ports"):
        from_mapping({**base, "prometheusStatsHttpPort": "8080", "httpServerEnabled": "true"})
    with pytest.raises(ConfigError, match="prometheusStatsHttpPort must be 1..65535"):
        from_mapping({**base, "prometheusStatsHttpPort": "70000"})
    with pytest.raises(ConfigError, match="httpServerPort must be 1..65535"):
        from_mapping({**base, "httpServerEnabled": "true", "httpServerPort": "0"})
    assert from_mapping({**base, "httpServerPort": "0"}).httpServerPort == 0    # unused while disabled
