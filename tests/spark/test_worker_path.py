"""Spark's Python processes import the installed, compiled pyspark, not pyspark.zip
(spark_connector.worker_path; `make` installs its .pth into .venv). Real local SparkSession."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyspark
import pytest
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from bkledger.spark_connector import worker_path

pytestmark = pytest.mark.spark


class _WhichPyspark(DataSource):
    """Reports where the planner process (partitions) and the task worker (read) found pyspark."""

    @classmethod
    def name(cls) -> str:
        return "which_pyspark"

    def schema(self) -> str:
        return "process string, pyspark string"

    def reader(self, schema: Any) -> DataSourceReader:
        return _WhichReader()


class _WhichReader(DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        import pyspark as planner_pyspark
        return [InputPartition(planner_pyspark.__file__)]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, str]]:
        import pyspark as worker_pyspark
        yield "planner", partition.value
        yield "worker", worker_pyspark.__file__


def test_spark_python_processes_import_the_installed_pyspark(spark: Any) -> None:
    if not worker_path.installed():
        pytest.skip("the .pth is not installed in this interpreter: "
                    "python -m bkledger.spark_connector.worker_path install")
    spark.dataSource.register(_WhichPyspark)
    found = {row["process"]: row["pyspark"] for row in spark.read.format("which_pyspark").load().collect()}
    assert found == {"planner": pyspark.__file__, "worker": pyspark.__file__}
    assert "pyspark.zip" not in pyspark.__file__
