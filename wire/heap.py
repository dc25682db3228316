"""glibc's malloc thresholds for processes that move large buffers: freed ones reused, not faulted in again.

glibc serves a block above its mmap threshold with a fresh mapping and unmaps it when it is freed, and
once any threshold is set by hand it trims the heap's top eagerly, so a process that allocates buffers
of a few MiB over and over page-faults and zeroes each one anew. `pin_malloc_thresholds` sets chosen
thresholds with mallopt, each skipped when the operator chose it through glibc's environment variable
(MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_); a no-op without glibc's mallopt.

The bookie pins its own (`bookie.memory`). The Spark connector pins WORKER_THRESHOLDS once in each
Python process it runs in (`keep_large_buffers`): a bulk's chunks are packaged, gathered per bookie and
encoded into new buffers of a few MiB, and in a warm Spark append their page faults, page clearing and
unmapping took about a tenth of a Python worker's CPU. The price: a worker may keep up to 128 MiB of
freed heap.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading

log = logging.getLogger("bkledger.heap")

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc <malloc.h>
Thresholds = dict[int, tuple[str, int]]     # mallopt parameter -> (glibc's environment variable, value)
WORKER_THRESHOLDS: Thresholds = {
    M_MMAP_THRESHOLD: ("MALLOC_MMAP_THRESHOLD_", 32 << 20),    # glibc's largest on 64-bit
    M_TRIM_THRESHOLD: ("MALLOC_TRIM_THRESHOLD_", 128 << 20),
}

_lock = threading.Lock()
_worker: list[list[str]] = []


def pin_malloc_thresholds(thresholds: Thresholds) -> list[str]:
    """Set these malloc thresholds for this process; the names of those set here."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return []
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = []
    for param, (env, value) in thresholds.items():
        if env in os.environ:
            continue
        if mallopt(param, value):
            done.append(env)
        else:
            log.warning("mallopt refused %s=%d; malloc keeps its default", env, value)
    return done


def keep_large_buffers() -> list[str]:
    """Once per process: pin WORKER_THRESHOLDS (the names set then, on every call)."""
    with _lock:
        if not _worker:
            _worker.append(pin_malloc_thresholds(WORKER_THRESHOLDS))
        return _worker[0]
