"""File helpers shared by the journal and the entry logs: hex-id file names, whole writes, directory fsync."""

from __future__ import annotations

import os
from pathlib import Path


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
