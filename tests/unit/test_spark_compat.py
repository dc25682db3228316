"""spark_connector.spark_compat (issue 43 item 1: Spark 4.0, 4.1 and 4.2): on the pyspark this venv runs
(4.2, constraints.txt) every name is PySpark's own, so the connector behaves as it did before the module
existed; the reader for Spark before 4.2 refuses read limits with the release they need. The older
releases themselves run in tests/spark/test_spark_versions.py (`make test-spark-versions`)."""

from __future__ import annotations

import inspect

import pyspark.sql.datasource as ds
import pytest
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from bkledger.spark_connector import pushdown, spark_compat, stream_sink
from bkledger.spark_connector.options import BkLedgerOptionError
from bkledger.spark_connector.stream_source import BkLedgerStreamReader, LegacyStreamReader, stream_reader

URI = "zk://127.0.0.1:2181/ledgers"
SCHEMA = StructType([StructField("log", StringType()), StructField("ledger_id", LongType()),
                     StructField("entry_id", LongType()), StructField("value", BinaryType())])


def _pyspark_42() -> bool:
    import pyspark

    return tuple(int(p) for p in pyspark.__version__.split(".")[:2]) >= (4, 2)


needs_42 = pytest.mark.skipif(not _pyspark_42(), reason="checks the names of pyspark 4.2+")


@needs_42
def test_on_pyspark_42_every_name_is_pysparks_own() -> None:
    from pyspark.sql.streaming import datasource as sds

    assert spark_compat.FILTER_PUSHDOWN and spark_compat.STREAM_ADMISSION_CONTROL
    assert spark_compat.Filter is ds.Filter and pushdown.EqualTo is ds.EqualTo and pushdown.In is ds.In
    assert spark_compat.StreamArrowWriterBase is ds.DataSourceStreamArrowWriter
    assert issubclass(stream_sink.BkLedgerStreamWriter, ds.DataSourceStreamArrowWriter)
    for name in ("ReadLimit", "ReadAllAvailable", "ReadMaxRows", "ReadMaxBytes", "SupportsTriggerAvailableNow"):
        assert getattr(spark_compat, name) is getattr(sds, name), name


@needs_42
def test_on_pyspark_42_the_stream_reader_takes_read_limits() -> None:
    """Spark 4.2 gives a reader admission control when its latestOffset takes parameters (its
    python_streaming_source_runner.check_support_func): the 4.2 reader, not the legacy one."""
    reader = stream_reader({"metadataServiceUri": URI, "log": "orders", "maxEntriesPerTrigger": "10"}, SCHEMA)
    assert type(reader) is BkLedgerStreamReader
    assert len(inspect.signature(reader.latestOffset).parameters) == 2
    assert isinstance(reader, spark_compat.SupportsTriggerAvailableNow)


@pytest.mark.parametrize("option", ["maxEntriesPerTrigger", "maxBytesPerTrigger"])
def test_before_42_a_read_limit_is_refused_naming_the_release(option: str) -> None:
    with pytest.raises(BkLedgerOptionError) as got:
        LegacyStreamReader({"metadataServiceUri": URI, "log": "orders", option: "100"}, SCHEMA)
    assert got.value.option == option
    assert "needs pyspark >= 4.2.0" in str(got.value) and spark_compat.SPARK_VERSION in str(got.value)


def test_arrow_schema_has_utc_timestamps_on_this_pyspark() -> None:
    """The readers' Arrow batches carry UTC timestamps: 4.2 says timezone="UTC", 4.0 and 4.1 timestamp_utc."""
    import pyarrow as pa
    from pyspark.sql.types import TimestampType

    got = spark_compat.arrow_schema(StructType([*SCHEMA.fields, StructField("timestamp", TimestampType())]))
    assert got.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert got.field("value").type == pa.binary() and got.field("entry_id").type == pa.int64()
