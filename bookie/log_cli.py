"""`bkledger log VERB ...`: logs made of ledgers from the command line, as Kafka's `kafka-topics` /
`kafka-console-producer` / `kafka-console-consumer` and DistributedLog's tool do for theirs.

Verbs: list, describe, create, delete, truncate, retention, append (a console producer: lines of stdin or
files, one record each, with key and timestamp), tail (a console consumer: records decoded from the record
                                     "retention, append, tail, cursors, compact, offload")
`--uri`, else `--conf` (a bookie configuration), else the local cluster in `--dir`. Every verb prints
JSON with `--json` (tail: one JSON object a line). Errors a user can fix print one line and exit 1 (2 for a
bad command line); never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bkledger.bookie import log_records as records
from bkledger.bookie.shell import DEFAULT_LOCAL_DIR, ShellError, connect, printable, table

if TYPE_CHECKING:
    from bkledger.client import BookKeeper

_SIZES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class UsageError(Exception):
    """A command line the verb cannot run (exit 2)."""


def _limit(text: str | None, units: dict[str, int], what: str) -> float | None | bool:
    """`none` -> None (no limit), `7d` / `512m` -> a number; argument absent -> False (unchanged)."""
    if text is None:
        return False
    if text.lower() in ("none", "off", "-1"):
        return None
    got = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-z]?)b?", text.strip().lower())
    if got is None or got.group(2) not in units:
        raise UsageError(f"{what} {text!r}: give a number with an optional unit ({'/'.join(k for k in units if k)})"
                         " or none")
    return float(got.group(1)) * units[got.group(2)]


# ---- verbs ----------------------------------------------------------------------------------------
def cmd_list(bk: BookKeeper, args: argparse.Namespace) -> int:
    names = sorted(bk.list_logs())
    if args.json:
        print(json.dumps(names))
    else:
        for name in names:
            print(printable(name))
    return 0


def cmd_describe(bk: BookKeeper, args: argparse.Namespace) -> int:
    from bkledger.client.log.core.meta import shown
    from bkledger.client.log.logs import describe_log

    meta = bk.log_metadata(args.name)
    if args.json:
        print(json.dumps(shown(meta), indent=2, sort_keys=True))       # the log's own key hidden
    else:
        from bkledger.client.log import offloader
        from bkledger.client.log.core import offload_policy as op

        lines = describe_log(meta)
        at = len(lines) - len(meta.ledgers) - 1                  # before the table of ledgers
        lines[at:at] = offloader.describe_copies(offloader.pending_copies(bk, args.name), op.deletion_lag(meta))
        print("\n".join(printable(line) for line in lines))
    return 0


def cmd_create(bk: BookKeeper, args: argparse.Namespace) -> int:
    from bkledger.client.log.core.meta import shown
    from bkledger.client.log.naming import creatable_log_name
    from bkledger.client.log.store import create_log

    creatable_log_name(bk, args.name)      # InvalidLogNameError: the character and its index, or the length
    if args.name in bk.list_logs():
        raise ShellError(f"log {args.name!r} exists already")
    create_log(bk.store, args.name)
    meta = _set_retention(bk, args) if (args.max_age or args.max_bytes or args.cursor_max_lag) \
        else bk.log_metadata(args.name)
    _emit(args, shown(meta), f"created log {printable(args.name)}")
    return 0


def cmd_delete(bk: BookKeeper, args: argparse.Namespace) -> int:
    meta = bk.log_metadata(args.name)
    if not args.force:
        if not sys.stdin.isatty():
            raise ShellError(f"deleting log {args.name!r} ({len(meta.ledgers)} ledgers) needs --force here "
                             "(no terminal to confirm on)")
        answer = input(f"delete log {args.name!r} and its {len(meta.ledgers)} ledgers? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("not deleted", file=sys.stderr)
            return 1
    bk.delete_log(args.name, delete_ledgers_too=not args.keep_ledgers)
    kept = " (its ledgers kept)" if args.keep_ledgers else f" and its {len(meta.ledgers)} ledgers"
    _emit(args, {"log": args.name, "deleted": True, "ledgers_deleted": not args.keep_ledgers},
          f"deleted log {printable(args.name)}{kept}")
    return 0


def cmd_truncate(bk: BookKeeper, args: argparse.Namespace) -> int:
    from bkledger.client.log.core.meta import Position

    dropped = bk.truncate_log(args.name, Position.parse(args.before))
    _emit(args, {"log": args.name, "before": args.before, "deleted_ledgers": dropped},
          f"log {printable(args.name)}: deleted {len(dropped)} ledgers before {args.before}"
          + (f" ({', '.join(map(str, dropped))})" if dropped else ""))
    return 0


def _set_retention(bk: BookKeeper, args: argparse.Namespace) -> Any:
    age = _limit(args.max_age, _SECONDS, "--max-age")
    size = _limit(args.max_bytes, _SIZES, "--max-bytes")
    current = bk.log_metadata(args.name).retention
    max_age = current.max_age_s if age is False else age
    max_bytes = current.max_bytes if size is False else (None if size is None else int(size))
    lag = _limit(args.cursor_max_lag, _SIZES, "--cursor-max-lag")
    return bk.set_log_retention(args.name, max_age_s=max_age, max_bytes=max_bytes,
                                cursor_max_lag_bytes=False if lag is False else None if lag is None else int(lag))


def cmd_retention(bk: BookKeeper, args: argparse.Namespace) -> int:
    meta = _set_retention(bk, args) if (args.max_age or args.max_bytes or args.cursor_max_lag) \
        else bk.log_metadata(args.name)
    dropped = bk.apply_log_retention(args.name) if args.apply else []
    ret = meta.retention
    data = {"log": args.name, "max_age_s": ret.max_age_s, "max_bytes": ret.max_bytes}
    if args.apply:
        data["deleted_ledgers"] = dropped
    rows = [("max_age_s", "none" if ret.max_age_s is None else f"{ret.max_age_s:g}"),
            ("max_bytes", "none" if ret.max_bytes is None else ret.max_bytes)]
    if args.apply:
        rows.append(("deleted ledgers", ", ".join(map(str, dropped)) or "none"))
    _emit(args, data, table(("retention of " + args.name, "value"), rows))
    return 0


def cmd_cursors(bk: BookKeeper, args: argparse.Namespace) -> int:
    """The log's cursors and their lag (issue 44 item 3), as `kafka-consumer-groups --describe` shows."""
    data = bk.list_cursors(args.name, password=args.password.encode())
    quota = data["cursor_max_lag_bytes"]
    rows = [(c["cursor"], c["position"] or "(none acked)", c["lag_entries"], c["lag_bytes"], f"{c['lag_seconds']:g}",
             "LOST " + ",".join(map(str, c["lost"]["ledgers"])) if c["lost"] else "ok") for c in data["cursors"]]
    _emit(args, data, table(("cursor", "position", "lag entries", "lag bytes", "lag s", "state"), rows)
          + f"\ncursor quota (cursor_max_lag_bytes): {'none' if quota is None else quota}")
    return 0


def cmd_tail(bk: BookKeeper, args: argparse.Namespace) -> int:
    from bkledger.client.log.core.meta import Position

    start: Any = args.start if args.start in ("earliest", "latest") else Position.parse(args.start)
    return records.tail(bk, args, start)


def cmd_append(bk: BookKeeper, args: argparse.Namespace) -> int:
    return records.append(bk, args)


def cmd_compact(bk: BookKeeper, args: argparse.Namespace) -> int:
    """Progress on stderr like the shell's recover/decommission (a bar on a terminal, lines otherwise,
    nothing with --json); the first Ctrl-C stops between two runs (what was copied so far is swapped in,
    the log stays whole), prints what was done and exits 130."""
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


def cmd_offload(bk: BookKeeper, args: argparse.Namespace) -> int:
    """Offload the log's sealed ledgers to its Delta table; the store defaults to the one the log records,
    else (a local cluster) `offload` in the cluster's folder."""
    import os

    store = args.store
    if store is None and not (args.uri or args.conf) and not _offloaded_before(bk, args.name):
        store = os.path.join(os.path.abspath(args.dir), "offload")
    done = bk.offload_log(args.name, store, max_file_bytes=args.max_file_bytes, password=args.password.encode())
    text = [f"{f}: ledgers {ids[0]}..{ids[-1]}" for f, ids in done.files]
    resumed = " (finished a run a crash left)" if done.resumed else ""
    text.append(f"offload run {done.run}: {len(done.files)} files, {done.entries} entries, {done.bytes} bytes to "
                f"{done.table_uri} (version {done.version}){resumed}")
    _emit(args, done.as_dict(), "\n".join(text))
    return 0


def cmd_offload_policy(bk: BookKeeper, args: argparse.Namespace) -> int:
    """Show, set or (--clear) remove the log's offload policy, which `bkledger offloader` applies; options
    not given keep their value."""
    from bkledger.client.log.core import offload_policy as op

    if args.clear:
        bk.clear_log_offload(args.name)
    elif any(x is not None for x in (args.after_bytes, args.after_age, args.store, args.deletion_lag)):
        now = bk.log_offload_policy(args.name) or op.OffloadPolicy()
        size = _limit(args.after_bytes, _SIZES, "--after-bytes")
        age = _limit(args.after_age, _SECONDS, "--after-age")
        lag: float | str | None = now.deletion_lag_s
        if args.deletion_lag is not None:
            got = op.KEEP if args.deletion_lag.lower() == op.KEEP else _limit(args.deletion_lag, _SECONDS,
                                                                              "--deletion-lag")
            if got is None:
                raise UsageError(f"--deletion-lag: give seconds (or 30m, 4h) or {op.KEEP}")
            lag = got if isinstance(got, str) else float(got)
        bk.set_log_offload(args.name, after_bytes=now.after_bytes if size is False else None if size is None
                           else int(size), after_seconds=now.after_seconds if age is False else age,
                           store_uri=args.store or now.store_uri, deletion_lag_seconds=op.KEEP if lag is None else lag)
    pol = bk.log_offload_policy(args.name)
    shown = pol.as_dict() if pol is not None else None
    rows = [(k, "none" if v is None else v) for k, v in (shown or {}).items()] or [("policy", "none")]
    _emit(args, {"log": args.name, "policy": shown}, table(("offload policy of " + args.name, "value"), rows))
    return 0


def _offloaded_before(bk: BookKeeper, name: str) -> bool:
    from bkledger.client.log.core import offload as ol

    return ol.state(bk.log_metadata(name)).uri is not None


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else text)


# ---- running --------------------------------------------------------------------------------------
def cmd_log(args: argparse.Namespace) -> int:
    """Run one `bkledger log` verb; user errors are one line on stderr."""
    from bkledger.client.errors import BKError

    logging.getLogger("kazoo").setLevel(logging.WARNING)
    verb: Callable[[BookKeeper, argparse.Namespace], int] = args.log_func
    try:
        with connect(args) as bk:
            return verb(bk, args)
    except UsageError as exc:
        print(f"bkledger log {args.action}: {exc}", file=sys.stderr)
        return 2
    except (ShellError, BKError, records.RecordError, TimeoutError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        print(f"bkledger log {args.action}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def add_log_parser(sub: Any) -> None:
    """The `log` command and its verbs (registered by `bookie.cli.build_parser`)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--uri", help="metadata service URI, e.g. zk://127.0.0.1:2181/ledgers")
    common.add_argument("--conf", help="a bookie configuration file (its metadataServiceUri is used)")
    common.add_argument("--dir", default=DEFAULT_LOCAL_DIR, help="local cluster to use without --uri/--conf")
    common.add_argument("--client-conf", help="client settings file (TLS, ZooKeeper credentials)")
    common.add_argument("--json", action="store_true", help="JSON output for scripts (tail: one object a line)")

    log = sub.add_parser("log", help="logs made of ledgers: list, describe, create, delete, truncate, "
                                     "retention, append, tail, cursors, compact, offload, offload-policy")
    verbs = log.add_subparsers(dest="action", required=True)

    def verb(name: str, func: Callable[[BookKeeper, argparse.Namespace], int], text: str,
             named: bool = True) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = verbs.add_parser(name, parents=[common], help=text, description=text)
        if named:
            p.add_argument("name", help="the log")
        p.set_defaults(log_func=func)
        return p

    verb("list", cmd_list, "the logs' names", named=False)
    verb("describe", cmd_describe, "a log's ledgers, sizes and retention")
    p = verb("create", cmd_create, "create an empty log (a writer or append creates one too)")
    _retention_options(p)
    p = verb("delete", cmd_delete, "delete a log and (unless --keep-ledgers) its ledgers")
    p.add_argument("--force", action="store_true", help="do not ask for confirmation")
    p.add_argument("--keep-ledgers", action="store_true", help="delete only the log, not its ledgers")
    p = verb("truncate", cmd_truncate, "delete the ledgers entirely before a position (the last one stays)")
    p.add_argument("--before", required=True, metavar="LEDGER:ENTRY", help="the first position to keep")
    p = verb("retention", cmd_retention, "show or set a log's retention; --apply deletes what it no longer keeps")
    _retention_options(p)
    p.add_argument("--apply", action="store_true", help="delete the ledgers retention no longer keeps, now")
    _append_parser(verb("append", cmd_append, "append lines of stdin or files, one record each (console producer)"))
    _tail_parser(verb("tail", cmd_tail, "print records from a position (console consumer)"))
    p = verb("cursors", cmd_cursors, "a log's cursors: acknowledged position and lag behind the tail")
    p.add_argument("--password", default="", help="the log's ledger password (to read the open ledger's LAC)")
    p = verb("compact", cmd_compact, "rewrite runs of small closed ledgers into larger ones")
    p.add_argument("--password", default="", help="the log's ledger password")
    p.add_argument("--target-bytes", type=int, default=64 << 20, help="bytes of a compacted ledger")
    p.add_argument("--min-ledgers", type=int, default=4, help="fewest ledgers in a run worth compacting")
    p.add_argument("--grace-s", type=float, default=600.0,
                   help="seconds before replaced ledgers are deleted, by a later run")
    p = verb("offload", cmd_offload, "write the sealed ledgers to the log's Delta table (tiered history)")
    p.add_argument("--store", help="table store URI: a directory or s3://bucket/prefix?endpoint_override=HOST:PORT"
                                   "&scheme=http (default: the log's, else DIR/offload of a local cluster)")
    p.add_argument("--max-file-bytes", type=int, default=64 << 20, help="ledger bytes per Parquet file")
    p.add_argument("--password", default="", help="the log's ledger password")
    p = verb("offload-policy", cmd_offload_policy, "show or set when `bkledger offloader` offloads the log and "
             "deletes its bookie copies")
    p.add_argument("--after-bytes", help="offload once the sealed ledgers on bookies hold more: bytes or 512m, "
                                         "10g; none: no byte threshold")
    p.add_argument("--after-age", help="offload ledgers closed longer ago: seconds or 30m, 12h, 7d; none: no age "
                                       "threshold")
    p.add_argument("--store", help="table store URI (default: the log's, else the offloader's)")
    p.add_argument("--deletion-lag", help="delete the bookie copies this long after an offload: seconds or 30m, "
                                          "4h; 0: at once; keep: never (default 4h)")
    p.add_argument("--clear", action="store_true", help="remove the policy (offloaded history stays)")
    log.set_defaults(func=cmd_log)


def _retention_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-age", help="keep data this long: seconds or 30m, 12h, 7d, 2w; none: no limit")
    p.add_argument("--max-bytes", help="drop the oldest ledgers beyond this: bytes or 512m, 10g; none: no limit")
    p.add_argument("--cursor-max-lag", help="a cursor further behind than this (bytes or 512m, 10g) no longer "
                                            "holds retention back; none: every cursor holds")


def _append_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", metavar="FILE", help="read lines from these files (default, or -: stdin)")
    p.add_argument("--key", help="the key of every record")
    p.add_argument("--key-separator", metavar="SEP", help="each line is KEY SEP VALUE (a line without SEP: no key)")
    p.add_argument("--timestamp", default="now",
                   help="now (default: each record's append time), none, milliseconds since the epoch or "
                        "ISO 8601 (2026-01-31T12:00:00Z)")
    p.add_argument("--create", action="store_true", help="create the log if it does not exist")
    p.add_argument("--fence-writer", action="store_true", help="take the log over from a live writer (fences it)")
    p.add_argument("--password", default="", help="the log's ledger password")
    p.add_argument("-e", "--ensemble", type=int, default=3, help="ensemble size of the new ledger")
    p.add_argument("-w", "--write-quorum", type=int, default=2)
    p.add_argument("-a", "--ack-quorum", type=int, default=2)


def _tail_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="start", default="earliest", help="earliest, latest or LEDGER:ENTRY")
    p.add_argument("--max", type=int, default=None, help="stop after this many records")
    p.add_argument("--timeout", type=float, default=2.0, help="stop after this many idle seconds")
    p.add_argument("--follow", action="store_true", help="keep tailing until interrupted")
    p.add_argument("--raw", action="store_true", help="entries as stored: no record envelope decoding")
    p.add_argument("--hex", action="store_true", help="bytes (key, value) as hex")
    p.add_argument("--password", default="", help="the log's ledger password")
