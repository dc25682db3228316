"""`read_log`: a log read as Spark's own Parquet scan of its offloaded history unioned with a
`format("bkledger")` read of the rest, from the seam position on (issue 42 item 3, the helper for speed).

The driver reads the log's metadata once (the snapshot): the files of the offloaded history it names go to
`spark.read.parquet` (those files only, never the table's folder: files an offload, compaction or
retention adds or removes later are not read) and the tail is `format("bkledger")` with
startingPositions at the snapshot's seam (`spark_connector.seam`). Positions are never reused, so an
offload that commits meanwhile moves records of the tail into files that this read's tail still reads
(from the table, by position): nothing is lost or doubled at the seam. The columns are those of
`format("bkledger")` with the same options (`log`, positions, `key`/`timestamp` when the log carries the
envelope, `headers` with includeHeaders, null from the files: offload stores no headers).

Reading part of the log (positions or times) is `format("bkledger")`'s: `read_log` reads all of it.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from bkledger.client.connector import table_store
from bkledger.client.log.core import offload as ol
from bkledger.spark_connector.clients import planning_client
from bkledger.spark_connector.options import BkLedgerOptionError, parse_source
from bkledger.spark_connector.seam import history_files, seam

BOUNDED = ("startingpositions", "endingpositions", "startingtimestamp", "endingtimestamp",
           "startingpositionsbytimestamp", "endingpositionsbytimestamp", "logpattern", "ledgers")


def file_uri(table: str, log_name: str, name: str) -> str:
    """The URI Spark reads a file of the log's table by: file:// for a local store, s3a:// for s3://
    (Hadoop's S3 filesystem: hadoop-aws on the classpath), else the store's own scheme."""
    root = table_store(table, log_name).uri
    parsed = urllib.parse.urlsplit(root)
    if parsed.scheme in ("", "file"):
        return "file://" + urllib.parse.quote(f"{parsed.path if parsed.scheme else root}/{name}")
    scheme = "s3a" if parsed.scheme == "s3" else parsed.scheme
    return urllib.parse.urlunsplit((scheme, parsed.netloc, f"{parsed.path}/{name}", "", ""))


def read_log(spark: Any, name: str, **options: str) -> Any:
    """The log `name` as a DataFrame: the same rows and columns as
    `spark.read.format("bkledger").option("log", name).options(**options).load()`, its offloaded history
    scanned by Spark's Parquet reader. `options`: those of format("bkledger") (metadataServiceUri is
    required) except the ones that read part of the log or other logs (BkLedgerOptionError)."""
    for key in options:
        if key.lower() in BOUNDED or key.lower() in ("log", "path"):
            raise BkLedgerOptionError(key, "read_log reads one whole log, named by its argument; read part "
                                           "of a log (or several) with format(\"bkledger\")")
    source = parse_source({**options, "log": name})
    with planning_client(source.metadata_service_uri, source.client_settings) as bk:
        meta = bk.log_metadata(name)
    tail = spark.read.format("bkledger").options(**options).option("log", name)
    at = seam(meta)
    if at is None:
        return tail.load()
    tail_df = tail.option("startingPositions", json.dumps({name: {str(at.ledger_id): at.entry_id}})).load()
    table = ol.state(meta).uri
    assert table is not None                      # a log with offloaded records records its table
    files = [file_uri(table, name, f) for f in history_files(meta)]
    return _as_read(spark.read.parquet(*files), tail_df.schema, name).unionByName(tail_df)


def _as_read(history: Any, schema: Any, name: str) -> Any:
    """The history's rows with the columns (names, types, order) of the tail's read schema."""
    from pyspark.sql import functions as F

    columns = []
    for field in schema.fields:
        if field.name == "log":
            column = F.lit(name)
        elif field.name == "headers" or field.name not in history.columns:
            column = F.lit(None)
        else:
            column = F.col(field.name)
        columns.append(column.cast(field.dataType).alias(field.name))
    return history.select(*columns)
