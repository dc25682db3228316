"""Many producers per log (issue 44 item 2): `bk.open_log_producer(name)`, as Kafka's idempotent producer.

    p = bk.open_log_producer("orders", max_records=1000, max_bytes=1 << 20, linger_ms=5)
    fut = p.send(b"value", key=b"k")              # Future[Position]: done once its ledger is in the log
    p.flush(); p.close()

A producer batches records (up to `max_records` records or `max_bytes` bytes, or what came within
`linger_ms` of the batch's first record: Kafka's batch.size and linger.ms), writes each batch to a ledger
of its own (created for the batch, closed after it), and commits that CLOSED ledger into the log in ONE
compare-and-swap, as a Spark sink's commit. Any number of producers, Spark appends and sink commits write
one log at once; none fences another. A batch becomes visible to readers when committed, in commit order.

Each commit carries the producer id and a sequence number, recorded in the log by the same CAS
(`client.log.core.producers`): a commit retried after an ambiguous ZooKeeper answer finds its sequence
recorded and appends nothing. The commit is retried (same sequence, same ledger) until it is known to be
in the log or not, up to `delivery_timeout_s`. A ledger that another commit overtook (R27: a log's ledger
ids increase; a ledger created before another that committed first cannot follow it) is replaced by a new
ledger, the batch written again from the producer's memory (`commit_batch(rewrite=...)`; a caller without
the batch gets a copy read from the bookies, `client.log.ledger_copy.copy_ledger`, as the Spark commit).

A producer's ledgers carry `bkledger.job` = `producer:<id>` and `bkledger.log` = the log: those of a
producer that died before committing them are what `bkledger shell sweepjobs` finds and deletes.
Records are written in the record envelope (`client.log.core.envelope`): version 1 (key, timestamp), or
version 2 (key, timestamp, headers) for a batch where any record has headers (its other records are
written in v2 too: a ledger has one version, which its custom metadata names and the log records).
`_enveloped` and `_Record.payload_as` are the places that build it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from bkledger.client.errors import (
    ClientTimeoutError,
    InvalidLogUpdateError,
    InvalidOptionError,
    LogUpdateConflictError,
    LogWriterClosedError,
    MetadataVersionError,
)
from bkledger.client.log.core import envelope as env
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import producers as pr
from bkledger.client.log.core.meta import LogMetadata, Position
from bkledger.client.log.ledger_copy import copy_ledger
from bkledger.client.log.ledgers import JOB_KEY, LOG_KEY, log_ledger_password, seal_tail
from bkledger.client.log.liveness import check_live_writer
from bkledger.client.log.store import load_log, now_ms, update_logs
from bkledger.client.meta.errors import MetadataStoreError
from bkledger.client.protocol.metadata import LedgerMetadata, LedgerState

if TYPE_CHECKING:
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper

log = logging.getLogger("bkledger.producer")

COMMIT_ATTEMPTS = 20            # rounds of "overtaken: copy the ledger, commit again"
Timestamp = int | datetime.datetime


@dataclasses.dataclass(frozen=True)
class ProducerConfig:
    """A producer's batching bounds and ledger settings (see `LogsMixin.open_log_producer`)."""

    max_records: int = 10_000
    max_bytes: int = 1024 * 1024
    linger_ms: float = 5.0
    max_buffered_bytes: int = 32 * 1024 * 1024
    delivery_timeout_s: float = 120.0
    quorum: tuple[int, int, int] = (3, 2, 2)
    digest_type: str = "crc32c"
    bounds: pr.Bounds = pr.Bounds()

    def check(self) -> None:
        for what in ("max_records", "max_bytes", "max_buffered_bytes"):
            if getattr(self, what) <= 0:
                raise InvalidOptionError(f"open_log_producer: {what} must be > 0, got {getattr(self, what)}")
        if self.linger_ms < 0 or self.delivery_timeout_s <= 0:
            raise InvalidOptionError("open_log_producer: linger_ms must be >= 0 and delivery_timeout_s > 0")
        if self.bounds.expire_ms <= 0 or self.bounds.max_producers <= 0:
            raise InvalidOptionError("open_log_producer: producer_expire_s and max_producers must be > 0")


@dataclasses.dataclass
class _Record:
    payload: bytes              # enveloped in `version`
    timestamp_us: int
    future: concurrent.futures.Future[Position]
    version: int = env.V1
    key: bytes | None = None
    value: bytes = b""

    def payload_as(self, version: int) -> bytes:
        """The record enveloped in `version` (a v1 record in a batch that also has headers: v2)."""
        if version == self.version:
            return self.payload
        return env.encode(self.key, self.timestamp_us, self.value, None, version=version)


def _enveloped(value: bytes, key: bytes | None, timestamp: Timestamp | None,
               headers: env.HeadersIn | None) -> tuple[bytes, int, int]:
    """The record as stored (envelope v1, or v2 if it has headers), its timestamp in microseconds (default:
    now) and that envelope version."""
    for what, got in (("value", value), ("key", key)):
        if got is not None and not isinstance(got, (bytes, bytearray, memoryview)):
            raise InvalidOptionError(f"send: {what} must be bytes, got {type(got).__name__}")
    if timestamp is None:
        ts_us = time.time_ns() // 1000
    elif isinstance(timestamp, datetime.datetime):   # naive: UTC, as LogWriter.append reads it
        moment = timestamp if timestamp.tzinfo is not None else timestamp.replace(tzinfo=datetime.UTC)
        ts_us = int(moment.timestamp() * 1_000_000)
    elif isinstance(timestamp, int) and not isinstance(timestamp, bool):
        ts_us = timestamp * 1000
    else:
        raise InvalidOptionError(f"send: timestamp is milliseconds since the epoch (int) or a datetime, got "
                                 f"{type(timestamp).__name__}")
    try:
        norm = env.normalized_headers(headers)
    except TypeError as exc:
        raise InvalidOptionError(f"send: {exc}") from None
    version = env.V1 if norm is None else env.V2
    return env.encode(None if key is None else bytes(key), ts_us, bytes(value), norm, version), ts_us, version


class LogProducer:
    """One of any number of producers of a log; thread-safe. Use `bk.open_log_producer`."""

    def __init__(self, bk: BookKeeper, name: str, producer_id: str | None, config: ProducerConfig,
                 password: bytes = b"") -> None:
        config.check()
        self.producer_id = producer_id if producer_id is not None else uuid.uuid4().hex
        why = pr.check_producer_id(self.producer_id)
        if why is not None:
            raise InvalidOptionError(f"open_log_producer: {why}")
        self.name = name
        self._bk = bk
        self._config = config
        self._password = log_ledger_password(bk, name, password)    # creates the log if missing
        loaded = load_log(bk.store, name, whole=False)
        self._sequence = pr.next_sequence(loaded.meta, self.producer_id) if loaded is not None else 0
        self._instance = uuid.uuid4().hex[:12]     # tells two producers sharing an id apart
        self._cond = threading.Condition()
        self._pending: list[_Record] = []
        self._pending_bytes = 0
        self._first_at = 0.0
        self._busy = False
        self._flushing = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"log-producer-{name}", daemon=True)
        self._thread.start()

    # ---- the user's side ----------------------------------------------------------------------------
    def send(self, value: bytes, key: bytes | None = None, timestamp: Timestamp | None = None,
             headers: env.HeadersIn | None = None) -> concurrent.futures.Future[Position]:
        """Queue a record; the future gives its Position once its batch's ledger is committed into the log
        (or the error that kept it out). `headers` (Kafka's record headers: a mapping or a list of (str,
        bytes or None) pairs, keys may repeat) make its batch's ledger envelope v2. Blocks while
        `max_buffered_bytes` are waiting (bounded by `delivery_timeout_s`: ClientTimeoutError then)."""
        payload, ts_us, version = _enveloped(value, key, timestamp, headers)
        future: concurrent.futures.Future[Position] = concurrent.futures.Future()
        deadline = time.monotonic() + self._config.delivery_timeout_s
        with self._cond:
            while not self._closed and self._pending_bytes + len(payload) > self._config.max_buffered_bytes \
                    and self._pending:
                if not self._cond.wait(deadline - time.monotonic()) and time.monotonic() >= deadline:
                    raise ClientTimeoutError(f"producer {self.producer_id} of log {self.name!r}: its buffer "
                                             "(max_buffered_bytes) stayed full for delivery_timeout_s; the "
                                             "log's commits are too slow")
            if self._closed:
                raise LogWriterClosedError(f"producer {self.producer_id} of log {self.name!r} is closed")
            if not self._pending:
                self._first_at = time.monotonic()
            self._pending.append(_Record(payload, ts_us, future, version,
                                         None if key is None else bytes(key), bytes(value)))
            self._pending_bytes += len(payload)
            self._cond.notify_all()
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Commit every record sent so far now (not waiting for linger_ms); returns once all are settled."""
        limit = self._config.delivery_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + limit
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._pending or self._busy:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._thread.is_alive():
                        raise ClientTimeoutError(f"producer {self.producer_id} of log {self.name!r}: "
                                                 f"flush did not finish within {limit} s")
                    self._cond.wait(left)
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop: later sends raise LogWriterClosedError."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join(self._config.delivery_timeout_s)

    def __enter__(self) -> LogProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the batching thread ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            try:
                self._write_and_commit(batch)
            except BaseException as exc:    # noqa: BLE001 - every record's future gets the error, no thread dies silently
                log.warning("producer %s of log %r: a batch of %d records failed: %s", self.producer_id,
                            self.name, len(batch), exc)
                for record in batch:
                    if not record.future.done():
                        record.future.set_exception(exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _next_batch(self) -> list[_Record] | None:
        cfg = self._config
        with self._cond:
            while True:
                if self._pending:
                    due = self._first_at + cfg.linger_ms / 1000.0
                    full = len(self._pending) >= cfg.max_records or self._pending_bytes >= cfg.max_bytes
                    if full or self._flushing or self._closed or time.monotonic() >= due:
                        return self._take(cfg)
                    self._cond.wait(max(0.0, due - time.monotonic()))
                elif self._closed:
                    return None
                else:
                    self._cond.wait()

    def _take(self, cfg: ProducerConfig) -> list[_Record]:
        count, size = 0, 0
        for record in self._pending:
            if count and (count >= cfg.max_records or size + len(record.payload) > cfg.max_bytes):
                break
            count, size = count + 1, size + len(record.payload)
        batch, self._pending = self._pending[:count], self._pending[count:]
        self._pending_bytes -= size
        self._first_at = time.monotonic()
        self._busy = True
        self._cond.notify_all()
        return batch

    def _write_and_commit(self, batch: list[_Record]) -> None:
        written = self._write(batch)
        stamps = [r.timestamp_us for r in batch]
        sequence, self._sequence = self._sequence, self._sequence + 1
        commit = Commit(self.name, self.producer_id, sequence, self._password, self._instance,
                        self._config.bounds, (min(stamps), max(stamps)))
        final = commit_batch(self._bk, commit, written.ledger_id, self._config.delivery_timeout_s,
                             written, lambda: self._write(batch))
        for entry_id, record in enumerate(batch):
            record.future.set_result(Position(final, entry_id))

    def _write(self, batch: list[_Record]) -> Written:
        """A new ledger holding the batch, CLOSED: what the commit lists of it."""
        e, qw, qa = self._config.quorum
        version = max(r.version for r in batch)         # V2 if any record has headers
        custom = {**env.custom_metadata(version), JOB_KEY: f"producer:{self.producer_id}".encode(),
                  LOG_KEY: self.name.encode()}
        lh = self._bk.create_ledger(e, qw, qa, digest_type=self._config.digest_type, password=self._password,
                                    custom_metadata=custom)
        try:
            payloads = [r.payload_as(version) for r in batch]
            offsets = [0]
            for payload in payloads:
                offsets.append(offsets[-1] + len(payload))
            lh.add_entries(b"".join(payloads), offsets).result(self._config.delivery_timeout_s)
            lh.close()
        except BaseException:
            with contextlib.suppress(Exception):
                lh.close()
            with contextlib.suppress(Exception):
                self._bk.delete_ledger(lh.ledger_id)
            raise
        return _written(lh.metadata)


# ---- the commit ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Commit:
    """One producer commit: which log, whose (id, instance), which sequence, and what the log records."""

    name: str
    producer_id: str
    sequence: int
    password: bytes
    instance: str = ""
    bounds: pr.Bounds = pr.Bounds()
    time_span: tuple[int, int] | None = None


@dataclasses.dataclass(frozen=True)
class Written:
    """A CLOSED ledger a producer wrote, as its handle knows it (no ZooKeeper read to list it)."""

    closed: lm.ClosedLedger
    envelope: int | None

    @property
    def ledger_id(self) -> int:
        return self.closed[0]


def _written(md: LedgerMetadata) -> Written:
    """A CLOSED ledger's metadata as a commit lists it."""
    if md.state is not LedgerState.CLOSED:
        raise InvalidLogUpdateError(f"ledger {md.ledger_id} is not CLOSED: a producer commits closed ledgers only")
    return Written((md.ledger_id, md.last_entry_id, md.length, md.ctime_ms), lm.recorded_envelope(md.custom_metadata))


def commit_batch(bk: BookKeeper, commit: Commit, ledger_id: int, timeout_s: float = 120.0,
                 written: Written | None = None, rewrite: Callable[[], Written] | None = None) -> int:
    """Commit the producer's CLOSED ledger as its commit `sequence`, exactly once; the id of the ledger the
    log lists for it (the ledger itself, or a new one if another commit overtook it: `rewrite()`, the batch
    written again from memory, else a copy read from the bookies). Idempotent: called again for the same
    commit (a retry) it appends nothing and returns that id. The ledgers it does not list are deleted,
    unless ZooKeeper's answer stays unknown (MetadataStoreError): then `sweepjobs` does. `written`: the
    ledger as its writer knows it (else its metadata is read)."""

    current, made = ledger_id, []                     # the ledger tried now; the new ledgers made
    known = written if written is not None and written.ledger_id == ledger_id else None
    deadline = time.monotonic() + timeout_s
    try:
        for _ in range(COMMIT_ATTEMPTS):
            try:
                listed = _commit_once(bk, commit, current, deadline, known)
            except InvalidLogUpdateError:
                got = load_log(bk.store, commit.name, whole=False)
                if got is None or not lm.late_ledgers({commit.name: got.meta}, {commit.name: [current]}):
                    raise
                known = rewrite() if rewrite is not None else None
                current = known.ledger_id if known is not None else copy_ledger(bk, current, commit.password)
                made.append(current)
                log.info("producer %s: ledger %d was overtaken by another commit into log %r: %s to %d",
                         commit.producer_id, ledger_id, commit.name, "rewritten" if known else "copied", current)
                continue
            bk.delete_ledgers([i for i in [ledger_id, *made] if i != listed])
            return listed
        raise LogUpdateConflictError(f"log {commit.name!r}: producer {commit.producer_id}'s commit "
                                     f"{commit.sequence} was overtaken {COMMIT_ATTEMPTS} times; nothing of it "
                                     "was appended")
    except MetadataStoreError:
        raise                                        # ZooKeeper unreachable: unknown; `sweepjobs` decides later
    except BaseException:
        listed_after = _listed_for(bk, commit)
        if listed_after is not None:                 # the last answer lost was a commit after all
            bk.delete_ledgers([i for i in [ledger_id, *made] if i != listed_after])
            return listed_after
        bk.delete_ledgers([ledger_id, *made])        # known not committed: none of them is listed
        raise


def _listed_for(bk: BookKeeper, commit: Commit) -> int | None:
    """The ledger the log lists for the commit if it is in the log, else None."""
    got = load_log(bk.store, commit.name, whole=False)
    try:
        done = pr.committed(got.meta, commit.producer_id, commit.sequence, commit.instance) if got else None
    except pr.ProducerConflictError:
        return None                                  # another producer's commit: not this one
    return None if done is None else done.ledger_id


def _commit_once(bk: BookKeeper, commit: Commit, ledger_id: int, deadline: float,
                 known: Written | None = None) -> int:
    """One CAS loop of the commit, repeated while ZooKeeper's answer is unknown (the commit is idempotent,
    so a repeat after a lost answer is safe). The ledger id the log lists for the commit."""
    if known is None:
        known = _written(bk.ledger_metadata(ledger_id))
    closed = known.closed
    envelopes = {ledger_id: known.envelope}
    spans = {ledger_id: commit.time_span} if commit.time_span is not None else None
    listed = [ledger_id]
    name = commit.name

    def change(metas: Mapping[str, LogMetadata]) -> dict[str, LogMetadata]:
        meta = metas[name]
        done = pr.committed(meta, commit.producer_id, commit.sequence, commit.instance)
        if done is not None:
            listed[0] = done.ledger_id
            return {}
        check_live_writer(bk, meta, False)
        sealed = seal_tail(bk, meta, commit.password)
        new = pr.with_producer_commit(sealed, commit.producer_id, commit.sequence, [closed], now_ms(),
                                      commit.bounds, commit.instance, spans, envelopes)
        listed[0] = ledger_id
        return {name: new} if new is not None else {}

    while True:
        try:
            update_logs(bk.store, [name], change, create=True)
            return listed[0]
        except (MetadataStoreError, MetadataVersionError) as exc:
            if time.monotonic() >= deadline:
                raise
            log.warning("producer %s: commit %d into log %r: ZooKeeper's answer is unknown (%s); asking again",
                        commit.producer_id, commit.sequence, name, exc)
