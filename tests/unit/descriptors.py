"""A block run with this process out of file descriptors, for real (no mock of os.open)."""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator


@contextlib.contextmanager
def out_of_descriptors(spare: int = 0) -> Iterator[None]:
    """Inside the block the process has `spare` descriptors left, and the next one it asks for fails with
    EMFILE: the open-file limit is lowered to a little above what is open and /dev/null is opened until the
    limit is reached (then `spare` of those closed). Both are undone after the block, whatever happens
    in it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fillers: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 16, hard))
        with contextlib.suppress(OSError):
            while True:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
        for _ in range(spare):
            os.close(fillers.pop())
        yield
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
