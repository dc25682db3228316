"""Offload of a log's sealed ledgers to its Delta table: one run, crash-safe and idempotent.

A run (`offload_log`) plans the files (`client.log.core.offload.plan`), reads each group's entries from
the bookies (as compaction copies them), writes them as Parquet files into the log's table
(`client.log.offload_store`), commits them as ONE Delta version carrying the application transaction
(`bkledger-offload:<log>`, run number), then swaps the log's records to point at the files in ONE CAS of
the log's head (the run number and table version recorded with them).

Crash at any step, then a rerun: before the commit, the run's files are invisible to Delta readers; the
rerun writes its own (each attempt names its files with a token of its own) and, once its commit landed,
deletes the files of the run that no commit names. After the commit (the table names the run), the rerun
reads the files' footers and swaps them in without writing anything; after the swap, the log records the
run and the next run starts. Records whose ledgers the log no longer holds as planned (truncated or
rewritten between the commit and the swap) are not swapped in, and their files are removed from the
table, so the table holds exactly the log's offloaded history. The bookie copies of offloaded ledgers
are left where they are: the log still lists their ids (in the offloaded records), and the swap names
the compacted ledgers it leaves unlisted in a child znode of the log (`offloaded-<run>`), so that
`delete_log` and a later deletion after a lag find them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from bkledger.client.errors import (
    BKError,
    InvalidOptionError,
    LogUpdateConflictError,
    MetadataVersionError,
    OffloadError,
)
from bkledger.client.log import offload_store as store_io
from bkledger.client.log.compaction import _payloads_in_order
from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import offload as ol
from bkledger.client.log.core.meta import LogLedger, LogMetadata
from bkledger.client.log.store import LOG_UPDATE_ATTEMPTS, commit_changes, now_ms, prepare_change, require_loaded
from bkledger.client.meta.zksession import ZkOp

if TYPE_CHECKING:
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper

log = logging.getLogger("bkledger.logs")
DEFAULT_FILE_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class OffloadResult:
    """What one run did: its number (the log's last run when there was nothing to do), the table and its
    version, the files swapped in (name, logical ledger ids), entries and bytes offloaded, files removed
    again (their ledgers changed before the swap), and whether it only finished a run a crash left."""

    run: int
    table_uri: str
    version: int | None
    files: list[tuple[str, list[int]]]
    entries: int = 0
    bytes: int = 0
    removed: list[str] = dataclasses.field(default_factory=list)
    resumed: bool = False

    def as_dict(self) -> dict[str, object]:
        return {"run": self.run, "table_uri": self.table_uri, "version": self.version,
                "files": [{"file": f, "ledgers": ids} for f, ids in self.files], "entries": self.entries,
                "bytes": self.bytes, "removed": self.removed, "resumed": self.resumed}


def offload_log(bk: BookKeeper, name: str, store_uri: str | None = None, *,
                storage_options: Mapping[str, str] | None = None, max_file_bytes: int = DEFAULT_FILE_BYTES,
                password: bytes = b"") -> OffloadResult:
    """Offload the log's sealed ledgers (see the module docstring). `store_uri`: where its table goes the
    first time (default `offload_store.default_store_uri()`); later runs use the one the log records
    (another one: InvalidOptionError). A failure of the table store (unreachable, refused, a file that is
    not one offload wrote, deltalake missing) is an OffloadError."""
    if max_file_bytes < 1:
        raise InvalidOptionError(f"max_file_bytes must be >= 1, got {max_file_bytes}")
    try:
        return _offload(bk, name, store_uri, storage_options, max_file_bytes, password)
    except ImportError as exc:
        raise OffloadError(f"offload needs the deltalake package ({exc}): pip install 'bkledger[delta]'") from exc
    except Exception as exc:
        if isinstance(exc, BKError) or not store_io.is_store_error(exc):
            raise
        raise OffloadError(f"log {name!r}: offload failed in its table store: {exc}; rerun the offload (it "
                           "resumes the run)") from exc


def _offload(bk: BookKeeper, name: str, store_uri: str | None, storage_options: Mapping[str, str] | None,
             max_file_bytes: int, password: bytes) -> OffloadResult:
    meta = require_loaded(bk.store, name, whole=True).meta
    before = ol.state(meta)
    uri = _store_uri(name, before, store_uri)
    table = store_io.table_store(uri, name, storage_options)
    run, app = before.run + 1, ol.app_id(name)
    done, dt = store_io.committed_run(table, app)
    if done is not None and done >= run:
        return _resume(bk, name, table, uri, run, dt)
    groups = ol.plan(meta, _envelopes(bk, meta), max_file_bytes)
    if not groups:
        return OffloadResult(before.run, table.uri, before.version, [])
    token = uuid.uuid4().hex[:8]
    written: list[tuple[str, int, str, LogLedger]] = []
    try:
        for group in groups:
            written.append(_write_group(bk, table, run, group, token, password))
        version = store_io.commit(table, dt, [(f, size, stats) for f, size, stats, _ in written], app, run)
    except BaseException:                       # this attempt's files (its token), written or half-written
        store_io.drop_own_uncommitted(table, [ol.file_name(run, group, token) for group in groups])
        raise
    store_io.drop_uncommitted(table, run, [f for f, _, _, _ in written])
    records = [dataclasses.replace(rec, offloaded=(f, version)) for f, _, _, rec in written]
    log.info("log %r: offload run %d committed %d files at table version %d", name, run, len(records), version)
    return _swap(bk, name, table, uri, run, version, records)


def _store_uri(name: str, before: ol.OffloadState, given: str | None) -> str:
    if before.uri is None:
        return given or store_io.default_store_uri()
    if given is not None and given.rstrip("/") != before.uri.rstrip("/"):
        raise InvalidOptionError(f"log {name!r} offloads to {before.uri!r}; it cannot move to {given!r} "
                                 "(give that store or none)")
    return before.uri


def _envelopes(bk: BookKeeper, meta: LogMetadata) -> dict[int, int | None]:
    """The envelope version of each candidate ledger: the log's record, else its custom metadata."""
    unknown = [led.ledger_id for led in ol.candidates(meta) if led.envelope is None]
    out: dict[int, int | None] = {}
    for ledger_id, got in zip(unknown, bk.store.read_ledgers_versioned(unknown) if unknown else [], strict=True):
        out[ledger_id] = None if got is None else lm.recorded_envelope(got[0].custom_metadata)
    return out


def _resume(bk: BookKeeper, name: str, table: store_io.TableStore, uri: str, run: int, dt: Any) -> OffloadResult:
    """The run's Delta commit landed but its swap did not: swap in the files it committed."""
    version = int(dt.version())
    names = [f for f in store_io.committed_files(dt) if ol.run_of_file(f) == run]
    store_io.drop_uncommitted(table, run, names)
    records = sorted((store_io.read_footer(table, f, version) for f in names), key=lambda rec: rec.key)
    log.info("log %r: offload run %d was committed (table version %d) but not swapped in: swapping %d files",
             name, run, version, len(records))
    return dataclasses.replace(_swap(bk, name, table, uri, run, version, records), resumed=True)


def _swap(bk: BookKeeper, name: str, table: store_io.TableStore, uri: str, run: int, version: int,
          records: Sequence[LogLedger]) -> OffloadResult:
    """ONE CAS of the log's head: its ledgers replaced by the records, the run recorded; then the files of
    records that could not be placed are removed from the table."""
    for attempt in range(LOG_UPDATE_ATTEMPTS):
        loaded = require_loaded(bk.store, name, whole=True)
        got = ol.with_offloaded(loaded.meta, records, run, uri, version)
        if got is None:
            raise OffloadError(f"log {name!r}: offload run {run} is stale (the log records run "
                               f"{ol.state(loaded.meta).run}): another offloader ran; nothing to do")
        new, skipped = got
        change = prepare_change(bk.store, loaded, new)
        gone = ol.unlisted(loaded.meta, new)
        if gone:                        # named in the same transaction: bookie copies never lose their owner
            path, data = f"{loaded.path}/{ol.unlisted_znode(run)}", cp.encode_pending(gone)
            bk.store.check_size(path, data, f"log {name!r}: the ledgers offload run {run} left unlisted")
            change = dataclasses.replace(change, ops=(*change.ops, ZkOp("create", path, data)))
        try:
            commit_changes(bk.store, [change])
            break
        except MetadataVersionError:
            time.sleep(min(0.002 * 2**attempt, 0.05))
    else:
        raise LogUpdateConflictError(f"log {name!r}: changed under offload run {run} {LOG_UPDATE_ATTEMPTS} times "
                                     "in a row; rerun the offload (it resumes this run)")
    removed = [rec.offloaded[0] for rec in skipped if rec.offloaded is not None]
    if removed:
        log.warning("log %r: offload run %d: the log changed under files %s; removing them from the table",
                    name, run, removed)
        store_io.remove(table, removed)
    placed = [rec for rec in records if rec not in skipped]
    files = [(rec.offloaded[0], [r[0] for r in rec.replaced]) for rec in placed if rec.offloaded is not None]
    return OffloadResult(run, table.uri, version, files, sum(rec.entries or 0 for rec in placed),
                         sum(rec.size or 0 for rec in placed), removed)


# ---- one file -------------------------------------------------------------------------------------------
def _write_group(bk: BookKeeper, table: store_io.TableStore, run: int, group: ol.Group, token: str,
                 password: bytes) -> tuple[str, int, str, LogLedger]:
    """Read the group's entries from the bookies and write its file; (file, size, stats, record)."""
    ids = [led.ledger_id for led in group.ledgers]        # no password given: each ledger's own (the log's key)
    payloads = [p for chunk in _payloads_in_order(bk, ids, password or None, {}) for p in chunk]
    if len(payloads) != group.entries:
        raise OffloadError(f"ledgers {[led.ledger_id for led in group.ledgers]}: read {len(payloads)} entries, "
                           f"the log records {group.entries}; nothing was offloaded")
    name = ol.file_name(run, group, token)
    record = ol.offloaded_record(group, name, 0, now_ms())
    size, stats = store_io.write_file(table, name, rows_of(group, payloads), record)
    return name, size, stats, record


def rows_of(group: ol.Group, payloads: Sequence[bytes]) -> pa.Table:
    """The file's rows: one per entry, in order, its position and (key, timestamp, value)."""
    ids: list[int] = []
    entries: list[int] = []
    offsets: list[int | None] = []
    for where in group.logical:
        count = where.entries or 0
        ids += [where.ledger_id] * count
        entries += range(count)
        offsets += [None] * count if where.first_position is None else \
            range(where.first_position, where.first_position + count)
    keys, stamps, values = split_payloads(payloads, group.envelope, ids, entries)
    return pa.table([pa.array(ids, pa.int64()), pa.array(entries, pa.int64()), pa.array(offsets, pa.int64()),
                     pa.array(keys, pa.binary()), pa.array(stamps, pa.timestamp("us", tz="UTC")),
                     pa.array(values, pa.binary())], schema=store_io.SCHEMA)


def split_payloads(payloads: Sequence[bytes], envelope: int, ids: Sequence[int], entries: Sequence[int]
                   ) -> tuple[list[bytes | None], list[int | None], list[bytes]]:
    """(keys, timestamps, values) of the payloads; OffloadError naming the entry if one would not come
    back byte for byte from its columns (`join_payloads`)."""
    if envelope == 0:
        return [None] * len(payloads), [None] * len(payloads), list(payloads)
    from bkledger.client.log.core import envelope as env

    keys: list[bytes | None] = []
    stamps: list[int | None] = []
    values: list[bytes] = []
    for i, payload in enumerate(payloads):
        try:
            key, stamp, value = env.decode(payload)
        except env.EnvelopeError as exc:
            raise OffloadError(f"entry {ids[i]}:{entries[i]}: {exc}; nothing was offloaded") from exc
        if env.encode(key, stamp, value) != payload:
            raise OffloadError(f"entry {ids[i]}:{entries[i]}: its record envelope has bits this format does not "
                               "keep; nothing was offloaded")
        keys.append(key)
        stamps.append(stamp)
        values.append(value)
    return keys, stamps, values


def join_payloads(rows: pa.Table, envelope: int) -> list[bytes]:
    """The entries' payloads, byte for byte as the bookies held them, from a file's rows."""
    values = rows.column("value").to_pylist()
    if envelope == 0:
        return values
    from bkledger.client.log.core import envelope as env

    keys = rows.column("key").to_pylist()
    stamps = rows.column("timestamp").cast(pa.int64()).to_pylist()
    return [env.encode(k, t, v) for k, t, v in zip(keys, stamps, values, strict=True)]
