"""`bkledger shell bookieformat` and `bkledger shell cookie get|delete|list`: a bookie's cookies (R24).

After BookKeeper's shell: `bookieformat [-n|--nonInteractive] [-f|--force] [-d|--deleteCookie]` formats a
stopped bookie's journal and ledger directories (asking first when they hold data, unless -n; with -n
only -f formats them) and with -d deletes its cookie in ZooKeeper, so the bookie starts again empty;
`cookie get|delete|list` (bkctl's `cookie` verbs) show and remove the cookies in ZooKeeper. These are the
fixes a cookie mismatch names (bookie.core.cookie). Both refuse while the bookie is registered (running),
and while any ledger still has a fragment on it: formatting or forgetting such a bookie would lose
acknowledged copies without anyone re-replicating them, so `bkledger shell decommission ID` comes first.
Registered from bookie.shell (`add_cookie_verbs`).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bkledger.bookie.core.cookie import Cookie, CookieError
from bkledger.bookie.shell_io import ShellError, connect, emit
from bkledger.client import BookKeeper
from bkledger.client.admin import Admin


def _bookie_config(args: argparse.Namespace) -> Any:
    from bkledger.bookie.address import resolve
    from bkledger.bookie.config import ConfigError, load

    if not args.conf:
        raise ShellError("bookieformat needs --conf, the bookie's configuration file (its directories and id); "
                         "a local cluster's bookie N has DIR/bookie-N/bookie.conf")
    try:
        return resolve(load(Path(args.conf)))     # the id the bookie registers (bookie.address)
    except ConfigError as exc:
        raise ShellError(str(exc)) from None


def _local_cookie(directory: Path) -> Cookie | None:
    path = directory / "current" / "VERSION"
    try:
        return Cookie.decode(path.read_bytes()) if path.exists() else None
    except CookieError:
        return None


def _must_be_safe(bk: BookKeeper, bookie_ids: Iterable[str], what: str) -> None:
    """Refuse while a bookie is registered or any ledger still has a fragment on it."""
    ids = sorted(set(bookie_ids))
    admin = Admin(bk)
    running = sorted(set(ids) & admin.registered_bookies())
    if running:
        raise ShellError(f"bookie {', '.join(running)} is registered (running): stop it before {what}")
    ledgers = admin.ledgers_on_bookies(ids)
    if ledgers:
        raise ShellError(
            f"{len(ledgers)} ledgers (first: {ledgers[:10]}) still have fragments on {', '.join(ids)}: "
            f"{what} would lose those copies. Move them first with `bkledger shell decommission ID` "
            "(the bookie stopped; it copies from the other replicas and deletes the cookie)")


def _wipe(directory: Path) -> int:
    """Remove everything inside `directory` (kept itself); the number of entries removed."""
    if not directory.is_dir():
        return 0
    removed = 0
    for child in directory.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
        removed += 1
    return removed


def _confirm(dirs: list[Path]) -> bool:
    print(f"Are you sure to format the bookie's data in {', '.join(map(str, dirs))}? (Y or N) ", end="",
          file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_bookieformat(args: argparse.Namespace) -> int:
    config = _bookie_config(args)
    dirs = [config.journal_dir, *config.ledger_dirs]
    has_data = any(d.is_dir() and any(d.iterdir()) for d in dirs)
    local_ids = {c.bookie_id for c in map(_local_cookie, dirs) if c is not None}
    with connect(args) as bk:
        _must_be_safe(bk, {config.bookie_id, *local_ids}, "formatting it")
        if has_data and args.nonInteractive and not args.force:
            raise ShellError(f"the directories hold data: add -f to format them ({', '.join(map(str, dirs))})")
        if has_data and not args.nonInteractive and not _confirm(dirs):
            raise ShellError("not formatted")
        removed = sum(_wipe(d) for d in dirs)
        deleted = _delete_own_cookies(bk, config, local_ids) if args.deleteCookie else []
    result = {"bookie_id": config.bookie_id, "formatted": [str(d) for d in dirs], "removed": removed,
              "cookies_deleted": deleted}
    kept = "" if args.deleteCookie else "; its cookie in ZooKeeper was kept (-d deletes it)"
    emit(args, result, text=f"bookie {config.bookie_id} formatted: {removed} entries removed from "
                            f"{', '.join(map(str, dirs))}{kept}"
                            + (f"; cookies deleted: {', '.join(deleted)}" if deleted else ""))
    return 0


def _delete_own_cookies(bk: BookKeeper, config: Any, local_ids: set[str]) -> list[str]:
    """The cookie of the configuration's id, and those of ids the directories' cookies named whose
    cookie in ZooKeeper names these same directories (the same bookie under an earlier id)."""
    deleted = []
    for bookie_id in sorted({config.bookie_id, *local_ids}):
        stored = bk.store.read_cookie(bookie_id)
        if stored is None:
            continue
        if bookie_id != config.bookie_id:
            try:
                cookie = Cookie.decode(stored[0])
            except CookieError:
                continue
            if cookie.journal_dir != str(config.journal_dir):
                continue
        bk.store.delete_cookie(bookie_id, stored[1])
        deleted.append(bookie_id)
    return deleted


def _cookie_dict(bookie_id: str, data: bytes, version: int) -> dict[str, Any]:
    try:
        c = Cookie.decode(data)
        fields: dict[str, Any] = {"journal_dir": c.journal_dir, "ledger_dirs": list(c.ledger_dirs),
                                  "instance_id": c.instance_id, "cookie_bookie_id": c.bookie_id}
    except CookieError as exc:
        fields = {"error": str(exc)}
    return {"bookie_id": bookie_id, "version": version, **fields}


def cmd_cookie(args: argparse.Namespace) -> int:
    actions: dict[str, Callable[[BookKeeper, argparse.Namespace], int]] = {
        "get": _cookie_get, "delete": _cookie_delete, "list": _cookie_list}
    if args.action != "list" and not args.bookie:
        raise ShellError(f"cookie {args.action} needs the bookie id (bkledger shell cookie list shows them)")
    with connect(args) as bk:
        return actions[args.action](bk, args)


def _cookie_get(bk: BookKeeper, args: argparse.Namespace) -> int:
    stored = bk.store.read_cookie(args.bookie)
    if stored is None:
        raise ShellError(f"no cookie for {args.bookie} in ZooKeeper (bkledger shell cookie list shows them)")
    data = _cookie_dict(args.bookie, *stored)
    emit(args, data, text="\n".join(f"{k:<18}{v}" for k, v in data.items()))
    return 0


def _cookie_delete(bk: BookKeeper, args: argparse.Namespace) -> int:
    stored = bk.store.read_cookie(args.bookie)
    if stored is None:
        raise ShellError(f"no cookie for {args.bookie} in ZooKeeper (bkledger shell cookie list shows them)")
    _must_be_safe(bk, [args.bookie], "deleting its cookie")
    bk.store.delete_cookie(args.bookie, stored[1])
    emit(args, {"bookie_id": args.bookie, "deleted": True},
         text=f"cookie of {args.bookie} deleted; its directories' cookies remain (bookieformat removes them)")
    return 0


def _cookie_list(bk: BookKeeper, args: argparse.Namespace) -> int:
    registered = Admin(bk).registered_bookies()
    rows = [{"bookie_id": b, "registered": b in registered} for b in bk.store.cookie_bookies()]
    emit(args, rows, ("bookie", "registered"), [(r["bookie_id"], "yes" if r["registered"] else "no") for r in rows])
    return 0


def add_cookie_verbs(verbs: Any, common: argparse.ArgumentParser) -> None:
    """Add `bookieformat` and `cookie` to the shell's verbs (called from bookie.shell.add_shell_parser)."""
    p = verbs.add_parser("bookieformat", parents=[common],
                         help="format a stopped bookie's directories (-d: and delete its cookie); needs --conf")
    p.add_argument("-n", "--nonInteractive", action="store_true", help="do not ask; with data, only -f formats")
    p.add_argument("-f", "--force", action="store_true", help="format directories that hold data (with -n)")
    p.add_argument("-d", "--deleteCookie", action="store_true", help="also delete its cookie in ZooKeeper")
    p.set_defaults(shell_func=cmd_bookieformat)
    p = verbs.add_parser("cookie", parents=[common], help="bookies' cookies in ZooKeeper: get, delete, list")
    p.add_argument("action", choices=["get", "delete", "list"])
    p.add_argument("bookie", nargs="?", help="the bookie id (get, delete)")
    p.set_defaults(shell_func=cmd_cookie)
