"""disk_limit: what this disk does for a journal — append one group, then fdatasync.

This is the limit the bookie's journal is compared to: the journal appends each group to a growing file
with one write and makes it durable with one fdatasync (bookie/journal.py), so the same pattern, with
the same group size, on the same file system, is the most a journal of that group size could do. The
journal writes either through the page cache (write(2)) or, by default, with O_DIRECT
(journalDirectIO, `bookie.direct_append`); the limit is the better of the two, each measured for half
the time, so a journal that gains from O_DIRECT is not compared to the slower way.
`measure_fsync_limit` is public so other benchmarks measure their own limit in their own run.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.core import MB, Context, Row, size_label
from bookie.direct_append import DirectAppender, open_direct
from bookie.files import write_all

MIN_GROUPS = 3


def measure_fsync_limit(directory: Path | str, group_bytes: int, seconds: float) -> tuple[float, float]:
    """(MB/s, fsyncs/s) of appending `group_bytes` groups to a new file in `directory`, each one write
    plus one os.fdatasync: the better of write(2) and O_DIRECT, each for about `seconds` / 2 (at least 3
    groups each; O_DIRECT only where the file system allows it)."""
    if group_bytes <= 0:
        raise ValueError(f"group_bytes must be positive, got {group_bytes}")
    data = os.urandom(group_bytes)
    ways = (_append_groups(directory, data, seconds / 2, direct=d) for d in (False, True))
    return max(r for r in ways if r is not None)


def _append_groups(directory: Path | str, data: bytes, seconds: float, direct: bool) -> tuple[float, float] | None:
    """One way of appending: None when O_DIRECT was asked for and refused.

    Starts with os.sync() so that earlier writers' dirty pages are not flushed inside this measurement;
    the file grows as a journal file does (no preallocation) and is removed afterwards.
    """
    os.sync()
    fd, path = tempfile.mkstemp(prefix="fsync-limit-", suffix=".bin", dir=str(directory))
    appender = None
    try:
        if direct:
            direct_fd = open_direct(path, os.O_WRONLY)
            if direct_fd is None:
                return None
            os.close(fd)
            fd = direct_fd
            appender = DirectAppender(fd)
        groups = 0
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            if appender is not None:
                appender.append([data])
            else:
                write_all(fd, data)
            os.fdatasync(fd)
            groups += 1
            now = time.perf_counter()
            if now >= deadline and groups >= MIN_GROUPS:
                break
    finally:
        if appender is not None:
            appender.close()
        os.close(fd)
        os.unlink(path)
    elapsed = now - start
    return groups * len(data) / elapsed / MB, groups / elapsed


def run(ctx: Context) -> list[Row]:
    rows: list[Row] = []
    for group in ctx.settings.group_sizes:
        mb_s, fsyncs_s = ctx.fsync_limit(group, measure_fsync_limit)
        label = size_label(group)
        why = (f"the limit itself: one {label} group appended to a new file in the data dir + os.fdatasync; "
               "the better of write(2) and O_DIRECT")
        rows.append(Row("disk_limit", f"append+fdatasync {label} groups", mb_s, "MB/s", None, why))
        rows.append(Row("disk_limit", f"append+fdatasync {label} groups", fsyncs_s, "fsyncs/s", None, why))
    return rows
