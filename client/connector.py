"""What a connector built on the client (the Spark data source, `bkledger.spark_connector`) uses beyond what
`bkledger.client` exports: the one other module of the client a connector imports (with `client.errors`,
`client.config` and the pure log format, `client.log.core`), so that the client's inner modules can move.

    ledgers a job writes for a log    JOB_KEY, LOG_KEY, log_ledger_password, copy_ledger, creatable_log_name
    reads of many small ledgers       Read, chunks_ahead, ReadChunk, Spans
    cursors                           create_cursor, ack_cursor
    the cluster's metadata            no_cluster_error, MetadataStoreError, ZNodeExistsError
    a log's offloaded history         table_store, check_rows (its Delta table's files, read by Spark tasks)
"""

from bkledger.client.log.cursors import ack_cursor, create_cursor
from bkledger.client.log.ledger_copy import copy_ledger
from bkledger.client.log.ledgers import JOB_KEY, LOG_KEY, log_ledger_password
from bkledger.client.log.naming import creatable_log_name
from bkledger.client.log.offload_store import check_rows, table_store
from bkledger.client.meta.cluster_root import no_cluster_error
from bkledger.client.meta.errors import MetadataStoreError, ZNodeExistsError
from bkledger.client.read_ahead import Read, chunks_ahead
from bkledger.client.reader import ReadChunk, Spans

__all__ = [
    "JOB_KEY",
    "LOG_KEY",
    "MetadataStoreError",
    "Read",
    "ReadChunk",
    "Spans",
    "ZNodeExistsError",
    "ack_cursor",
    "check_rows",
    "chunks_ahead",
    "copy_ledger",
    "create_cursor",
    "creatable_log_name",
    "log_ledger_password",
    "no_cluster_error",
    "table_store",
]
