"""Count the fsync-family system calls of a running process from outside, with `perf stat` tracepoints.

The bookie has no stats endpoint, and its journal's group size is the bytes it wrote divided by the
fdatasync calls it made. `perf stat -e syscalls:sys_enter_fdatasync -p PID` counts those calls in the
kernel without touching the bookie's code and without stopping it at each call (unlike strace).
Needs `perf` and permission to use tracepoints (root, or perf_event_paranoid low enough); when either
is missing `SyscallCounter.available()` says so and callers fall back to a weaker comparison.
"""

from __future__ import annotations

import functools
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

EVENTS = ("syscalls:sys_enter_fdatasync", "syscalls:sys_enter_fsync")


@functools.cache
def _probe() -> str:
    """'' when perf can count syscall tracepoints here, else the reason it cannot."""
    perf = shutil.which("perf")
    if perf is None:
        return "perf is not installed"
    try:
        done = subprocess.run([perf, "stat", "-x,", "-e", EVENTS[0], "--", "true"],
                              capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"perf did not run: {exc}"
    if done.returncode != 0 or b"sys_enter_fdatasync" not in done.stderr:
        return "perf cannot read syscall tracepoints: " + done.stderr.decode(errors="replace").strip()[:200]
    return ""


class SyscallCounter:
    """`with SyscallCounter(pid) as c: ...` then `c.counts['syscalls:sys_enter_fdatasync']`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.counts: dict[str, int] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._out = Path(tempfile.mkstemp(prefix="bench-perf-", suffix=".csv")[1])

    @staticmethod
    def available() -> str:
        """'' when counting works on this machine, else why not."""
        return _probe()

    def __enter__(self) -> SyscallCounter:
        perf = shutil.which("perf") or "perf"
        events = ",".join(EVENTS)
        self._proc = subprocess.Popen(
            [perf, "stat", "-x,", "-o", str(self._out), "-e", events, "-p", str(self.pid)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        time.sleep(0.3)  # let perf attach to every thread before the measured work starts
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        try:
            self.counts = parse_perf_csv(self._out.read_text())
        finally:
            self._out.unlink(missing_ok=True)


def parse_perf_csv(text: str) -> dict[str, int]:
    """`perf stat -x,` output -> {event: count}; events perf could not count are left out."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) < 3 or line.startswith("#"):
            continue
        value, event = fields[0].strip(), fields[2].strip()
        if value.isdigit():
            counts[event] = int(value)
    return counts
