"""Freed large buffers go back to the kernel: a pinned glibc mmap threshold for the bookie process.

glibc starts with a 128 KiB mmap threshold but raises it, up to 32 MiB, each time an mmapped block is
freed. Once a few multi-MiB buffers (large add batches, gRPC messages) have come and gone, every buffer
below that size is carved from the per-thread malloc arenas, where freed space stays resident and is
fragmented by what lives on: the bookie's RSS then tracks the largest bursts it has seen, not what it
holds. Setting M_MMAP_THRESHOLD explicitly turns the raise off. The bookie pins it at 2 MiB, above its
own 1 MiB range-read blobs and the journal's group buffers (pinning the glibc default of 128 KiB made
every read blob an mmap + page faults and halved range-read speed); bigger buffers are mmapped and
returned whole when freed. A no-op without glibc's `mallopt`, or when the operator already chose through
glibc's MALLOC_MMAP_THRESHOLD_ environment variable.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger("bkledger.bookie")

M_MMAP_THRESHOLD = -3  # glibc <malloc.h>
BOOKIE_MMAP_THRESHOLD = 2 << 20


def pin_mmap_threshold(threshold: int = BOOKIE_MMAP_THRESHOLD) -> bool:
    """Pin glibc's mmap threshold for this process; True if it was set here."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if not mallopt(M_MMAP_THRESHOLD, threshold):
        log.warning("could not pin the malloc mmap threshold; memory may follow the largest bursts")
        return False
    return True
