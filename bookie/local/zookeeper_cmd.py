"""`bkledger zookeeper`: one standalone ZooKeeper server for a cluster of several hosts, in the foreground.

As `zkServer.sh start-foreground` runs it: the server in the zookeeper jar the pyspark wheel ships
(bookie.local.zookeeper), listening on `--listen` (all interfaces by default, ZooKeeper's own default;
`127.0.0.1` keeps it to this host) and `--port` (2181), its data in `--dir`. It prints the
`metadataServiceUri` that bookies and clients on other hosts use (with this host's address, chosen as a
bookie chooses its own: bookie.core.bookie_address; a warning when only this host can reach it) and runs
until SIGTERM or SIGINT, then stops the server. The bookies create the cluster's znodes when the first one
starts. One server is not a replicated ensemble: for production, run three or five ZooKeeper servers.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from bkledger.bookie.address import local_host
from bkledger.bookie.core.bookie_address import AddressError, choose
from bkledger.bookie.local.zookeeper import ZooKeeperError, ZooKeeperServer

log = logging.getLogger("bkledger.zookeeper")
DEFAULT_DIR = "var/zookeeper"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("zookeeper", help="run a standalone ZooKeeper server that other hosts reach (foreground)")
    p.add_argument("--listen", default="0.0.0.0",
                   help="address to listen on (default: all interfaces; 127.0.0.1: this host only)")
    p.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    p.add_argument("--dir", default=DEFAULT_DIR, help=f"data directory (snapshots, logs; default {DEFAULT_DIR})")
    p.add_argument("--advertise", default="", help="address other hosts reach it at (default: this host's)")
    p.add_argument("--heap", default="512m", help="JVM heap (-Xmx; default 512m)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_zookeeper)


def advertised(listen: str, advertise: str, port: int) -> str:
    """The host other machines use to reach a server on listen:port; a warning logged when it is loopback."""
    try:
        chosen = choose(listen, advertise, port, use_host_name=False, allow_loopback=True, local=local_host())
    except AddressError:
        raise ZooKeeperError(f"--advertise {advertise} is a wildcard address: other hosts cannot connect to "
                             "it; give an address of this host they reach") from None
    if chosen.warning:
        log.warning("ZooKeeper on %s:%d, reached at %s: a loopback address, so only clients on this host can "
                    "reach it; --listen 0.0.0.0 (or an address of this host) serves other hosts",
                    listen, port, chosen.host)
    return chosen.host


def cmd_zookeeper(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if not 0 < args.port < 65536:
        print(f"bkledger zookeeper: --port must be 1..65535, got {args.port}", file=sys.stderr)
        return 2
    server = ZooKeeperServer(heap=args.heap, host=args.listen)
    try:
        host = advertised(args.listen, args.advertise, args.port)
        server.start(Path(args.dir), port=args.port, timeout=60.0)
    except ZooKeeperError as exc:
        print(f"bkledger zookeeper: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"zk://{host}:{args.port}/ledgers", flush=True)
        log.info("ZooKeeper serving on %s:%d (pid %d, data in %s, log %s); bookies and clients use "
                 "metadataServiceUri=zk://%s:%d/ledgers; SIGTERM or Ctrl-C stops it", args.listen, args.port,
                 server.pid, server.data_dir, server.log_path, host, args.port)
        while not stop.wait(0.5):
            if not server.running:
                log.error("the ZooKeeper server exited; see %s", server.log_path)
                return 1
        log.info("stopping ZooKeeper (pid %d)", server.pid)
    finally:
        server.stop()
    return 0
