"""The PySpark data source of bkledger (`format("bkledger")`, `spark_connector.datasource`) and `read_log`.

Kept light: client code imports modules of this package (the record envelope) without Spark.
"""

from __future__ import annotations

from typing import Any


def read_log(spark: Any, name: str, **options: str) -> Any:
    """A whole log as a DataFrame: Spark's Parquet scan of its offloaded history unioned with a
    format("bkledger") read of the rest (`spark_connector.history.read_log`)."""
    from bkledger.spark_connector.history import read_log as read

    return read(spark, name, **options)
