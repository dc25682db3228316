"""The `bkledger` command: `bookie` (one standalone bookie), `autorecovery` (the auditor and replication
worker beside a bookie), `local` (a cluster on this machine), `log` (logs made of ledgers) and `shell`
(the admin shell, `bookie.shell`).

Mirrors BookKeeper's `bin/bookkeeper bookie` and the local-bookie tooling. Errors a user can fix
print one line saying what to do and exit non-zero; they never print a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bkledger.bookie.config import BookieConfig

DEFAULT_LOCAL_DIR = "var/local-cluster"


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)


def _overrides(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--set takes key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _run_with_conf(args: argparse.Namespace, command: str, run: Callable[[BookieConfig], int]) -> int:
    """Load `--conf` (+ `--set` overrides) and run a daemon with it; a bad config is one line, exit 2."""
    from bkledger.bookie.config import ConfigError, load

    _setup_logging(args.verbose)
    try:
        config = load(Path(args.conf), **_overrides(args.set))
    except ConfigError as exc:
        print(f"bkledger {command}: {exc}", file=sys.stderr)
        return 2
    return run(config)


def cmd_bookie(args: argparse.Namespace) -> int:
    from bkledger.bookie.stop_signals import block_stop_signals

    block_stop_signals()  # before imports that start threads (numpy's BLAS pool): see bookie.stop_signals
    from bkledger.bookie.service import run_bookie

    return _run_with_conf(args, "bookie", run_bookie)


def cmd_autorecovery(args: argparse.Namespace) -> int:
    from bkledger.bookie.stop_signals import block_stop_signals

    block_stop_signals()  # before imports that start threads (numpy's BLAS pool): see bookie.stop_signals
    from bkledger.bookie.autorecovery.daemon import run_autorecovery

    return _run_with_conf(args, "autorecovery", run_autorecovery)


def cmd_shell(args: argparse.Namespace) -> int:
    from bkledger.bookie.shell import cmd_shell as run_shell

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    return run_shell(args)


def cmd_local(args: argparse.Namespace) -> int:
    from bkledger.bookie.local.cluster import ClusterError, LocalCluster
    from bkledger.client.errors import BKError

    try:
        if args.action == "up":
            cluster = LocalCluster(args.dir)
            try:
                cluster.up(args.bookies, _overrides(args.set), secure=args.secure)
            except BaseException:
                cluster.down()              # leave nothing half-started behind
                raise
            print(cluster.metadata_service_uri)
            if args.secure:
                print(f"secure: clients need export {_client_env(cluster)} (see local status --json)", file=sys.stderr)
        elif args.action == "down":
            LocalCluster.load(args.dir).down()
            print(f"local cluster in {args.dir} stopped")
        else:
            status = LocalCluster.load(args.dir).status()
            if args.json:
                print(json.dumps(status, indent=2))
            else:
                _print_status(status)
    except (ClusterError, BKError) as exc:     # BKError: e.g. ZooKeeper refused (ACLs), a bad TLS file
        print(f"bkledger local {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


def _client_env(cluster: Any) -> str:
    env = cluster.status().get("env", {})
    return " ".join(f"{k}={v}" for k, v in env.items())


def _print_status(status: dict[str, Any]) -> None:
    zk = status["zookeeper"]
    print(f"metadataServiceUri  {status['metadataServiceUri']}")
    if status.get("secure"):
        print(f"secure              TLS + client certificates + ZooKeeper ACLs; client conf {status['clientConf']}")
    print(f"zookeeper           {zk['address']}  pid {zk['pid']}  {'up' if zk['alive'] else 'DOWN'}")
    print(f"{'bookie':<22}{'pid':>8}  state  {'autorecovery':<14}  directories")
    for b in status["bookies"]:
        state = "up" if b["alive"] else "DOWN"
        ar = b.get("autorecovery_pid", 0)
        ar_state = f"{ar} {'up' if b.get('autorecovery_alive') else 'DOWN'}" if ar else "-"
        print(f"{b['bookie_id']:<22}{b['pid']:>8}  {state:<5}  {ar_state:<14}  {b['journal_dir']} "
              f"{','.join(b['ledger_dirs'])}")
    _print_http(status["bookies"])


def _print_http(bookies: list[dict[str, Any]]) -> None:
    """Where each bookie and autorecovery daemon serves metrics and the admin API (local status)."""
    rows = [(b["bookie_id"], b.get("metrics_port", 0), b.get("http_port", 0), b.get("autorecovery_metrics_port", 0))
            for b in bookies]
    if not any(any(r[1:]) for r in rows):
        return
    print(f"{'bookie':<22}{'metrics':<32}{'admin http':<32}autorecovery metrics")
    for bookie_id, metrics, http, ar in rows:
        def url(port: int, path: str) -> str:
            return f"http://127.0.0.1:{port}{path}" if port else "-"
        print(f"{bookie_id:<22}{url(metrics, '/metrics'):<32}{url(http, '/api/v1'):<32}{url(ar, '/metrics')}")


def cmd_log(args: argparse.Namespace) -> int:
    """`bkledger log list|describe NAME|tail NAME|compact NAME`: the logs under a metadata service URI."""
    from bkledger.client import BookKeeper
    from bkledger.client.errors import BKError
    from bkledger.client.log.core.meta import Position
    from bkledger.client.log.core.meta import shown as without_key
    from bkledger.client.log.logs import describe_log

    logging.getLogger("kazoo").setLevel(logging.WARNING)
    if args.action != "list" and not args.name:
        print(f"bkledger log {args.action}: give the log's NAME", file=sys.stderr)
        return 2
    try:
        with BookKeeper(args.uri) as bk:
            if args.action == "list":
                for name in bk.list_logs():
                    print(name)
            elif args.action == "describe":
                meta = bk.log_metadata(args.name)
                if args.json:
                    print(json.dumps(without_key(meta), indent=2, sort_keys=True))
                else:
                    print("\n".join(describe_log(meta)))
            elif args.action == "compact":
                return log_compact(bk, args)
            else:
                start: Any = args.start if args.start in ("earliest", "latest") else Position.parse(args.start)
                with bk.open_log_reader(args.name, start, password=args.password.encode()) as reader:
                    timeout = None if args.follow else args.timeout
                    for rec in reader.read(max_records=args.max, timeout=timeout):
                        shown = rec.payload.hex() if args.hex else rec.payload.decode("utf-8", "backslashreplace")
                        print(f"{rec.position}\t{shown}", flush=True)
    except BKError as exc:
        print(f"bkledger log {args.action}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def log_compact(bk: Any, args: argparse.Namespace) -> int:
    """`bkledger log compact NAME`: progress on stderr like the shell's recover/decommission (a bar on a
    terminal, lines otherwise, nothing with --json); the first Ctrl-C stops between two runs (what was
    copied so far is swapped in, the log stays whole), prints what was done and exits 130."""
    from bkledger.bookie.progress import Progress, stop_on_interrupt

    with Progress("compact", json_output=args.json) as progress, stop_on_interrupt(progress):
        done = bk.compact_log(args.name, target_bytes=args.target_bytes, min_ledgers=args.min_ledgers,
                              grace_s=args.grace_s, password=args.password.encode(), progress=progress)
    if args.json:
        print(json.dumps(done.as_dict(), indent=2, sort_keys=True))
    else:
        for new, old in done.compacted:
            print(f"ledger {new} replaces {len(old)} ledgers ({old[0]}..{old[-1]})")
        print(f"compacted {done.replaced} ledgers into {len(done.compacted)}; skipped {done.skipped} runs "
              f"(the log changed); deleted {len(done.deleted)} ledgers whose grace period ended")
        if progress.stop_asked:
            print("compact interrupted (Ctrl-C): the runs copied so far are in the log, the rest was not "
                  "touched; run the same command again to go on.")
    return 130 if progress.stop_asked else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bkledger", description="A replicated, ledger-backed log store")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("bookie", help="run one bookie (storage server)")
    p.add_argument("--conf", required=True, help="configuration file with BookKeeper key names")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_bookie)

    p = sub.add_parser("autorecovery", help="run the autorecovery daemon (auditor + replication worker)")
    p.add_argument("--conf", required=True, help="the bookie's configuration file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(func=cmd_autorecovery)

    from bkledger.bookie.shell import add_shell_parser

    add_shell_parser(sub)
    sub.choices["shell"].set_defaults(func=cmd_shell)

    p = sub.add_parser("local", help="a ZooKeeper and bookies on this machine")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--bookies", type=int, default=3, help="number of bookies (up)")
    p.add_argument("--dir", default=DEFAULT_LOCAL_DIR, help="where the cluster lives")
    p.add_argument("--json", action="store_true", help="status as JSON")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="bookie configuration")
    p.add_argument("--secure", action="store_true",
                   help="TLS with client certificates and ZooKeeper ACLs; material in DIR/secure (up)")
    p.set_defaults(func=cmd_local)

    p = sub.add_parser("log", help="logs made of ledgers: list, describe, tail, compact")
    p.add_argument("action", choices=["list", "describe", "tail", "compact"])
    p.add_argument("name", nargs="?", help="the log (describe, tail, compact)")
    p.add_argument("--uri", required=True, help="metadata service URI, e.g. zk://127.0.0.1:2181/ledgers")
    p.add_argument("--from", dest="start", default="earliest", help="earliest, latest or LEDGER:ENTRY (tail)")
    p.add_argument("--max", type=int, default=None, help="stop after this many records (tail)")
    p.add_argument("--timeout", type=float, default=2.0, help="stop after this many idle seconds (tail)")
    p.add_argument("--follow", action="store_true", help="keep tailing until interrupted (tail)")
    p.add_argument("--hex", action="store_true", help="print payloads as hex (tail)")
    p.add_argument("--password", default="", help="the log's ledger password (tail, compact)")
    p.add_argument("--target-bytes", type=int, default=64 << 20, help="bytes of a compacted ledger (compact)")
    p.add_argument("--min-ledgers", type=int, default=4, help="fewest ledgers in a run worth compacting (compact)")
    p.add_argument("--grace-s", type=float, default=600.0,
                   help="seconds before replaced ledgers are deleted, by a later run (compact)")
    p.add_argument("--json", action="store_true", help="metadata (describe) or the result (compact) as JSON")
    p.set_defaults(func=cmd_log)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
