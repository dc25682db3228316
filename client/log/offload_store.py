"""The Delta table of a log's offloaded history: where it is (a store URI and the log's name), its
Parquet files (written, read back as log records) and its Delta commits (with the offload run as an
application transaction, as Spark's Delta sink does).

Store URIs: a local or mounted directory (a path or `file://`), `s3://bucket/prefix` (query options
`endpoint_override=HOST:PORT`, `scheme=http|https`, `region=`; credentials the usual AWS way: the
environment, `~/.aws`, instance metadata, or `storage_options` such as `AWS_ACCESS_KEY_ID`), or any URI
`pyarrow.fs.FileSystem.from_uri` and delta-rs both understand. The log's table is the folder
`core.offload.table_dir(name)` below it.

File schema (one row per entry, in log order): `ledger_id`, `entry_id` (the entry's Position), `offset`
(its log-wide offset, null if unknown), `key`, `timestamp` (UTC, microseconds; null when the record has
none), `value`. A ledger written without the record envelope has null key and timestamp and its payload
as value. The footer's key-value metadata (`FOOTER_KEY`) holds the log's record of the file, so a rerun
after a crash can swap committed files in without rewriting them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
import urllib.parse
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bkledger.client.errors import OffloadError
from bkledger.client.log.core import offload as ol
from bkledger.client.log.core.meta import LogLedger

FOOTER_KEY = b"bkledger.offload"
SCHEMA = pa.schema([
    pa.field("ledger_id", pa.int64(), nullable=False),
    pa.field("entry_id", pa.int64(), nullable=False),
    pa.field("offset", pa.int64()),
    pa.field("key", pa.binary()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("value", pa.binary(), nullable=False),
])
_STAT_COLUMNS = ("ledger_id", "entry_id", "offset")


@dataclasses.dataclass(frozen=True)
class TableStore:
    """One log's table: `fs` and `root` (its folder on `fs`) for files, `uri` and `options` for delta-rs."""

    fs: pafs.FileSystem
    root: str
    uri: str
    options: Mapping[str, str]

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"


def default_store_uri() -> str:
    """Where tables go when neither the call nor the log names a store: $BKLEDGER_OFFLOAD_URI, else
    ~/.bkledger/offload."""
    return os.environ.get("BKLEDGER_OFFLOAD_URI") or os.path.join(os.path.expanduser("~"), ".bkledger", "offload")


def table_store(store_uri: str, log_name: str, storage_options: Mapping[str, str] | None = None) -> TableStore:
    """The log's table below `store_uri` (see the module docstring). OffloadError if the URI is not usable."""
    options = dict(storage_options or {})
    parsed = urllib.parse.urlsplit(store_uri)
    folder = ol.table_dir(log_name)
    try:
        if parsed.scheme in ("", "file"):
            base = os.path.abspath(parsed.path if parsed.scheme == "file" else store_uri)
            root = f"{base}/{folder}"
            return TableStore(pafs.LocalFileSystem(), root, root, options)
        if parsed.scheme == "s3":
            return _s3_store(parsed, folder, options)
        fs, base = pafs.FileSystem.from_uri(store_uri)
    except (ValueError, OSError, pa.ArrowException) as exc:
        raise OffloadError(f"offload store {store_uri!r} is not usable: {exc}") from exc
    clean = urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path.rstrip("/"), "", ""))
    return TableStore(fs, f"{base.rstrip('/')}/{folder}", f"{clean}/{folder}", options)


def _s3_store(parsed: urllib.parse.SplitResult, folder: str, options: dict[str, str]) -> TableStore:
    query = dict(urllib.parse.parse_qsl(parsed.query))
    endpoint, scheme = query.get("endpoint_override"), query.get("scheme", "https")
    if endpoint and "://" in endpoint:
        scheme, endpoint = endpoint.split("://", 1)
    upper = {k.upper(): v for k, v in options.items()}
    fs = pafs.S3FileSystem(access_key=upper.get("AWS_ACCESS_KEY_ID"), secret_key=upper.get("AWS_SECRET_ACCESS_KEY"),
                           session_token=upper.get("AWS_SESSION_TOKEN"), region=query.get("region") or
                           upper.get("AWS_REGION"), endpoint_override=endpoint, scheme=scheme)
    if endpoint:
        options.setdefault("AWS_ENDPOINT_URL", f"{scheme}://{endpoint}")
        if scheme == "http":
            options.setdefault("AWS_ALLOW_HTTP", "true")
    if query.get("region"):
        options.setdefault("AWS_REGION", query["region"])
    base = f"{parsed.netloc}{parsed.path.rstrip('/')}"
    return TableStore(fs, f"{base}/{folder}", f"s3://{base}/{folder}", options)


# ---- Parquet ------------------------------------------------------------------------------------------
def write_file(store: TableStore, name: str, rows: pa.Table, record: LogLedger) -> tuple[int, str]:
    """Write one file of the table (not yet committed: invisible to Delta readers); (its size, its
    Delta stats JSON)."""
    footer = json.dumps(ol.record_json(record), separators=(",", ":")).encode()
    rows = rows.replace_schema_metadata({FOOTER_KEY: footer})
    store.fs.create_dir(store.root, recursive=True)
    pq.write_table(rows, store.path(name), filesystem=store.fs, compression="zstd")
    size = store.fs.get_file_info(store.path(name)).size
    return int(size or 0), _stats(rows)


def _stats(rows: pa.Table) -> str:
    import pyarrow.compute as pc

    mins: dict[str, Any] = {}
    maxes: dict[str, Any] = {}
    for column in _STAT_COLUMNS:
        got = pc.min_max(rows[column]).as_py()
        if got["min"] is not None:
            mins[column], maxes[column] = got["min"], got["max"]
    nulls = {column: rows[column].null_count for column in rows.column_names}
    return json.dumps({"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxes, "nullCount": nulls})


def read_rows(store: TableStore, name: str) -> pa.Table:
    """All rows of one of the table's files."""
    return pq.read_table(store.path(name), filesystem=store.fs, schema=SCHEMA)


def read_footer(store: TableStore, name: str, version: int) -> LogLedger:
    meta = pq.read_metadata(store.path(name), filesystem=store.fs).metadata or {}
    if FOOTER_KEY not in meta:
        raise ValueError(f"offloaded file {name} has no {FOOTER_KEY.decode()} footer")
    return ol.record_from_json(json.loads(meta[FOOTER_KEY]), name, version)


def drop_uncommitted(store: TableStore, run: int, committed: Sequence[str]) -> None:
    """Delete the files of `run` that the table does not name (`committed`: those it does), left by an
    attempt that crashed or lost the commit. Called once the run's commit landed: no attempt at it can
    commit after that (its snapshot is older than a commit of the same application transaction)."""
    try:
        found = store.fs.get_file_info(pafs.FileSelector(store.root, allow_not_found=True))
    except (OSError, pa.ArrowException):
        return
    for info in found:
        name = info.path.rsplit("/", 1)[-1]
        if ol.run_of_file(name) == run and name not in committed:
            _delete(store, info.path)


def _delete(store: TableStore, path: str) -> None:
    """Delete a file; one that is gone already (another attempt deleted it) is fine."""
    with contextlib.suppress(FileNotFoundError):
        store.fs.delete_file(path)


def drop_own_uncommitted(store: TableStore, names: Sequence[str]) -> None:
    """After a failed attempt: delete the files it wrote that the table does not name (if the table
    cannot be read, they stay: a file a commit names is never deleted)."""
    try:
        dt = _table(store)
        committed = set(committed_files(dt)) if dt is not None else set()
        for name in names:
            if name not in committed:
                _delete(store, store.path(name))
    except Exception as exc:                # noqa: BLE001 - the attempt's own error is the one to raise
        import logging

        logging.getLogger("bkledger.logs").warning("offload: could not delete the uncommitted files %s of %s: %s",
                                                   list(names), store.uri, exc)


def is_store_error(exc: BaseException) -> bool:
    """Whether an error came from the table store (pyarrow's filesystems, delta-rs, a foreign file)."""
    if isinstance(exc, (OSError, ValueError, pa.ArrowException)):
        return True
    try:
        from deltalake.exceptions import DeltaError
    except ImportError:
        return False
    return isinstance(exc, DeltaError)


# ---- Delta --------------------------------------------------------------------------------------------
def _table(store: TableStore) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(store.uri, storage_options=dict(store.options)) \
        if DeltaTable.is_deltatable(store.uri, storage_options=dict(store.options)) else None


def committed_run(store: TableStore, app: str) -> tuple[int | None, Any]:
    """(the last run the table's commits name for `app`, the table object read), the table created empty
    first if there is none. Runs are committed only on such an object (`commit`): two creates racing may
    both land, a create with files would not be checked against a concurrent run (both would land)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    dt = _table(store)
    if dt is None:
        try:
            DeltaTable.create(store.uri, SCHEMA, mode="ignore", storage_options=dict(store.options))
        except DeltaError as exc:
            if _table(store) is None:
                raise OffloadError(f"the offload table at {store.uri!r} cannot be created: {exc}") from exc
        dt = _table(store)
        assert dt is not None
    return dt.transaction_version(app), dt


def committed_files(dt: Any) -> list[str]:
    """The file names (relative to the table root) of the table's current version."""
    return [urllib.parse.unquote(uri.rsplit("/", 1)[-1]) for uri in dt.file_uris()]


def commit(store: TableStore, dt: Any, files: Sequence[tuple[str, int, str]], app: str, run: int) -> int:
    """Commit the written files (name, size, stats) as one Delta version carrying (app, run); built on
    the table object `dt` that was checked (`committed_run`), so a commit of the same app landing meanwhile fails it
    (deltalake's conflict check). The new version; OffloadError if the commit failed."""
    from deltalake import CommitProperties, Transaction
    from deltalake.exceptions import CommitFailedError, DeltaError
    from deltalake.transaction import AddAction

    now = int(time.time() * 1000)
    adds = [AddAction(name, size, {}, now, True, stats) for name, size, stats in files]
    props = CommitProperties(app_transactions=[Transaction(app, run)],
                             custom_metadata={"bkledger.offload.run": str(run)})
    try:
        dt.create_write_transaction(adds, "append", SCHEMA, commit_properties=props)
    except (CommitFailedError, DeltaError) as exc:
        raise OffloadError(f"offload run {run}: the Delta commit failed ({exc}); rerun the offload") from exc
    table = _table(store)
    assert table is not None
    return int(table.version())


def remove(store: TableStore, names: Sequence[str]) -> None:
    """Take files off the table (remove actions; vacuum deletes them later)."""
    from deltalake.transaction import RemoveAction

    dt = _table(store)
    if dt is None or not names:
        return
    now = int(time.time() * 1000)
    dt.create_write_transaction([RemoveAction(n, True, now) for n in names], "append", SCHEMA)


def remove_stale(store: TableStore, log_name: str, keep: Collection[str], last_run: int) -> list[str]:
    """Take off the table, in ONE commit built on one snapshot, the files of runs up to `last_run` (runs the
    log swapped in) that the log no longer names (`keep`: the files it does): what truncation or retention
    dropped. Idempotent: a rerun finds none left; two at once: the commit carries an application
    transaction (`bkledger-prune:<log>`, a counter), so the one landing second fails and removes
    nothing. Files of a later run (committed, maybe not swapped in yet) are never touched. The files stay
    on disk until `vacuum`."""
    from deltalake import CommitProperties, Transaction
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import RemoveAction

    dt = _table(store)
    if dt is None:
        return []
    stale = [f for f in committed_files(dt) if (run := ol.run_of_file(f)) is not None and run <= last_run
             and f not in keep]
    if not stale:
        return []
    app = f"bkledger-prune:{log_name}"
    now = int(time.time() * 1000)
    props = CommitProperties(app_transactions=[Transaction(app, (dt.transaction_version(app) or 0) + 1)],
                             custom_metadata={"bkledger.offload.removed": str(len(stale))})
    try:            # on the snapshot read: a prune of the same table landing meanwhile fails this one
        dt.create_write_transaction([RemoveAction(n, True, now) for n in stale], "append", SCHEMA,
                                    commit_properties=props)
    except CommitFailedError:
        return []                       # another prune took them off; the next run checks again
    return stale


def vacuum(store: TableStore, retention_s: float) -> list[str]:
    """Delete the files taken off the table at least `retention_s` seconds ago (rounded up to hours, as
    Delta's vacuum counts them; only files with a remove action: never one a running offload wrote and
    has not committed yet). Commits (two) only when there is something to delete; the paths deleted."""
    dt = _table(store)
    if dt is None:
        return []
    hours = math.ceil(retention_s / 3600)
    if not dt.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False):
        return []
    return list(dt.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False))


def delete_table(store: TableStore) -> None:
    """Delete the log's whole table folder (its log is deleted: a log created again by that name starts a
    new table, its offload runs numbered from 1 again)."""
    with contextlib.suppress(FileNotFoundError):
        store.fs.delete_dir(store.root)


# ---- reading the log's history back ----------------------------------------------------------------------
def read_log_file(meta: Any, name: str) -> pa.Table:
    """The rows of one offloaded file of the log `meta` describes (its table from the log's head; S3
    credentials the usual AWS way). OffloadError if the file cannot be read."""
    uri = ol.state(meta).uri
    if uri is None:
        raise OffloadError(f"log {meta.name!r} names offloaded file {name} but no table store")
    try:
        return read_rows(table_store(uri, meta.name), name)
    except (OSError, pa.ArrowException) as exc:
        raise OffloadError(f"log {meta.name!r}: offloaded file {name} of its table at {uri!r} cannot be read: "
                           f"{exc}") from exc


def check_rows(log_name: str, name: str, rows: pa.Table, ledger_id: int, first_entry: int, count: int) -> None:
    """OffloadError unless `rows` are entries first_entry.. first_entry+count-1 of the ledger (a file
    that does not hold what the log says is never read as if it did)."""
    ids, entries = rows.column("ledger_id"), rows.column("entry_id")
    ok = (rows.num_rows == count and count > 0 and ids[0].as_py() == ledger_id and ids[count - 1].as_py() == ledger_id
          and entries[0].as_py() == first_entry and entries[count - 1].as_py() == first_entry + count - 1)
    if not ok:
        raise OffloadError(f"log {log_name!r}: offloaded file {name} does not hold entries {ledger_id}:{first_entry}.."
                           f"{ledger_id}:{first_entry + count - 1} where the log says; the table was changed "
                           "outside bkledger")
