"""Cursors held by the cluster (issue 44 item 3): their znodes, acknowledgements by compare-and-swap, and
retention / truncation that keep what a cursor has not acknowledged. Decisions: `client.log.core.cursors`.

ZooKeeper (under the ledgers root):

    cursors/<log>            data: the log's cursor quota {"max_lag_bytes": N | null}
    cursors/<log>/<cursor>   data: {"position": "L:E" | null, "acked_ms": ..., "lost": {...}?}

An ack is one CAS of the cursor's znode at the version read, and moves it forward only. Whatever may make a
cursor hold MORE (creating or deleting one, moving one back, changing the quota) also sets the parent
znode, so its version changes; retention and truncation check that version in the same multi-operation
transaction as the log's new ledger list (and the versions of the cursors they mark lost). So a cut never
deletes what a cursor it did not see holds: a cursor is created holding the whole log (position null)
before its reader seeks, and acks only ever release.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from bkledger.client.errors import (
    BKError,
    CursorLostError,
    CursorNotFoundError,
    InvalidOptionError,
    InvalidPositionError,
    LogNotFoundError,
    LogUpdateConflictError,
    MetadataVersionError,
    checked_password,
)
from bkledger.client.log.core import cursors as cc
from bkledger.client.log.core.meta import LogMetadata, Position
from bkledger.client.log.core.names import check_log_name
from bkledger.client.log.reader import LogReader, LogRecord, StartSpec
from bkledger.client.log.store import (
    LOG_UPDATE_ATTEMPTS,
    commit_changes,
    log_path,
    prepare_change,
    require_loaded,
)
from bkledger.client.meta.errors import MetadataFormatError, NoSuchNodeError, ZNodeExistsError
from bkledger.client.meta.zksession import ZkOp

if TYPE_CHECKING:
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper
    from bkledger.client.meta.store import MetadataStore

log = logging.getLogger("bkledger.logs")
T = TypeVar("T")


def now_ms() -> int:
    return int(time.time() * 1000)


# ---- metrics ----------------------------------------------------------------------------------------
class _NoMetric:
    def labels(self, *_: str) -> _NoMetric:
        return self

    def set(self, _: float) -> None:
        return None

    def inc(self, _: float = 1) -> None:
        return None


_NO = _NoMetric()
_METRICS: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_METRICS_LOCK = threading.Lock()
GAUGES = {"lag_entries": "entries the cursor is behind the log's tail",
          "lag_bytes": "bytes the cursor is behind the log's tail (sealed ledgers; the open one estimated)",
          "lag_seconds": "seconds since the ledger holding the cursor's next record was created (0 at the tail)"}


def cursor_metrics(bk: BookKeeper) -> dict[str, Any]:
    """Per (log, cursor) gauges `bkledger_log_cursor_lag_{entries,bytes,seconds}` and counters
    `bkledger_log_cursor_acks_total`, `bkledger_log_cursor_lost_total` in the client's registry."""
    registry = getattr(bk, "metrics_registry", None)
    if registry is None:
        return {name: _NO for name in (*GAUGES, "acks", "lost")}
    with _METRICS_LOCK:
        found = _METRICS.get(registry)
        if found is None:
            from prometheus_client import Counter, Gauge

            labels = ("log", "cursor")
            found = {name: Gauge(f"bkledger_log_cursor_{name}", text, labels, registry=registry)
                     for name, text in GAUGES.items()}
            found["acks"] = Counter("bkledger_log_cursor_acks", "acknowledgements stored", labels, registry=registry)
            found["lost"] = Counter("bkledger_log_cursor_lost", "times records a cursor had not acknowledged were "
                                    "deleted (its lag exceeded the log's cursor quota)", labels, registry=registry)
            _METRICS[registry] = found
        return found


def export_lag(bk: BookKeeper, name: str, cursor: str, lag: cc.Lag) -> None:
    metrics = cursor_metrics(bk)
    for key, value in (("lag_entries", lag.entries), ("lag_bytes", lag.bytes), ("lag_seconds", lag.seconds)):
        metrics[key].labels(name, cursor).set(value)


# ---- znodes -------------------------------------------------------------------------------------------
def parent_path(store: MetadataStore, name: str) -> str:
    try:
        return store.layout.log_cursors(name)
    except ValueError as exc:
        raise InvalidOptionError(str(exc)) from None


def cursor_path(store: MetadataStore, name: str, cursor: str) -> str:
    return f"{parent_path(store, name)}/{cc.check_cursor_name(cursor)}"


def _decoded(path: str, decode: Callable[[], T]) -> T:
    """A znode's data decoded, or MetadataFormatError naming the znode (retention then deletes nothing)."""
    try:
        return decode()
    except ValueError as exc:
        log.error("%s: %s", path, exc)
        raise MetadataFormatError(f"{path}: {exc}") from None


def read_policy(store: MetadataStore, name: str) -> tuple[int | None, int]:
    """(the log's cursor quota, the parent znode's version), creating the parent if missing."""
    path = parent_path(store, name)
    got = store.get(path)
    if got is None:
        with contextlib.suppress(ZNodeExistsError):
            store.create(path, cc.encode_policy(None), makepath=True)
        got = store.get(path)
        if got is None:
            raise MetadataVersionError(f"{path} was deleted meanwhile; retry")
    data = got[0]
    return _decoded(path, lambda: cc.decode_policy(data)), got[1]


def read_cursors(store: MetadataStore, name: str) -> dict[str, tuple[cc.CursorState, int]]:
    """Every cursor of the log: name -> (state, znode version)."""
    path = parent_path(store, name)
    names = store.children(path)
    got = store.get_many([f"{path}/{c}" for c in names])
    out = {}
    for cursor, g in zip(names, got, strict=True):
        if g is not None:
            out[cursor] = (_decoded(f"{path}/{cursor}", functools.partial(cc.decode_cursor, cursor, g[0])), g[1])
    return out


def read_cursor(store: MetadataStore, name: str, cursor: str) -> tuple[cc.CursorState, int] | None:
    path = cursor_path(store, name, cursor)
    got = store.get(path)
    if got is None:
        return None
    data = got[0]
    return _decoded(path, lambda: cc.decode_cursor(cursor, data)), got[1]


def _with_parent_bump(store: MetadataStore, name: str, ops: list[ZkOp]) -> None:
    """Run `ops` and set the parent znode (same data) in one transaction, so cuts in flight retry."""
    for _ in range(LOG_UPDATE_ATTEMPTS):
        path = parent_path(store, name)
        quota, version = read_policy(store, name)
        try:
            store.multi([*ops, ZkOp("set", path, cc.encode_policy(quota), version)], verify=[])
            return
        except MetadataVersionError:
            continue
    raise LogUpdateConflictError(f"cursors of log {name!r} changed {LOG_UPDATE_ATTEMPTS} times in a row")


def create_cursor(store: MetadataStore, name: str, cursor: str) -> cc.CursorState:
    """Create the cursor holding the whole log (position null); its current state if it exists.
    LogNotFoundError if the log does not exist (no cursor is left behind for it)."""
    path = cursor_path(store, name, cursor)
    if not store.exists(log_path(store, name)):
        raise LogNotFoundError(f"log {name!r} does not exist: a cursor needs its log (bkledger log list)")
    state = cc.CursorState(cursor, None, now_ms())
    with contextlib.suppress(ZNodeExistsError):
        _with_parent_bump(store, name, [ZkOp("create", path, cc.encode_cursor(state))])
    got = read_cursor(store, name, cursor)
    if got is None:
        raise CursorNotFoundError(f"cursor {cursor!r} of log {name!r} was deleted while being created")
    return got[0]


def lost_error(name: str, state: cc.CursorState) -> CursorLostError:
    lost = state.lost
    ledgers = () if lost is None else lost.ledgers
    why = "" if lost is None else f" ({lost.reason}, at {lost.at_ms} ms)"
    return CursorLostError(
        f"cursor {state.name!r} of log {name!r}: ledgers {list(ledgers)} were deleted before it acknowledged "
        f"them{why}, from position {state.position}; reopen the reader with fail_on_data_loss=False to go on "
        "from the earliest record still in the log, or delete the cursor", log=name, cursor=state.name,
        ledgers=ledgers)


def ack_cursor(store: MetadataStore, name: str, cursor: str, position: Position | None, *,
               backwards: bool = False, clear_lost: bool = False) -> bool:
    """Store `position` as the cursor's next unacknowledged record by CAS. A position behind the stored one
    is ignored (False) unless `backwards`. CursorLostError if the cursor is marked lost (unless
    `clear_lost`), CursorNotFoundError if it is gone."""
    path = cursor_path(store, name, cursor)
    for _ in range(LOG_UPDATE_ATTEMPTS):
        got = read_cursor(store, name, cursor)
        if got is None:
            raise CursorNotFoundError(f"cursor {cursor!r} of log {name!r} does not exist (deleted?)")
        state, version = got
        if state.lost is not None and not clear_lost:
            raise lost_error(name, state)
        behind = position is None or (state.position is not None and position < state.position)
        if state.lost is None and (behind and not backwards or position == state.position):
            return position == state.position
        new = cc.encode_cursor(cc.CursorState(cursor, position, now_ms()))
        try:
            if behind or state.lost is not None:          # holds more than before: cuts in flight retry
                _with_parent_bump(store, name, [ZkOp("set", path, new, version)])
            else:
                store.cas(path, new, version)
            return True
        except MetadataVersionError:
            continue
        except NoSuchNodeError:
            raise CursorNotFoundError(f"cursor {cursor!r} of log {name!r} was deleted meanwhile") from None
    raise LogUpdateConflictError(f"cursor {cursor!r} of log {name!r} changed {LOG_UPDATE_ATTEMPTS} times in a row")


def ack_op(store: MetadataStore, name: str, cursor: str, position: Position) -> ZkOp:
    """An acknowledgement as ONE transaction operation, for a multi-operation transaction with other changes
    (issue 44 item 4): the cursor's znode set at the version read (the transaction fails with
    MetadataVersionError if the cursor moved meanwhile). Forward only: InvalidPositionError for a position
    behind the stored one; CursorLostError / CursorNotFoundError as `ack_cursor`."""
    got = read_cursor(store, name, cursor)
    if got is None:
        raise CursorNotFoundError(f"cursor {cursor!r} of log {name!r} does not exist: open a reader on it first")
    state, version = got
    if state.lost is not None:
        raise lost_error(name, state)
    if state.position is not None and position < state.position:
        raise InvalidPositionError(f"cursor {cursor!r} of log {name!r} is at {state.position}: a transaction "
                                   f"cannot move it back to {position}")
    data = cc.encode_cursor(cc.CursorState(cursor, position, now_ms()))
    return ZkOp("set", cursor_path(store, name, cursor), data, version)


def delete_cursor(store: MetadataStore, name: str, cursor: str) -> None:
    path = cursor_path(store, name, cursor)
    if read_cursor(store, name, cursor) is None:
        raise CursorNotFoundError(f"log {name!r} has no cursor {cursor!r}")
    try:
        _with_parent_bump(store, name, [ZkOp("delete", path)])
    except NoSuchNodeError:
        raise CursorNotFoundError(f"cursor {cursor!r} of log {name!r} was deleted meanwhile") from None


def set_quota(store: MetadataStore, name: str, max_lag_bytes: int | None) -> None:
    try:
        quota = cc.check_quota(max_lag_bytes)
    except ValueError as exc:
        raise InvalidOptionError(str(exc)) from None
    read_policy(store, name)
    store.cas(parent_path(store, name), cc.encode_policy(quota), -1)


def delete_all(store: MetadataStore, name: str) -> None:
    """Remove the log's cursors and their parent (the log is being deleted)."""
    with contextlib.suppress(NoSuchNodeError):
        store.delete(parent_path(store, name), recursive=True)


# ---- retention and truncation ---------------------------------------------------------------------------
def held_update(bk: BookKeeper, name: str, cut: Callable[[LogMetadata], tuple[LogMetadata, list[int]]], *,
                why: str, ignore_cursors: bool = False) -> list[int]:
    """Apply `cut` (retention's or truncation's rule) to the log, deleting no ledger a cursor has not
    acknowledged (`cc.held_cut`), in one transaction checked on the log's head, the cursors' parent and
    the cursors marked lost. Returns the ledger ids dropped from the list (the caller deletes them)."""
    store = bk.store
    for attempt in range(LOG_UPDATE_ATTEMPTS):
        loaded = require_loaded(store, name, whole=True)
        _, proposed = cut(loaded.meta)
        if not proposed:
            return []
        quota, parent_version = read_policy(store, name)
        cursors = read_cursors(store, name)
        decision = cc.held_cut(loaded.meta, len(proposed), [s for s, _ in cursors.values()],
                               0 if ignore_cursors else quota, now_ms())
        new, dropped = cc.cut_front(loaded.meta, decision.count)
        if decision.count < len(proposed):
            log.warning("log %r %s: kept ledgers %s that cursors %s have not acknowledged", name, why,
                        proposed[decision.count:], list(decision.holders))
        lost = dict(decision.lost)
        if not dropped and not lost:
            return []
        extra = [ZkOp("check", parent_path(store, name), version=parent_version)]
        for cursor, ids in lost.items():
            state, version = cursors[cursor]
            marked = dataclasses.replace(state, lost=cc.Lost(ids, now_ms(), why))
            extra.append(ZkOp("set", cursor_path(store, name, cursor), cc.encode_cursor(marked), version))
        try:
            if new == loaded.meta:
                store.multi([ZkOp("check", loaded.path, version=loaded.version), *extra], verify=[])
            else:
                change = prepare_change(store, loaded, new)
                commit_changes(store, [dataclasses.replace(change, ops=(*change.ops, *extra))])
        except MetadataVersionError:
            time.sleep(min(0.002 * 2**attempt, 0.05))
            continue
        metrics = cursor_metrics(bk)
        for cursor, ids in lost.items():
            metrics["lost"].labels(name, cursor).inc()
            log.error("log %r %s deleted ledgers %s that cursor %r had not acknowledged (its lag exceeded the "
                      "log's cursor quota %s bytes): its consumer's next read or ack raises CursorLostError",
                      name, why, list(ids), cursor, quota)
        return dropped
    raise LogUpdateConflictError(f"log {name!r}: changed under this {why} {LOG_UPDATE_ATTEMPTS} times in a row")


# ---- listing ------------------------------------------------------------------------------------------
def tail_entries(bk: BookKeeper, meta: LogMetadata, password: bytes) -> int | None:
    """Entries readable now in the log's open last ledger (its LAC + 1), None if it cannot be asked."""
    last = meta.ledgers[-1] if meta.ledgers else None
    if last is None or last.sealed:
        return None
    try:
        return bk.open_ledger(last.ledger_id, password, recovery=False).last_add_confirmed + 1
    except BKError as exc:
        log.info("log %r: cannot read the LAC of ledger %s for cursor lag: %s", meta.name, last.ledger_id, exc)
        return None


def describe_cursors(bk: BookKeeper, name: str, password: bytes = b"") -> dict[str, Any]:
    """The log's cursor quota and, per cursor, its position, last ack, lag and loss (as plain data);
    also exported as the lag gauges."""
    meta = require_loaded(bk.store, name).meta
    tail = tail_entries(bk, meta, password)
    got = bk.store.get(parent_path(bk.store, name))
    quota = None if got is None else _decoded(parent_path(bk.store, name), lambda: cc.decode_policy(got[0]))
    now = now_ms()
    rows = []
    for cursor, (state, _) in sorted((read_cursors(bk.store, name) if got is not None else {}).items()):
        lag = cc.lag(meta, state.position, tail, now)
        export_lag(bk, name, cursor, lag)
        rows.append({"cursor": cursor, "position": None if state.position is None else str(state.position),
                     "acked_ms": state.acked_ms, "lag_entries": lag.entries, "lag_bytes": lag.bytes,
                     "lag_seconds": round(lag.seconds, 3),
                     "lost": None if state.lost is None else dataclasses.asdict(state.lost)})
    return {"log": name, "cursor_max_lag_bytes": quota, "cursors": rows}


# ---- the reader -----------------------------------------------------------------------------------------
class CursorReader(LogReader):
    """A LogReader that resumes from its cursor's acknowledged position and acknowledges with `ack`."""

    def __init__(self, bk: BookKeeper, name: str, cursor: str, start: StartSpec = "earliest", *,
                 fail_on_data_loss: bool = True, password: bytes = b"", poll_interval_s: float = 0.2) -> None:
        self.cursor = cc.check_cursor_name(cursor)
        self._store = bk.store
        self._cursor_changed = threading.Event()
        state = create_cursor(bk.store, name, cursor)
        if state.lost is not None:
            if fail_on_data_loss:
                raise lost_error(name, state)
            log.warning("%s; going on from the earliest record", lost_error(name, state))
            ack_cursor(bk.store, name, cursor, None, backwards=True, clear_lost=True)
            start, state = "earliest", cc.CursorState(cursor)
        super().__init__(bk, name, start if state.position is None else state.position,
                         fail_on_data_loss=fail_on_data_loss, password=password, poll_interval_s=poll_interval_s)
        self._cursor_watch = bk.store.watch_data(cursor_path(bk.store, name, cursor), self._cursor_changed.set)
        if state.position is None and self.position is not None:
            ack_cursor(bk.store, name, cursor, self.position)       # a new cursor starts where it reads

    def _data_lost(self, what: str) -> None:
        got = read_cursor(self._store, self.name, self.cursor)
        if got is not None and got[0].lost is not None:
            raise lost_error(self.name, got[0])
        if self.fail_on_data_loss:
            raise CursorLostError(f"log {self.name!r}, cursor {self.cursor!r}: {what}", log=self.name,
                                  cursor=self.cursor)
        super()._data_lost(what)

    def _check_cursor(self) -> None:
        if not self._cursor_changed.is_set():
            return
        self._cursor_changed.clear()
        got = read_cursor(self._store, self.name, self.cursor)
        if got is None:
            raise CursorNotFoundError(f"cursor {self.cursor!r} of log {self.name!r} was deleted")
        if got[0].lost is not None:
            raise lost_error(self.name, got[0])

    def read_next(self, timeout: float | None = None) -> LogRecord | None:
        self._check_cursor()
        return super().read_next(timeout)

    def read_batch(self, max_records: int = 10_000, max_bytes: int | None = None,
                   timeout: float | None = 0.0) -> list[LogRecord]:
        self._check_cursor()
        return super().read_batch(max_records, max_bytes, timeout)

    def ack(self, position: Position | None = None, *, backwards: bool = False) -> bool:
        """Acknowledge every record before `position` (default: all read so far), stored in ZooKeeper by
        CAS. A position behind the stored one is ignored (False) unless `backwards=True`; one beyond what
        this reader has read is refused (InvalidPositionError). CursorLostError if records the cursor had
        not acknowledged were deleted."""
        pos = self.position if position is None else position
        if pos is None:
            return False
        if not isinstance(pos, Position):
            raise InvalidPositionError(f"ack takes a Position (e.g. a record's position), got {pos!r}")
        if self.position is not None and pos > self.position:
            raise InvalidPositionError(f"cannot acknowledge {pos} on cursor {self.cursor!r}: this reader has "
                                       f"read only up to {self.position}")
        done = ack_cursor(self._store, self.name, self.cursor, pos, backwards=backwards)
        metrics = cursor_metrics(self._bk)
        metrics["acks"].labels(self.name, self.cursor).inc()
        if metrics["lag_entries"] is not _NO:
            self._export_lag(pos)
        return done

    def _export_lag(self, pos: Position) -> None:
        """The lag gauges at `pos`. This reader holds the log from the segment it started in on; a
        backwards ack before that part loads the log from `pos` on, so that the ledgers between count."""
        meta = self._meta
        if meta.ledgers and pos.ledger_id not in meta.logical_ids:
            try:
                meta = require_loaded(self._bk.store, self.name, from_ledger=pos.ledger_id).meta
            except (LogNotFoundError, LogUpdateConflictError) as exc:
                log.info("log %r cursor %r: lag not exported after the ack at %s: %s", self.name, self.cursor, pos, exc)
                return
        rh, last = self._rh, meta.last_ledger_id
        tail = rh.last_add_confirmed + 1 if rh is not None and rh.ledger_id == last else None
        export_lag(self._bk, self.name, self.cursor, cc.lag(meta, pos, tail, now_ms()))

    def close(self) -> None:
        with contextlib.suppress(AttributeError):
            self._cursor_watch.cancel()
        super().close()


# ---- the BookKeeper methods ---------------------------------------------------------------------------
class CursorsMixin:
    """Cursor operations of BookKeeper (list_cursors, delete_cursor); readers: open_log_reader(cursor=)."""

    def list_cursors(self, name: str, *, password: bytes = b"") -> dict[str, Any]:
        """The log's cursor quota and its cursors: position, last ack, lag (entries, bytes, seconds behind
        the tail) and whether records they had not acknowledged were deleted (`client.log.cursors`)."""
        bk = cast("BookKeeper", self)
        bk._check_open()
        check_log_name(name, new=False)
        return describe_cursors(bk, name, checked_password(password))

    def delete_cursor(self, name: str, cursor: str) -> None:
        """Delete the log's cursor (it no longer holds retention); CursorNotFoundError if it has none so named."""
        bk = cast("BookKeeper", self)
        bk._check_open()
        check_log_name(name, new=False)
        delete_cursor(bk.store, name, cursor)
