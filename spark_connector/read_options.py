"""The options of a read (`parse_read_options`): those of every read (`options`) and, for reads of logs,
the Kafka-like ones (`kafka_options`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from bkledger.spark_connector.kafka_options import check_raw_ledger_reads, parse_log_reads
from bkledger.spark_connector.options import (
    COMMON,
    DEFAULT_MAX_ENTRIES_PER_PARTITION,
    DEFAULT_TARGET_PARTITION_BYTES,
    READ,
    WRITE,
    ReadOptions,
    _lowered,
    check_known,
    parse_bool,
    parse_int,
    parse_positions,
    parse_source,
)


def parse_read_options(options: Mapping[str, str], extra_known: Iterable[str] = ()) -> ReadOptions:
    """Options of a batch (or, with `extra_known`, streaming) read; BkLedgerOptionError on any problem."""
    check_known(options, (*COMMON, *READ, *WRITE, *extra_known), "reads")
    opts = _lowered(options)
    source = parse_source(options)
    headers = parse_bool(opts, "includeHeaders", False)
    if source.ledgers is None:
        return dataclasses.replace(parse_log_reads(opts, source), include_headers=headers)
    check_raw_ledger_reads(opts)
    return ReadOptions(
        include_headers=headers,
        source=source,
        starting=parse_positions(opts, "startingPositions", source.log, "earliest"),
        ending=parse_positions(opts, "endingPositions", source.log, "latest"),
        fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
        max_entries_per_partition=parse_int(opts, "maxEntriesPerPartition", DEFAULT_MAX_ENTRIES_PER_PARTITION),
        target_partition_bytes=parse_int(opts, "targetPartitionBytes", DEFAULT_TARGET_PARTITION_BYTES),
        min_partitions=parse_int(opts, "minPartitions", 0) or None,
    )
