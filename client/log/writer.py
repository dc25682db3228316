"""LogWriter: the single writer of a log made of ledgers (R28 open, R29 roll), appending records.

Mirrors DistributedLog's BKLogWriteHandler / Pulsar's ManagedLedgerImpl on the write side. Opening fences
and recovers the log's last two ledgers, creates a new ledger and CASes it into the list; nothing is
written before that CAS succeeds. `append` returns a Position (ledger id, entry id). Rolling creates the
next ledger, CASes it into the list and then closes the previous ledger; while it runs, no append is
issued (appends wait on the writer's lock), so the previous ledger's in-flight appends finish (or fail)
before any append goes to the new ledger, and order is kept. A roll happens before the append that would
exceed roll_entries / roll_bytes, or that comes once the ledger is older than roll_age_s (an idle writer
does not roll on its own), and on demand with `roll()`.

Losing the log: a CAS that finds another ledger appended (someone else became writer) raises
LogFencedError, and so does every append once the current ledger got fenced by a new writer. A writer
whose ledger failed for another reason (no bookies) is broken too: open a new writer, it recovers the tail.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bkledger.client.errors import (
    BKError,
    ClientTimeoutError,
    LedgerClosedError,
    LedgerFencedError,
    LogFencedError,
    LogNotFoundError,
    LogUpdateConflictError,
    LogWriterClosedError,
    MetadataConflictError,
    MetadataVersionError,
)
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core.meta import LogMetadata, Position
from bkledger.client.log.ledgers import seal_tail
from bkledger.client.log.liveness import WriterLeases
from bkledger.client.log.store import (
    LoadedLog,
    commit_changes,
    create_log,
    load_log,
    now_ms,
    prepare_change,
    require_loaded,
    update_log,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import numpy.typing as npt

    from bkledger.client.ledger_handle import LedgerHandle
    from bkledger.client.log.core.envelope import HeadersIn
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper
    from bkledger.client.log.ledgers import RollPolicy
    from bkledger.client.log.records import Timestamp

log = logging.getLogger("bkledger.logs")
CAS_ATTEMPTS = 50


class LogWriter:
    """Appends to one log. Thread-safe; create it with `BookKeeper.open_log_writer`."""

    def __init__(self, bk: BookKeeper, name: str, *, quorum: tuple[int, int, int], password: bytes,
                 roll: RollPolicy, digest_type: str, envelope: int = 0) -> None:
        self._bk = bk
        if envelope != 0:                # a version this bkledger writes, else EnvelopeVersionError
            from bkledger.client.log.core.envelope import check_version

            check_version(envelope)
        self._envelope = envelope        # the record envelope version its ledgers name (0: bare values)
        self.name = name
        self._quorum = quorum
        self._password = password
        self.roll_policy = roll
        self._digest_type = digest_type
        self._lock = threading.RLock()
        self._loaded: LoadedLog | None = None      # the log's tail as this writer last stored it
        self._lh: LedgerHandle | None = None
        self._entries = 0                # appends issued to the current ledger
        self._bytes = 0
        self._started = time.monotonic()
        self._error: BKError | None = None
        self._closed = False
        self._leases = WriterLeases(bk, name)     # "this writer is alive" (client.log.liveness)
        self._spans: dict[int, tuple[int, int]] = {}    # ledger id -> its records' (least, greatest) timestamp

    # ---- becoming the writer (R28) ------------------------------------------------------------
    @classmethod
    def open(cls, bk: BookKeeper, name: str, *, quorum: tuple[int, int, int], password: bytes,
             roll: RollPolicy, create: bool, digest_type: str, envelope: int = 0) -> LogWriter:
        writer = cls(bk, name, quorum=quorum, password=password, roll=roll, digest_type=digest_type,
                     envelope=envelope)
        writer._become_writer(create)
        return writer

    def _become_writer(self, create: bool) -> None:
        got = load_log(self._bk.store, self.name, whole=False)
        if got is None:
            if not create:
                raise LogNotFoundError(f"log {self.name!r} does not exist: open the writer with create=True")
            got = create_log(self._bk.store, self.name, whole=False)
        sealed = seal_tail(self._bk, got.meta, self._password)          # fence + recover the last two
        self._password = lm.ledger_password(got.meta, self._password)   # none given: the log's own key
        lh = self._new_ledger()
        try:
            self._loaded = self._cas_owned(got, lambda m: lm.with_ledger_appended(
                _reseal(m, sealed), lh.ledger_id, now_ms(), _envelope(lh)))
        except BaseException:
            self._discard(lh)
            raise
        self._switch_to(lh)
        log.info("log %r: writer on ledger %d", self.name, lh.ledger_id)

    def _new_ledger(self) -> LedgerHandle:
        e, qw, qa = self._quorum
        custom = {"log": self.name.encode("utf-8")}
        if self._envelope:
            custom[lm.ENVELOPE_KEY] = str(self._envelope).encode()
        lh = self._bk.create_ledger(e, qw, qa, digest_type=self._digest_type, password=self._password,
                                    custom_metadata=custom)
        self._leases.hold(lh.ledger_id)         # before the ledger enters the list: no unleased open tail
        return lh

    def _cas_owned(self, loaded: LoadedLog, change: Callable[[LogMetadata], LogMetadata]) -> LoadedLog:
        """CAS `change(meta)`; on a lost race re-read and retry only while nobody appended a ledger (the
        change was truncation, retention or an annotation); else LogFencedError (R28: someone else writes)."""
        base = loaded.meta
        store = self._bk.store
        for attempt in range(CAS_ATTEMPTS):
            try:
                return commit_changes(store, [prepare_change(store, loaded, change(loaded.meta))])[self.name]
            except MetadataVersionError:
                loaded = require_loaded(store, self.name, whole=False)
                if not lm.same_tail(base, loaded.meta):
                    raise self._taken_over(loaded.meta) from None
                time.sleep(min(0.002 * 2**attempt, 0.05))
        raise LogUpdateConflictError(f"log {self.name!r}: the ledger list kept changing; retry opening")

    def _discard(self, lh: LedgerHandle) -> None:
        """Drop a ledger that never made it into the list (nobody can know of it)."""
        self._leases.release(lh.ledger_id)
        with contextlib.suppress(BKError):
            lh.close()
        with contextlib.suppress(BKError):
            self._bk.delete_ledger(lh.ledger_id)

    def _switch_to(self, lh: LedgerHandle) -> None:
        self._lh = lh
        self._entries = 0
        self._bytes = 0
        self._started = time.monotonic()

    # ---- state ------------------------------------------------------------------------------
    @property
    def ledger_id(self) -> int:
        """The ledger appends go to now."""
        assert self._lh is not None
        return self._lh.ledger_id

    @property
    def metadata(self) -> LogMetadata:
        """The log's tail (its last ledgers) as this writer last wrote it (bk.log_metadata reads the whole
        current log)."""
        assert self._loaded is not None
        return self._loaded.meta

    @property
    def is_closed(self) -> bool:
        return self._closed

    # ---- appending ----------------------------------------------------------------------------
    def append_async(self, payload: bytes | bytearray | memoryview, *, key: bytes | None = None,
                     timestamp: Timestamp | None = None,
                     headers: HeadersIn | None = None) -> concurrent.futures.Future[Position]:
        """Queue an append; the future gives its Position once acknowledged. May roll first (R29).
        A writer opened with `envelope=1` or `2` writes the record envelope (`client.log.records`: key,
        timestamp, by default the time of this call, and with 2 headers); one of envelope 0 the payload."""
        self._bk._ctx.runtime.check_not_forked()    # in a fork child: at once, before a lock the parent held
        if self._envelope or key is not None or timestamp is not None or headers is not None:
            from bkledger.client.log import records

            records.check_fields(self.name, self._envelope, key, timestamp, headers)
            payload, span = records.enveloped(self._envelope, payload, key, timestamp, headers,
                                              time.time_ns() // 1000)
        with self._lock:
            self._check_usable()
            if self._should_roll(len(payload)):
                self._roll_locked()
            lh = self._lh
            assert lh is not None
            if self._envelope and span is not None:
                self._note_span(lh.ledger_id, span)
            inner = lh.add_entry_async(payload)
            self._entries += 1
            self._bytes += len(payload)
        outer: concurrent.futures.Future[Position] = concurrent.futures.Future()
        ledger_id = lh.ledger_id
        inner.add_done_callback(lambda fut: self._settle(ledger_id, fut, outer))
        return outer

    def append_many(self, data: bytes | bytearray | memoryview | npt.NDArray[np.uint8],
                    offsets: Sequence[int] | npt.NDArray[np.integer], *, copy: bool = True,
                    keys: Sequence[bytes | None] | None = None, timestamps: Sequence[Timestamp | None] | None = None,
                    headers: Sequence[HeadersIn | None] | None = None) -> concurrent.futures.Future[Position]:
        """Queue n records at once, record i being data[offsets[i]:offsets[i + 1]] (LedgerHandle.add_entries:
        same offsets, `copy`, errors and failure semantics); the future gives the Position of the last record. The
        records go to one ledger, consecutive: a roll due happens before them, never among them. An enveloped
        writer envelopes them (`keys`, `timestamps`, `headers`: one item per record, or None; default
        timestamp: the time of this call), as `append_async` does one."""
        self._bk._ctx.runtime.check_not_forked()    # in a fork child: at once, before a lock the parent held
        if self._envelope or keys is not None or timestamps is not None or headers is not None:
            from bkledger.client.log import records

            records.check_fields(self.name, self._envelope, keys, timestamps, headers)
            data, offsets, span = records.enveloped_many(self._envelope, data, offsets, keys, timestamps, headers,
                                                         time.time_ns() // 1000)
            copy = False                            # a fresh buffer nobody else holds
        with self._lock:
            self._check_usable()
            nbytes = _span(offsets)
            if self._should_roll(nbytes):
                self._roll_locked()
            lh = self._lh
            assert lh is not None
            if self._envelope and span is not None:
                self._note_span(lh.ledger_id, span)
            inner = lh.add_entries(data, offsets, copy=copy)
            self._entries += len(offsets) - 1
            self._bytes += nbytes
        outer: concurrent.futures.Future[Position] = concurrent.futures.Future()
        ledger_id = lh.ledger_id
        inner.add_done_callback(lambda fut: self._settle(ledger_id, fut, outer))
        return outer

    def append(self, payload: bytes | bytearray | memoryview, timeout: float | None = 60.0, *,
               key: bytes | None = None, timestamp: Timestamp | None = None,
               headers: HeadersIn | None = None) -> Position:
        """Append and wait for the acknowledgement; the record's Position. ClientTimeoutError (a TimeoutError)
        if it is not acknowledged within `timeout`: it is still pending then and may complete. `key`,
        `timestamp` (int: milliseconds since the epoch, or a datetime), `headers`: see `append_async`."""
        try:
            return self.append_async(payload, key=key, timestamp=timestamp, headers=headers).result(timeout)
        except TimeoutError as exc:
            if isinstance(exc, BKError):
                raise
            raise ClientTimeoutError(f"log {self.name!r}: the append was not acknowledged within {timeout}s; it "
                                     "is still pending and may complete") from None

    def _note_span(self, ledger_id: int, span: tuple[int, int]) -> None:
        from bkledger.client.log.records import widened

        self._spans[ledger_id] = widened(self._spans.get(ledger_id), span) or span

    def _settle(self, ledger_id: int, inner: concurrent.futures.Future[int],
                outer: concurrent.futures.Future[Position]) -> None:
        exc = inner.exception()
        if exc is None:
            outer.set_result(Position(ledger_id, inner.result()))
            return
        error = self._translate(ledger_id, exc)
        if self._error is None and isinstance(error, BKError):
            self._error = error
        outer.set_exception(error)

    def _translate(self, ledger_id: int, exc: BaseException) -> BaseException:
        if isinstance(exc, LogFencedError | LogWriterClosedError):
            return exc
        if isinstance(exc, LedgerFencedError) or (isinstance(exc, LedgerClosedError) and not self._closed):
            fenced = LogFencedError(
                f"log {self.name!r}: ledger {ledger_id} was fenced by another writer of the log; this append "
                "was maybe written (read the log to find out) and this writer may not append any more")
            fenced.__cause__ = exc
            return fenced
        if isinstance(exc, LedgerClosedError):
            return LogWriterClosedError(f"log {self.name!r}: the writer was closed with this append pending")
        return exc

    def _check_usable(self) -> None:
        if self._closed:
            raise LogWriterClosedError(f"log {self.name!r}: this writer is closed; open a new one to append")
        if self._error is not None:
            raise self._error

    def _should_roll(self, size: int) -> bool:
        if self._entries == 0:
            return False
        policy = self.roll_policy
        return ((policy.entries is not None and self._entries >= policy.entries)
                or (policy.bytes is not None and self._bytes + size > policy.bytes)
                or (policy.age_s is not None and time.monotonic() - self._started >= policy.age_s))

    # ---- rolling (R29) ------------------------------------------------------------------------
    def roll(self) -> int:
        """Close the current ledger and continue in a new one now; the new ledger's id."""
        with self._lock:
            self._check_usable()
            self._roll_locked()
            return self.ledger_id

    def _roll_locked(self) -> None:
        old = self._lh
        assert old is not None and self._loaded is not None
        if self._loaded.meta.last_ledger_id != old.ledger_id:
            raise self._fail(self._taken_over(self._loaded.meta))
        lh = self._new_ledger()                                            # 1. create
        try:                                                               # 2. CAS it into the list
            self._loaded = self._cas_owned(
                self._loaded, lambda m: lm.with_ledger_appended(m, lh.ledger_id, now_ms(), _envelope(lh)))
        except BKError as exc:
            self._discard(lh)
            self._fail(exc)
            raise
        self._switch_to(lh)
        try:                                                               # 3. close the previous one
            old.close()
        except BKError as exc:
            raise self._fail(self._close_error(old, exc)) from exc
        self._leases.release(old.ledger_id)
        self._record_sealed(old)
        log.info("log %r: rolled from ledger %d (%d entries) to %d", self.name, old.ledger_id,
                 old.last_entry_id + 1, lh.ledger_id)

    def _fail(self, exc: BKError) -> BKError:
        if self._error is None:
            self._error = exc
        return exc

    def _close_error(self, lh: LedgerHandle, exc: BKError) -> BKError:
        """Closing our ledger failed: another writer recovered it (LogFencedError), or something else."""
        if isinstance(exc, LedgerFencedError | LedgerClosedError | MetadataConflictError):
            return LogFencedError(f"log {self.name!r}: ledger {lh.ledger_id} was recovered by another writer of "
                                  "the log; appends that failed were maybe written; stop writing here")
        return exc

    def _record_sealed(self, lh: LedgerHandle) -> None:
        """Best effort: note the closed ledger's count and size (the next writer would do it otherwise)."""
        md = lh.metadata
        span = self._spans.pop(lh.ledger_id, None) if self._error is None else None   # all its appends acked

        def seal(m: LogMetadata) -> LogMetadata:
            return lm.with_ledger_sealed(m, lh.ledger_id, md.last_entry_id, md.length, now_ms(), span)

        try:
            loaded = update_log(self._bk.store, self.name, seal, whole=False)
        except BKError as exc:
            log.warning("log %r: could not record that ledger %d is closed (a later writer will): %s",
                        self.name, lh.ledger_id, exc)
            return
        if self._lh is not None and loaded.meta.last_ledger_id != self._lh.ledger_id:
            self._fail(self._taken_over(loaded.meta))     # never adopt a list whose tail another writer added
            return
        self._loaded = loaded

    def _taken_over(self, current: LogMetadata) -> LogFencedError:
        return LogFencedError(f"log {self.name!r}: another writer appended ledger {current.last_ledger_id}; it "
                              "is the log's writer now; stop writing here")

    # ---- closing ------------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for pending appends and close the current ledger. If another writer took over, this only
        marks the writer closed (its ledger is that writer's to recover)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            lh = self._lh
            try:
                if lh is None or isinstance(self._error, LogFencedError):
                    return
                try:
                    lh.close()
                except BKError as exc:
                    raise self._fail(self._close_error(lh, exc)) from exc
            finally:
                self._leases.release_all()
            self._record_sealed(lh)

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(LogFencedError):
            self.close()


def _reseal(current: LogMetadata, sealed: LogMetadata) -> LogMetadata:
    """Carry the counts learnt by recovering ledgers (in `sealed`) over to a re-read `current`."""
    out = current
    for led in sealed.ledgers:
        if led.sealed and led.entries is not None:
            out = lm.with_ledger_sealed(out, led.ledger_id, led.entries - 1, led.size or 0, led.closed_ms or 0)
    return out


def _span(offsets: Sequence[int] | npt.NDArray[np.integer]) -> int:
    """The payload bytes of a bulk's offsets (0 when they are malformed: add_entries then says why)."""
    try:
        return max(0, int(offsets[-1]) - int(offsets[0]))
    except (TypeError, ValueError, IndexError):
        return 0


def _envelope(lh: LedgerHandle) -> int | None:
    """What the log records of the writer's ledger's record envelope (none: it writes values as given)."""
    return lm.recorded_envelope(lh.metadata.custom_metadata)
