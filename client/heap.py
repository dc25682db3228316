"""The C heap of a process that moves large buffers: keep freed ones for reuse (glibc's mallopt).

A Spark append packages, gathers and encodes every chunk of a bulk into new buffers of a few MiB.
glibc serves an allocation that large with a fresh mmap (above its mmap threshold) and returns it to
the kernel when freed, so each one is page-faulted and zeroed again: in a warm Spark append that was
about a tenth of a Python worker's CPU (page faults, clearing and charging pages). With the threshold at
glibc's maximum (32 MiB) and the heap trimmed only once 128 MiB lie free at its top, freed buffers are
reused from the heap instead. Called by the Spark connector in the Python workers it runs in; a no-op
where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024       # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD = 128 * 1024 * 1024

_lock = threading.Lock()
_done: list[bool] = []


def keep_large_buffers() -> bool:
    """Once per process: raise glibc's mmap and trim thresholds. True when glibc took both settings."""
    with _lock:
        if not _done:
            _done.append(_set_thresholds())
        return _done[0]


def _set_thresholds() -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
