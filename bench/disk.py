"""disk_limit: what this disk does for a journal — append one group, then fdatasync.

This is the limit the bookie's journal is compared to: the journal appends each group to a growing file
with one write and makes it durable with one fdatasync (bookie/journal.py), so the same pattern, with
the same group size, on the same file system, is the most a journal of that group size could do. The
journal writes either through the page cache (write(2)) or, by default, with O_DIRECT
(journalDirectIO, `bookie.direct_append`); the limit is the better of the two, each measured for half
the time, so a journal that gains from O_DIRECT is not compared to the slower way.
`measure_fsync_limit` is public so other benchmarks measure their own limit in their own run,
`DiskMeter` counts what the disk under a directory was given to write while a benchmark ran, and
`DiskLoadMeter` how loaded that disk was meanwhile (MB/s written, time per write request, requests in
flight), from /proc/diskstats.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from pathlib import Path

from bench.core import MB, Context, Row, size_label
from bkledger.bookie.direct_append import DirectAppender, open_direct
from bkledger.bookie.files import write_all

MIN_GROUPS = 3
SECTOR = 512          # /proc/diskstats counts 512-byte sectors on every device
DISKSTATS = Path("/proc/diskstats")


def _device_counters(device: tuple[int, int]) -> list[int] | None:
    """The counters /proc/diskstats keeps for the block device (major, minor) since boot (reads completed,
    merged, sectors, ms; writes completed, merged, sectors, ms; I/Os in flight, ms busy, weighted ms, ...),
    or None if the kernel lists none (a file system on no block device: tmpfs, overlay)."""
    try:
        lines = DISKSTATS.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 13 and (int(fields[0]), int(fields[1])) == device:
            return [int(f) for f in fields[3:]]
    return None


def _sectors_written(device: tuple[int, int]) -> int | None:
    """Sectors written to the block device (major, minor) since boot, or None if the kernel lists none."""
    counters = _device_counters(device)
    return counters[6] if counters is not None else None


def _device_of(directory: Path | str) -> tuple[int, int]:
    st = os.stat(directory)
    return os.major(st.st_dev), os.minor(st.st_dev)


@dataclasses.dataclass(frozen=True)
class DiskLoad:
    """What the block device under a directory was doing over a stretch of time, everyone's I/O included."""

    written_mb_per_s: float
    writes_per_s: float
    ms_per_write: float       # mean time a write request spent queued and served by the device
    in_flight: float          # mean requests in flight (queued or served), reads included
    busy: float               # share of the time with at least one request in flight

    def describe(self) -> str:
        return (f"the disk wrote {self.written_mb_per_s:.0f} MB/s in {self.writes_per_s:,.0f} requests/s of "
                f"{self.ms_per_write:.2f} ms each (mean, queued and served), {self.in_flight:.1f} in flight, "
                f"busy {self.busy:.0%}")


def disk_load(before: list[int], after: list[int], seconds: float) -> DiskLoad | None:
    """The load between two snapshots of a device's /proc/diskstats counters `seconds` apart; None when
    that is no time or the counters went back (the device was replaced)."""
    delta = [a - b for a, b in zip(after[:11], before[:11], strict=True)]
    if seconds <= 0 or min(delta[:8] + delta[9:]) < 0:
        return None
    writes = delta[4]
    return DiskLoad(written_mb_per_s=delta[6] * SECTOR / seconds / MB, writes_per_s=writes / seconds,
                    ms_per_write=delta[7] / writes if writes else 0.0, in_flight=delta[10] / 1000 / seconds,
                    busy=min(1.0, delta[9] / 1000 / seconds))


class DiskLoadMeter:
    """`with DiskLoadMeter(directory) as m: ...` then `m.load` (a DiskLoad of the block device holding
    `directory` meanwhile) or None with `m.why_not`. Unlike DiskMeter it syncs nothing: it watches what
    the device does under a benchmark's own load, write-back included."""

    def __init__(self, directory: Path | str) -> None:
        self.device = _device_of(directory)
        self.load: DiskLoad | None = None
        self.why_not = ""
        self._before: tuple[list[int], float] | None = None

    def __enter__(self) -> DiskLoadMeter:
        counters = _device_counters(self.device)
        self._before = (counters, time.perf_counter()) if counters is not None else None
        return self

    def __exit__(self, *exc: object) -> None:
        after = _device_counters(self.device)
        if self._before is None or after is None:
            self.why_not = f"device {self.device[0]}:{self.device[1]} is not in {DISKSTATS}"
            return
        counters, began = self._before
        self.load = disk_load(counters, after, time.perf_counter() - began)
        if self.load is None:
            self.why_not = "the device's counters went back"


class DiskMeter:
    """`with DiskMeter(directory) as m: ...` then `m.written` (bytes the block device holding `directory`
    wrote meanwhile, everyone's writes included) or None with `m.why_not`."""

    def __init__(self, directory: Path | str) -> None:
        self.device = _device_of(directory)
        self.written: int | None = None
        self.why_not = ""
        self._before: int | None = None

    def __enter__(self) -> DiskMeter:
        os.sync()                       # earlier writers' dirty pages are flushed before, not during
        self._before = _sectors_written(self.device)
        return self

    def __exit__(self, *exc: object) -> None:
        os.sync()                       # what was written meanwhile reaches the disk now, and is counted
        after = _sectors_written(self.device)
        if self._before is None or after is None:
            self.why_not = f"device {self.device[0]}:{self.device[1]} is not in {DISKSTATS}"
            return
        self.written = (after - self._before) * SECTOR


class GroupFile:
    """A file appended to as the journal appends (bookie/journal.py): each group one write, then one
    fdatasync; with O_DIRECT where `direct` is asked for and the file system takes it (`self.direct`
    says which), else through the page cache."""

    def __init__(self, path: Path | str, direct: bool = True) -> None:
        fd = open_direct(path, os.O_WRONLY | os.O_CREAT) if direct else None
        self.direct = fd is not None
        self.fd = fd if fd is not None else os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._appender = DirectAppender(fd) if fd is not None else None

    def commit(self, data: bytes) -> None:
        """Append `data` and make it durable."""
        if self._appender is not None:
            self._appender.append([data])
        else:
            write_all(self.fd, data)
        os.fdatasync(self.fd)

    def close(self) -> None:
        if self._appender is not None:
            self._appender.close()
        os.close(self.fd)


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
    os.close(fd)
    try:
        file = GroupFile(path, direct)
        try:
            if direct and not file.direct:
                return None
            groups = 0
            start = time.perf_counter()
            deadline = start + seconds
            while True:
                file.commit(data)
                groups += 1
                now = time.perf_counter()
                if now >= deadline and groups >= MIN_GROUPS:
                    break
        finally:
            file.close()
    finally:
        os.unlink(path)
    elapsed = now - start
    return groups * len(data) / elapsed / MB, groups / elapsed


def disk_rows(name: str, label: str, disk: DiskMeter, payload: int, seconds: float, raw_mb_s: float,
              write_quorum: int) -> list[Row]:
    """Two rows on what the disk under the bookies wrote while `payload` bytes were added in `seconds` with
    `write_quorum` copies: bytes per payload byte, and the write rate against the raw limit `raw_mb_s`."""
    if disk.written is None or payload <= 0:
        return [Row(name, f"{label}: disk bytes per payload byte", 0.0, "x", None,
                    f"not measured: {disk.why_not or 'no payload'}")]
    per_byte = disk.written / payload
    return [
        Row(name, f"{label}: disk bytes per payload byte", per_byte, "x", 2.0 * write_quorum,
            f"2 x Qw={write_quorum}: each copy is written to a journal and to an entry log, all on one disk"),
        Row(name, f"{label}: disk write MB/s", disk.written / seconds / MB, "MB/s", raw_mb_s,
            "one writer's raw append+fdatasync on this disk (several writers together may do more)"),
    ]


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
