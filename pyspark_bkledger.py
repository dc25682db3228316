"""format("bkledger") with no register call: Spark 4 imports `pyspark_*` modules and registers DefaultSource."""

from spark_connector.datasource import BkLedgerDataSource as DefaultSource

__all__ = ["DefaultSource"]
