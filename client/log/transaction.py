"""Transactions across logs and cursors (issue 44 item 4): `with bk.transaction() as tx:`.

    with bk.transaction() as tx:
        tx.append("billing", b"value", key=b"k", timestamp=ms, headers={"h": b"v"})
        tx.append("audit", b"...")
        tx.ack("orders", "billing-svc", reader.position)
    # here: every record and the ack are visible and durable, or (an exception in the block) none of them

Each log's records go to a ledger of the transaction's own (envelope v2: key, timestamp, headers), created
in the background from the log's first append on (the ledgers of several logs at once; records appended
before it exists are queued and added in order), written as the block runs and CLOSED at commit (all of
them at once). A creation that fails fails the transaction like any other error. The commit is ONE ZooKeeper
multi-operation: each log's new ledger list checked on its head's version, each cursor's acknowledgement
set at the version read when `tx.ack` was called, and the creation of the marker znode
`transactions/<id>`. So readers see all of it or none of it.

- A log whose list changed meanwhile (another append landed first): its ledger may now be below the log's
  tail (R27); it is copied above it and the commit tried again, a bounded number of times
  (`spark_connector.log_commit`'s re-homing). A cursor acknowledged by someone else since `tx.ack` fails
  the transaction (TransactionConflictError: another consumer processed those records); an ack that would
  move a cursor back fails it with CursorMovedBackError.
- An answer lost with the connection: the marker exists if and only if the multi was applied, so the
  commit reads it back and is decided once (never applied twice). The marker is deleted once the outcome is
  known; markers left by a crash right after a commit are deleted by `sweep_markers`.
- The ledgers carry `bkledger.job` = `transaction:<id>` and `bkledger.log`: an aborted transaction deletes
  them; a crashed one leaves them unlisted, and `bkledger shell sweepjobs` deletes them as a dead Spark
  job's. Decisions: `client.log.core.transactions`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from bkledger.client.errors import (
    BKError,
    CursorNotFoundError,
    InvalidLogUpdateError,
    InvalidOptionError,
    MetadataVersionError,
    NoSuchLedgerError,
)
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import transactions as tc
from bkledger.client.log.core.meta import LogMetadata, Position
from bkledger.client.log.core.names import check_log_name
from bkledger.client.log.cursors import cursor_path, lost_error, read_cursor
from bkledger.client.log.ledger_copy import copy_ledger
from bkledger.client.log.ledgers import JOB_KEY, LOG_KEY, log_ledger_password, seal_tail
from bkledger.client.log.liveness import check_live_writer
from bkledger.client.log.store import LogChange, commit_changes, load_log, now_ms, prepare_change, unborn_log
from bkledger.client.meta.errors import NoSuchNodeError, ZNodeExistsError
from bkledger.client.meta.zksession import ZkOp
from bkledger.client.protocol.metadata import LedgerState

if TYPE_CHECKING:
    from bkledger.client.ledger_handle import LedgerHandle
    from bkledger.client.log import records  # imports numpy: loaded at a first append, not with the client
    from bkledger.client.log.core import envelope as env
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper

log = logging.getLogger("bkledger.transaction")

ADD_TIMEOUT_S = 120.0
CREATE_TIMEOUT_S = 120.0
_T = TypeVar("_T")
JOB_PREFIX = "transaction:"


class TransactionConflictError(BKError):
    """The transaction could not commit: a cursor it acknowledges was acknowledged by someone else since
    `tx.ack`, or its logs kept changing under it. Nothing of it was applied."""


class TransactionOutcomeUnknownError(BKError):
    """The commit's answer was lost and ZooKeeper could not be asked again: the transaction may or may not
    be applied (look at its logs and cursors). Its ledgers are kept until `sweepjobs` finds them unlisted."""


@dataclasses.dataclass
class _LogPart:
    """One log's share of the transaction: its ledger (created in the background: `creating`, so that the
    ledgers of several logs are created at once and appends need not wait), the records appended before it
    existed, the adds in flight, the record time span."""

    name: str
    creating: concurrent.futures.Future[tuple[bytes, LedgerHandle]]
    queued: list[bytes] = dataclasses.field(default_factory=list)
    pending: list[concurrent.futures.Future[int]] = dataclasses.field(default_factory=list)
    span: tuple[int, int] | None = None
    listed: int = -1                        # the ledger to list: the handle's, or its copy (-1: not known yet)

    def ready(self) -> LedgerHandle:
        """The ledger, once created (raises what its creation raised); records queued meanwhile are added
        first, in order."""
        _, handle = self.creating.result(CREATE_TIMEOUT_S)
        if self.listed < 0:
            self.listed = handle.ledger_id
        if self.queued:
            self.pending.extend(handle.add_entry_async(entry) for entry in self.queued)
            self.queued.clear()
        return handle

    @property
    def handle(self) -> LedgerHandle:
        return self.ready()

    @property
    def password(self) -> bytes:
        return self.creating.result(CREATE_TIMEOUT_S)[0]

    @property
    def ledger_id(self) -> int:
        self.ready()
        return self.listed

    @ledger_id.setter
    def ledger_id(self, value: int) -> None:
        self.listed = value


def _started(name: str, fn: Callable[[], _T]) -> concurrent.futures.Future[_T]:
    """`fn()` run in a thread of its own; its result or exception in the future (no thread dies silently)."""
    future: concurrent.futures.Future[_T] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:    # noqa: BLE001 - handed to whoever waits for the future
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


@dataclasses.dataclass(frozen=True)
class _Ack:
    position: Position
    version: int                            # the cursor znode's version when first acknowledged here


class Transaction:
    """Appends to any number of logs and cursor acknowledgements that commit together or not at all.
    Use `bk.transaction()`; not thread-safe (one thread builds a transaction)."""

    def __init__(self, bk: BookKeeper, transaction_id: str | None = None, *,
                 quorum: tuple[int, int, int] = (3, 2, 2), digest_type: str = "crc32c") -> None:
        try:
            self.transaction_id = tc.check_transaction_id(transaction_id or uuid.uuid4().hex)
        except ValueError as exc:
            raise InvalidOptionError(f"bk.transaction: {exc}") from None
        self._bk = bk
        if transaction_id is not None and bk.store.exists(bk.store.layout.transaction(transaction_id)):
            raise InvalidOptionError(f"bk.transaction: transaction id {transaction_id!r} is in use (its marker "
                                     "exists); give each transaction its own id")
        self._token = uuid.uuid4().hex          # tells this transaction's marker from another's with its id
        self._quorum = quorum
        self._digest = digest_type
        self._phase = tc.Phase.OPEN
        self._parts: dict[str, _LogPart] = {}
        self._acks: dict[tuple[str, str], _Ack] = {}
        self.positions: dict[str, list[Position]] = {}    # after commit: each log's records' positions

    @property
    def phase(self) -> tc.Phase:
        return self._phase

    # ---- building ---------------------------------------------------------------------------------
    def append(self, log_name: str, value: bytes | bytearray | memoryview, key: bytes | None = None,
               timestamp: records.Timestamp | None = None, headers: env.HeadersIn | None = None) -> None:
        """Add a record to `log_name` (created at commit if missing). Written now to the transaction's ledger
        for that log, visible to readers only once the transaction commits."""
        self._phase = tc.next_phase(self._phase, tc.Event.WRITE, self.transaction_id)
        part = self._parts.get(log_name) or self._new_part(log_name)
        from bkledger.client.log import records
        from bkledger.client.log.core import envelope as env

        entry, span = records.enveloped(env.V2, value, key, timestamp, headers, time.time_ns() // 1000)
        if part.creating.done():
            part.pending.append(part.ready().add_entry_async(entry))
        else:
            part.queued.append(entry)           # added, in order, once its ledger exists
        part.span = records.widened(part.span, span)

    def ack(self, log_name: str, cursor: str, position: Position) -> None:
        """Acknowledge `position` on the log's cursor when the transaction commits. The cursor must not be
        acknowledged by anyone else until then (TransactionConflictError at commit), nor moved back
        (CursorMovedBackError). CursorNotFoundError / CursorLostError as `reader.ack`."""
        self._phase = tc.next_phase(self._phase, tc.Event.WRITE, self.transaction_id)
        if not isinstance(position, Position):
            raise InvalidOptionError(f"tx.ack takes a Position (e.g. reader.position), got {position!r}")
        check_log_name(log_name, new=False)
        got = read_cursor(self._bk.store, log_name, cursor)
        if got is None:
            raise CursorNotFoundError(f"cursor {cursor!r} of log {log_name!r} does not exist: open a reader on "
                                      "it first (bk.open_log_reader(name, cursor=...))")
        state, version = got
        if state.lost is not None:
            raise lost_error(log_name, state)
        earlier = self._acks.get((log_name, cursor))
        merged = tc.merged_ack(None if earlier is None else earlier.position, position, log_name, cursor)
        tc.check_forward(state.position, merged, log_name, cursor)
        self._acks[(log_name, cursor)] = _Ack(merged, version if earlier is None else earlier.version)

    def _new_part(self, name: str) -> _LogPart:
        check_log_name(name, new=True)
        part = _LogPart(name, _started(f"tx-{self.transaction_id[:8]}-create", lambda: self._create(name)))
        self._parts[name] = part
        return part

    def _create(self, name: str) -> tuple[bytes, LedgerHandle]:
        """The log's ledger password and a new ledger for the transaction's records to it (a thread's)."""
        from bkledger.client.log.core import envelope as env  # numpy: not at the client's import

        password = log_ledger_password(self._bk, name)
        custom = {**env.custom_metadata(env.V2), JOB_KEY: f"{JOB_PREFIX}{self.transaction_id}".encode(),
                  LOG_KEY: name.encode()}
        e, qw, qa = self._quorum
        handle = self._bk.create_ledger(e, qw, qa, digest_type=self._digest, password=password,
                                        custom_metadata=custom)
        return password, handle

    # ---- ending -----------------------------------------------------------------------------------
    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None and self._phase is tc.Phase.OPEN:
            self.commit()
        elif self._phase is tc.Phase.OPEN:
            self.abort()

    def abort(self) -> None:
        """Drop the transaction: nothing of it becomes visible; its ledgers are deleted."""
        self._phase = tc.next_phase(self._phase, tc.Event.ABORT, self.transaction_id)
        self._delete_ledgers()

    def commit(self) -> None:
        """Make every append and ack visible and durable at once (one ZooKeeper transaction), or raise and
        apply none of it (the transaction is then aborted)."""
        self._phase = tc.next_phase(self._phase, tc.Event.COMMIT, self.transaction_id)
        try:
            closed = self._close_ledgers()
            self._commit(closed)
        except BaseException as exc:
            outcome = self._read_back()               # the last word: was the multi applied after all?
            if outcome is not tc.Outcome.COMMITTED:
                self._phase = tc.next_phase(self._phase, tc.Event.FAILED, self.transaction_id)
                if outcome is None:
                    raise TransactionOutcomeUnknownError(
                        f"transaction {self.transaction_id}: ZooKeeper could not be asked whether it committed "
                        f"({exc}); its ledgers are kept: `bkledger shell sweepjobs` deletes them if their logs do "
                        "not list them") from exc
                with contextlib.suppress(Exception):
                    self._delete_ledgers()
                raise
            log.info("transaction %s: committed after all (%s)", self.transaction_id, exc)
        self._phase = tc.next_phase(self._phase, tc.Event.COMMITTED, self.transaction_id)
        self._forget_marker()

    def _close_ledgers(self) -> dict[str, lm.ClosedLedger]:
        """Every part's ledger, its adds acknowledged, CLOSED: the ledgers closed at once (one thread each
        but the last)."""
        entries: dict[str, list[int]] = {}
        for name, part in self._parts.items():
            part.ready()                            # created, its queued records added
            entries[name] = [f.result(ADD_TIMEOUT_S) for f in part.pending]
        handles = [part.handle for part in self._parts.values()]
        closing = [_started(f"tx-{self.transaction_id[:8]}-close", h.close) for h in handles[:-1]]
        for handle in handles[-1:]:
            handle.close()
        for future in closing:
            future.result(ADD_TIMEOUT_S)
        out: dict[str, lm.ClosedLedger] = {}
        for name, part in self._parts.items():
            md = part.handle.metadata
            if md.state is not LedgerState.CLOSED:
                md = self._bk.ledger_metadata(part.ledger_id)
            out[name] = (part.ledger_id, md.last_entry_id, md.length, md.ctime_ms)
            self.positions[name] = [Position(part.ledger_id, e) for e in entries[name]]
        return out

    def _delete_ledgers(self) -> None:
        for part in self._parts.values():
            try:
                handle = part.ready()              # a creation still running: wait for it, delete its ledger
            except Exception as exc:  # noqa: BLE001 - a ledger never created has nothing to delete
                log.warning("transaction %s: the ledger for log %r was not created: %s", self.transaction_id,
                            part.name, exc)
                continue
            with contextlib.suppress(Exception):
                handle.close()
            for ledger_id in {handle.ledger_id, part.listed}:
                with contextlib.suppress(NoSuchLedgerError):
                    self._bk.delete_ledger(ledger_id)

    # ---- the commit -------------------------------------------------------------------------------
    def _commit(self, closed: dict[str, lm.ClosedLedger]) -> None:
        for attempt in range(tc.COMMIT_ATTEMPTS):
            try:
                changes = self._changes(closed)
                self._run(changes)
                return
            except InvalidLogUpdateError:
                late = self._late(closed)
                if tc.after_failed_commit(attempt, late, False) is not tc.Step.REHOME:
                    raise
                for name in late:
                    self._rehome(name, closed, copy_ledger)
            except MetadataVersionError:
                if self._marker_exists():
                    return                  # our own multi, applied; its answer was lost
                self._check_cursors_unmoved()
                if tc.after_failed_commit(attempt, {}, True) is not tc.Step.RETRY:
                    break
                time.sleep(min(0.002 * 2**attempt, 0.05))
        raise TransactionConflictError(f"transaction {self.transaction_id}: logs {sorted(self._parts)} kept "
                                       f"changing under it ({tc.COMMIT_ATTEMPTS} times); nothing of it was "
                                       "applied; retry it")

    def _changes(self, closed: Mapping[str, lm.ClosedLedger]) -> list[LogChange]:
        from bkledger.client.log.core import envelope as env  # numpy: not at the client's import

        store = self._bk.store
        changes = []
        for name in sorted(closed):
            part = self._parts[name]
            loaded = load_log(store, name, whole=False) or unborn_log(store, name)
            check_live_writer(self._bk, loaded.meta, False)
            sealed = seal_tail(self._bk, loaded.meta, part.password)
            spans = {part.ledger_id: part.span} if part.span is not None else None
            new: LogMetadata = lm.with_sealed_ledgers_appended(sealed, [closed[name]], now_ms(), spans,
                                                               {part.ledger_id: env.V2})
            changes.append(prepare_change(store, loaded, new))
        return changes

    def _extra_ops(self) -> list[ZkOp]:
        from bkledger.client.log.core import cursors as cc

        store = self._bk.store
        ops = []
        for (name, cursor), ack in sorted(self._acks.items()):
            data = cc.encode_cursor(cc.CursorState(cursor, ack.position, now_ms()))
            ops.append(ZkOp("set", cursor_path(store, name, cursor), data, ack.version))
        marker = json.dumps({"logs": sorted(self._parts), "at_ms": now_ms(), "token": self._token}).encode()
        ops.append(ZkOp("create", store.layout.transaction(self.transaction_id), marker))
        return ops

    def _run(self, changes: list[LogChange]) -> None:
        store = self._bk.store
        extra = self._extra_ops()
        parent = store.layout.under_root("transactions")
        if not store.exists(parent):
            with contextlib.suppress(ZNodeExistsError):
                store.create(parent, b"", makepath=True)
        if not changes:
            try:
                store.multi(extra, verify=[op for op in extra if op.kind == "set"])
            except (ZNodeExistsError, NoSuchNodeError) as exc:
                raise MetadataVersionError(f"transaction {self.transaction_id}: {exc}") from None
            return
        first = changes[0]
        commit_changes(store, [dataclasses.replace(first, ops=(*first.ops, *extra)), *changes[1:]])

    def _late(self, closed: Mapping[str, lm.ClosedLedger]) -> dict[str, list[int]]:
        metas = {}
        for name in closed:
            got = load_log(self._bk.store, name, whole=False)
            if got is not None:
                metas[name] = got.meta
        return lm.late_ledgers(metas, {name: [c[0]] for name, c in closed.items()})

    def _rehome(self, name: str, closed: dict[str, lm.ClosedLedger],
                copy: Callable[[BookKeeper, int, bytes], int]) -> None:
        part = self._parts[name]
        new_id = copy(self._bk, part.ledger_id, part.password)
        if part.ledger_id != part.handle.ledger_id:
            with contextlib.suppress(NoSuchLedgerError):
                self._bk.delete_ledger(part.ledger_id)          # an earlier copy that went late too
        log.info("transaction %s: ledger %d was below log %r's tail (another append committed first): copied "
                 "to %d", self.transaction_id, part.ledger_id, name, new_id)
        part.ledger_id = new_id
        md = self._bk.ledger_metadata(new_id)
        closed[name] = (new_id, md.last_entry_id, md.length, md.ctime_ms)
        self.positions[name] = [Position(new_id, p.entry_id) for p in self.positions.get(name, [])]

    def _check_cursors_unmoved(self) -> None:
        for (name, cursor), ack in self._acks.items():
            got = read_cursor(self._bk.store, name, cursor)
            if got is None:
                raise CursorNotFoundError(f"transaction {self.transaction_id}: cursor {cursor!r} of log {name!r} "
                                          "was deleted; nothing of the transaction was applied")
            if got[0].lost is not None:
                raise lost_error(name, got[0])
            if got[1] != ack.version:
                raise TransactionConflictError(
                    f"transaction {self.transaction_id}: cursor {cursor!r} of log {name!r} was acknowledged by "
                    f"someone else (now at {got[0].position}) since this transaction's ack; another consumer "
                    "processed those records: nothing of the transaction was applied")

    def _read_back(self) -> tc.Outcome | None:
        """Whether the transaction's multi was applied (its marker exists); None if ZooKeeper cannot say."""
        try:
            return tc.outcome_after_unknown(self._marker_exists())
        except Exception as exc:    # noqa: BLE001 - any failure to ask leaves the outcome unknown
            log.warning("transaction %s: cannot read its marker back: %s", self.transaction_id, exc)
            return None

    def _marker_exists(self) -> bool:
        """This transaction's marker exists (not one of another transaction given the same id)."""
        got = self._bk.store.get(self._bk.store.layout.transaction(self.transaction_id))
        if got is None:
            return False
        try:
            return bool(json.loads(got[0]).get("token") == self._token)
        except (ValueError, AttributeError):
            return False

    def _forget_marker(self) -> None:
        with contextlib.suppress(Exception):
            self._bk.store.delete(self._bk.store.layout.transaction(self.transaction_id))
        for part in self._parts.values():
            if part.ledger_id != part.handle.ledger_id:      # the log lists the copy
                with contextlib.suppress(Exception):
                    self._bk.delete_ledger(part.handle.ledger_id)


def sweep_markers(bk: BookKeeper, older_than_s: float) -> list[str]:
    """Delete the markers of committed transactions older than `older_than_s` (left by a process that died
    right after its commit); the ids deleted. A marker matters only while its transaction's commit runs."""
    store = bk.store
    parent = store.layout.under_root("transactions")
    gone = []
    for txid in store.children(parent) if store.exists(parent) else []:
        path = store.layout.transaction(txid)
        got = store.get(path)
        if got is None or now_ms() - _marker_time(got[0]) < older_than_s * 1000:
            continue
        with contextlib.suppress(NoSuchNodeError):
            store.delete(path)
            gone.append(txid)
    if gone:
        log.info("deleted the markers of %d committed transactions (their processes died at commit)", len(gone))
    return gone


def _marker_time(data: bytes) -> int:
    """When a marker was written (ms); 0 (old: sweep it) if its data is not a marker's."""
    try:
        at = json.loads(data).get("at_ms")
    except (ValueError, AttributeError):
        return 0
    return at if isinstance(at, int) else 0


class TransactionsMixin:
    """`bk.transaction()`."""

    def transaction(self, transaction_id: str | None = None, *, ensemble_size: int = 3, write_quorum: int = 2,
                    ack_quorum: int = 2, digest_type: str = "crc32c") -> Transaction:
        """A transaction across logs and cursors (`client.log.transaction`): use as `with bk.transaction()
        as tx:`. `transaction_id`: its marker's name (default a random one); ledger settings for its
        per-log ledgers."""
        bk: BookKeeper = self  # type: ignore[assignment]
        bk._check_open()
        return Transaction(bk, transaction_id, quorum=(ensemble_size, write_quorum, ack_quorum),
                           digest_type=digest_type)
