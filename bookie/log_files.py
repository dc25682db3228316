"""The log file of a bookie or autorecovery daemon (`--log-file FILE`), rotated by size.

BookKeeper leaves this to log4j2 (a RollingFile appender: a size trigger and a maximum number of rolled
files). Here the process writes its own file: `logFileMaxSize` (default 100MB; units B, KB, MB, GB)
rolls it, FILE becomes FILE.1, FILE.1 becomes FILE.2 and so on, and only `logFileMaxBackups` (default 10)
rolled files are kept: the oldest is deleted. So one process's logs never take more than about
(logFileMaxBackups + 1) x logFileMaxSize.

Standard output and standard error (file descriptors 1 and 2) point at the current file too, and move to
the new file at each roll: whatever the process writes outside `logging` (a traceback of a dying thread,
gRPC's own messages, a fault handler's dump) lands in the same rotated file instead of growing a file
that never rolls. Such writes are counted at the next log record's size check.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RotatingLogFile(RotatingFileHandler):
    """A RotatingFileHandler that also points fds 1 and 2 at the file it writes (after each roll too)."""

    def __init__(self, path: Path | str, max_bytes: int, backups: int) -> None:
        if max_bytes < 1 or backups < 1:
            raise ValueError("a rotated log file needs a size limit and at least one backup")
        super().__init__(str(path), maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self.setFormatter(logging.Formatter(FORMAT))
        self._point_std_streams()

    def doRollover(self) -> None:  # noqa: N802 - the logging module's name
        super().doRollover()
        self._point_std_streams()

    def _point_std_streams(self) -> None:
        if self.stream is None:
            self.stream = self._open()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):   # a closed or broken stream: nothing to keep
                stream.flush()
        fd = self.stream.fileno()
        os.dup2(fd, 1)
        os.dup2(fd, 2)


def use_log_file(path: Path | str, max_bytes: int, backups: int) -> RotatingLogFile:
    """Send the process's logging (and fds 1, 2) to `path`, rotated; the root logger's other handlers go."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    handler = RotatingLogFile(path, max_bytes, backups)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    return handler
