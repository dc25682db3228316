"""File helpers shared by the journal and the entry logs: hex-id file names, whole writes, directory fsync,
and removing a large file without stalling the journal's fdatasyncs (`remove_gradually`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

DELETING = ".deleting"          # suffix of a file being removed: no listing takes it for a journal or entry log
REMOVE_STEP_BYTES = 8 << 20     # a file being removed shrinks by this much per step
REMOVE_PAUSE_S = 0.002          # the least pause between two steps (at least twice what the step took)


def list_hex_ids(directory: Path, extension: str) -> list[int]:
    """The ids of the files `<hex id>.<extension>` in `directory`, ascending (others are ignored)."""
    ids = []
    for name in os.listdir(directory):
        stem, dot, ext = name.partition(".")
        if dot and ext == extension:
            try:
                ids.append(int(stem, 16))
            except ValueError:
                continue
    return sorted(ids)


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """write(2) all of `data` (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def remove_gradually(path: Path) -> int:
    """Remove a large file (an old journal, a dead entry log) without stalling the disk's other writers.

    The file is renamed to `<name>.deleting` (a listing of journals or entry logs ignores it from then
    on, also after a crash half way), then truncated from its end REMOVE_STEP_BYTES at a time, each step
    fsynced by the remover itself and followed by a pause of twice what it took (at least
    REMOVE_PAUSE_S), then unlinked. Why: ext4 frees a file's blocks (and, mounted with `discard` as this
    machine's disk is, trims them) in the next commit of its own journal, and every fdatasync that needs
    a commit waits behind it. Unlinking a 512 MB bookie journal at once, as the checkpoint did, took
    280-380 ms and held the other bookie journals' fdatasyncs on the same disk meanwhile: adds waited up
    to 150 ms. In steps, the remover pays for each commit and the disk is left to the others at least two
    thirds of the time. Returns the bytes freed (0 if the file was gone already)."""
    doomed = path.with_name(path.name + DELETING)
    try:
        os.rename(path, doomed)
    except FileNotFoundError:
        return 0
    fsync_dir(path.parent)
    return _shrink_and_unlink(doomed)


def remove_leftovers(directory: Path) -> None:
    """Finish removals that a stop interrupted (files still named `*.deleting`)."""
    for name in os.listdir(directory):
        if name.endswith(DELETING):
            _shrink_and_unlink(directory / name)


def _shrink_and_unlink(path: Path) -> int:
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return 0
    try:
        size = left = os.fstat(fd).st_size
        while left > REMOVE_STEP_BYTES:
            left -= REMOVE_STEP_BYTES
            took = _truncate(fd, left)
            time.sleep(max(REMOVE_PAUSE_S, 2 * took))
    finally:
        os.close(fd)
    os.unlink(path)
    return size


def _truncate(fd: int, size: int) -> float:
    """Shrink the file to `size` and commit that (the freeing happens now, not in someone else's fsync);
    returns the seconds it took."""
    start = time.perf_counter()
    os.ftruncate(fd, size)
    os.fsync(fd)
    return time.perf_counter() - start
