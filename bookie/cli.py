"""The `bkledger` command: `bookie` (one standalone bookie), `autorecovery` (the auditor and replication
worker beside a bookie), `zookeeper` (a standalone ZooKeeper server for several hosts:
`bookie.local.zookeeper_cmd`), `local` (a cluster on this machine), `log` (logs made of ledgers: `bookie.log_cli`),
`offloader` (applies the logs' offload policies: `bookie.offloader`) and `shell` (the admin shell, `bookie.shell`).

Mirrors BookKeeper's `bin/bookkeeper bookie` and the local-bookie tooling. Errors a user can fix
print one line saying what to do and exit non-zero; they never print a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
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
    # kazoo's own lines (every reconnect attempt) are DEBUG (client.meta.zklog): shown with --verbose only;
    # ZooKeeper trouble is one line of logger bkledger.zookeeper
    logging.getLogger("kazoo").setLevel(logging.DEBUG if verbose else logging.WARNING)


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
    if args.log_file:
        from bkledger.bookie.config import size_bytes
        from bkledger.bookie.log_files import use_log_file

        use_log_file(args.log_file, size_bytes(config.logFileMaxSize), config.logFileMaxBackups)
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
            restarting = cluster.state_path.exists()
            try:
                cluster.up(args.bookies, _overrides(args.set), secure=args.secure)
            except BaseException:
                cluster.down()              # leave nothing half-started behind
                raise
            print(cluster.metadata_service_uri)
            if restarting:
                print(f"restarted the cluster kept in {args.dir}: ZooKeeper and bookies on their kept ports, "
                      f"with their ids and data ({len(cluster.bookies)} bookies)", file=sys.stderr)
            if cluster.secure:
                print(f"secure: clients need export {_client_env(cluster)} (see local status --json)", file=sys.stderr)
        elif args.action == "down":
            LocalCluster.load(args.dir).down(wipe=args.wipe)
            print(f"local cluster in {args.dir} stopped and deleted" if args.wipe else
                  f"local cluster in {args.dir} stopped; its data is kept: `bkledger local up --dir {args.dir}` "
                  "starts it again, `bkledger local down --wipe` deletes it")
        else:
            status = LocalCluster.load(args.dir).status(health=True)
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
    _print_health(status["bookies"])


def _print_health(bookies: list[dict[str, Any]]) -> None:
    """What each live bookie says of itself (its admin HTTP state): mode, checkpoints, background threads."""
    rows = [(b["bookie_id"], b["health"]) for b in bookies if b.get("health")]
    if not rows:
        return
    print(f"{'bookie':<22}{'mode':<28}{'last checkpoint':<21}{'failed checkpoints':<20}thread failures")
    for bookie_id, h in rows:
        last = h.get("lastCheckpointTime", 0)
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last)) if last else "none yet"
        threads = ", ".join(f"{k} {v}" for k, v in sorted(h.get("threadFailures", {}).items())) or "none"
        mode = h.get("state", "?") + (" (storage failed)" if h.get("storageFailed") else "")
        print(f"{bookie_id:<22}{mode:<28}{when:<21}{h.get('checkpointFailures', 0):<20}{threads}")


def _print_http(bookies: list[dict[str, Any]]) -> None:
    """Where each bookie and autorecovery daemon serves metrics and the admin API (local status)."""
    if not any(b.get("urls") for b in bookies):
        return
    print(f"{'bookie':<22}{'metrics':<32}{'admin http':<48}autorecovery metrics")
    for b in bookies:
        urls = b.get("urls", {})
        print(f"{b['bookie_id']:<22}{urls.get('metrics', '-'):<32}{urls.get('admin', '-'):<48}"
              f"{urls.get('autorecovery_metrics', '-')}")


#: The commands, in the order `bkledger --help` lists them.
COMMANDS = ("bookie", "autorecovery", "zookeeper", "shell", "local", "log", "offloader")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with `command` (one of COMMANDS) that command's alone: the shell's, log's and
    offloader's parsers import the client, which a bookie or autorecovery daemon does not need (half a
    CPU-second at each start)."""
    def wanted(name: str) -> bool:
        return command is None or command == name

    parser = argparse.ArgumentParser(prog="bkledger", description="A replicated, ledger-backed log store")
    parser.add_argument("--version", action="version", version=f"bkledger {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    if wanted("bookie"):
        _add_daemon_parser(sub, "bookie", "run one bookie (storage server)",
                           "configuration file with BookKeeper key names", cmd_bookie)
    if wanted("autorecovery"):
        _add_daemon_parser(sub, "autorecovery", "run the autorecovery daemon (auditor + replication worker)",
                           "the bookie's configuration file", cmd_autorecovery)
    if wanted("zookeeper"):
        from bkledger.bookie.local.zookeeper_cmd import add_parser as add_zookeeper_parser

        add_zookeeper_parser(sub)
    if wanted("shell"):
        from bkledger.bookie.shell import add_shell_parser

        add_shell_parser(sub)
        sub.choices["shell"].set_defaults(func=cmd_shell)
    if wanted("local"):
        _add_local_parser(sub)
    if wanted("log"):
        from bkledger.bookie.log_cli import add_log_parser

        add_log_parser(sub)
    if wanted("offloader"):
        from bkledger.bookie.offloader import add_offloader_parser

        add_offloader_parser(sub)
    return parser


def _add_daemon_parser(sub: Any, name: str, help: str, conf_help: str,
                       func: Callable[[argparse.Namespace], int]) -> None:
    p = sub.add_parser(name, help=help)
    p.add_argument("--conf", required=True, help=conf_help)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--log-file", metavar="FILE", help="log to FILE (and stdout/stderr too), rolled at "
                   "logFileMaxSize, logFileMaxBackups rolled files kept (default: log to stderr)")
    p.set_defaults(func=func)


def _add_local_parser(sub: Any) -> None:
    p = sub.add_parser("local", help="a ZooKeeper and bookies on this machine")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--bookies", type=int, default=None,
                   help="number of bookies (up; default 3, or on a restart the kept ones)")
    p.add_argument("--dir", default=DEFAULT_LOCAL_DIR, help="where the cluster lives")
    p.add_argument("--json", action="store_true", help="status as JSON")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="bookie configuration")
    p.add_argument("--secure", action="store_true",
                   help="TLS with client certificates and ZooKeeper ACLs; material in DIR/secure (up)")
    p.add_argument("--wipe", action="store_true", help="also delete the cluster's directory, data and all (down)")
    p.set_defaults(func=cmd_local)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bkledger")
    except PackageNotFoundError:
        return "(not installed)"


# Daemons whose SIGTERM/SIGINT a watcher thread takes (to name the sender): the signals are blocked before
# the parser is built, since building it imports the client, and an import may start a thread (gRPC's,
# numpy's BLAS pool) that would otherwise take the signal (bookie.stop_signals).
DAEMONS = frozenset({"bookie", "autorecovery", "offloader"})


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words and words[0] in DAEMONS:
        import faulthandler
        import signal

        from bkledger.bookie.stop_signals import block_stop_signals

        block_stop_signals()
        # `kill -USR1 PID`: every thread's stack to stderr (the log), the daemon goes on (a stop that hangs
        # says where)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    args = build_parser(words[0] if words and words[0] in COMMANDS else None).parse_args(argv)
    try:
        code = int(args.func(args))
        sys.stdout.flush()
    except BrokenPipeError:            # `bkledger log list | head -1`: the reader left, as for any Unix tool
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())     # no second error at exit
        return 141                     # 128 + SIGPIPE, what the shell reports for a tool killed by it
    return code


if __name__ == "__main__":
    sys.exit(main())
