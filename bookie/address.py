"""A bookie's advertised address, looked up on this host: the driver of bookie.core.bookie_address.

`resolve(config)` gathers this host's canonical name and its own IPv4 addresses (the host name's, the
source address of the default route, every interface's; only those that can be bound here, so an
/etc/hosts entry for another network namespace is passed over), lets the pure module choose, logs one
line saying which id the bookie registers and why (a warning when it is a loopback one), and returns the
configuration with `advertisedAddress` filled in, so `config.bookie_id` is the id to register
(and with `listeningInterface`, BookKeeper's key, `listenAddress` set to that interface's address). The
bookie, its autorecovery daemon and `bookieformat` all resolve through here, so they agree on the id.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import socket
import struct

from bkledger.bookie.config import BookieConfig, ConfigError
from bkledger.bookie.core.bookie_address import AddressError, LocalHost, choose

log = logging.getLogger("bkledger.bookie.address")
SIOCGIFADDR = 0x8915                 # Linux ioctl: an interface's IPv4 address
ROUTE_PROBE = ("192.0.2.1", 9)       # TEST-NET-1: connecting a UDP socket only looks up the route, sends nothing


def _name_addresses(name: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return []
    return [str(info[4][0]) for info in infos]


def _route_source() -> list[str]:
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(ROUTE_PROBE)
        return [str(s.getsockname()[0])]
    return []


def interface_address(name: str) -> str | None:
    """The IPv4 address of network interface `name`, or None (no such interface, or no IPv4 address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, contextlib.suppress(OSError):
        packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        return socket.inet_ntoa(packed[20:24])
    return None


def _interface_addresses() -> list[str]:
    return [a for a in (interface_address(name) for _, name in socket.if_nameindex()) if a]


def _bindable(address: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((address, 0))
        return True
    except OSError:
        return False


def local_host() -> LocalHost:
    """This host's canonical name and own addresses, best first."""
    fqdn = socket.getfqdn()
    candidates = [*_name_addresses(socket.gethostname()), *_route_source(), *_interface_addresses()]
    own = tuple(a for a in dict.fromkeys(candidates) if _bindable(a))
    return LocalHost(fqdn, tuple(_name_addresses(fqdn)), own)


def resolve(config: BookieConfig) -> BookieConfig:
    """`config` with advertisedAddress set to what the bookie registers; ConfigError if nobody could reach it.
    With `listeningInterface` (BookKeeper's key), listenAddress becomes that interface's address."""
    if config.listeningInterface:
        found = interface_address(config.listeningInterface)
        if found is None:
            raise ConfigError(f"listeningInterface={config.listeningInterface}: no such network interface with an "
                              "IPv4 address here (`ip -4 addr` lists them)")
        config = dataclasses.replace(config, listenAddress=found)
    try:
        chosen = choose(config.listenAddress, config.advertisedAddress, config.bookiePort,
                        use_host_name=config.useHostNameAsBookieID, allow_loopback=config.allowLoopback,
                        local=local_host())
    except AddressError as exc:
        raise ConfigError(str(exc)) from None
    resolved = dataclasses.replace(config, advertisedAddress=chosen.host)
    if chosen.warning:
        log.warning("%s", chosen.warning)
    log.info("bookie id %s: advertising %s (from %s), listening on %s:%d", resolved.bookie_id, chosen.host,
             chosen.source, config.listenAddress, config.bookiePort)
    return resolved
