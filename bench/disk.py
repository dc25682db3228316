"""disk_limit: what this disk does for a journal — append one group with write(2), then fdatasync.

This is the limit the bookie's journal is compared to: the journal appends each group to a growing file
with one write and makes it durable with one fdatasync (bookie/journal.py), so the same pattern, with
the same group size, on the same file system, is the most a journal of that group size could do.
`measure_fsync_limit` is public so other benchmarks measure their own limit in their own run.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.core import MB, Context, Row, size_label

MIN_GROUPS = 3


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def measure_fsync_limit(directory: Path | str, group_bytes: int, seconds: float) -> tuple[float, float]:
    """(MB/s, fsyncs/s) of appending `group_bytes` groups to a new file in `directory`, each one
    write(2) plus one os.fdatasync, for about `seconds` (at least 3 groups).

    Starts with os.sync() so that earlier writers' dirty pages are not flushed inside this measurement;
    the file grows as a journal file does (no preallocation) and is removed afterwards.
    """
    if group_bytes <= 0:
        raise ValueError(f"group_bytes must be positive, got {group_bytes}")
    data = os.urandom(group_bytes)
    os.sync()
    fd, path = tempfile.mkstemp(prefix="fsync-limit-", suffix=".bin", dir=str(directory))
    try:
        groups = 0
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            _write_all(fd, data)
            os.fdatasync(fd)
            groups += 1
            now = time.perf_counter()
            if now >= deadline and groups >= MIN_GROUPS:
                break
    finally:
        os.close(fd)
        os.unlink(path)
    elapsed = now - start
    return groups * group_bytes / elapsed / MB, groups / elapsed


def run(ctx: Context) -> list[Row]:
    rows: list[Row] = []
    for group in ctx.settings.group_sizes:
        mb_s, fsyncs_s = ctx.fsync_limit(group, measure_fsync_limit)
        label = size_label(group)
        why = f"the limit itself: write(2) of one {label} group + os.fdatasync, appended to a new file in the data dir"
        rows.append(Row("disk_limit", f"append+fdatasync {label} groups", mb_s, "MB/s", None, why))
        rows.append(Row("disk_limit", f"append+fdatasync {label} groups", fsyncs_s, "fsyncs/s", None, why))
    return rows
