"""Progress of long shell verbs on the terminal, and Ctrl-C that stops them cleanly.

`Progress` implements `client.progress.ProgressSink` in three modes, chosen from the output:
- "bar" on a terminal: a tqdm bar over the bytes (or the ledgers when no byte estimate exists) with
  ledgers done of the total, rate and time left;
- "lines" when stderr is not a terminal (logs, CI) or a terminal with no size: one plain line every `interval` seconds
  (BKLEDGER_PROGRESS_INTERVAL, default 10; 0: on every step) and one at the end;
- "off" with `--json`: nothing extra, the JSON result says it all.

`stop_on_interrupt(progress)` turns the first Ctrl-C (SIGINT) into a stop request the operation honours
at its next consistent point (between fragments or ledgers); a second Ctrl-C interrupts at once.
A verb such as `log compact` uses both the same way: `with Progress("compact", ...) as p,
stop_on_interrupt(p): run(progress=p)`, then prints its summary and exits 130 if `p.stop_requested()`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import IO, Any

INTERVAL_ENV = "BKLEDGER_PROGRESS_INTERVAL"


def choose_mode(json_output: bool, stream: IO[str]) -> str:
    """"off" with --json, "bar" on a terminal that knows its width, else "lines" (a pipe, a file, or a
    terminal with no size, e.g. a pty nobody sized, where a bar's redrawn line can vanish)."""
    if json_output:
        return "off"
    return "bar" if stream.isatty() and _columns(stream) > 0 else "lines"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def human_seconds(s: float) -> str:
    s = int(s + 0.5)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _columns(stream: IO[str]) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


class Progress:
    """A ProgressSink drawn on stderr (see the module docstring)."""

    def __init__(self, what: str, *, json_output: bool = False, stream: IO[str] | None = None,
                 mode: str | None = None, interval: float | None = None, unit: str = "ledgers") -> None:
        self.what = what
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.mode = mode or choose_mode(json_output, self.stream)
        self.interval = interval if interval is not None else float(os.environ.get(INTERVAL_ENV, "10"))
        self.total_items = 0
        self.total_bytes = 0
        self.items = 0
        self.nbytes = 0
        self.started = time.monotonic()
        self._last_line = 0.0
        self._stop = threading.Event()
        self._announced = False
        self._bar: Any = None

    # ---- ProgressSink ---------------------------------------------------------------------
    def begin(self, total_items: int, total_bytes: int) -> None:
        self.total_items, self.total_bytes = total_items, total_bytes
        self.started = time.monotonic()
        if self.mode == "bar":
            from tqdm import tqdm

            by_bytes = total_bytes > 0
            self._bar = tqdm(total=total_bytes if by_bytes else total_items, desc=self.what, file=self.stream,
                             unit="B" if by_bytes else f" {self.unit}", unit_scale=by_bytes, leave=True,
                             mininterval=0.2, dynamic_ncols=True)
            self._bar.set_postfix_str(self._items_text(), refresh=True)
        elif self.mode == "lines":
            self._line(f"{self.what}: {total_items} {self.unit}" +
                       (f", ~{human_bytes(total_bytes)}" if total_bytes else ""))

    def advance(self, items: int = 0, nbytes: int = 0) -> None:
        self.items += items
        self.nbytes += nbytes
        if self._bar is not None:
            by_bytes = self.total_bytes > 0
            step = nbytes if by_bytes else items
            if by_bytes and self._bar.n + step > self._bar.total:      # the byte total is an estimate
                self._bar.total = self._bar.n + step
            self._bar.set_postfix_str(self._items_text(), refresh=False)
            self._bar.update(step)
        elif self.mode == "lines" and time.monotonic() - self._last_line >= self.interval:
            self._line(self.status_text())

    def note(self, message: str) -> None:
        return None             # detail lines stay out of the bar and the periodic lines (they flood)

    def stop_requested(self) -> bool:
        if self._stop.is_set() and not self._announced:      # said here, not in the signal handler
            self._announced = True
            self.say(f"{self.what}: Ctrl-C: stopping after the step in hand (Ctrl-C again to abort at once)")
        return self._stop.is_set()

    # ---- the rest -------------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    @property
    def stop_asked(self) -> bool:
        return self._stop.is_set()

    def _items_text(self) -> str:
        return f"{self.items}/{self.total_items} {self.unit}"

    def status_text(self) -> str:
        """'3/10 ledgers, 12.0 MB of ~40.0 MB, 2.0 MB/s, ~14s left'."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        parts = [self._items_text()]
        if self.total_bytes:
            parts.append(f"{human_bytes(self.nbytes)} of ~{human_bytes(self.total_bytes)}")
        else:
            parts.append(human_bytes(self.nbytes))
        parts.append(f"{human_bytes(self.nbytes / elapsed)}/s")
        left = self._time_left(elapsed)
        if left is not None:
            parts.append(f"~{human_seconds(left)} left")
        return ", ".join(parts)

    def _time_left(self, elapsed: float) -> float | None:
        if self.total_bytes and self.nbytes:
            return max(self.total_bytes - self.nbytes, 0) * elapsed / self.nbytes
        if self.total_items and self.items:
            return (self.total_items - self.items) * elapsed / self.items
        return None

    def _line(self, text: str) -> None:
        self._last_line = time.monotonic()
        self.stream.write(f"{text}\n" if text.startswith(self.what) else f"{self.what}: {text}\n")
        self.stream.flush()

    def say(self, text: str) -> None:
        """A message for the user on stderr (not with --json); clears the bar's line first."""
        if self.mode == "off":
            return
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            self._line(text)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.mode == "lines":
            self._line(f"{self.status_text()} ({'stopped' if self.stop_asked else 'done'} after "
                       f"{human_seconds(time.monotonic() - self.started)})")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def stop_on_interrupt(progress: Progress) -> Iterator[Progress]:
    """First Ctrl-C: ask `progress`'s operation to stop at its next consistent point; second: interrupt now.
    Only the main thread receives signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield progress
        return

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if progress.stop_asked:
            raise KeyboardInterrupt
        progress.request_stop()           # no output here: a write could re-enter one in progress

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield progress
    finally:
        signal.signal(signal.SIGINT, previous)
