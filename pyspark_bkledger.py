"""format("bkledger") with no register call: Spark 4 imports `pyspark_*` modules and registers DefaultSource.

Spark imports this module in a Python worker process, not in the driver. A driver that starts bkledger
jobs from threads other than its main one (or from several sessions) imports it once, which makes each
call resolve the format in its own session (`spark_connector.active_session`):

    import pyspark_bkledger  # noqa: F401
"""

from bkledger.spark_connector.datasource import BkLedgerDataSource as DefaultSource

__all__ = ["DefaultSource"]
