"""Parsing of `metadataServiceUri`, as BookKeeper's ZKMetadataDriverBase reads it.

Form: `zk[+<type>]://<host>[:<port>][;<host>[:<port>]...]/<ledgers root>`, e.g.
`zk://127.0.0.1:2181/ledgers` or `zk+hierarchical://zk1:2181;zk2:2181/ledgers`. `<type>` is one of
`flat`, `legacyhierarchical`, `hierarchical`, `longhierarchical` or `null`; `null` or no type means
"read it from the cluster's LAYOUT znode" (a new cluster then gets `hierarchical`, BookKeeper's
default). Hosts may be separated by `;` (BookKeeper's form) or `,` (ZooKeeper's); the port defaults
to 2181. The result gives kazoo's comma-joined host string, the root path and the manager type.
"""

from __future__ import annotations

import dataclasses
import re

from bkledger.client.meta.errors import InvalidOptionError
from bkledger.client.meta.layout import LedgerManagerType, ZkLayout

DEFAULT_ZK_PORT = 2181
EXPECTED_FORM = ("expected zk[+flat|+hierarchical|+longhierarchical|+legacyhierarchical|+null]://"
                 "host[:port][;host[:port]...]/ledgers-root, e.g. zk://127.0.0.1:2181/ledgers")
_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/]*)(?P<path>/.*)?$")
_HOST = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::(?P<port>\d{1,5}))?$")


@dataclasses.dataclass(frozen=True)
class MetadataServiceUri:
    uri: str
    hosts: str                                 # "h1:2181,h2:2181", as kazoo takes it
    root: str                                  # "/ledgers"
    ledger_manager: LedgerManagerType | None   # None: read LAYOUT (new cluster: hierarchical)

    def layout(self, manager: LedgerManagerType) -> ZkLayout:
        return ZkLayout(self.root, manager)


def _bad(uri: str, why: str) -> InvalidOptionError:
    return InvalidOptionError(f"metadataServiceUri {uri!r}: {why}; {EXPECTED_FORM}")


def _parse_scheme(uri: str, scheme: str) -> LedgerManagerType | None:
    base, _, kind = scheme.lower().partition("+")
    if base != "zk":
        raise _bad(uri, f"unsupported scheme {base!r} (only ZooKeeper, 'zk', is supported)")
    if kind in ("", "null"):
        return None
    try:
        return LedgerManagerType.parse(kind)
    except ValueError:
        raise _bad(uri, f"unknown ledger manager type {kind!r}") from None


def _parse_hosts(uri: str, authority: str) -> str:
    hosts = []
    for item in re.split(r"[;,]", authority):
        item = item.strip()
        m = _HOST.match(item)
        if not m:
            raise _bad(uri, f"bad ZooKeeper server {item!r}")
        port = int(m.group("port") or DEFAULT_ZK_PORT)
        if not 0 < port < 65536:
            raise _bad(uri, f"port {port} of {item!r} is out of range")
        host = f"[{m.group('v6')}]" if m.group("v6") else m.group("name")
        hosts.append(f"{host}:{port}")
    return ",".join(hosts)


def _parse_root(uri: str, path: str | None) -> str:
    if not path or path == "/":
        raise _bad(uri, "the ledgers root path is missing")
    root = path.rstrip("/")
    if "//" in root or any(ord(c) < 0x21 for c in root) or "?" in root or "#" in root:
        raise _bad(uri, f"bad ledgers root path {path!r}")
    if any(part in (".", "..") for part in root.split("/")):
        raise _bad(uri, f"ledgers root {path!r} must not contain '.' or '..'")
    return root


def parse_metadata_service_uri(uri: str) -> MetadataServiceUri:
    """Parse a metadata service URI; raises InvalidOptionError (a ValueError) saying the expected form."""
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidOptionError(f"metadataServiceUri is empty; {EXPECTED_FORM}")
    text = uri.strip()
    m = _URI.match(text)
    if not m:
        raise _bad(uri, "not a URI")
    manager = _parse_scheme(uri, m.group("scheme"))
    if not m.group("authority"):
        raise _bad(uri, "no ZooKeeper servers")
    return MetadataServiceUri(text, _parse_hosts(uri, m.group("authority")),
                              _parse_root(uri, m.group("path")), manager)
