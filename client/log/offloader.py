"""A log's offload policy, applied: store it (`set_log_offload`), run it once for a log (`run_policy`:
offload what the policy says is due, then delete the bookie copies whose deletion lag has passed), one run
per log at a time across processes (`policy_lock`). The decisions are `client.log.core.offload_policy`'s;
the loop over every log is the `bkledger offloader` daemon's (`bookie.offloader`).

The lock is an EPHEMERAL child znode of the log (`offloader`), created without makepath (a deleted log is
never created again by it): a second offloader finds it and skips the log this round; a killed one's
lock goes with its ZooKeeper session. It only saves work: a run that lost its lock is still safe, since
offload runs are idempotent and checked by CAS (`client.log.offload`) and deleting a ledger twice is a
no-op.

Truncation and retention take the files of offloaded records they drop off the table (Delta remove
actions, one commit: `prune_table`, idempotent: it removes what the table names and the log does not),
and the files are deleted (vacuum) once the deletion lag has passed; `delete_log` deletes the table.

Deleting the bookie copies of a run (`delete_offloaded_copies`): delete the ledgers its `offloaded-<run>`
znode names (a ledger gone already is skipped), then the znode. A crash in between leaves the znode: the
next run deletes the same ledgers again and then the znode. Readers read those ledgers' entries from the
table's files, so nothing readable is lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import offload as ol
from bkledger.client.log.core import offload_policy as op
from bkledger.client.log.core.names import check_log_name
from bkledger.client.log.store import log_path, now_ms, require_log, update_log
from bkledger.client.meta.errors import NoSuchNodeError, ZNodeExistsError

if TYPE_CHECKING:
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper
    from bkledger.client.log.offload import OffloadResult

log = logging.getLogger("bkledger.offloader")
LOCK_ZNODE = "offloader"
MAX_LEDGERS_PER_RUN = 256          # sealed ledgers one run offloads at most (bounded work per log and round)
MAX_DELETIONS_PER_RUN = 64         # `offloaded-<run>` znodes one run deletes the copies of at most


@dataclasses.dataclass(frozen=True)
class PolicyRun:
    """What one run of a log's policy did: the offload (None: nothing was due or the log has no policy)
    and the bookie ledgers deleted (of `runs` offload runs); `busy`: another offloader held the log."""

    name: str
    offload: OffloadResult | None = None
    deleted: tuple[int, ...] = ()
    runs: int = 0
    busy: bool = False
    removed: tuple[str, ...] = ()      # files taken off the table (the log no longer names them)
    vacuumed: tuple[str, ...] = ()     # files deleted from the store (taken off longer than the lag ago)


def set_log_offload(bk: BookKeeper, name: str, pol: op.OffloadPolicy | None) -> op.OffloadPolicy | None:
    """Store (or, with None, clear) the log's policy; the policy now stored."""
    check_log_name(name, new=False)
    update_log(bk.store, name, lambda m: op.with_policy(m, pol), whole=False)
    return op.policy(require_log(bk.store, name)[0])


@contextlib.contextmanager
def policy_lock(bk: BookKeeper, name: str) -> Iterator[bool]:
    """Hold the log's offloader lock while the block runs; yields False (nothing held) if another
    process holds it or the log is gone."""
    path = f"{log_path(bk.store, name)}/{LOCK_ZNODE}"
    holder = json.dumps({"pid": os.getpid(), "since_ms": now_ms()}).encode()
    try:
        bk.store.create(path, holder, ephemeral=True, makepath=False)
    except (ZNodeExistsError, NoSuchNodeError):
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(NoSuchNodeError):
            bk.store.delete(path)


def run_policy(bk: BookKeeper, name: str, *, default_store_uri: str | None = None,
               max_ledgers: int = MAX_LEDGERS_PER_RUN, max_deletions: int = MAX_DELETIONS_PER_RUN) -> PolicyRun:
    """One run of the log's policy under its lock: offload the ledgers due (at most `max_ledgers`), then
    delete the bookie copies due, then prune the table (`prune_table`). `default_store_uri`: the table
    store when neither the policy nor the log names one (else `offload_store.default_store_uri()`)."""
    with policy_lock(bk, name) as held:
        if not held:
            return PolicyRun(name, busy=True)
        meta = require_log(bk.store, name)[0]
        pol = op.policy(meta)
        done = None
        due = 0 if pol is None else op.due_count(meta, pol, now_ms())
        if pol is not None and due:
            store = pol.store_uri or (None if ol.state(meta).uri else default_store_uri)
            from bkledger.client.log.offload import offload_log

            done = offload_log(bk, name, store, max_ledgers=min(due, max_ledgers))
        deleted, runs = delete_offloaded_copies(bk, name, max_runs=max_deletions)
        removed, vacuumed = prune_table(bk, name)
        return PolicyRun(name, done, tuple(deleted), runs, removed=tuple(removed), vacuumed=tuple(vacuumed))


def delete_offloaded_copies(bk: BookKeeper, name: str, *, max_runs: int = MAX_DELETIONS_PER_RUN,
                            now: int | None = None) -> tuple[list[int], int]:
    """Delete the bookie copies of the log's offload runs whose deletion lag has passed (the log's policy's,
    else 4 h; "keep": never), oldest run first, at most `max_runs` runs; (ledger ids deleted, runs done)."""
    path = log_path(bk.store, name)
    meta = require_log(bk.store, name)[0]
    due = op.due_copies(pending_copies(bk, name), op.deletion_lag(meta), now_ms() if now is None else now)
    deleted: list[int] = []
    for copies in due[:max_runs]:
        deleted += bk.delete_ledgers(copies.ledgers)
        with contextlib.suppress(NoSuchNodeError):
            bk.store.delete(f"{path}/{copies.znode}")
        log.info("log %r: deleted the bookie copies of %s: ledgers %s", name, copies.znode, list(copies.ledgers))
    return deleted, len(due[:max_runs])


def pending_copies(bk: BookKeeper, name: str) -> list[op.Copies]:
    """The log's offload runs whose bookie copies are not deleted yet (their `offloaded-<run>` znodes)."""
    path = log_path(bk.store, name)
    found = []
    for znode in bk.store.children(path):
        if not znode.startswith(ol.UNLISTED_PREFIX):
            continue
        got = bk.store.get(f"{path}/{znode}")
        if got is None:
            continue
        try:
            found.append(op.decode_copies(znode, got[0]))
        except ValueError as exc:
            log.warning("log %r: %s; left alone", name, exc)
    return found


def describe_copies(found: list[op.Copies], lag_s: float | None) -> list[str]:
    """The `bkledger log describe` line of bookie copies waiting for their deletion (none: no line)."""
    if not found:
        return []
    ledgers = sum(len(c.ledgers) for c in found)
    stamps = [c.swapped_ms for c in found if c.swapped_ms is not None]
    when = "kept (deletion lag: keep)" if lag_s is None else \
        f"the first due {op.utc(min(stamps) + int(lag_s * 1000))}" if stamps else "due now"
    return [f"bookie copies       {ledgers} ledgers of {len(found)} offload runs wait for deletion; {when}"]


def prune_table(bk: BookKeeper, name: str) -> tuple[list[str], list[str]]:
    """Take off the log's table the files the log no longer names (truncation and retention dropped their
    records), then vacuum the files taken off longer than the deletion lag ago (the policy's; with none or
    "keep", 4 h): a reader that planned a file before the cut still finds it until then. (files removed,
    files deleted); nothing for a log never offloaded."""
    from bkledger.client.log import offload_store as store_io

    meta = require_log(bk.store, name)[0]
    now = ol.state(meta)
    if now.uri is None:
        return [], []
    table = store_io.table_store(now.uri, name)
    removed = store_io.remove_stale(table, name, {f for f, *_ in ol.offloaded_files(meta)}, now.run)
    if removed:
        log.info("log %r: took %d files the log no longer holds off its table: %s", name, len(removed), removed)
    lag = op.deletion_lag(meta)
    return removed, store_io.vacuum(table, op.DEFAULT_DELETION_LAG_S if lag is None else lag)


def prune_after_cut(bk: BookKeeper, name: str) -> None:
    """`prune_table` after a truncation or a retention cut; a failure is logged, not raised (the cut is
    done; the offloader's next run of the log prunes the table)."""
    try:
        prune_table(bk, name)
    except Exception as exc:  # noqa: BLE001 - the cut succeeded; its table catches up later
        log.warning("log %r: the offloaded files the cut dropped stay in its table until the offloader's next "
                    "run: %s", name, exc)


def delete_table(bk: BookKeeper, meta: lm.LogMetadata) -> None:
    """Delete a deleted log's table (if it has one); a failure is logged (the folder is then the user's)."""
    uri = ol.state(meta).uri
    if uri is None:
        return
    from bkledger.client.log import offload_store as store_io

    try:
        store_io.delete_table(store_io.table_store(uri, meta.name))
    except Exception as exc:  # noqa: BLE001 - the log is deleted; say what is left
        log.warning("log %r is deleted but its table at %s could not be: %s", meta.name, uri, exc)


class OffloadPolicyMixin:
    """The offload policy operations of `BookKeeper`."""

    def set_log_offload(self, name: str, *, after_bytes: int | None = None, after_seconds: float | None = None,
                        store_uri: str | None = None,
                        deletion_lag_seconds: float | str = op.DEFAULT_DELETION_LAG_S) -> op.OffloadPolicy:
        """Store the log's offload policy (thresholds as Pulsar's: offload its sealed ledgers on bookies
        once they hold more than `after_bytes`, or once closed more than `after_seconds` ago), the table
        store (None: the log's, else the offloader's default) and how long the bookie copies stay after an
        offload (seconds, 0: at once, "keep": never). The `bkledger offloader` daemon applies it."""
        bk = self._bookkeeper()
        got = set_log_offload(bk, name, op.make_policy(after_bytes, after_seconds, store_uri, deletion_lag_seconds))
        assert got is not None
        return got

    def clear_log_offload(self, name: str) -> None:
        """Remove the log's offload policy (what was offloaded stays; bookie copies then go after 4 h)."""
        set_log_offload(self._bookkeeper(), name, None)

    def log_offload_policy(self, name: str) -> op.OffloadPolicy | None:
        """The log's offload policy, or None."""
        bk = self._bookkeeper()
        check_log_name(name, new=False)
        return op.policy(require_log(bk.store, name)[0])

    def _bookkeeper(self) -> BookKeeper:
        from typing import cast

        bk = cast("BookKeeper", self)
        bk._check_open()
        return bk
