"""File naming shared by the journal and the entry logs: files named by a hexadecimal id."""

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
