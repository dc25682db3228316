"""Logs made of ledgers (R27-R30): named, ordered lists of ledgers in ZooKeeper, and their operations.

Mirrors BookKeeper's "ledgers to logs" recipe as DistributedLog and Pulsar's ManagedLedger implement it.
A log lives in the znode `{root}/logs/<name>` and its segment znodes (see `client.log.core.stored`) and
changes only by a transaction checked on the head's version (R27; `client.log.store`).
`LogsMixin` gives `BookKeeper` the log operations:

    w = bk.open_log_writer("orders")            # R28: fence the last two ledgers, new ledger, CAS
    pos = w.append(b"...")                      # Position(ledger_id, entry_id); rolls by count/bytes/age (R29)
    r = bk.open_log_reader("orders", start="earliest")   # never fences; tails the open ledger
    bk.truncate_log("orders", before=pos)       # R30: CAS the shorter list, then delete the ledgers
    bk.set_log_retention("orders", max_age_s=..., max_bytes=...); bk.start_log_retention(60.0)
    append_ledgers(bk, "orders", [12, 13], commit_marker=("query-1", 7))   # Spark sink commit
    append_ledgers_to_logs(bk, {"orders": [12], "refunds": [13]})       # several logs, one transaction

Retention runs where you start it: `bk.start_log_retention(interval_s)` starts a daemon thread that
applies every log's retention settings each interval (stop it with `.stop()`); `bk.apply_log_retention`
runs it once. Deleted ledgers lose their metadata at once; bookies reclaim the space at garbage collection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, cast

from bkledger.client.errors import (
    BKError,
    ClientClosedError,
    DataLossError,
    InvalidLogUpdateError,
    InvalidOptionError,
    InvalidPositionError,
    LogFencedError,
    LogNotFoundError,
    LogUpdateConflictError,
    LogWriterClosedError,
    NoSuchLedgerError,
    checked_password,
)
from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import offload as ol
from bkledger.client.log.core import outcome
from bkledger.client.log.core.meta import LogLedger, LogMetadata, Position, RetentionPolicy
from bkledger.client.log.core.names import check_log_name
from bkledger.client.log.cursors import CursorsMixin
from bkledger.client.log.ledgers import JOB_KEY, LOG_KEY, RollPolicy, log_ledger_password, seal_tail
from bkledger.client.log.liveness import check_live_writer
from bkledger.client.log.naming import creatable_log_name
from bkledger.client.log.store import (
    LoadedLog,
    delete_log_znodes,
    now_ms,
    read_log,
    require_loaded,
    require_log,
    update_log,
    update_logs,
)
from bkledger.client.meta import log_leases
from bkledger.client.meta.cluster_root import no_cluster_error
from bkledger.client.meta.errors import NoSuchNodeError
from bkledger.client.progress import NO_PROGRESS, ProgressSink
from bkledger.client.protocol.metadata import LedgerState

if TYPE_CHECKING:
    from bkledger.client.log.compaction import CompactionResult, CompactionTask
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper
    from bkledger.client.log.offload import OffloadResult
    from bkledger.client.log.producer import LogProducer
    from bkledger.client.log.reader import LogReader, StartSpec
    from bkledger.client.log.writer import LogWriter

log = logging.getLogger("bkledger.logs")

__all__ = [
    "DataLossError", "InvalidLogUpdateError", "InvalidPositionError", "LogFencedError", "LogLedger",
    "LogMetadata", "LogNotFoundError", "LogUpdateConflictError", "LogWriterClosedError", "LogsMixin",
    "Position", "RetentionPolicy", "RetentionTask", "append_ledgers", "append_ledgers_to_logs", "describe_log",
]


def _replaced_not_deleted(bk: BookKeeper, loaded: LoadedLog) -> list[int]:
    """Ledgers that compactions of the log replaced and that still wait for their grace period (listed in
    the head or in its `pending-*` child znodes): the log no longer lists them, but they are its data."""
    _, ids, znodes = cp.without_due(loaded.meta, _EVERYTHING_DUE_MS)
    znodes += [c for c in bk.store.children(loaded.path) if c.startswith(ol.UNLISTED_PREFIX)]    # offload's
    for znode in znodes:
        got = bk.store.get(f"{loaded.path}/{znode}")
        if got is not None:
            ids += cp.decode_pending(got[0])
    return ids


_EVERYTHING_DUE_MS = 2**62


# ---- ledgers a job wrote for a log and never committed --------------------------------------------
@dataclasses.dataclass(frozen=True)
class UncommittedLedger:
    ledger_id: int
    log: str
    job: str
    age_s: float


def uncommitted_job_ledgers(bk: BookKeeper, older_than_s: float, log_name: str | None = None
                            ) -> list[UncommittedLedger]:
    """Ledgers a job wrote for a log that the log does not list, created over `older_than_s` ago: what a
    job whose driver died between its tasks and its commit left behind. A job still running owns such
    ledgers too, so the age must exceed the longest job."""
    if log_name is not None:
        check_log_name(log_name, new=False)
    listed: dict[str, set[int]] = {}
    now = now_ms()
    out = []
    for ledger_id, md in bk.store.ledgers_with_metadata():
        job, target = md.custom_metadata.get(JOB_KEY), md.custom_metadata.get(LOG_KEY)
        age = (now - md.ctime_ms) / 1000.0
        if job is None or target is None or age < older_than_s:
            continue
        name = target.decode(errors="replace")
        if log_name is not None and name != log_name:
            continue
        if name not in listed:
            try:
                got = read_log(bk.store, name)
            except InvalidOptionError:    # not a log name: not ours to judge
                continue
            listed[name] = got[0].listed_ids if got is not None else set()
        if ledger_id not in listed[name]:
            out.append(UncommittedLedger(ledger_id, name, job.decode(errors="replace"), age))
    return out


def delete_uncommitted(bk: BookKeeper, found: Iterable[UncommittedLedger]) -> list[int]:
    """Delete them, each after checking again that its log still does not list it; the ids deleted."""
    gone = []
    for led in found:
        got = read_log(bk.store, led.log)
        if got is not None and led.ledger_id in got[0].listed_ids:
            continue
        with contextlib.suppress(NoSuchLedgerError):
            bk.delete_ledger(led.ledger_id)
            gone.append(led.ledger_id)
    return gone


def describe_log(meta: LogMetadata) -> list[str]:
    """Human-readable lines about a log (`bkledger log describe`)."""
    def show(value: int | None) -> str:
        return "-" if value is None else str(value)

    ret = meta.retention
    lines = [
        f"log                 {meta.name}",
        f"ledgers             {len(meta.ledgers)}",
        f"entries             {'unknown (last ledger open)' if meta.entries is None else meta.entries}",
        f"bytes (closed)      {meta.size}",
        f"retention           max_age_s={show_float(ret.max_age_s)} max_bytes={show(ret.max_bytes)}",
    ]
    if meta.committed_batches:
        lines.append(f"committed batches   {dict(sorted(meta.committed_batches.items()))}")
    lines += ol.describe_tiers(meta)
    lines.append(f"{'ledger_id':>12}{'first_pos':>12}{'entries':>10}{'bytes':>12}  state")
    for led in meta.ledgers:
        state = "closed" if led.sealed else "open"
        if led.offloaded is not None:
            state += f", offloaded to {led.offloaded[0]} (table version {led.offloaded[1]})"
        elif led.replaced:
            state += f", compacted: replaces {len(led.replaced)} ledgers {led.replaced[0][0]}..{led.replaced[-1][0]}"
        lines.append(f"{led.ledger_id:>12}{show(led.first_position):>12}{show(led.entries):>10}"
                     f"{show(led.size):>12}  {state}")
    return lines


def show_float(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


# ---- appending closed ledgers (the Spark sink's commit) ---------------------------------------
def append_ledgers(bk: BookKeeper, name: str, ledger_ids: Iterable[int], *,
                   commit_marker: tuple[str, int] | None = None, password: bytes = b"",
                   fence_live_writer: bool = False,
                   time_spans: Mapping[int, tuple[int, int]] | None = None) -> bool:
    """Append CLOSED ledgers to the log and record `commit_marker=(query_id, batch_id)`, in ONE CAS.

    Returns False, appending nothing, if the marker shows that batch (or a later one) is already
    committed. Creates the log if missing (in the same transaction). Like a new log writer (R28) it first
    fences and recovers the log's last two ledgers if they are still open; if the last one belongs to a
    live LogWriter (it holds the writer lease, `client.log.liveness`) it raises LiveLogWriterError
    instead, unless `fence_live_writer` asks to fence that writer out. The ledger ids must be above the
    log's last ledger id (InvalidLogUpdateError otherwise). `time_spans` maps a ledger id to the (min, max)
    timestamp in microseconds of its records, where the writer knew it: the log records it for reads by
    time. `append_ledgers_to_logs` does several logs.
    """
    return append_ledgers_to_logs(bk, {name: ledger_ids}, commit_marker=commit_marker, password=password,
                                  fence_live_writer=fence_live_writer, time_spans=time_spans)


def append_ledgers_to_logs(bk: BookKeeper, ledgers: Mapping[str, Iterable[int]], *,
                           commit_marker: tuple[str, int] | None = None, password: bytes = b"",
                           fence_live_writer: bool = False,
                           time_spans: Mapping[int, tuple[int, int]] | None = None) -> bool:
    """Append each log's CLOSED ledgers (and the marker to each log) in ONE ZooKeeper transaction that
    checks every log's head version: readers see all the logs with the job's ledgers or none of them.

    As `append_ledgers`, per log (missing logs are created in the transaction, live writers refused
    unless `fence_live_writer`, open tails sealed); False, appending nothing anywhere, if the marker
    shows the batch committed in any of the logs (`client.log.core.meta.with_job_appended`). A lost
    race on any log re-reads them all and tries again; if the logs then list every one of the ledgers
    (the transaction landed but ZooKeeper's answer was lost, `client.log.core.outcome`) it is done: True,
    nothing appended twice. InvalidLogNameError for a name that cannot name a
    log (`client.log.core.names`), PasswordTypeError for a password that is not bytes."""
    password = checked_password(password)
    for name in ledgers:
        creatable_log_name(bk, name)
    ids = {name: sorted(got) for name, got in ledgers.items()}
    every = [i for got in ids.values() for i in got]
    if len(set(every)) != len(every):
        raise InvalidLogUpdateError(f"append_ledgers: ledger ids {ids} repeat")
    envelopes: dict[int, int | None] = {}
    closed = {name: [_closed(bk, name, ledger_id, envelopes) for ledger_id in got] for name, got in ids.items()}
    appended = [False]

    def commit(metas: Mapping[str, LogMetadata]) -> dict[str, LogMetadata]:
        appended[0] = False
        if outcome.landed(metas, ids):   # this call's transaction landed, its answer was lost: done, once
            appended[0] = True
            return {}
        if commit_marker is not None and any(lm.batch_committed(m, *commit_marker) for m in metas.values()):
            return {}
        sealed = {}
        for name, meta in metas.items():
            check_live_writer(bk, meta, fence_live_writer)
            sealed[name] = seal_tail(bk, meta, password)
        new = lm.with_job_appended(sealed, closed, now_ms(), commit_marker, time_spans, envelopes)
        appended[0] = bool(new)
        return new

    update_logs(bk.store, sorted(ids), commit, create=True)    # the tails only: cost does not grow with the logs
    return appended[0]


def _closed(bk: BookKeeper, name: str, ledger_id: int, envelopes: dict[int, int | None]) -> lm.ClosedLedger:
    """The ledger as the log records it (its envelope version put in `envelopes`); it must be CLOSED."""
    md = bk.ledger_metadata(ledger_id)
    if md.state is not LedgerState.CLOSED:
        raise InvalidLogUpdateError(f"ledger {ledger_id} is not CLOSED: close it before appending it to "
                                    f"log {name!r}")
    envelopes[ledger_id] = lm.recorded_envelope(md.custom_metadata)
    return (ledger_id, md.last_entry_id, md.length, md.ctime_ms)


# ---- retention --------------------------------------------------------------------------------
class RetentionTask:
    """A daemon thread applying every log's retention settings each `interval_s` seconds."""

    def __init__(self, bk: BookKeeper, interval_s: float, names: Iterable[str] | None = None) -> None:
        if interval_s <= 0:
            raise InvalidOptionError(f"retention interval must be > 0 seconds, got {interval_s}")
        self._bk = bk
        self._interval = interval_s
        self._names = None if names is None else list(names)
        self._stop = threading.Event()
        self.runs = 0
        self.deleted: list[int] = []
        self._thread = threading.Thread(target=self._run, name="bkledger-log-retention", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.run_once()

    def run_once(self) -> None:
        try:
            names = self._names if self._names is not None else self._bk.list_logs()
        except ClientClosedError:
            self._stop.set()                        # the client went away: so does its retention task
            return
        except BKError as exc:
            log.warning("log retention: cannot list logs: %s", exc)
            return
        for name in names:
            if self._stop.is_set():
                return
            try:
                self.deleted += self._bk.apply_log_retention(name)
            except ClientClosedError:
                self._stop.set()
                return
            except BKError as exc:
                log.warning("log retention of %r failed (retried next round): %s", name, exc)
        self.runs += 1

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> RetentionTask:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bk(mixin: LogsMixin) -> BookKeeper:
    return cast("BookKeeper", mixin)


# ---- the BookKeeper methods -------------------------------------------------------------------
class LogsMixin(CursorsMixin):
    """Log operations of BookKeeper (open_log_writer, open_log_reader, truncate_log, list_logs, ...)."""

    def open_log_writer(self, name: str, *, ensemble_size: int = 3, write_quorum: int = 2,
                        ack_quorum: int = 2, password: bytes = b"", roll_entries: int | None = 50_000,
                        roll_bytes: int | None = 256 * 1024 * 1024, roll_age_s: float | None = 4 * 3600.0,
                        create: bool = True, digest_type: str = "crc32c", envelope: int = 0) -> LogWriter:
        """Become the writer of the log (R28): fence its last two ledgers, create a new ledger, CAS it into
        the list. LogFencedError if another writer changed the list meanwhile; LogNotFoundError if the log
        does not exist and create is False. A previous writer's further appends fail with LogFencedError.
        `envelope`: the record envelope version the writer's ledgers name in their custom metadata
        (`bkledger.envelope`, as the Spark writer's do) and its appends write (`client.log.records`): 0 bare
        values (the default), 1 key and timestamp (Spark reads `key`, `timestamp`), 2 headers too (readers
        before bkledger knew version 2 refuse such ledgers)."""
        from bkledger.client.log.writer import LogWriter

        bk = _bk(self)
        bk._check_open()
        password = checked_password(password)
        if create:
            creatable_log_name(bk, name)
        else:
            check_log_name(name, new=False)
        roll = RollPolicy(roll_entries, roll_bytes, roll_age_s)
        return LogWriter.open(bk, name, quorum=(ensemble_size, write_quorum, ack_quorum), password=password,
                              roll=roll, create=create, digest_type=digest_type, envelope=envelope)

    def open_log_producer(self, name: str, producer_id: str | None = None, *, max_records: int = 10_000,
                          max_bytes: int = 1024 * 1024, linger_ms: float = 5.0,
                          max_buffered_bytes: int = 32 * 1024 * 1024, delivery_timeout_s: float = 120.0,
                          ensemble_size: int = 3, write_quorum: int = 2, ack_quorum: int = 2,
                          password: bytes = b"", digest_type: str = "crc32c",
                          producer_expire_s: float = 86_400.0, max_producers: int = 1_000) -> LogProducer:
        """One of any number of producers of the log (`client.log.producer`): batches of up to `max_records`
        records / `max_bytes` bytes / `linger_ms` each go to a ledger of their own, committed into the log
        in one CAS with the producer's id and sequence (idempotent: a retried commit lands once). No fencing:
        other producers, Spark appends and sink commits write the log at the same time (a live LogWriter
        refuses them: LiveLogWriterError). `producer_id`: a stable id (default: a new one) lets a restarted
        producer continue its sequence; the log forgets a producer silent for `producer_expire_s` and keeps
        at most `max_producers`."""
        from bkledger.client.log.core.producers import Bounds
        from bkledger.client.log.producer import LogProducer, ProducerConfig

        bk = _bk(self)
        bk._check_open()
        creatable_log_name(bk, name)
        config = ProducerConfig(max_records=max_records, max_bytes=max_bytes, linger_ms=linger_ms,
                                max_buffered_bytes=max_buffered_bytes, delivery_timeout_s=delivery_timeout_s,
                                quorum=(ensemble_size, write_quorum, ack_quorum), digest_type=digest_type,
                                bounds=Bounds(int(producer_expire_s * 1000), max_producers))
        return LogProducer(bk, name, producer_id, config, checked_password(password))

    def open_log_reader(self, name: str, start: StartSpec = "earliest", *,
                        fail_on_data_loss: bool = True, password: bytes = b"",
                        poll_interval_s: float = 0.2, cursor: str | None = None) -> LogReader:
        """Read the log in order from `start` ("earliest", "latest" or a Position) without fencing: it tails
        the open ledger up to its LAC and follows new ledgers. A start whose ledgers were truncated raises
        DataLossError, or starts at the earliest available record if fail_on_data_loss is False.
        `cursor`: a cursor held by the cluster (`client.log.cursors`): the reader resumes from its
        acknowledged position (from `start` if the cursor is new) and `reader.ack(position)` stores it."""
        from bkledger.client.log.reader import LogReader

        bk = _bk(self)
        bk._check_open()
        check_log_name(name, new=False)
        password = checked_password(password)
        if cursor is not None:
            from bkledger.client.log.cursors import CursorReader

            return CursorReader(bk, name, cursor, start, fail_on_data_loss=fail_on_data_loss, password=password,
                                poll_interval_s=poll_interval_s)
        return LogReader(bk, name, start, fail_on_data_loss=fail_on_data_loss, password=password,
                         poll_interval_s=poll_interval_s)

    def list_logs(self) -> list[str]:
        bk = _bk(self)
        bk._check_open()
        return bk.store.children(bk.store.layout.logs)

    def log_metadata(self, name: str, *, from_ledger: int | None = None) -> LogMetadata:
        """The log's metadata: all of it, or with `from_ledger` (a ledger id positions use) only the ledgers
        from the segment holding it on (`first_index` ledgers come before; all of them if the log begins
        after it): what a reader at that ledger needs, read in a time that does not grow with the log."""
        bk = _bk(self)
        bk._check_open()
        check_log_name(name, new=False)
        try:
            if from_ledger is None:
                return require_log(bk.store, name)[0]
            return require_loaded(bk.store, name, from_ledger=from_ledger).meta
        except LogNotFoundError as exc:           # at a wrong root, say so (client.meta.cluster_root)
            missing = no_cluster_error(bk.store)
            if missing is None:
                raise
            raise LogNotFoundError(f"{exc}; {missing}") from None

    def truncate_log(self, name: str, before: Position, *, ignore_cursors: bool = False) -> list[int]:
        """Drop the ledgers entirely before `before` (R30): CAS the shorter list, then delete the dropped
        ledgers. The last ledger is never dropped, nor one a cursor has not acknowledged (unless
        `ignore_cursors`: those cursors are then marked lost). Returns the dropped ledger ids."""
        from bkledger.client.log.cursors import held_update

        bk = _bk(self)
        bk._check_open()
        check_log_name(name, new=False)
        dropped = held_update(bk, name, lambda meta: lm.truncated_before(meta, before), why="truncation",
                              ignore_cursors=ignore_cursors)
        bk.delete_ledgers(dropped)
        if dropped:
            log.info("log %r truncated before %s: deleted ledgers %s", name, before, dropped)
        return list(dropped)

    def set_log_retention(self, name: str, *, max_age_s: float | None = None,
                          max_bytes: int | None = None, cursor_max_lag_bytes: int | None | bool = False
                          ) -> LogMetadata:
        """Store the log's retention settings (None: no limit); applied by apply_log_retention / the task.
        `cursor_max_lag_bytes`: a cursor further behind than this (bytes of sealed ledgers) no longer holds
        retention or truncation back (None: every cursor holds; False, the default: unchanged)."""
        bk = _bk(self)
        bk._check_open()
        check_log_name(name, new=False)
        update_log(bk.store, name, lambda m: lm.with_retention(m, max_age_s, max_bytes), whole=False)
        if cursor_max_lag_bytes is not False:
            from bkledger.client.log.cursors import set_quota

            set_quota(bk.store, name, cursor_max_lag_bytes)
        return require_log(bk.store, name)[0]

    def apply_log_retention(self, name: str) -> list[int]:
        """Drop and delete the ledgers the log's retention settings no longer keep; their ids."""
        bk = _bk(self)
        bk._check_open()
        check_log_name(name, new=False)
        from bkledger.client.log.cursors import held_update

        dropped = held_update(bk, name, lambda meta: lm.retention_cut(meta, now_ms()), why="retention")
        bk.delete_ledgers(dropped)
        if dropped:
            log.info("log %r retention: deleted ledgers %s", name, dropped)
        return list(dropped)

    def start_log_retention(self, interval_s: float = 60.0,
                            names: Iterable[str] | None = None) -> RetentionTask:
        """Apply retention to every log (or `names`) every `interval_s` seconds in a daemon thread."""
        bk = _bk(self)
        bk._check_open()
        return RetentionTask(bk, interval_s, names)

    def compact_log(self, name: str, *, target_bytes: int = 64 * 1024 * 1024, min_ledgers: int = 4,
                    grace_s: float = 600.0, password: bytes = b"",
                    progress: ProgressSink = NO_PROGRESS) -> CompactionResult:
        """Rewrite runs of at least `min_ledgers` small CLOSED ledgers (together at most `target_bytes`) into
        one ledger each, same payloads in the same order, and swap them in with one CAS; positions keep
        working. The old ledgers are deleted after `grace_s` seconds (by a later run). `progress` hears of
        each run copied and may ask to stop between runs (`client.progress`). See `client.log.compaction`."""
        from bkledger.client.log.compaction import compact_log

        bk = _bk(self)
        bk._check_open()
        check_log_name(name, new=False)
        password = checked_password(password)
        return compact_log(bk, name, target_bytes=target_bytes, min_ledgers=min_ledgers, grace_s=grace_s,
                           password=password, progress=progress)

    def start_log_compaction(self, interval_s: float = 600.0, names: Iterable[str] | None = None, *,
                             target_bytes: int = 64 * 1024 * 1024, min_ledgers: int = 4,
                             grace_s: float = 600.0) -> CompactionTask:
        """Compact every log (or `names`) every `interval_s` seconds in a daemon thread; `.stop()` it."""
        from bkledger.client.log.compaction import CompactionTask

        bk = _bk(self)
        bk._check_open()
        return CompactionTask(bk, interval_s, names, target_bytes=target_bytes, min_ledgers=min_ledgers,
                              grace_s=grace_s)

    def offload_log(self, name: str, store_uri: str | None = None, *,
                    storage_options: Mapping[str, str] | None = None, max_file_bytes: int = 64 * 1024 * 1024,
                    password: bytes = b"") -> OffloadResult:
        """Write the log's sealed ledgers (all but its last two) as Parquet files into its Delta table at
        `store_uri` (a directory, `s3://...`; see `client.log.offload_store`), then point the log's records
        at them in ONE CAS. Idempotent and crash-safe: a rerun finishes a run a crash left. Positions keep
        working; `open_log_reader` reads the offloaded history from the table. See `client.log.offload`."""
        from bkledger.client.log.offload import offload_log

        bk = _bk(self)
        bk._check_open()
        return offload_log(bk, name, store_uri, storage_options=storage_options, max_file_bytes=max_file_bytes,
                           password=password)

    def append_ledgers(self, name: str, ledger_ids: Iterable[int], *,
                       commit_marker: tuple[str, int] | None = None, password: bytes = b"",
                       fence_live_writer: bool = False,
                       time_spans: Mapping[int, tuple[int, int]] | None = None) -> bool:
        bk = _bk(self)
        bk._check_open()
        return append_ledgers(bk, name, ledger_ids, commit_marker=commit_marker, password=password,
                              fence_live_writer=fence_live_writer, time_spans=time_spans)

    def log_ledger_password(self, name: str) -> bytes:
        """The password to create ledgers with that will be appended to log `name` (`append_ledgers`): the
        log's own key (the log is created, empty, if missing), or b"" for a log made before logs had keys."""
        bk = _bk(self)
        bk._check_open()
        return log_ledger_password(bk, name)

    def delete_log(self, name: str, *, delete_ledgers_too: bool = True) -> None:
        """Remove the log's znode (then, by default, its ledgers). Fence its writer first if it has one."""
        bk = _bk(self)
        bk._check_open()
        check_log_name(name, new=False)
        loaded = require_loaded(bk.store, name)
        replaced = _replaced_not_deleted(bk, loaded) if delete_ledgers_too else []
        try:
            delete_log_znodes(bk.store, loaded)
        except NoSuchNodeError:
            raise LogNotFoundError(f"log {name!r} was deleted meanwhile") from None
        log_leases.forget_log(bk.store, name)
        from bkledger.client.log.cursors import delete_all

        delete_all(bk.store, name)
        if delete_ledgers_too:
            bk.delete_ledgers(sorted({*loaded.meta.listed_ids, *replaced}))
