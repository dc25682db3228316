"""Which address a bookie advertises (the host of its id and of its registration), as BookKeeper decides it.

After BookKeeper's `BookieImpl.getBookieAddress`: `advertisedAddress` if set; else the address the bookie
listens on if that is one address (`listenAddress`); else, listening on all interfaces (the default,
`0.0.0.0`), this host's address: its canonical host name with `useHostNameAsBookieID=true`, else the first
of this host's own addresses that is not loopback. An id other hosts cannot reach is refused: a wildcard
address always, a loopback one (or listening on loopback only) unless `allowLoopback=true`, and then the
decision carries a warning to log. `bookieId`, when set, names the bookie; the registration still carries
the advertised host, which is where clients connect.

Pure: the driver (bookie.address) gathers this host's names and addresses and logs what is decided.
"""

from __future__ import annotations

import dataclasses
import ipaddress

WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]", "*"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
FIX = ("set advertisedAddress to an address of this host that the other hosts reach (e.g. "
       "advertisedAddress=10.0.0.5), or listenAddress to that address")


class AddressError(ValueError):
    """No address other hosts can reach could be chosen, or one was set that they cannot; says what to set."""


@dataclasses.dataclass(frozen=True)
class LocalHost:
    """What the driver found of this host: its canonical name, the addresses that name resolves to, and its
    own addresses (bindable here), best first (the host name's, the default route's, the interfaces')."""

    fqdn: str
    name_addresses: tuple[str, ...]
    addresses: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Advertised:
    host: str                 # the host part of the bookie id and the registration's "host"
    source: str               # which setting or lookup gave it, for the log line
    warning: str = ""         # set when a loopback address is used (allowLoopback=true)


def is_wildcard(host: str) -> bool:
    return host.strip() in WILDCARDS


def is_loopback(host: str) -> bool:
    host = host.strip().strip("[]")
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _from_local_host(local: LocalHost, use_host_name: bool) -> tuple[str, str, bool]:
    """(host, source, loopback-only) for a bookie listening on all interfaces."""
    if use_host_name:
        loopback = not local.name_addresses or all(map(is_loopback, local.name_addresses))
        return local.fqdn, "this host's name (useHostNameAsBookieID=true)", loopback or is_loopback(local.fqdn)
    reachable = [a for a in local.addresses if not is_loopback(a) and not is_wildcard(a)]
    if reachable:
        return reachable[0], "this host's address (listening on all interfaces)", False
    return "127.0.0.1", "loopback: this host has no other address", True


def choose(listen: str, advertised: str, port: int, *, use_host_name: bool, allow_loopback: bool,
           local: LocalHost) -> Advertised:
    """The advertised host for these settings, or AddressError when other hosts could not reach it."""
    if advertised.strip():
        host, source, loopback = advertised.strip(), "advertisedAddress", is_loopback(advertised)
    elif not is_wildcard(listen):
        host, source, loopback = listen.strip(), "listenAddress", is_loopback(listen)
    else:
        host, source, loopback = _from_local_host(local, use_host_name)
    if is_wildcard(host):
        raise AddressError(f"bookie id {host}:{port} ({source}) is a wildcard address, which names no host: "
                           f"other hosts cannot connect to it; {FIX}")
    listen_only_loopback = is_loopback(listen)
    if not (loopback or listen_only_loopback):
        return Advertised(host, source)
    what = (f"bookie id {host}:{port} ({source}) is a loopback address" if loopback else
            f"the bookie listens on {listen} (loopback) only")
    if not allow_loopback:
        raise AddressError(f"{what}: other hosts cannot reach it, so this is refused by default, as BookKeeper "
                           f"does; {FIX}; or allowLoopback=true for a bookie used from this host only")
    return Advertised(host, source, warning=f"{what}: only clients on this host can reach it (allowLoopback=true)")
