"""The "bkledger" PySpark data source: batch read and batch append of bkledger logs (and raw ledgers).

    spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", "orders").load()
    df.write.format("bkledger").option("metadataServiceUri", uri).option("log", "orders").mode("append").save()

Writes need `.mode("append")`: Spark refuses a Python data source's write in its default mode (ErrorIfExists)
before bkledger runs, and bkledger refuses "overwrite" (a log is append-only); `spark_connector.save_mode`
adds that advice to Spark's error on a driver that imported the connector.

Spark 4 finds it with no register call through the top-level module `pyspark_bkledger` (its
`DefaultSource`); `spark.dataSource.register(BkLedgerDataSource)` works too. This class only parses
options (`spark_connector.options`, errors at planning time) and hands over to the reader/writer
modules; streaming lives in `spark_connector.stream_source` / `spark_connector.stream_sink`.
Importing it also makes format("bkledger") resolvable from any thread and session of a classic driver
(`spark_connector.active_session`). It imports nothing of the client: Spark's lookup of data sources
imports it in a Python process of its own at a session's first use, and needs only the name.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter
from pyspark.sql.types import StructType

from bkledger.spark_connector import active_session, save_mode

active_session.install()
save_mode.install()       # save() without .mode("append"): Spark's refusal says to append (save_mode)


class BkLedgerDataSource(DataSource):
    """format("bkledger"): a log of ledgers (option log) or raw ledgers (option ledgers)."""

    @classmethod
    def name(cls) -> str:
        return "bkledger"

    def schema(self) -> StructType:
        """The columns, discovered from the log's ledgers; accepts batch and streaming read options."""
        from bkledger.spark_connector.batch_reader import discover_schema
        from bkledger.spark_connector.stream_source import discovery_options

        return discover_schema(discovery_options(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        from bkledger.spark_connector.batch_reader import reader_for
        from bkledger.spark_connector.read_options import parse_read_options

        return reader_for(parse_read_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from bkledger.spark_connector.batch_writer import plan_writer
        from bkledger.spark_connector.options import parse_write_options

        return plan_writer(parse_write_options(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from bkledger.spark_connector.stream_sink import stream_writer

        return stream_writer(self.options, schema, overwrite)

    def streamReader(self, schema: StructType) -> Any:
        from bkledger.spark_connector.stream_source import stream_reader

        return stream_reader(self.options, schema)
