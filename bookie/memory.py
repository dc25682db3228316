"""glibc's malloc thresholds for the bookie process: freed buffers are reused, not faulted in again.

glibc starts with a 128 KiB mmap threshold and raises it, up to 32 MiB, each time an mmapped block is
freed, so the bookie's RSS used to track the largest bursts it had seen; pinning M_MMAP_THRESHOLD turns
that raise off. But glibc also hands freed memory back to the kernel eagerly (the heap top is trimmed
past 128 KiB of free space once any threshold is set by hand; thread arenas shrink with madvise) and
mmaps every block above the threshold afresh, so under bulk adds each megabyte-sized request or
journal buffer faulted in new zeroed pages: page faults, page clearing and unmapping took more of this
machine's CPU than the bookie's own Python, and three bookies took bulk adds at 74-78k entries/s with a
2 MiB threshold against 85-87k with these. The bookie pins the mmap threshold at 16 MiB (above its
request, range-read and group buffers), keeps 16 MiB of free heap before trimming and grows the heap
4 MiB at a time. Measured cost: a bookie's RSS after 1 GiB of adds is about 155-170 MiB instead of
about 100 MiB, and stays flat. Each setting is skipped when the operator chose it through glibc's
environment variable (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_); a no-op without
glibc's `mallopt` (`wire.heap`, which the Spark connector's Python workers use too).
"""

from __future__ import annotations

from bkledger.wire import heap
from bkledger.wire.heap import M_MMAP_THRESHOLD, M_TOP_PAD, M_TRIM_THRESHOLD

BOOKIE_THRESHOLDS: heap.Thresholds = {
    M_MMAP_THRESHOLD: ("MALLOC_MMAP_THRESHOLD_", 16 << 20),
    M_TRIM_THRESHOLD: ("MALLOC_TRIM_THRESHOLD_", 16 << 20),
    M_TOP_PAD: ("MALLOC_TOP_PAD_", 4 << 20),
}


def pin_malloc_thresholds() -> list[str]:
    """Set the bookie's malloc thresholds for this process; the names of those set here."""
    return heap.pin_malloc_thresholds(BOOKIE_THRESHOLDS)
