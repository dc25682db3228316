"""LogReader: reads a log made of ledgers in order, across ledgers, tailing the open one (R11, R12).

Mirrors DistributedLog's BKLogReadHandler / a Pulsar non-durable cursor. Ledgers are opened without
recovery, so a reader never fences the writer. In an open ledger it reads up to the LAC, never beyond,
and waits for more with LAC long polls; it moves on once the ledger is CLOSED (a metadata refresh tells)
and read to its last entry, taking the next ledger from the log's list (re-read from ZooKeeper).
Offloaded history (`client.log.offload`) is read from the log's Delta table files instead, at the same
positions, byte for byte as the bookies held it.
ZooKeeper watches on the ledger's and the log's znodes say when a re-read is worth it, so an idle
reader does not poll ZooKeeper (it re-reads anyway every `REFRESH_FALLBACK_S`, in case a watch event
was missed). A re-read while reading loads the log from the reader's ledger on (`load_log(from_ledger=)`),
so its cost does not grow with the log; a log that changed under every attempt to read it (producers
committing) is "not yet": the reader reads it again after a short pause, within the read's deadline.

`position` is where the next record will come from; give it back as `start` to resume. Data loss: when
ledgers the reader still needed were truncated (or removed by retention), it raises DataLossError, or,
with fail_on_data_loss=False, skips to the earliest record still in the log.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Literal, TypeVar

from bkledger.client.errors import (
    DataLossError,
    InvalidOptionError,
    LogUpdateConflictError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core.meta import LogMetadata, Position
from bkledger.client.log.store import log_path, require_loaded, segment_of

if TYPE_CHECKING:
    import pyarrow as pa

    from bkledger.client.ledger_handle import LedgerHandle
    from bkledger.client.log.core.envelope import Record
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper
    from bkledger.client.meta.zksession import Watch

log = logging.getLogger("bkledger.logs")
StartSpec = Literal["earliest", "latest"] | Position
REFRESH_FALLBACK_S = 2.0
OFFLOAD_CHUNK = 4096                 # records taken from an offloaded file at a time
CHANGING_PAUSE_S = (0.005, 0.2)      # first and longest pause before reading again a log that kept changing
OPEN_LOAD_S = 30.0                   # how long opening a reader reads again a log that keeps changing
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class LogRecord:
    """One entry of the log. `payload`: its bytes as stored; `envelope`: the record envelope version its
    ledger names (0: bare values). `key`, `timestamp_us`, `headers` and `value` decode the envelope (as a
    LogWriter or the Spark writer wrote it); EnvelopeError if the entry does not decode, EnvelopeVersionError
    for a version this bkledger does not know."""

    position: Position
    payload: bytes
    envelope: int = 0

    @functools.cached_property
    def record(self) -> Record:
        from bkledger.client.log.core.envelope import decode_record

        return decode_record(self.payload, self.envelope)

    @property
    def key(self) -> bytes | None:
        return self.record.key

    @property
    def timestamp_us(self) -> int | None:
        """Microseconds since the epoch (None: the record has no timestamp, or the ledger no envelope)."""
        return self.record.timestamp_us

    @property
    def headers(self) -> tuple[tuple[str, bytes | None], ...] | None:
        return self.record.headers

    @property
    def value(self) -> bytes:
        return self.record.value

    @property
    def ledger_id(self) -> int:
        return self.position.ledger_id

    @property
    def entry_id(self) -> int:
        return self.position.entry_id


class _NotYet(Exception):
    """The log kept changing under every read of it until the read's deadline."""


class LogReader:
    """Reads one log from a start position; not thread-safe (one reader per thread)."""

    def __init__(self, bk: BookKeeper, name: str, start: StartSpec = "earliest", *,
                 fail_on_data_loss: bool = True, password: bytes = b"", poll_interval_s: float = 0.2) -> None:
        self._bk = bk
        self.name = name
        self.fail_on_data_loss = fail_on_data_loss
        self._password = password or None      # none given: each ledger's own (the log's key, issue 41)
        self._poll = max(0.01, poll_interval_s)
        self._segment: int | None = None            # the log's segment that held the ledger at the last load
        self._meta = self._opening_meta(start)
        self._ledger_id: int | None = None          # the ledger being read (None: before the first one)
        self._next = 0                               # next entry id to fetch from it
        self._rh: LedgerHandle | None = None
        self._offload_file: tuple[str, pa.Table] | None = None      # (file, rows) of offloaded history read
        self._where: lm.Located | None = None        # where the current ledger's entries are (compaction)
        self._buffer: collections.deque[LogRecord] = collections.deque()
        self._position: Position | None = None
        self._first_offset: int | None = None        # log-wide offset of the current ledger's entry 0
        self._closed = False
        self._log_changed = threading.Event()
        self._log_watch = bk.store.watch_data(log_path(bk.store, name), self._log_changed.set)
        self._ledger_changed = threading.Event()
        self._ledger_watch: tuple[int, Watch] | None = None
        self._last_refresh = 0.0
        self._deadline: float | None = None         # the deadline of the read under way
        self._seek(start)

    # ---- start --------------------------------------------------------------------------------
    def _opening_meta(self, start: StartSpec) -> LogMetadata:
        """The log as a reader starting at `start` needs it: from a position's ledger on, else all of it."""
        meta = self._load(time.monotonic() + OPEN_LOAD_S, start.ledger_id if isinstance(start, Position) else None)
        if meta is None:
            raise LogUpdateConflictError(f"log {self.name!r} changed under every read of it for {OPEN_LOAD_S:g} s; "
                                         "retry later")
        return meta

    def _seek(self, start: StartSpec) -> None:
        if start == "earliest":
            self._go(self._meta.ledgers[0].key if self._meta.ledgers else None, 0)
        elif start == "latest":
            self._seek_latest()
        elif isinstance(start, Position):
            verdict = lm.check_start(self._meta, start)
            if verdict == "truncated":
                self._data_lost(f"start position {start} is before the log's first ledger "
                                f"{self._meta.ledger_ids[:1]}: it was truncated")
            else:
                self._go(start.ledger_id, start.entry_id)
        else:
            raise TypeError(f"start must be 'earliest', 'latest' or a Position, got {start!r}")

    def _seek_latest(self) -> None:
        """After the last entry readable now: in the older of the last two ledgers still open (a rolling
        writer closes the previous ledger after adding the next), else after the last ledger's end."""
        tail = self._meta.ledger_ids[-2:]
        if not tail:
            self._go(None, 0)
            return
        for ledger_id in tail:
            rh = self._bk.open_ledger(ledger_id, self._password, recovery=False)
            if not rh.is_closed or ledger_id == tail[-1]:
                self._go(ledger_id, rh.last_entry_id + 1)
                self._rh = rh
                return

    def _go(self, ledger_id: int | None, entry_id: int) -> None:
        where = None if ledger_id is None else lm.locate(self._meta, ledger_id)
        moved = where is not None and (where.compacted or where.offloaded is not None)
        keep = self._rh if (moved and where is not None and where.offloaded is None and self._rh is not None
                            and self._rh.ledger_id == where.physical) else None
        self._ledger_id, self._next, self._rh = ledger_id, entry_id, keep
        self._where = where if moved else None
        self._first_offset = None
        self._note_first_offset()
        self._position = None if ledger_id is None else Position(ledger_id, entry_id)

    def _data_lost(self, what: str) -> None:
        if self.fail_on_data_loss:
            raise DataLossError(f"log {self.name!r}: {what}; restart from 'earliest' or open the reader with "
                                "fail_on_data_loss=False to skip to the earliest available record")
        log.warning("log %r: %s; skipping to the earliest available record", self.name, what)
        self._go(self._meta.ledgers[0].key if self._meta.ledgers else None, 0)

    # ---- public ---------------------------------------------------------------------------------
    @property
    def position(self) -> Position | None:
        """Where the next record comes from (None while the log has no ledger yet)."""
        if self._buffer:
            return self._buffer[0].position
        return self._position

    def read_next(self, timeout: float | None = None) -> LogRecord | None:
        """The next record, waiting up to `timeout` seconds (None: forever) for it; None on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._buffer and not self._fill(deadline):
            return None
        return self._take()

    def read(self, max_records: int | None = None, timeout: float | None = 1.0) -> Iterator[LogRecord]:
        """Records in order until `max_records` were given or none came within `timeout` seconds."""
        count = 0
        while max_records is None or count < max_records:
            rec = self.read_next(timeout)
            if rec is None:
                return
            count += 1
            yield rec

    def read_batch(self, max_records: int = 10_000, max_bytes: int | None = None,
                   timeout: float | None = 0.0) -> list[LogRecord]:
        """A batch for bulk consumers: waits up to `timeout` for the first record, then takes what is
        readable now, up to `max_records` records / `max_bytes` payload bytes (at least one record)."""
        out: list[LogRecord] = []
        size = 0
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(out) < max_records:
            if not self._buffer and not self._fill(deadline if not out else time.monotonic()):
                break
            if out and max_bytes is not None and size + len(self._buffer[0].payload) > max_bytes:
                break
            rec = self._take()
            out.append(rec)
            size += len(rec.payload)
        return out

    def ack(self, position: Position | None = None, *, backwards: bool = False) -> bool:
        """Acknowledge records to the reader's cursor: only a reader opened with `cursor=` has one
        (`client.log.cursors.CursorReader`); InvalidOptionError here."""
        raise InvalidOptionError(f"this reader of log {self.name!r} has no cursor to acknowledge to: open it with "
                                 "bk.open_log_reader(name, cursor='NAME')")

    def __iter__(self) -> Iterator[LogRecord]:
        return self.read(timeout=None)

    def close(self) -> None:
        self._closed = True
        self._buffer.clear()
        self._rh = None
        self._log_watch.cancel()
        if self._ledger_watch is not None:
            self._ledger_watch[1].cancel()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- machinery ------------------------------------------------------------------------------
    def _take(self) -> LogRecord:
        rec = self._buffer.popleft()
        self._position = Position(rec.ledger_id, rec.entry_id + 1)
        return rec

    def _fill(self, deadline: float | None) -> bool:
        """Fetch the next chunk into the buffer; False if nothing came before the deadline."""
        self._deadline = deadline
        try:
            return self._fill_until(deadline)
        except _NotYet:
            return False

    def _fill_until(self, deadline: float | None) -> bool:
        polled = False
        while True:
            if self._where is not None and self._where.offloaded is not None:     # in the log's table
                if self._next < (self._where.entries or 0):
                    self._fetch_offloaded(self._where)
                    return True
                if not self._advance(deadline):
                    return False
                continue
            if self._ledger_id is None or (self._rh is not None and self._finished(self._rh)):
                if not self._advance(deadline):
                    return False
                continue
            rh = self._handle()
            if rh is None:
                continue                      # its ledger was gone; the reader skipped ahead
            last = rh.last_entry_id if rh.is_closed else rh.last_add_confirmed
            if self._where is not None:                   # a ledger compacted into a part of this one
                last = (self._where.entries or 0) - 1
            if self._next <= last:
                if self._fetch(rh, last):
                    return True
                continue
            if rh.is_closed:
                continue
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                if polled:
                    return False
                polled = True
                rh.read_last_add_confirmed()
            else:
                wait = self._poll if remaining is None else min(remaining, self._poll)
                rh.wait_for_lac(self._next - 1, wait)
            if rh.last_add_confirmed < self._next and self._refresh_due(rh.ledger_id):
                self._guard(rh.refresh)       # learn that the writer closed it (R12: never fences)

    def _refresh_due(self, ledger_id: int) -> bool:
        """Whether the ledger's metadata may have changed: its watch fired, or the fallback time passed."""
        if self._ledger_watch is None or self._ledger_watch[0] != ledger_id:
            if self._ledger_watch is not None:
                self._ledger_watch[1].cancel()
            self._ledger_changed.set()
            self._ledger_watch = (ledger_id, self._bk.store.watch_ledger(
                ledger_id, lambda _md, _version: self._ledger_changed.set()))
        now = time.monotonic()
        if self._ledger_changed.is_set() or now - self._last_refresh >= REFRESH_FALLBACK_S:
            self._ledger_changed.clear()
            self._last_refresh = now
            return True
        return False

    def _finished(self, rh: LedgerHandle) -> bool:
        if self._where is not None:
            return self._next >= (self._where.entries or 0)
        return rh.is_closed and self._next > rh.last_entry_id

    def _handle(self) -> LedgerHandle | None:
        if self._rh is None:
            assert self._ledger_id is not None
            ledger_id = self._ledger_id if self._where is None else self._where.physical
            self._rh = self._guard(lambda: self._bk.open_ledger(ledger_id, self._password, recovery=False))
        return self._rh

    def _fetch(self, rh: LedgerHandle, last: int) -> bool:
        base = 0 if self._where is None else self._where.base      # positions stay the replaced ledger's
        chunk = self._guard(lambda: rh.read_chunk(base + self._next, base + last))
        if chunk is None:
            return False
        lid = self._ledger_id
        assert lid is not None
        version = lm.recorded_envelope(rh.metadata.custom_metadata) or 0
        self._buffer.extend(LogRecord(Position(lid, e - base), bytes(p), version)
                            for e, p in zip(chunk.entry_ids, chunk.payloads, strict=True))
        self._next = chunk.entry_ids[-1] + 1 - base
        return True

    def _fetch_offloaded(self, where: lm.Located) -> None:
        """The next records of an offloaded ledger, from its Parquet file (read once, kept while it is read)."""
        from bkledger.client.log import offload_store
        from bkledger.client.log.offload import join_payloads

        assert where.offloaded is not None and self._ledger_id is not None
        name = where.offloaded[0]
        if self._offload_file is None or self._offload_file[0] != name:
            self._offload_file = (name, offload_store.read_log_file(self._meta, name))
        rows = self._offload_file[1]
        start = where.base + self._next
        count = min((where.entries or 0) - self._next, OFFLOAD_CHUNK)
        chunk = rows.slice(start, count)
        offload_store.check_rows(self.name, name, chunk, self._ledger_id, self._next, count)
        payloads = join_payloads(chunk, where.envelope or 0)
        self._buffer.extend(LogRecord(Position(self._ledger_id, self._next + i), p) for i, p in enumerate(payloads))
        self._next += count

    def _guard(self, call: Callable[[], T]) -> T | None:
        """Run a read of the current ledger; if the ledger is gone from the log, that is data loss
        (DataLossError, or skip ahead and return None)."""
        try:
            return call()
        except (NoSuchLedgerError, NoSuchEntryError):
            self._meta = self._reloaded(self._deadline)
            if self._ledger_id in self._meta.logical_ids:
                where = lm.locate(self._meta, self._ledger_id)
                physical = self._ledger_id if self._where is None else self._where.physical
                if where is None or (where.physical == physical and where.offloaded is None):
                    raise
                self._go(self._ledger_id, self._next)     # compacted or offloaded meanwhile: read it there
                return None
            self._data_lost(f"ledger {self._ledger_id} was truncated while this reader was at {self._position}")
            return None

    def _advance(self, deadline: float | None) -> bool:
        """Move to the ledger after the current one (fully read) once the log lists it."""
        current = self._ledger_id
        if self._where is not None and current is not None:            # next in the same compacted ledger?
            following = lm.next_ledger(self._meta, current)
            where = lm.locate(self._meta, following) if following is not None else None
            if where is not None and where.physical == self._where.physical:
                self._go(following, 0)
                return True
        while True:
            old = self._meta
            self._log_changed.clear()           # a change after this read wakes the wait below
            try:
                self._meta = self._reloaded(deadline)
            except _NotYet:
                return False
            current = self._ledger_id
            if current is not None:
                self._note_first_offset(old)
                end = None if self._first_offset is None or self._rh is None else \
                    self._first_offset + (self._rh.last_entry_id + 1 if self._where is None else self._next)
                if lm.lost_after(old, self._meta, current, end):
                    self._data_lost(f"ledgers after ledger {current} were truncated before this reader read them")
                    return True
            following = (lm.next_ledger(self._meta, current) if current is not None
                         else (self._meta.ledgers[0].key if self._meta.ledgers else None))
            if following is not None:
                self._go(following, 0)
                return True
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self._log_changed.wait(REFRESH_FALLBACK_S if remaining is None else min(REFRESH_FALLBACK_S, remaining))

    def _reloaded(self, deadline: float | None) -> LogMetadata:
        """The log from the current ledger's segment on: what moving on needs (the ledgers after it, and
        it, to tell truncation from compaction and offload), read in a time that does not grow with the log.
        If the current ledger is gone the load holds the whole log (its first ledger is after it), so data
        loss skips to the log's earliest record. _NotYet if the log kept changing until `deadline`."""
        meta = self._load(deadline, self._ledger_id)
        if meta is None:
            raise _NotYet
        return meta

    def _load(self, deadline: float | None, from_ledger: int | None) -> LogMetadata | None:
        """The log from `from_ledger`'s segment on (None: all of it). A log that changed under every
        attempt of a load is not an error for a reader: it loads again after a pause (growing to
        CHANGING_PAUSE_S[1]) until `deadline` (None: none); at least once. None if the deadline came first."""
        pause = CHANGING_PAUSE_S[0]
        while True:
            try:
                loaded = require_loaded(self._bk.store, self.name, from_ledger=from_ledger, near=self._segment)
            except LogUpdateConflictError as exc:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    log.debug("log %r: %s; the read returns at its deadline", self.name, exc)
                    return None
                log.debug("log %r: %s; reading it again in %.3f s", self.name, exc, pause)
                time.sleep(pause if remaining is None else min(pause, remaining))
                pause = min(2 * pause, CHANGING_PAUSE_S[1])
                continue
            self._segment = None if from_ledger is None else segment_of(loaded, from_ledger)
            return loaded.meta

    def _note_first_offset(self, *metas: LogMetadata) -> None:
        """Remember the log-wide offset of the current ledger's first entry, once some snapshot knows it."""
        if self._first_offset is not None or self._ledger_id is None:
            return
        for meta in (*metas, self._meta):
            led = lm.locate(meta, self._ledger_id)
            if led is not None and led.first_position is not None:
                self._first_offset = led.first_position
                return
