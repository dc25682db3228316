"""wire.heap: with glibc's thresholds raised, a freed large buffer is reused, not unmapped and faulted
in again (measured in fresh processes: minor page faults over buffers of a few MiB in a thread)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

SCRIPT = """
import resource, sys, threading
from bkledger.wire import heap
if sys.argv[1] == "tuned":
    names = heap.keep_large_buffers()
    assert names == heap.keep_large_buffers() == ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
def chunks():   # a bulk's chunk as a Spark task's client thread handles it: packaged, gathered per bookie
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        packaged = bytes(4 << 20)
        gathered = [bytes(2_800_000 + i) for i in range(3)]
        del packaged
        encoded = bytes(3_000_000)
        del gathered, encoded
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
thread = threading.Thread(target=chunks)
thread.start()
thread.join()
"""


def _faults(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=60, check=True,
                         env=env)
    return int(out.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt thresholds are glibc's")
def test_freed_large_buffers_are_reused_once_tuned() -> None:
    plain, tuned = _faults("plain"), _faults("tuned")
    pages = 50 * (4 << 20) // 4096        # the 4 MiB buffers alone, each faulted in anew
    assert plain > pages, f"untuned, the buffers faulted only {plain} pages: the test shows nothing here"
    assert tuned < pages // 4, f"tuned, the buffers faulted {tuned} pages (untuned {plain})"
