"""Which address a bookie advertises (bookie.core.bookie_address, bookie.address), as BookKeeper decides it:
all interfaces and this host's address by default, never a wildcard id, a loopback one only when allowed."""

from __future__ import annotations

import logging
import socket

import pytest

from bkledger.bookie import address
from bkledger.bookie.config import BookieConfig, ConfigError, from_mapping
from bkledger.bookie.core.bookie_address import AddressError, LocalHost, choose

HOST = LocalHost("node1.example.org", ("10.0.0.5",), ("10.0.0.5", "172.17.0.1"))
ONLY_LOOPBACK = LocalHost("localhost", ("127.0.0.1",), ("127.0.0.1",))


def _choose(listen: str = "0.0.0.0", advertised: str = "", *, use_host_name: bool = False,
            allow_loopback: bool = False, local: LocalHost = HOST) -> str:
    return choose(listen, advertised, 3181, use_host_name=use_host_name, allow_loopback=allow_loopback,
                  local=local).host


def test_defaults_bind_all_interfaces_and_know_bookkeepers_names() -> None:
    config = from_mapping({"useHostNameAsBookieID": "true", "allowLoopback": "true"})
    assert BookieConfig().listenAddress == "0.0.0.0" and not BookieConfig().allowLoopback
    assert config.useHostNameAsBookieID and config.allowLoopback


def test_listening_on_all_interfaces_advertises_this_hosts_address() -> None:
    assert _choose() == "10.0.0.5"
    assert _choose(local=LocalHost("h", (), ("127.0.0.1", "192.168.1.7"))) == "192.168.1.7"
    assert _choose(use_host_name=True) == "node1.example.org"


def test_advertised_then_listen_address_win() -> None:
    assert _choose("10.0.0.9", "bookie1.example.org") == "bookie1.example.org"
    assert _choose("10.0.0.9") == "10.0.0.9"


def test_a_wildcard_id_is_refused_even_with_allow_loopback() -> None:
    with pytest.raises(AddressError, match="wildcard.*advertisedAddress"):
        _choose(advertised="0.0.0.0", allow_loopback=True)


@pytest.mark.parametrize("listen,advertised,local", [
    ("127.0.0.1", "", HOST),                  # listening on loopback: the id would be 127.0.0.1:3181
    ("0.0.0.0", "localhost", HOST),
    ("0.0.0.0", "", ONLY_LOOPBACK),           # no address but loopback on this host
    ("127.0.0.1", "10.0.0.5", HOST),          # advertises an address, but listens where nobody else reaches
])
def test_loopback_is_refused_unless_allowed_and_then_warned(listen: str, advertised: str, local: LocalHost) -> None:
    with pytest.raises(AddressError, match="loopback.*allowLoopback=true"):
        _choose(listen, advertised, local=local)
    chosen = choose(listen, advertised, 3181, use_host_name=False, allow_loopback=True, local=local)
    assert "only clients on this host" in chosen.warning


def test_a_host_name_resolving_to_loopback_only_is_refused() -> None:
    with pytest.raises(AddressError, match="loopback"):
        _choose(use_host_name=True, local=LocalHost("box", ("127.0.1.1",), ("10.0.0.5",)))


def test_resolve_fills_advertised_address_with_an_own_address(caplog: pytest.LogCaptureFixture) -> None:
    """The driver on this machine: the id is one of this host's own (bindable) non-loopback addresses."""
    found = address.local_host().addresses
    if not [a for a in found if not a.startswith("127.")]:
        pytest.skip(f"this host has no address but loopback ({found})")
    with caplog.at_level(logging.INFO, logger="bkledger.bookie.address"):
        resolved = address.resolve(BookieConfig())
    host = resolved.advertisedAddress
    assert not host.startswith("127.") and host != "0.0.0.0" and resolved.bookie_id == f"{host}:3181"
    socket.create_server((host, 0)).close()          # bindable here: it is this host's
    assert f"bookie id {host}:3181: advertising {host}" in caplog.text


def test_resolve_refuses_loopback_as_a_config_error_and_logs_when_allowed(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigError, match="allowLoopback"):
        address.resolve(BookieConfig(listenAddress="127.0.0.1"))
    with caplog.at_level(logging.WARNING, logger="bkledger.bookie.address"):
        resolved = address.resolve(BookieConfig(listenAddress="127.0.0.1", allowLoopback=True))
    assert resolved.bookie_id == "127.0.0.1:3181"
    assert "loopback" in caplog.text and "allowLoopback=true" in caplog.text


def test_listening_interface_listens_on_and_advertises_that_interfaces_address() -> None:
    """BookKeeper's listeningInterface: the interface's address is bound and advertised."""
    resolved = address.resolve(BookieConfig(listeningInterface="lo", allowLoopback=True))
    assert resolved.listenAddress == "127.0.0.1" and resolved.bookie_id == "127.0.0.1:3181"
    with pytest.raises(ConfigError, match="allowLoopback"):
        address.resolve(BookieConfig(listeningInterface="lo"))
    with pytest.raises(ConfigError, match="listeningInterface=nosuch0: no such network interface"):
        address.resolve(BookieConfig(listeningInterface="nosuch0"))
