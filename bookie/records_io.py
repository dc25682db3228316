"""LastLogMark files: the checkpoint position kept in every ledger directory.

Mirrors BookKeeper's `lastMark`: written (and fsynced) to every ledger directory after ledger
storage was flushed; at start the highest one tells where journal replay begins.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bkledger.bookie.journal import LogMark, read_mark_file, write_mark_file

MARK_FILE = "lastMark"


def read_last_mark(ledger_dirs: Sequence[Path]) -> LogMark:
    marks = [read_mark_file(d / "current" / MARK_FILE) for d in ledger_dirs]
    found = [m for m in marks if m is not None]
    return max(found) if found else LogMark(0, 0)


def write_last_mark(ledger_dirs: Sequence[Path], mark: LogMark) -> None:
    for d in ledger_dirs:
        write_mark_file(d / "current" / MARK_FILE, mark)
