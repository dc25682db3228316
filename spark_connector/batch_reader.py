"""Batch read of a log (or of raw ledgers): schema discovery and planning on the driver, reads in tasks.

Mirrors a BookKeeper ReadHandle opened without recovery (R12: a reader never fences the writer):
planning reads the log's ledger list and each ledger's metadata from ZooKeeper, takes the LAC of an
OPEN ledger (as it is now) or the last entry id of a CLOSED one as the bound, and cuts partitions with
`spark_connector.planning`. Each task opens its ledger without recovery and streams its entry range
with `read_chunk`, yielding one Arrow RecordBatch per chunk (`spark_connector.arrow_io`).
Schema: `log, ledger_id, entry_id, value`, plus `key, timestamp` when any ledger carries the envelope.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, DataType, LongType, StringType, StructField, StructType, TimestampType

from client import BadPasswordError, BookKeeper, DataLossError, NoSuchEntryError, NoSuchLedgerError
from spark_connector import envelope as env
from spark_connector.arrow_io import chunk_to_batch
from spark_connector.clients import planning_client, shared_client
from spark_connector.options import BkLedgerOptionError, ReadOptions, SourceOptions
from spark_connector.planning import LedgerPartition, LedgerView, plan_partitions, resolve_bounds

log = logging.getLogger("bkledger.spark")

COLUMNS: dict[str, DataType] = {
    "log": StringType(), "ledger_id": LongType(), "entry_id": LongType(), "value": BinaryType(),
    "key": BinaryType(), "timestamp": TimestampType(),
}
BASE_COLUMNS = ("log", "ledger_id", "entry_id", "value")
ENVELOPE_COLUMNS = ("key", "timestamp")
LAC_WAIT_S = 10.0


def read_schema(with_envelope: bool) -> StructType:
    names = (*BASE_COLUMNS, *ENVELOPE_COLUMNS) if with_envelope else BASE_COLUMNS
    return StructType([StructField(n, COLUMNS[n], nullable=True) for n in names])


def check_schema(schema: StructType) -> None:
    """A user-given read schema may name only the source's columns, with their types."""
    for field in schema.fields:
        expected = COLUMNS.get(field.name)
        if expected is None:
            raise BkLedgerOptionError("schema", f"column {field.name!r} is not a bkledger column; "
                                                f"columns are {', '.join(COLUMNS)}")
        if field.dataType != expected:
            raise BkLedgerOptionError("schema", f"column {field.name!r} must be {expected.simpleString()}, "
                                                f"not {field.dataType.simpleString()}")


# ---- driver: what is there ---------------------------------------------------------------------
def ledger_view(bk: BookKeeper, ledger_id: int, source: SourceOptions) -> LedgerView:
    """The ledger's fragments, readable bound (LAC if OPEN: opened without recovery) and envelope."""
    md = bk.ledger_metadata(ledger_id)
    if md.password != source.password:
        raise BadPasswordError(f"bkledger option password: wrong password for ledger {ledger_id}; give the "
                               "password the ledgers were written with")
    if source.digest_type is not None and md.digest_type.name.lower() != source.digest_type:
        raise BkLedgerOptionError("digestType", f"ledger {ledger_id} uses {md.digest_type.name.lower()}, "
                                                f"not {source.digest_type}")
    last = md.last_entry_id
    if not md.is_closed:
        rh = bk.open_ledger(ledger_id, source.password, recovery=False)
        md, last = rh.metadata, rh.last_entry_id
    return LedgerView(ledger_id, tuple(f.first_entry_id for f in md.fragments), last,
                      env.version_of(md.custom_metadata), md.is_closed)


def discover(bk: BookKeeper, opts: ReadOptions) -> list[LedgerView]:
    """The ledgers to read, ascending: the log's (from its metadata) or the `ledgers` option's."""
    source = opts.source
    ids = bk.log_metadata(source.log).ledger_ids if source.log is not None else sorted(source.ledgers or ())
    views: list[LedgerView] = []
    for ledger_id in ids:
        try:
            views.append(ledger_view(bk, ledger_id, source))
        except NoSuchLedgerError:
            where = f"log {source.log!r} lists" if source.log is not None else "option ledgers names"
            if opts.fail_on_data_loss:
                raise DataLossError(f"{where} ledger {ledger_id}, which does not exist (deleted?); set "
                                    "failOnDataLoss=false to read the others") from None
            log.warning("%s ledger %d, which does not exist; skipped (failOnDataLoss=false)", where, ledger_id)
    return views


def discover_schema(opts: ReadOptions) -> StructType:
    with planning_client(opts.source.metadata_service_uri, opts.source.client_settings) as bk:
        views = discover(bk, opts)
    return read_schema(any(v.envelope != env.NONE for v in views))


def plan(opts: ReadOptions) -> list[LedgerPartition]:
    with planning_client(opts.source.metadata_service_uri, opts.source.client_settings) as bk:
        views = discover(bk, opts)
    bounds = resolve_bounds(opts.source.log, views, opts.starting, opts.ending, opts.fail_on_data_loss)
    return plan_partitions(opts.source.log, views, bounds, opts.max_entries_per_partition)


# ---- tasks: reading --------------------------------------------------------------------------------
def read_partition(opts: ReadOptions, part: LedgerPartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Entries first..last of the partition's ledger as RecordBatches (one per read chunk)."""
    source = opts.source
    bk = shared_client(source.metadata_service_uri, source.client_settings)
    try:
        rh = bk.open_ledger(part.ledger_id, source.password, recovery=False)
        if not rh.is_closed and rh.last_add_confirmed < part.last_entry_id:
            rh.wait_for_lac(part.last_entry_id - 1, LAC_WAIT_S)   # a bookie behind the one planning asked
            if rh.last_add_confirmed < part.last_entry_id:
                rh.refresh()
        position = part.first_entry_id
        while position <= part.last_entry_id:
            chunk = rh.read_chunk(position, part.last_entry_id)
            yield chunk_to_batch(schema, part.log, part.ledger_id, chunk.entry_ids, chunk.payloads, part.envelope)
            position = chunk.entry_ids[-1] + 1
    except (NoSuchLedgerError, NoSuchEntryError) as exc:
        what = f"ledger {part.ledger_id} entries {part.first_entry_id}..{part.last_entry_id}"
        if opts.fail_on_data_loss:
            raise DataLossError(f"{what} are gone since planning ({exc}); set failOnDataLoss=false to skip "
                                "them") from exc
        log.warning("%s are gone since planning; skipped (failOnDataLoss=false)", what)


class BkLedgerBatchReader(DataSourceReader):
    """Plans on the driver (partitions) and reads in tasks (read); holds only options and the schema."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        check_schema(schema)
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        return list(plan(self.opts))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark.sql.pandas.types import to_arrow_schema

        if not isinstance(partition, LedgerPartition):
            return          # nothing to read: Spark plans one InputPartition(None) for an empty list
        yield from read_partition(self.opts, partition, to_arrow_schema(self.schema, timezone="UTC"))
