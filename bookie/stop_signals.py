"""Stop signals, with who sent them: SIGTERM / SIGINT are taken by one thread so the log can name the sender.

`block_stop_signals()` must run in the main thread before any other thread exists (threads inherit the
mask); afterwards `watch_stop_signals(on_stop)` starts a daemon thread that waits for the signals with
`sigwaitinfo` and calls `on_stop(description)`, e.g. "SIGTERM from pid 123 (python -m pytest)". A signal
that arrives before the watcher starts stays pending and is taken when it does.

A thread started before the mask was set (an import that starts a thread pool, say) would still take
such a signal, and its default action kills the process on the spot. So the daemons also install an
ordinary handler (`FALLBACK`: "SIGTERM (sender unknown)"): a stop then stays graceful, only anonymous.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
FALLBACK = "{} (sender unknown)"


def block_stop_signals() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def describe_sender(pid: int) -> str:
    """The command line of `pid`, or a placeholder when it has gone or cannot be read."""
    if pid <= 0:
        return "the kernel"
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "gone"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200] or "?"


def watch_stop_signals(on_stop: Callable[[str], None]) -> threading.Thread:
    def run() -> None:
        while True:
            info = signal.sigwaitinfo(STOP_SIGNALS)
            name = signal.Signals(info.si_signo).name
            on_stop(f"{name} from pid {info.si_pid} ({describe_sender(info.si_pid)})")

    thread = threading.Thread(target=run, name="stop-signals", daemon=True)
    thread.start()
    return thread


def install_fallback_handlers(on_stop: Callable[[str], None]) -> None:
    """Ordinary handlers (run in the main thread) for a stop signal that bypassed the watcher."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signo, _frame: on_stop(FALLBACK.format(signal.Signals(signo).name)))
