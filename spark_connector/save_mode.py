"""`df.write.format("bkledger").save()` without `.mode("append")`: make Spark's refusal say what to do.

Spark (4.0-4.2) refuses a Python data source's write in its default mode ErrorIfExists (and in Ignore)
with `[UNSUPPORTED_DATA_SOURCE_SAVE_MODE] ... Please use either the "Append" or "Overwrite" mode
instead.`, in the JVM, before any Python of the source runs (`DataFrameWriter.saveInternal`): the Python
data source API has no way for a source to accept the default mode as Kafka's sink does (Kafka is a
built-in V1 source), so bkledger cannot make `save()` append. Overwrite, which the message suggests, is
refused by bkledger (`batch_writer.plan_writer`: a log is append-only) with a message naming
`mode("append")`.

What can be done is done here: on a driver that imported the connector (`import pyspark_bkledger`, or
anything importing `spark_connector.datasource`), `install()` wraps PySpark's `DataFrameWriter.save`
(classic, and Spark Connect's if that client is imported already: importing it costs about 2 s, too much
for Spark's own imports of this module) so that this error, when it is about bkledger, carries one
more sentence: use `.mode("append")`. The exception keeps its type and condition; a classic one gets the
sentence in its message, a Connect one as a note (PEP 678) shown with its traceback.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
from collections.abc import Callable
from typing import Any

CONDITION = "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"
HINT = ('\nbkledger: a log is append-only, and Spark refuses its default save mode (ErrorIfExists) for Python '
        'data sources before bkledger runs: write with .mode("append"), e.g. df.write.format("bkledger")'
        '.option("metadataServiceUri", uri).option("log", name).mode("append").save()')
_WRITERS = (("pyspark.sql.readwriter", "DataFrameWriter"), ("pyspark.sql.connect.readwriter", "DataFrameWriter"))
_MARK = "_bkledger_save_mode_hint"
_lock = threading.Lock()


def condition_of(exc: BaseException) -> str | None:
    get = getattr(exc, "getCondition", None)
    if get is None:
        return None
    try:
        return str(get())
    except Exception:         # a stopped session's JVM: nothing to tell
        return None


def explain(exc: BaseException) -> None:
    """Add HINT to Spark's save-mode refusal of a bkledger write (any other error is left alone)."""
    if condition_of(exc) != CONDITION:
        return
    desc = getattr(exc, "_desc", None)
    text = desc if isinstance(desc, str) else str(exc)
    if "bkledger" not in text or HINT in text:
        return
    if isinstance(desc, str):
        exc._desc = desc + HINT  # type: ignore[attr-defined]   # classic: str(exc) reads _desc
    else:
        exc.add_note(HINT.strip())


def _wrapped(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def save(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            explain(exc)
            raise

    setattr(save, _MARK, True)
    return save


def install() -> None:
    """Wrap `DataFrameWriter.save` of classic PySpark (and of Spark Connect, if imported) once (idempotent)."""
    with _lock:
        for module_name, class_name in _WRITERS:
            if module_name != _WRITERS[0][0] and module_name not in sys.modules:
                continue
            cls: Any = None
            with contextlib.suppress(ImportError):
                cls = getattr(importlib.import_module(module_name), class_name, None)
            method = getattr(cls, "save", None)
            if method is not None and not getattr(method, _MARK, False):
                cls.save = _wrapped(method)
