"""What a long operation reports as it goes, and how it is asked to stop (a protocol; no I/O here).

Used by `client.admin` (recover, decommission) and meant for any long client-side operation (log
compaction, ...): the operation calls `begin` with its totals, `advance` as ledgers and bytes get done,
`note` for a detail line, and checks `stop_requested()` at points where stopping leaves the metadata
consistent (between fragments or ledgers; never between a copy and its compare-and-swap). The shell's
terminal renderer is `bookie.progress.Progress`; without one, operations use `NO_PROGRESS`.
"""

from __future__ import annotations

from typing import Protocol


class ProgressSink(Protocol):
    def begin(self, total_items: int, total_bytes: int) -> None:
        """The work ahead: items (ledgers) and an estimate of the bytes (0: unknown)."""

    def advance(self, items: int = 0, nbytes: int = 0) -> None:
        """Items finished and bytes moved since the last call."""

    def note(self, message: str) -> None:
        """A detail worth showing (e.g. one fragment copied)."""

    def stop_requested(self) -> bool:
        """True once the user asked to stop (Ctrl-C): finish the step in hand, then return."""


class NoProgress:
    """Reports nothing and never asks to stop."""

    def begin(self, total_items: int, total_bytes: int) -> None:
        return None

    def advance(self, items: int = 0, nbytes: int = 0) -> None:
        return None

    def note(self, message: str) -> None:
        return None

    def stop_requested(self) -> bool:
        return False


NO_PROGRESS = NoProgress()
