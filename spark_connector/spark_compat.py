"""The parts of PySpark's Python data source API that differ between the release lines the connector runs on
(4.0, 4.1, 4.2 and later), found by what the installed pyspark has, not by its version number.

| what | 4.0 | 4.1 | 4.2+ |
|---|---|---|---|
| `pyspark.sql.datasource.Filter` and its subclasses (`pushFilters`) | no: no filter pushdown | yes | yes |
| `DataSourceStreamArrowWriter` (a streaming sink fed Arrow batches) | no: `DataSourceArrowWriter` | yes | yes |
| `pyspark.sql.streaming.datasource` (read limits, `SupportsTriggerAvailableNow`) | no | no | yes |
| `to_arrow_schema(..., timezone="UTC")` (`arrow_schema`) | `timestamp_utc=True` | `timestamp_utc=True` | yes |

Where a piece is missing, this module gives a stand-in of the same name that nothing of Spark's ever
hands over (a Filter class no object is an instance of; read limits only the connector makes), so the
modules that use them import on every line; what a missing piece changes is decided where it is used:
`spark_connector.stream_source` (`STREAM_ADMISSION_CONTROL`) and `spark_connector.stream_sink`.
With pyspark 4.2 every name here is PySpark's own.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import TYPE_CHECKING, Any, cast

import pyspark
import pyspark.sql.datasource as _datasource
from pyspark.sql.types import StructType

SPARK_VERSION: str = pyspark.__version__

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceStreamArrowWriter as StreamArrowWriterBase,
    )
    from pyspark.sql.datasource import (
        EqualTo,
        Filter,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    FILTER_PUSHDOWN: bool
    STREAM_ADMISSION_CONTROL: bool
else:
    FILTER_PUSHDOWN = hasattr(_datasource, "Filter")              # 4.1+
    if FILTER_PUSHDOWN:
        from pyspark.sql.datasource import (
            EqualTo,
            Filter,
            GreaterThan,
            GreaterThanOrEqual,
            In,
            LessThan,
            LessThanOrEqual,
        )
    else:
        class Filter:
            """Stand-in: Spark before 4.1 pushes no filter to a Python data source."""

        EqualTo = GreaterThan = GreaterThanOrEqual = In = LessThan = LessThanOrEqual = Filter

    # Spark 4.0 feeds Arrow batches to any DataSourceArrowWriter, a streaming one too (its
    # write_into_data_source checks only that class), and its sink runner calls commit(messages, batchId)
    StreamArrowWriterBase = getattr(_datasource, "DataSourceStreamArrowWriter", _datasource.DataSourceArrowWriter)

    try:                                                          # 4.2+
        from pyspark.sql.streaming.datasource import (
            ReadAllAvailable,
            ReadLimit,
            ReadMaxBytes,
            ReadMaxRows,
            SupportsTriggerAvailableNow,
        )

        STREAM_ADMISSION_CONTROL = True
    except ImportError:
        STREAM_ADMISSION_CONTROL = False

        class ReadLimit:
            """Stand-in: Spark before 4.2 passes no read limit to a Python stream reader."""

        @dataclasses.dataclass
        class ReadAllAvailable(ReadLimit):
            pass

        @dataclasses.dataclass
        class ReadMaxRows(ReadLimit):
            max_rows: int

        @dataclasses.dataclass
        class ReadMaxBytes(ReadLimit):
            max_bytes: int

        class SupportsTriggerAvailableNow:
            """Stand-in: Spark before 4.2 runs Trigger.AvailableNow of a Python source through its own
            wrapper, which asks for the latest offset once and reads up to it."""

if TYPE_CHECKING:
    import pyarrow as pa

ADMISSION_CONTROL_SINCE = "4.2.0"


@functools.cache
def _takes_timezone() -> bool:
    from pyspark.sql.pandas.types import to_arrow_schema

    return "timezone" in inspect.signature(to_arrow_schema).parameters


def arrow_schema(schema: StructType) -> pa.Schema:
    """Spark's Arrow schema for `schema`, timestamps in UTC: what a reader's Arrow batches must match."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if _takes_timezone():
        return to_arrow_schema(schema, timezone="UTC")
    return cast(Any, to_arrow_schema)(schema, timestamp_utc=True)            # before 4.2


def needs_newer_spark(feature: str, since: str) -> str:
    """The sentence of an error about a feature this pyspark lacks."""
    return f"{feature} needs pyspark >= {since}; this is pyspark {SPARK_VERSION}"


__all__ = [
    "ADMISSION_CONTROL_SINCE", "FILTER_PUSHDOWN", "SPARK_VERSION", "STREAM_ADMISSION_CONTROL", "EqualTo", "Filter",
    "GreaterThan", "GreaterThanOrEqual", "In", "LessThan", "LessThanOrEqual", "ReadAllAvailable", "ReadLimit",
    "ReadMaxBytes", "ReadMaxRows", "StreamArrowWriterBase", "SupportsTriggerAvailableNow", "arrow_schema",
    "needs_newer_spark",
]
