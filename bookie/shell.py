"""`bkledger shell VERB ...`: the admin shell (BookKeeper's `bin/bookkeeper shell`).

Verbs: listbookies, listledgers, ledgermetadata, readledger, recover, decommission, simpletest,
bookiesanity, listunderreplicated, whoisauditor, autorecovery (status / enable / disable),
lostbookierecoverydelay. The cluster is named with `--uri`, `--conf` (a bookie configuration file: its
metadataServiceUri) or, by default, the local cluster in `--dir`. Security settings (TLS, ZooKeeper
credentials) come from `--client-conf FILE`, else the bookie configuration's keys (`--conf`), else the
local cluster's (a `--secure` one), on top of the file named by BKLEDGER_CLIENT_CONF. Output is an
aligned table for people, or JSON with `--json`; long operations (recover, decommission) show progress on
stderr (`bookie.progress`: a bar on a terminal, periodic lines otherwise, nothing with --json) and stop
cleanly on Ctrl-C. Logs made of ledgers have their own command: `bkledger log list|describe|tail`.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from bkledger.bookie.progress import Progress, stop_on_interrupt
from bkledger.bookie.shell_io import (
    DEFAULT_LOCAL_DIR,
    ShellError,
    client_config,
    connect,
    emit,
    printable,
    resolve_uri,
    table,
)
from bkledger.client import BookKeeper
from bkledger.client.admin import Admin, ReplicationStats
from bkledger.client.errors import BKError
from bkledger.client.protocol.metadata import LedgerMetadata


def _ms(ts: int) -> str:
    return datetime.datetime.fromtimestamp(ts / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def metadata_dict(md: LedgerMetadata) -> dict[str, Any]:
    return {
        "ledger_id": md.ledger_id, "state": md.state.name, "ensemble_size": md.ensemble_size,
        "write_quorum": md.write_quorum, "ack_quorum": md.ack_quorum, "last_entry_id": md.last_entry_id,
        "length": md.length, "digest_type": md.digest_type.name, "ctime_ms": md.ctime_ms,
        "compression": md.compression,
        "custom_metadata": {k: v.decode("utf-8", "backslashreplace") for k, v in md.custom_metadata.items()},
        "fragments": [{"first_entry_id": f.first_entry_id, "ensemble": list(f.ensemble)} for f in md.fragments],
    }


class _OnBookies:
    """A placement policy that puts new ledgers on given bookies (bookiesanity)."""

    def __init__(self, bookies: Sequence[str]) -> None:
        self.bookies = list(bookies)

    def new_ensemble(self, ensemble_size: int, writable: Sequence[str], exclude: Collection[str] = ()) -> list[str]:
        return self.bookies[:ensemble_size]

    def replace_bookie(self, ensemble: Sequence[str], writable: Sequence[str], exclude: Collection[str] = ()) -> str:
        raise BKError("bookiesanity writes to one bookie only: no replacement")


# ---- verbs ------------------------------------------------------------------------------------


def cmd_listbookies(args: argparse.Namespace) -> int:
    with connect(args) as bk:
        rows = []
        for state, ids in (("rw", bk.store.writable_bookies()), ("ro", bk.store.readonly_bookies())):
            if (state == "rw" and args.ro and not args.rw) or (state == "ro" and args.rw and not args.ro):
                continue
            for bookie_id in ids:
                info = bk.store.bookie_info(bookie_id) or {}
                rows.append({"bookie_id": bookie_id, "state": state,
                             "address": f"{info.get('host', '?')}:{info.get('port', '?')}"})
    emit(args, rows, ("bookie", "state", "address"), [(r["bookie_id"], r["state"], r["address"]) for r in rows])
    return 0


def cmd_listledgers(args: argparse.Namespace) -> int:
    with connect(args) as bk:
        out = []
        for ledger_id in bk.list_ledgers():
            try:
                md = bk.ledger_metadata(ledger_id)
            except BKError:
                continue
            bookies = sorted({b for f in md.fragments for b in f.ensemble})
            if args.bookie and args.bookie not in bookies:
                continue
            out.append((md, bookies))
    data = [metadata_dict(md) if args.meta else {"ledger_id": md.ledger_id, "state": md.state.name,
                                                  "bookies": bookies} for md, bookies in out]
    rows = [(md.ledger_id, md.state.name, f"{md.ensemble_size}/{md.write_quorum}/{md.ack_quorum}",
             md.last_entry_id, md.length, ",".join(bookies)) for md, bookies in out]
    emit(args, data, ("ledger", "state", "E/Qw/Qa", "last entry", "length", "bookies"), rows)
    return 0


def cmd_ledgermetadata(args: argparse.Namespace) -> int:
    with connect(args) as bk:
        md = bk.ledger_metadata(args.ledger)
    d = metadata_dict(md)
    lines = [f"{k:<16}{v}" for k, v in d.items() if k not in ("fragments", "custom_metadata")]
    lines[lines.index(f"{'ctime_ms':<16}{md.ctime_ms}")] += f"  ({_ms(md.ctime_ms)} UTC)"
    for k, v in d["custom_metadata"].items():
        lines.append(f"custom {k:<9}{v}")
    lines.append("fragments")
    lines.append(table(("first entry", "ensemble"),
                       [(f.first_entry_id, ", ".join(f.ensemble)) for f in md.fragments]))
    emit(args, d, text="\n".join(lines))
    return 0


def cmd_readledger(args: argparse.Namespace) -> int:
    """Entries of a ledger; those of a ledger written with the record envelope decoded into key,
    timestamp and value (`bookie.log_records`), unless --raw."""
    from bkledger.bookie.log_records import ledger_envelope, shown, text_fields

    with connect(args) as bk:
        md = bk.ledger_metadata(args.ledger)
        handle = bk.open_ledger(args.ledger, md.password, recovery=args.recover)
        last_readable = handle.last_add_confirmed
        last = last_readable if args.last < 0 else min(args.last, last_readable)
        entries = [] if last < args.first else list(handle.read_entries(args.first, last))
        version = 0 if args.raw else ledger_envelope(bk, args.ledger)
    data = [{"entry_id": e.entry_id, **shown(e.payload, version, args.raw, args.hex)} for e in entries]
    if not version:
        for d in data:
            d["payload"] = d.pop("value")            # bare entries keep their JSON field's name
        emit(args, data, ("entry", "size", "payload"),
             [(d["entry_id"], d["size"], text_fields(d | {"value": d["payload"]}, args.width)[-1]) for d in data])
        return 0
    rows = [(d["entry_id"], d["size"], printable(d.get("key") or "-"), d.get("timestamp") or "-",
             " ".join(text_fields({**d, "key": None, "timestamp": None}, args.width))) for d in data]
    emit(args, data, ("entry", "size", "key", "timestamp", "value"), rows)
    return 0


def _stats_rows(stats: ReplicationStats) -> list[tuple[str, object]]:
    mb_s = stats.bytes / 1e6 / stats.seconds if stats.seconds > 0 else 0.0
    rows: list[tuple[str, object]] = [("ledgers", stats.ledgers), ("fragments", stats.fragments),
                                      ("entries", stats.entries), ("bytes", stats.bytes),
                                      ("seconds", round(stats.seconds, 2)), ("MB/s", round(mb_s, 2)),
                                      ("failed", len(stats.failed))]
    if stats.interrupted:
        rows.append(("left", len(stats.left)))
    rows += [(f"failed ledger {k}", v) for k, v in sorted(stats.failed.items())]
    return rows


def _interrupted_text(verb: str, stats: ReplicationStats) -> str:
    gone_through = stats.total_ledgers - len(stats.left)
    kept = "; the cookie was kept" if verb == "decommission" else ""
    return (f"{verb} interrupted (Ctrl-C): {gone_through} of {stats.total_ledgers} ledgers gone through, "
            f"{len(stats.left)} left (first: {stats.left[:10]}). Every fragment copied so far is in the "
            f"metadata and nothing is half-swapped{kept}; run the same command again to finish.")


def _run_replication(args: argparse.Namespace, action: Callable[[Admin, Progress], ReplicationStats]) -> int:
    """Run recover/decommission with a progress bar (or lines, or nothing with --json); Ctrl-C stops it
    between two fragments, prints what was done and exits 130."""
    with connect(args) as bk, Progress(args.verb, json_output=args.json) as progress, stop_on_interrupt(progress):
        stats = action(Admin(bk), progress)
    rows = "\n".join(f"{k:<20}{v}" for k, v in _stats_rows(stats))
    text = f"{rows}\n{_interrupted_text(args.verb, stats)}" if stats.interrupted else rows
    emit(args, stats.as_dict(), text=text)
    if stats.interrupted:
        return 130
    return 1 if stats.failed else 0


_BOOKIE_ID = re.compile(r"[A-Za-z0-9:._-]+")       # BookKeeper's BookieId.validateBookieId


def check_bookie_id(text: str) -> str:
    """`text` if it can be a bookie id (BookKeeper's rule: letters, digits, ':', '.', '_', '-', not
    "readonly"; a trailing ":port" must be a port 1-65535), else ShellError."""
    _, sep, port = text.rpartition(":")
    bad_port = bool(sep) and (not port.isdigit() or not 1 <= int(port) <= 65535)
    if not _BOOKIE_ID.fullmatch(text) or text.lower() == "readonly" or bad_port:
        raise ShellError(f"{text!r} is not a bookie id: give HOST:PORT as listbookies shows it, e.g. "
                         "127.0.0.1:3181 (several separated by commas)")
    return text


def check_known_bookies(bk: BookKeeper, bookies: Sequence[str]) -> None:
    """ShellError naming each of `bookies` that this cluster does not know (not registered, no cookie, in
    no ledger's ensemble), with the bookies it knows: a typo must not be "recovered" as 0 ledgers."""
    for bookie_id in bookies:
        check_bookie_id(bookie_id)
    known = set(Admin(bk).registered_bookies()) | set(bk.store.cookie_bookies())
    unknown = [b for b in bookies if b not in known]
    if not unknown:
        return
    named = {b for _, md in bk.store.ledgers_with_metadata() for f in md.fragments for b in f.ensemble}
    stray = [b for b in unknown if b not in named]
    if stray:
        listed = ", ".join(sorted(known | named)) or "none"
        which = "bookie " + ", ".join(stray) + (" is" if len(stray) == 1 else " are")
        raise ShellError(f"{which} not known to this cluster (not registered, no cookie, in no ledger's "
                         f"ensemble); known bookies: {listed}")


def cmd_recover(args: argparse.Namespace) -> int:
    bookies = [b.strip() for b in args.bookie.split(",") if b.strip()]
    if not bookies:
        raise ShellError("give the bookie id(s) to recover, e.g. 127.0.0.1:3181")
    with connect(args) as bk:
        check_known_bookies(bk, bookies)
        if args.target is not None and check_bookie_id(args.target) not in bk.store.writable_bookies():
            raise ShellError(f"target {args.target} is not a writable bookie of this cluster; writable: "
                             f"{', '.join(bk.store.writable_bookies()) or 'none'}")
    return _run_replication(args, lambda admin, progress: admin.recover_bookies(
        bookies, target=args.target, force=args.force, progress=progress))


def cmd_decommission(args: argparse.Namespace) -> int:
    with connect(args) as bk:
        check_known_bookies(bk, [args.bookie])
    return _run_replication(args, lambda admin, progress: admin.decommission(args.bookie, progress=progress))


def cmd_simpletest(args: argparse.Namespace) -> int:
    payload = b"x" * args.size
    with connect(args) as bk:
        start = time.monotonic()
        handle = bk.create_ledger(args.ensemble, args.write_quorum, args.ack_quorum, password=b"simpletest")
        ledger_id, ensemble = handle.ledger_id, list(handle.metadata.fragments[0].ensemble)
        futures = [handle.add_entry_async(payload) for _ in range(args.num_entries)]
        with Progress("simpletest", json_output=args.json, unit="entries") as progress:
            progress.begin(args.num_entries, args.num_entries * args.size)
            for fut in futures:
                fut.result(60)
                progress.advance(items=1, nbytes=args.size)
        handle.close()
        write_s = time.monotonic() - start
        reader = bk.open_ledger(ledger_id, b"simpletest", recovery=False)
        count = 0
        for entry in ([] if args.num_entries == 0 else reader.read_entries(0, args.num_entries - 1)):
            if entry.payload != payload or entry.entry_id != count:
                raise ShellError(f"ledger {ledger_id} entry {entry.entry_id} read back wrong")
            count += 1
        bk.delete_ledger(ledger_id)
        total_s = time.monotonic() - start
    result = {"ledger_id": ledger_id, "ensemble": ensemble, "written": args.num_entries, "read": count,
              "write_seconds": round(write_s, 3), "total_seconds": round(total_s, 3), "deleted": True,
              "ok": count == args.num_entries}
    text = (f"simpletest: ledger {ledger_id} on {', '.join(ensemble)} "
            f"(E={args.ensemble} Qw={args.write_quorum} Qa={args.ack_quorum})\n"
            f"wrote {args.num_entries} entries of {args.size} B in {write_s:.2f}s, read back {count}, deleted\n"
            f"{'OK' if result['ok'] else 'FAILED'}")
    emit(args, result, text=text)
    return 0 if result["ok"] else 1


def cmd_bookiesanity(args: argparse.Namespace) -> int:
    uri, config = resolve_uri(args), client_config(args)
    with BookKeeper(uri, config=config) as bk:
        bookies = [args.bookie] if args.bookie else bk.store.writable_bookies()
    results = []
    for bookie_id in bookies:
        start = time.monotonic()
        try:
            with BookKeeper(uri, config=config, placement=_OnBookies([bookie_id])) as bk:
                handle = bk.create_ledger(1, 1, 1, password=b"bookiesanity")
                for i in range(args.num_entries):
                    handle.add_entry(f"bookiesanity {i}".encode(), timeout=30)
                handle.close()
                got = [e.payload for e in bk.open_ledger(handle.ledger_id, b"bookiesanity", recovery=False)
                       .read_entries(0, args.num_entries - 1)] if args.num_entries else []
                bk.delete_ledger(handle.ledger_id)
            ok = got == [f"bookiesanity {i}".encode() for i in range(args.num_entries)]
            results.append({"bookie_id": bookie_id, "ok": ok, "ms": round((time.monotonic() - start) * 1000, 1),
                            "error": "" if ok else "read back differs"})
        except (BKError, OSError, TimeoutError) as exc:
            results.append({"bookie_id": bookie_id, "ok": False,
                            "ms": round((time.monotonic() - start) * 1000, 1), "error": str(exc)})
    emit(args, results, ("bookie", "result", "ms", "error"),
         [(r["bookie_id"], "OK" if r["ok"] else "FAILED", r["ms"], r["error"]) for r in results])
    return 0 if results and all(r["ok"] for r in results) else 1


def cmd_listunderreplicated(args: argparse.Namespace) -> int:
    with connect(args) as bk:
        ur = Admin(bk).underreplication
        marks = [(m, ur.lock_owner(m.ledger_id)) for m in ur.list_marked()]
    data = [{"ledger_id": m.ledger_id, "missing_replicas": list(m.replicas), "ctime_ms": m.ctime_ms,
             "locked_by": owner} for m, owner in marks]
    emit(args, data, ("ledger", "missing replicas", "marked at (UTC)", "locked by"),
         [(m.ledger_id, ",".join(m.replicas), _ms(m.ctime_ms), owner or "-") for m, owner in marks])
    return 0


def cmd_whoisauditor(args: argparse.Namespace) -> int:
    with connect(args) as bk:
        auditor = Admin(bk).underreplication.auditor()
    emit(args, {"auditor": auditor}, text=auditor or "no auditor (no autorecovery daemon is running)")
    return 0 if auditor else 1


def cmd_autorecovery(args: argparse.Namespace) -> int:
    with connect(args) as bk:
        ur = Admin(bk).underreplication
        if args.enable or args.disable:
            ur.set_enabled(bool(args.enable))
        enabled = ur.is_enabled()
        auditor = ur.auditor()
    emit(args, {"enabled": enabled, "auditor": auditor},
         text=f"autorecovery {'enabled' if enabled else 'DISABLED'}; auditor: {auditor or '-'}")
    return 0


def cmd_lostbookierecoverydelay(args: argparse.Namespace) -> int:
    with connect(args) as bk:
        ur = Admin(bk).underreplication
        if args.set is not None:
            ur.set_lost_bookie_recovery_delay(args.set)
        value = ur.lost_bookie_recovery_delay(-1)
    shown = "not set (each daemon uses its lostBookieRecoveryDelay)" if value < 0 else f"{value} s"
    emit(args, {"lostBookieRecoveryDelay": None if value < 0 else value}, text=f"lostBookieRecoveryDelay: {shown}")
    return 0


def cmd_sweepjobs(args: argparse.Namespace) -> int:
    from bkledger.client.log.logs import delete_uncommitted, uncommitted_job_ledgers
    from bkledger.client.log.transaction import sweep_markers

    with connect(args) as bk:
        found = uncommitted_job_ledgers(bk, args.older_than, args.log)
        gone = set(delete_uncommitted(bk, found)) if args.delete else set()
        if args.delete and args.log is None:
            sweep_markers(bk, args.older_than)      # markers of transactions whose process died at commit
    data = [{"ledger_id": f.ledger_id, "log": f.log, "job": f.job, "age_s": round(f.age_s, 1),
             "deleted": f.ledger_id in gone} for f in found]
    emit(args, data, ("ledger", "log", "job", "age", "deleted"),
         [(f.ledger_id, f.log, f.job, f"{f.age_s:.0f}s", "yes" if f.ledger_id in gone else "no") for f in found])
    return 0


# ---- parser -----------------------------------------------------------------------------------


def add_shell_parser(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--uri", help="metadata service URI, e.g. zk://127.0.0.1:2181/ledgers")
    common.add_argument("--conf", help="a bookie configuration file (its metadataServiceUri is used)")
    common.add_argument("--dir", default=DEFAULT_LOCAL_DIR, help="local cluster to use without --uri/--conf")
    common.add_argument("--json", action="store_true", help="JSON output for scripts")
    common.add_argument("--client-conf", help="client settings file (TLS, ZooKeeper credentials; README: Security)")

    shell = sub.add_parser("shell", help="admin shell: bookies, ledgers, recovery, autorecovery, tests")
    verbs = shell.add_subparsers(dest="verb", required=True)

    def verb(name: str, func: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = verbs.add_parser(name, parents=[common], help=help_text)
        p.set_defaults(shell_func=func)
        return p

    p = verb("listbookies", cmd_listbookies, "registered bookies (writable and read-only)")
    p.add_argument("--rw", action="store_true", help="only writable bookies")
    p.add_argument("--ro", action="store_true", help="only read-only bookies")
    p = verb("listledgers", cmd_listledgers, "every ledger")
    p.add_argument("--bookie", help="only ledgers with a fragment on this bookie")
    p.add_argument("--meta", action="store_true", help="full metadata in --json output")
    p = verb("ledgermetadata", cmd_ledgermetadata, "the metadata of one ledger")
    p.add_argument("ledger", type=int)
    p = verb("readledger", cmd_readledger, "print a ledger's entries")
    p.add_argument("ledger", type=int)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--last", type=int, default=-1, help="last entry (default: the last readable one)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--hex", action="store_true", help="payloads as hex")
    fmt.add_argument("--utf8", action="store_true", help="payloads as UTF-8 text (default)")
    p.add_argument("--raw", action="store_true", help="entries as stored: no record envelope decoding")
    p.add_argument("--width", type=int, default=80, help="cut payloads to this many characters (0: never)")
    p.add_argument("--recover", action="store_true", help="open with recovery (fences and closes an open ledger)")
    p = verb("recover", cmd_recover, "re-replicate the data of lost bookie(s) (manual recovery)")
    p.add_argument("bookie", help="bookie id, or several separated by commas")
    p.add_argument("target", nargs="?", help="copy everything to this bookie (default: random per fragment)")
    p.add_argument("--force", action="store_true", help="recover even if the bookie is still registered")
    p = verb("decommission", cmd_decommission, "move all data off a stopped bookie, then delete its cookie")
    p.add_argument("bookie")
    p = verb("simpletest", cmd_simpletest, "create a ledger, write, read back, delete")
    p.add_argument("-e", "--ensemble", type=int, default=3)
    p.add_argument("-w", "--write-quorum", type=int, default=2)
    p.add_argument("-a", "--ack-quorum", type=int, default=2)
    p.add_argument("-n", "--num-entries", type=int, default=100)
    p.add_argument("--size", type=int, default=1024, help="entry size in bytes")
    p = verb("bookiesanity", cmd_bookiesanity, "write and read a ledger on one bookie (default: each writable)")
    p.add_argument("--bookie", help="the bookie to check")
    p.add_argument("-n", "--num-entries", type=int, default=10)
    verb("listunderreplicated", cmd_listunderreplicated, "ledgers marked under-replicated")
    verb("whoisauditor", cmd_whoisauditor, "the elected auditor")
    p = verb("autorecovery", cmd_autorecovery, "autorecovery status; enable or disable it cluster-wide")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--enable", action="store_true")
    g.add_argument("--disable", action="store_true")
    p = verb("sweepjobs", cmd_sweepjobs, "ledgers a job wrote for a log but never committed (its driver died)")
    p.add_argument("--log", help="only ledgers written for this log")
    p.add_argument("--older-than", type=float, default=86400.0,
                   help="only ledgers created this many seconds ago or earlier (default 86400: longer than any job)")
    p.add_argument("--delete", action="store_true", help="delete them (default: only list them)")
    p = verb("lostbookierecoverydelay", cmd_lostbookierecoverydelay, "get or set the auditor's delay (s)")
    p.add_argument("-s", "--set", type=int, help="new delay in seconds")
    from bkledger.bookie.cookie_shell import add_cookie_verbs

    add_cookie_verbs(verbs, common)     # bookieformat, cookie get|delete|list (bookie.cookie_shell)


def cmd_shell(args: argparse.Namespace) -> int:
    import logging

    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        return int(args.shell_func(args))
    except (ShellError, BKError, TimeoutError) as exc:
        print(f"bkledger shell {args.verb}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
