"""save() without .mode("append"): Spark refuses it in the JVM before bkledger runs (no hook in the Python
data source API); on a driver that imported the connector its error says to use .mode("append")
(spark_connector.save_mode), keeping its type and condition. Overwrite is refused by bkledger, saying
the same."""

from __future__ import annotations

import pytest

import pyspark_bkledger  # noqa: F401   (a driver that imported the connector)


def test_save_without_mode_says_mode_append(spark) -> None:
    from pyspark.errors import AnalysisException

    df = spark.range(2).selectExpr("cast(id as string) as value")
    writer = df.write.format("bkledger").option("metadataServiceUri", "zk://127.0.0.1:1/x").option("log", "a")
    for mode in (None, "error", "ignore"):
        w = writer if mode is None else writer.mode(mode)
        with pytest.raises(AnalysisException) as got:
            w.save()
        assert got.value.getCondition() == "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"
        assert 'write with .mode("append")' in str(got.value)
    with pytest.raises(Exception, match=r'append-only; use mode\("append"\)'):
        writer.mode("overwrite").save()


def test_other_sources_errors_are_left_alone(spark) -> None:
    from pyspark.errors import AnalysisException
    from pyspark.sql.datasource import DataSource, DataSourceWriter

    class Toy(DataSource):
        @classmethod
        def name(cls) -> str:
            return "toy_save_mode"

        def writer(self, schema, overwrite) -> DataSourceWriter:
            raise AssertionError("never reached")

    spark.dataSource.register(Toy)
    with pytest.raises(AnalysisException) as got:
        spark.range(1).write.format("toy_save_mode").save()
    assert got.value.getCondition() == "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" and "bkledger" not in str(got.value)
