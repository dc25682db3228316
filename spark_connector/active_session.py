"""Make format("bkledger") resolvable from any Python thread of a classic (py4j) driver.

Why it is needed (Spark 4.2, pinned thread mode, the default): each Python thread of the driver talks to
its own JVM thread. The JVM keeps the *active* SparkSession in a thread-local that PySpark sets only on
the thread that built the session (and in a few calls such as createDataFrame). Spark resolves a short
format name in `DataSource.lookupDataSource`, which looks for Python data sources (registered with
`spark.dataSource.register` or found through a `pyspark_*` module's `DefaultSource`) only in
`SparkSession.getActiveSession`'s DataSourceManager; with no active session on the thread it tries the
JVM classes `bkledger` / `bkledger.DefaultSource` and fails with `[DATA_SOURCE_NOT_FOUND]`.
`DataFrameWriter.save`, `DataStreamReader.load` and `DataStreamWriter.start` go through that lookup;
`DataFrameReader.load` asks its own session's manager, which is why batch reads (and a toy source's
read) worked from threads while appends did not. With several sessions (`newSession()`), the thread's
active session may also be another session than the DataFrame's.

The fix: before each of those calls, make the caller's own session the active one of the calling
thread's JVM thread (what PySpark does itself in createDataFrame). `install()` wraps the entry points of
PySpark's classic DataFrameReader/DataFrameWriter/DataStreamReader/DataStreamWriter once; it runs when
`spark_connector.datasource` (or `pyspark_bkledger`) is imported. Spark Connect needs nothing: its server
sets the session of each request itself.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

_ENTRY_POINTS = {
    ("pyspark.sql.readwriter", "DataFrameReader"): ("load", "table"),
    ("pyspark.sql.readwriter", "DataFrameWriter"): ("save", "saveAsTable", "insertInto"),
    ("pyspark.sql.streaming.readwriter", "DataStreamReader"): ("load", "table"),
    ("pyspark.sql.streaming.readwriter", "DataStreamWriter"): ("start", "toTable"),
}
_MARK = "_bkledger_sets_active_session"
_lock = threading.Lock()


def activate(spark: Any) -> None:
    """Make `spark` the active session of the calling thread's JVM thread (classic sessions only)."""
    jsession = getattr(spark, "_jsparkSession", None)
    jvm = getattr(spark, "_jvm", None)
    if jsession is None or jvm is None:
        return                                    # Spark Connect, or a stopped session
    from pyspark.sql import SparkSession

    SparkSession._get_j_spark_session_class(jvm).setActiveSession(jsession)


def _wrapped(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        activate(self._spark)
        return method(self, *args, **kwargs)

    setattr(call, _MARK, True)
    return call


def install() -> None:
    """Wrap the classic reader/writer entry points once per process (idempotent, thread-safe)."""
    import importlib

    with _lock:
        for (module_name, class_name), methods in _ENTRY_POINTS.items():
            cls = getattr(importlib.import_module(module_name), class_name)
            for name in methods:
                method = getattr(cls, name, None)
                if method is None or getattr(method, _MARK, False):
                    continue
                setattr(cls, name, _wrapped(method))
