"""What every verb of `bkledger shell` shares (its own and those of `bookie.cookie_shell` and
`bookie.log_records`): the user's errors, the output (a table or JSON) and the connection to the cluster."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig

DEFAULT_LOCAL_DIR = "var/local-cluster"


class ShellError(Exception):
    """A shell verb failed in a way the user can fix; the message says how."""


# ---- output -----------------------------------------------------------------------------------


def printable(text: str) -> str:
    """`text` with control and other non-printable characters escaped (`\\n`, `\\x1b`): a table cell stays
    on its line and no terminal escape sequence gets through."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An aligned text table; numbers are right-aligned, control characters escaped (`printable`)."""
    cells = [[printable(str(c)) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], int | float) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True))]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def emit(args: argparse.Namespace, data: Any, headers: Sequence[str] = (),
         rows: Sequence[Sequence[object]] = (), text: str | None = None) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    elif text is not None:
        print(text)
    else:
        print(table(headers, rows))


# ---- the cluster ------------------------------------------------------------------------------


def resolve_uri(args: argparse.Namespace) -> str:
    if args.uri:
        return str(args.uri)
    if args.conf:
        from bkledger.bookie.config import ConfigError, load

        try:
            return load(Path(args.conf)).metadataServiceUri
        except ConfigError as exc:
            raise ShellError(str(exc)) from None
    from bkledger.bookie.local.cluster import ClusterError, LocalCluster

    try:
        return LocalCluster.load_running(args.dir).metadata_service_uri
    except ClusterError as exc:
        raise ShellError(f"give --uri or --conf ({exc})") from None


def security_options(args: argparse.Namespace) -> dict[str, Any]:
    """TLS and ZooKeeper settings: --client-conf, else the bookie configuration's, else the local cluster's."""
    from bkledger.client.config import SECURITY_KEYS, read_properties

    if getattr(args, "client_conf", None):
        return dict(read_properties(Path(args.client_conf)))
    if args.uri:
        return {}
    if args.conf:
        from bkledger.bookie.config import ConfigError, load

        try:
            bookie_conf = load(Path(args.conf))
        except ConfigError as exc:
            raise ShellError(str(exc)) from None
        return {k: getattr(bookie_conf, k) for k in SECURITY_KEYS}
    from bkledger.bookie.local.cluster import ClusterError, LocalCluster

    try:
        return dict(LocalCluster.load(args.dir).client_options)
    except ClusterError:
        return {}


def client_config(args: argparse.Namespace) -> ClientConfig:
    return ClientConfig.from_environment({"readTimeout": 5.0, "addEntryTimeoutSec": 10.0, **security_options(args)})


def connect(args: argparse.Namespace, **kwargs: Any) -> BookKeeper:
    return BookKeeper(resolve_uri(args), config=client_config(args), **kwargs)
