"""The log znodes: load a log (whole, or the tail a commit needs), turn one change into transaction
operations checked on the head's version, and commit the changes of ONE OR SEVERAL logs in one ZooKeeper
transaction (R27: every change of a log is one compare-and-swap; see `client.log.core.stored` for the form).

    loaded = load_log(store, "orders", whole=False)          # head + the last segment(s)
    change = prepare_change(store, loaded, new_meta)         # ops: set head at loaded.version, segments
    commit_changes(store, [change, other_log_change])        # one multi-op; MetadataVersionError if any
                                                             # log's head moved (nothing written then)
    update_logs(store, ["a", "b"], fn)                       # the CAS loop over several logs at once
    update_logs(store, ["a", "new"], fn, create=True)        # "new" is created IN the same transaction

A log that does not exist yet is loaded as `unborn` (version -1): its change creates the head znode (and
its first segment) in the transaction itself, so a log comes into being together with its first ledgers,
or not at all; a creation that loses the race (the znode exists by then) retries like a moved head.

Reads of a whole log fetch the segments concurrently and re-check the head's version, so the list is a
snapshot of one version.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from bkledger.client.errors import InvalidOptionError, LogNotFoundError, LogUpdateConflictError, MetadataVersionError
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import stored as st
from bkledger.client.log.core.meta import LogMetadata
from bkledger.client.meta.errors import MetadataFormatError, NoSuchNodeError, ZNodeExistsError
from bkledger.client.meta.zksession import ZkOp

if TYPE_CHECKING:
    from bkledger.client.meta.store import MetadataStore

LOG_UPDATE_ATTEMPTS = 50
SNAPSHOT_ATTEMPTS = 20
LOG_PASSWORD_BYTES = 20       # the size of a new log's own key
SEGMENTS_PER_READ = 8          # segments per multiRead request (about 16 KB each: replies stay near 128 KB)

__all__ = [
    "LOG_UPDATE_ATTEMPTS", "LoadedLog", "LogChange", "commit_changes", "create_log", "load_log", "log_path",
    "prepare_change", "read_log", "require_log", "update_log", "update_logs",
]


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclasses.dataclass(frozen=True)
class LoadedLog:
    """A log as read at head version `version`: all of it, or (for a commit) its tail (`window`)."""

    name: str
    path: str
    version: int
    window: st.Window

    @property
    def meta(self) -> LogMetadata:
        return self.window.meta

    @property
    def unborn(self) -> bool:
        """The log does not exist yet: a change creates it (in the same transaction)."""
        return self.version < 0


@dataclasses.dataclass(frozen=True)
class LogChange:
    """One log's change as transaction operations: the head set at the version it was read at, the
    touched segments. `staged`: segment creates to run before the transaction (converting a format-1
    log too big for one request); nothing refers to them until the head is set."""

    loaded: LoadedLog
    meta: LogMetadata
    ops: tuple[ZkOp, ...]
    staged: tuple[ZkOp, ...] = ()
    after: st.Window | None = None

    @property
    def head_op(self) -> ZkOp:
        return self.ops[0]


def log_path(store: MetadataStore, name: str) -> str:
    try:
        return store.layout.log(name)
    except ValueError as exc:
        raise InvalidOptionError(str(exc)) from None


# ---- reading ---------------------------------------------------------------------------------------------
def load_log(store: MetadataStore, name: str, *, whole: bool = True,
             from_ledger: int | None = None, near: int | None = None) -> LoadedLog | None:
    """The log at one head version (None if it does not exist); `whole=False` loads only what a commit
    needs (the head, the last segment and any holding a ledger not yet recorded as sealed);
    `from_ledger` (a reader's) loads the segments from the one that holds that (logical) ledger id on,
    found by binary search (all of them if the log's first ledger comes after it), or tried first at
    segment `near` (`segment_of` a previous load: where a reader was). A retry after the log changed reuses
    the segment found, if the segments then read still cover that ledger (a commit moves the head but
    seldom the reader's segment): a search widens the window in which a commit makes the snapshot stale."""
    path = log_path(store, name)
    start = near if from_ledger is not None else None
    for _ in range(SNAPSHOT_ATTEMPTS):
        got = store.get(path)
        if got is None:
            return None
        data, version = got
        try:
            base, head = st.decode_head(name, data)
        except ValueError as exc:
            raise MetadataFormatError(str(exc)) from exc
        if head is None:
            return LoadedLog(name, path, version, st.Window(base))
        if from_ledger is None:
            start = st.window_start(head, whole)
        elif start is None or not head.first <= start <= head.last:
            start = _segment_holding(store, path, name, head, from_ledger)
        if start is None:
            continue                               # a segment went while we searched: read again
        numbers = list(range(start, head.last + 1))
        raw = store.get_many([f"{path}/{st.segment_name(head.prefix, n)}" for n in numbers],
                             per_request=SEGMENTS_PER_READ)
        snapshot = whole or from_ledger is not None
        if any(r is None for r in raw):
            start = None                           # a segment went (truncation): read again, search again
            continue
        if snapshot and _moved(store, path, version):
            continue                               # changed while we read: read again
        try:
            segments = [(n, st.decode_segment(name, n, r[0])) for n, r in zip(numbers, raw, strict=True)
                        if r is not None]
            if from_ledger is not None and not _covers(head, start, segments, from_ledger):
                start = None                       # the ledger moved to an earlier segment: search again
                continue
            return LoadedLog(name, path, version, st.assemble(base, head, segments))
        except ValueError as exc:
            if not whole and _moved(store, path, version):
                continue                           # segments newer than the head read: read again
            raise MetadataFormatError(str(exc)) from exc
    raise LogUpdateConflictError(f"log {name!r} changed {SNAPSHOT_ATTEMPTS} times while being read; retry later")


def _segment_holding(store: MetadataStore, path: str, name: str, head: st.Head, ledger_id: int) -> int | None:
    """The last segment whose first (logical) ledger id is <= `ledger_id` (head.first if none is): a
    binary search over the segments, reading about log2(segments) of them (empty ones, left by
    compaction, are stepped over). None if a segment vanished meanwhile."""
    lo, hi, best = head.first, head.last, head.first
    while lo <= hi:
        mid = (lo + hi) // 2
        number, first = mid, None
        while number <= hi and first is None:
            got = store.get(f"{path}/{st.segment_name(head.prefix, number)}")
            if got is None:
                return None
            try:
                ledgers = st.decode_segment(name, number, got[0])
            except ValueError:
                return None                        # newer than the head read: read again
            first = lm.logical_first_id(ledgers[0]) if ledgers else None
            number += 0 if first is not None else 1
        if first is not None and first <= ledger_id:
            best, lo = number, number + 1
        else:
            hi = mid - 1
    return best


def segment_of(loaded: LoadedLog, ledger_id: int) -> int | None:
    """The loaded segment holding (logical) `ledger_id`, or the last before it (None if none was loaded)."""
    found = None
    for number, ledgers in loaded.window.segments:
        if ledgers and lm.logical_first_id(ledgers[0]) <= ledger_id:
            found = number
    return found


def _covers(head: st.Head, start: int, segments: Sequence[tuple[int, tuple[lm.LogLedger, ...]]],
            ledger_id: int) -> bool:
    """Whether segments `start`.. (one snapshot) hold every ledger from `ledger_id` on: they are all of the
    log's, or the first ledger in them comes at or before it."""
    if start <= head.first:
        return True
    first = next((leds[0] for _, leds in segments if leds), None)
    return first is not None and lm.logical_first_id(first) <= ledger_id


def _moved(store: MetadataStore, path: str, version: int) -> bool:
    got = store.get(path)
    return got is None or got[1] != version


def require_loaded(store: MetadataStore, name: str, *, whole: bool = True,
                   from_ledger: int | None = None, near: int | None = None) -> LoadedLog:
    got = load_log(store, name, whole=whole, from_ledger=from_ledger, near=near)
    if got is None:
        raise LogNotFoundError(f"log {name!r} does not exist: check the name (bkledger log list) or create it "
                               "by opening a log writer")
    return got


def read_log(store: MetadataStore, name: str) -> tuple[LogMetadata, int] | None:
    """(whole metadata, head version) of the log, or None if it does not exist."""
    got = load_log(store, name)
    return None if got is None else (got.meta, got.version)


def require_log(store: MetadataStore, name: str) -> tuple[LogMetadata, int]:
    got = require_loaded(store, name)
    return got.meta, got.version


def create_log(store: MetadataStore, name: str, *, whole: bool = True) -> LoadedLog:
    """Create the log (format 2, no ledgers), or load it if someone else created it first."""
    path = log_path(store, name)
    meta = lm.new_log(name, now_ms(), new_log_password())
    with contextlib.suppress(ZNodeExistsError):
        store.create(path, st.encode_head(meta, st.new_head(_prefix())), makepath=True)
    return require_loaded(store, name, whole=whole)


def unborn_log(store: MetadataStore, name: str) -> LoadedLog:
    """A log that does not exist yet, as if loaded empty at version -1 (its change creates it)."""
    meta = lm.new_log(name, now_ms(), new_log_password())
    return LoadedLog(name, log_path(store, name), -1, st.Window(meta, st.new_head(_prefix())))


def new_log_password() -> bytes:
    """A fresh secret for a new log (`client.log.core.meta.log_password`): 20 random bytes."""
    return secrets.token_bytes(LOG_PASSWORD_BYTES)


def _prefix() -> str:
    return "s" + uuid.uuid4().hex[:8]


# ---- changing --------------------------------------------------------------------------------------------
def prepare_change(store: MetadataStore, loaded: LoadedLog, new: LogMetadata) -> LogChange:
    """The transaction operations that store `new` (changed from `loaded.meta`), checked on the head's
    version: the head and only the segments it touches. ZNodeTooLargeError if a znode would be too big."""
    stored = st.change(loaded.window, new, _prefix())
    seg = f"{loaded.path}/{{}}"
    ops = [ZkOp("create", loaded.path, stored.head) if loaded.unborn
           else ZkOp("set", loaded.path, stored.head, loaded.version)]
    segments = [ZkOp("create", seg.format(st.segment_name(stored.prefix, n)), data)
                for n, data in sorted(stored.creates.items())]
    segments += [ZkOp("set", seg.format(st.segment_name(stored.prefix, n)), data)
                 for n, data in sorted(stored.writes.items())]
    segments += [ZkOp("delete", seg.format(st.segment_name(stored.prefix, n))) for n in stored.deletes]
    for op in [*ops, *segments]:
        store.check_size(op.path, op.data, f"log {loaded.name!r}: this znode")
    if stored.converting:
        return LogChange(loaded, new, tuple(ops), staged=tuple(segments), after=stored.after)
    return LogChange(loaded, new, (*ops, *segments), after=stored.after)


def commit_changes(store: MetadataStore, changes: Sequence[LogChange]) -> dict[str, LoadedLog]:
    """Store the changes of one or several logs in ONE transaction: every log's head is checked at the
    version it was read at. MetadataVersionError if any moved (nothing was written), LogNotFoundError if
    a log was deleted. Returns each log as now stored (head version + 1)."""
    names = [c.loaded.name for c in changes]
    if len(set(names)) != len(names):
        raise ValueError(f"commit_changes: one change per log, got {names}")
    for change in changes:
        for op in change.staged:                  # unreferenced until the head is set below
            with contextlib.suppress(ZNodeExistsError):
                store.create(op.path, op.data, makepath=False)
    ops = [op for c in changes for op in c.ops]
    if any(c.loaded.unborn for c in changes) and not store.exists(store.layout.logs):
        with contextlib.suppress(ZNodeExistsError):
            store.create(store.layout.logs, b"", makepath=True)     # the parent of every log: no log yet
    try:
        store.multi(ops, verify=[c.head_op for c in changes])
    except ZNodeExistsError:
        _drop_staged(store, changes)
        raise MetadataVersionError(f"one of logs {names} was created meanwhile; re-read and retry") from None
    except NoSuchNodeError as exc:
        gone = [c.loaded.name for c in changes if not c.loaded.unborn and not store.exists(c.loaded.path)]
        if gone:
            raise LogNotFoundError(f"log {gone[0]!r} was deleted meanwhile") from None
        raise MetadataVersionError(f"a log segment changed meanwhile ({exc}); re-read and retry") from None
    except MetadataVersionError:
        _drop_staged(store, changes)
        raise
    return {c.loaded.name: dataclasses.replace(c.loaded, version=c.loaded.version + 1,
                                               window=c.after or st.Window(c.meta)) for c in changes}


def _drop_staged(store: MetadataStore, changes: Iterable[LogChange]) -> None:
    for change in changes:
        for op in change.staged:
            with contextlib.suppress(NoSuchNodeError):
                store.delete(op.path)


def update_logs(store: MetadataStore, names: Sequence[str],
                fn: Callable[[Mapping[str, LogMetadata]], Mapping[str, LogMetadata]], *, whole: bool = False,
                create: bool = False, attempts: int = LOG_UPDATE_ATTEMPTS) -> dict[str, LoadedLog]:
    """The CAS loop over several logs: load them, `fn({name: metadata})` -> {name: new metadata} (a log
    left out or returned unchanged is not written, nor checked), commit all in ONE transaction; on a
    lost race re-load and call `fn` again. `whole=False` gives `fn` only the logs' tails (enough to
    append, seal and set markers); `create`: a missing log is given to `fn` empty and created by the same
    transaction (if `fn` changes it). LogUpdateConflictError after `attempts`."""
    for attempt in range(attempts):
        loaded = {n: _load_or_create(store, n, whole, create) for n in names}
        new = fn({n: got.meta for n, got in loaded.items()})
        changes = [prepare_change(store, loaded[n], m) for n, m in new.items() if m != loaded[n].meta]
        if not changes:
            return loaded
        try:
            return {**loaded, **commit_changes(store, changes)}
        except MetadataVersionError:
            time.sleep(min(0.002 * 2**attempt, 0.05))
    raise LogUpdateConflictError(f"logs {list(names)}: changed under this update {attempts} times in a row; "
                                 "retry later")


def _load_or_create(store: MetadataStore, name: str, whole: bool, create: bool) -> LoadedLog:
    got = load_log(store, name, whole=whole)
    if got is not None:
        return got
    if not create:
        return require_loaded(store, name, whole=whole)
    return unborn_log(store, name)


def update_log(store: MetadataStore, name: str, fn: Callable[[LogMetadata], LogMetadata], *,
               whole: bool = True, attempts: int = LOG_UPDATE_ATTEMPTS) -> LoadedLog:
    """The CAS loop of one log: read, `fn(current)`, commit; on a lost race re-read and call `fn` again."""
    return update_logs(store, [name], lambda metas: {name: fn(metas[name])}, whole=whole,
                       attempts=attempts)[name]


def delete_log_znodes(store: MetadataStore, loaded: LoadedLog) -> None:
    """Delete the head at the version read (MetadataVersionError if it moved), then its segments."""
    children = store.children(loaded.path)
    head = loaded.window.head
    ops = [ZkOp("delete", f"{loaded.path}/{c}") for c in children]
    ops.append(ZkOp("delete", loaded.path, version=loaded.version))
    if sum(op.request_bytes for op in ops) <= store.max_request_bytes:
        store.multi(ops, verify=[])
        return
    store.cas(loaded.path, st.encode_head(lm.new_log(loaded.name, 0), st.new_head("deleted"))
              if head is not None else b"", loaded.version)
    for child in children:
        with contextlib.suppress(NoSuchNodeError):
            store.delete(f"{loaded.path}/{child}")
    store.delete(loaded.path)
