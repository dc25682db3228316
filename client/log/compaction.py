"""Compaction of a log: rewrite runs of small CLOSED ledgers into one ledger each, swap them in with one
CAS, delete the old ledgers after a grace period; and the background task that runs it on a schedule.

Like Delta Lake's OPTIMIZE: readers see the same records at the same positions before and after (the log
records which old ledger ids each new ledger replaced and where each began: `client.log.core.
compaction`). The copy reads each old ledger without recovery (opened many at a time: `BookKeeper.
open_ledgers`; their first chunks many per bookie call: `read_chunks_async`) and adds their payloads in
bulk (`add_entries`), unchanged and in order (the key/timestamp envelope is inside the payload; the
ledger's custom metadata is carried over, without the job tag). Runs are swapped in as they are copied,
`SWAP_LEDGERS` replaced ledgers at a time; each swap is one ZooKeeper transaction checked on the log
head's version (the compare-and-swap): a writer's roll, a sink's commit or a truncation racing it makes
one side retry, never both land half. The swap also creates a child znode of the log naming the replaced
ledgers (`pending-...`; the head lists only these znodes and when each is due), so neither the head nor
one transaction grows with the log. Old ledgers wait there for `grace_s` so a reader in the middle of
one finishes; every compaction run (and `bk.start_log_compaction`) first deletes the ones whose grace
period ended. Progress goes to a `client.progress.ProgressSink`, which may ask to stop between runs; a
failure deletes the copies not yet swapped in.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from bkledger.client.errors import (
    BKError,
    ClientClosedError,
    InvalidOptionError,
    LogUpdateConflictError,
    MetadataVersionError,
)
from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core.meta import LogLedger
from bkledger.client.log.store import (
    LOG_UPDATE_ATTEMPTS,
    commit_changes,
    now_ms,
    prepare_change,
    require_loaded,
    require_log,
)
from bkledger.client.meta.zksession import ZkOp
from bkledger.client.progress import NO_PROGRESS, ProgressSink
from bkledger.client.protocol.metadata import LedgerMetadata
from bkledger.client.read_ahead import Read, chunks_ahead

if TYPE_CHECKING:
    from bkledger.client.ledger_handle import LedgerHandle
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper
    from bkledger.client.reader import ReadChunk

log = logging.getLogger("bkledger.logs")
JOB_KEY = "bkledger.job"
COMPACTED_KEY = "bkledger.compacted"      # custom metadata of a ledger compaction wrote
DEFAULT_TARGET_BYTES = 64 * 1024 * 1024
DEFAULT_MIN_LEDGERS = 4
DEFAULT_GRACE_S = 600.0
SWAP_LEDGERS = 4096                       # replaced ledgers swapped in per transaction (and pending znode)
PENDING_PREFIX = "pending-"               # child znodes of a log naming replaced ledgers to delete
OPEN_WINDOW = 2000                        # old ledgers opened together while copying (open_ledgers)
Known = dict[int, tuple[LedgerMetadata, int]]   # ledger id -> (metadata, version), read already
READ_GROUP = 256                          # old ledgers whose first chunks are asked for together while copying
COPY_BULK_BYTES = 4 << 20                 # payloads added together (add_entries) ...
COPY_BULK_ENTRIES = 8192                  # ... or this many


@dataclasses.dataclass(frozen=True)
class CompactionResult:
    """What one compaction did: (new ledger id, the listed ledger ids it replaced) per run swapped in,
    runs written but not swapped (the log changed under them; their ledger was deleted), ledgers deleted
    whose grace period had ended; `stopped`: the progress sink asked to stop (Ctrl-C) and runs were left
    for the next compaction (what was copied before was swapped in)."""

    compacted: list[tuple[int, list[int]]]
    skipped: int
    deleted: list[int]
    stopped: bool = False

    @property
    def replaced(self) -> int:
        return sum(len(ids) for _, ids in self.compacted)

    def as_dict(self) -> dict[str, object]:
        return {"compacted": [{"ledger_id": new, "replaced": old} for new, old in self.compacted],
                "replaced": self.replaced, "skipped": self.skipped, "deleted": self.deleted,
                "stopped": self.stopped}


def check_options(target_bytes: int, min_ledgers: int, grace_s: float) -> None:
    if target_bytes < 1:
        raise InvalidOptionError(f"target_bytes must be >= 1, got {target_bytes}")
    if min_ledgers < 2:
        raise InvalidOptionError(f"min_ledgers must be >= 2 (a run of one ledger has nothing to merge), "
                                 f"got {min_ledgers}")
    if grace_s < 0:
        raise InvalidOptionError(f"grace_s must be >= 0, got {grace_s}")


def compact_log(bk: BookKeeper, name: str, *, target_bytes: int = DEFAULT_TARGET_BYTES,
                min_ledgers: int = DEFAULT_MIN_LEDGERS, grace_s: float = DEFAULT_GRACE_S,
                password: bytes = b"", progress: ProgressSink = NO_PROGRESS) -> CompactionResult:
    """Plan the runs on the whole log, copy them in order and swap them in, SWAP_LEDGERS replaced ledgers
    per transaction (so each stays far below ZooKeeper's limit however long the log); between runs
    `progress.stop_requested()` may end it early (what was copied is swapped in first)."""
    check_options(target_bytes, min_ledgers, grace_s)
    deleted = delete_due(bk, name)
    meta, _ = require_log(bk.store, name)
    runs = cp.plan_runs(meta, target_bytes, min_ledgers)
    by_id = {led.ledger_id: led for led in meta.ledgers}
    progress.begin(sum(len(r.ledger_ids) for r in runs),
                   sum(by_id[i].size or 0 for r in runs for i in r.ledger_ids))
    batch: list[tuple[cp.Run, LogLedger]] = []
    try:
        swapped, written, stopped = _copy_and_swap(bk, name, runs, by_id, batch, min_ledgers, grace_s,
                                                   (password, lm.log_password(meta)), progress)
    except BaseException:
        _discard_unlisted(bk, name, [led.ledger_id for _, led in batch])
        raise
    if grace_s == 0 and swapped:
        deleted += delete_due(bk, name)
    if swapped:
        log.info("log %r: compacted %d ledgers into %s", name, sum(len(i) for _, i in swapped),
                 sorted(new for new, _ in swapped))
    return CompactionResult(swapped, written - len(swapped), deleted, stopped)


def _copy_and_swap(bk: BookKeeper, name: str, runs: Sequence[cp.Run], by_id: Mapping[int, LogLedger],
                   batch: list[tuple[cp.Run, LogLedger]], min_ledgers: int, grace_s: float,
                   passwords: tuple[bytes, bytes | None], progress: ProgressSink
                   ) -> tuple[list[tuple[int, list[int]]], int, bool]:
    """Copy the runs in order into `batch` and swap it in every SWAP_LEDGERS replaced ledgers and at the
    end (`batch` holds what is copied and not yet swapped). (swapped, copies written, stopped early).
    `passwords`: the one given (b"": none) and the log's own key (None: a log made before keys)."""
    password, key = passwords
    swapped: list[tuple[int, list[int]]] = []
    written = 0
    stopped = False
    for run in runs:
        if progress.stop_requested():
            stopped = True
            break
        parts, known = _same_kind(bk, run, min_ledgers, by_password=bool(password))
        for part in parts:
            elements = [by_id[i] for i in part.ledger_ids]
            new = cp.compacted_ledger(elements, copy_run(bk, elements, password, known, key), now_ms())
            batch.append((part, _with_envelope(new, known.get(elements[0].ledger_id))))
            written += 1
            if sum(len(r.ledger_ids) for r, _ in batch) >= SWAP_LEDGERS:
                swapped += _swap(bk, name, batch, grace_s)
                batch.clear()
        progress.advance(items=len(run.ledger_ids), nbytes=sum(by_id[i].size or 0 for i in run.ledger_ids))
    if batch:
        swapped += _swap(bk, name, batch, grace_s)
        batch.clear()
    return swapped, written, stopped


def _discard_unlisted(bk: BookKeeper, name: str, copies: Sequence[int]) -> None:
    """After a failure: delete the copies the log does not list (an error may follow a swap that landed,
    e.g. ZooKeeper lost mid-commit); if the log cannot be read, leave them and say so."""
    if not copies:
        return
    try:
        listed = require_log(bk.store, name)[0].listed_ids
        bk.delete_ledgers([i for i in copies if i not in listed])
    except BKError as exc:
        log.warning("log %r: compaction failed; could not check its copies %s (delete the unlisted ones): %s",
                    name, list(copies), exc)


def _swap(bk: BookKeeper, name: str, batch: Sequence[tuple[cp.Run, LogLedger]],
          grace_s: float) -> list[tuple[int, list[int]]]:
    """Swap the copied runs that are still in the log as they were into it, in ONE transaction checked on
    the head's version, with a new child znode naming the replaced ledgers for deletion after `grace_s`;
    retried on a lost race. Copies that could not be swapped are deleted. What was swapped."""
    swapped: list[tuple[int, list[int]]] = []
    for attempt in range(LOG_UPDATE_ATTEMPTS):
        loaded = require_loaded(bk.store, name, whole=True)
        out, swapped = loaded.meta, []
        for run, led in batch:
            changed = cp.with_compacted(out, run, led)
            if changed is not None:
                out = changed
                swapped.append((led.ledger_id, list(run.ledger_ids)))
        if not swapped:
            break
        znode = f"{PENDING_PREFIX}{uuid.uuid4().hex[:12]}"
        change = prepare_change(bk.store, loaded, cp.with_pending(out, znode, now_ms() + int(grace_s * 1000)))
        path, data = f"{loaded.path}/{znode}", cp.encode_pending([i for _, ids in swapped for i in ids])
        bk.store.check_size(path, data, f"log {name!r}: the ledgers this compaction replaced")
        try:
            commit_changes(bk.store, [dataclasses.replace(change, ops=(*change.ops, ZkOp("create", path, data)))])
            break
        except MetadataVersionError:
            time.sleep(min(0.002 * 2**attempt, 0.05))
    else:
        _discard_unlisted(bk, name, [led.ledger_id for _, led in batch])   # a lost answer may have landed
        raise LogUpdateConflictError(f"log {name!r}: changed under this compaction {LOG_UPDATE_ATTEMPTS} times in "
                                     "a row; its unlisted copies were deleted; retry later")
    # a transaction whose answer was lost (then MetadataVersionError) may have landed: the log read last
    # says which copies it lists (`client.log.core.outcome`); only the others are deleted
    swapped += [(led.ledger_id, list(run.ledger_ids)) for run, led in batch
                if led.ledger_id in loaded.meta.listed_ids and all(led.ledger_id != new for new, _ in swapped)]
    done = {new for new, _ in swapped}
    bk.delete_ledgers([led.ledger_id for _, led in batch if led.ledger_id not in done])
    return swapped


def _same_kind(bk: BookKeeper, run: cp.Run, min_ledgers: int, by_password: bool = True
               ) -> tuple[list[cp.Run], Known]:
    """The run cut where the ledgers' kind changes (custom metadata but the job tag: the envelope, the
    log; digest type, password), so a compacted ledger is read exactly as its parts were; and the
    metadata read for it (the copy opens the ledgers from it: no second ZooKeeper read each). Without
    `by_password` (no password given: each part is opened with its own, the copy gets the log's key) the
    password does not cut the run."""
    found = bk.store.read_ledgers_versioned(list(run.ledger_ids))
    known: Known = {}
    parts: list[list[int]] = []
    kind: object = None
    for ledger_id, got in zip(run.ledger_ids, found, strict=True):
        if got is None:                           # gone (truncated meanwhile): the swap would skip it
            kind = None
            parts.append([])
            continue
        md = got[0]
        known[ledger_id] = got
        this = (sorted((k, v) for k, v in md.custom_metadata.items() if k not in (JOB_KEY, COMPACTED_KEY)),
                md.digest_type, md.password if by_password else b"", md.compression)
        if not parts or this != kind:
            parts.append([])
            kind = this
        parts[-1].append(ledger_id)
    return [cp.Run(tuple(p)) for p in parts if len(p) >= max(2, min_ledgers)], known


def _with_envelope(new: LogLedger, first: tuple[LedgerMetadata, int] | None) -> LogLedger:
    """`new` with the envelope version its run's metadata names, when the log recorded none for the run
    (the run's ledgers share it: `_same_kind`)."""
    if new.envelope is not None or first is None:
        return new
    return dataclasses.replace(new, envelope=lm.recorded_envelope(first[0].custom_metadata))


def copy_run(bk: BookKeeper, elements: Sequence[LogLedger], password: bytes, known: Known | None = None,
             key: bytes | None = None) -> int:
    """A new CLOSED ledger with the entries of `elements`, in order; its id. The payloads go out in bulk
    adds of about COPY_BULK_BYTES (`add_entries`), not one add each. `known`: metadata (and versions)
    read already, by ledger id. With `password` (not empty) the elements are opened and the copy created
    with it; without, each element is opened with the password its metadata holds and the copy is created
    with the log's own `key` (or, for a log made before keys, the first element's password)."""
    known = known or {}
    first = known[elements[0].ledger_id][0] if elements[0].ledger_id in known \
        else bk.ledger_metadata(elements[0].ledger_id)
    custom = {k: v for k, v in first.custom_metadata.items() if k != JOB_KEY}
    custom[COMPACTED_KEY] = b"1"
    lh = bk.create_ledger(first.ensemble_size, first.write_quorum, first.ack_quorum,
                          digest_type=first.digest_type, password=password or key or first.password,
                          custom_metadata=custom,
                          compression=first.compression)
    try:
        pending: list[concurrent.futures.Future[int]] = []
        held: list[bytes] = []
        size = 0
        for payloads in _payloads_in_order(bk, [led.ledger_id for led in elements], password or None, known):
            held += payloads
            size += sum(map(len, payloads))
            if size >= COPY_BULK_BYTES or len(held) >= COPY_BULK_ENTRIES:
                pending.append(_add_all(lh, held))
                held, size = [], 0
            if len(pending) > 8:
                _wait(pending)
                pending = []
        if held:
            pending.append(_add_all(lh, held))
        _wait(pending)
        lh.close()
    except BaseException:
        with contextlib.suppress(BKError):
            lh.close()
        with contextlib.suppress(BKError):
            bk.delete_ledger(lh.ledger_id)
        raise
    return lh.ledger_id


def _add_all(lh: LedgerHandle, payloads: list[bytes]) -> concurrent.futures.Future[int]:
    offsets = [0]
    for p in payloads:
        offsets.append(offsets[-1] + len(p))
    return lh.add_entries(b"".join(payloads), offsets)


def _payloads_in_order(bk: BookKeeper, ledger_ids: Sequence[int], password: bytes | None, known: Known
                       ) -> Iterator[list[bytes]]:
    """Every entry of each CLOSED ledger, ledger by ledger in order (opened without recovery). The ledgers
    are opened OPEN_WINDOW at a time (from `known`, or `open_ledgers`: pipelined metadata reads) and their
    first chunks asked for READ_GROUP ledgers at a time, the next group while this one is copied
    (`read_chunks_async`: many small ledgers per bookie call). A ledger with no metadata raises
    NoSuchLedgerError (the copy fails and is deleted)."""
    for start in range(0, len(ledger_ids), OPEN_WINDOW):
        window = ledger_ids[start:start + OPEN_WINDOW]
        handles = bk.handles_for([known[i] for i in window if i in known], password)
        handles.update(bk.open_ledgers([i for i in window if i not in known], password, recovery=False))
        for ledger_id in window:
            if ledger_id not in handles:
                handles[ledger_id] = bk.open_ledger(ledger_id, password, recovery=False)

        groups = [window[i:i + READ_GROUP] for i in range(0, len(window), READ_GROUP)]

        def reads_of(number: int, groups: list[Sequence[int]] = groups,
                     handles: Mapping[int, LedgerHandle] = handles) -> list[Read | None]:
            return [(rh, 0, rh.last_entry_id) if (rh := handles[i]).last_entry_id >= 0 else None
                    for i in groups[number]]

        ahead = chunks_ahead(bk.read_chunks_async, len(groups), reads_of)
        try:
            for ledger_id, chunk in zip(window, ahead, strict=True):
                yield _rest(handles[ledger_id], chunk)
        finally:
            ahead.close()


def _rest(rh: LedgerHandle, ahead: concurrent.futures.Future[ReadChunk] | None) -> list[bytes]:
    """The ledger's entries: the chunk read ahead, then the others one by one."""
    out: list[bytes] = []
    position, last = 0, rh.last_entry_id
    while position <= last:
        chunk = ahead.result(120) if ahead is not None else rh.read_chunk(position, last)
        ahead = None
        out += [bytes(p) for p in chunk.payloads]
        position = chunk.entry_ids[-1] + 1
    return out


def _wait(futures: Iterable[concurrent.futures.Future[int]]) -> None:
    for fut in futures:
        fut.result(120)


def delete_due(bk: BookKeeper, name: str) -> list[int]:
    """Delete the replaced ledgers whose grace period ended: first take them off the log's pending list
    (and their child znodes) in one transaction checked on the head, then delete the ledgers."""
    for attempt in range(LOG_UPDATE_ATTEMPTS):
        loaded = require_loaded(bk.store, name, whole=False)
        new, due, znodes = cp.without_due(loaded.meta, now_ms())
        if not due and not znodes:
            return []
        drops = []
        for znode in znodes:
            got = bk.store.get(f"{loaded.path}/{znode}")
            if got is not None:
                due += cp.decode_pending(got[0])
                drops.append(ZkOp("delete", f"{loaded.path}/{znode}", version=got[1]))
        change = prepare_change(bk.store, loaded, new)
        try:
            commit_changes(bk.store, [dataclasses.replace(change, ops=(*change.ops, *drops))])
            break
        except MetadataVersionError:
            time.sleep(min(0.002 * 2**attempt, 0.05))
    else:
        raise LogUpdateConflictError(f"log {name!r}: changed under the deletion of replaced ledgers "
                                     f"{LOG_UPDATE_ATTEMPTS} times in a row; retry later")
    bk.delete_ledgers(due)
    return list(due)


class CompactionTask:
    """A daemon thread compacting every log (or `names`) each `interval_s` seconds."""

    def __init__(self, bk: BookKeeper, interval_s: float, names: Iterable[str] | None = None,
                 **options: float) -> None:
        if interval_s <= 0:
            raise InvalidOptionError(f"compaction interval must be > 0 seconds, got {interval_s}")
        check_options(int(options.get("target_bytes", DEFAULT_TARGET_BYTES)),
                      int(options.get("min_ledgers", DEFAULT_MIN_LEDGERS)), options.get("grace_s", DEFAULT_GRACE_S))
        self._bk, self._interval, self._options = bk, interval_s, options
        self._names = None if names is None else list(names)
        self._stop = threading.Event()
        self.runs = 0
        self.results: list[CompactionResult] = []
        self._thread = threading.Thread(target=self._run, name="bkledger-log-compaction", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.run_once()

    def run_once(self) -> None:
        try:
            names = self._names if self._names is not None else self._bk.list_logs()
            for name in names:
                if self._stop.is_set():
                    return
                try:
                    self.results.append(compact_log(
                        self._bk, name, target_bytes=int(self._options.get("target_bytes", DEFAULT_TARGET_BYTES)),
                        min_ledgers=int(self._options.get("min_ledgers", DEFAULT_MIN_LEDGERS)),
                        grace_s=float(self._options.get("grace_s", DEFAULT_GRACE_S))))
                except ClientClosedError:
                    raise
                except BKError as exc:
                    log.warning("log compaction of %r failed (retried next round): %s", name, exc)
        except ClientClosedError:
            self._stop.set()
            return
        self.runs += 1

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def __enter__(self) -> CompactionTask:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
