"""Helpers of the operations tests (metrics, admin HTTP, progress): placement on chosen bookies."""

from __future__ import annotations

from collections.abc import Collection, Sequence


class OnBookies:
    """Placement on given bookies first (so a test knows which bookies hold a ledger)."""

    def __init__(self, first: Sequence[str]) -> None:
        self.first = list(first)

    def new_ensemble(self, ensemble_size: int, writable: Sequence[str], exclude: Collection[str] = ()) -> list[str]:
        chosen = [b for b in self.first if b in writable][:ensemble_size]
        chosen += [b for b in writable if b not in chosen and b not in exclude][: ensemble_size - len(chosen)]
        return chosen

    def replace_bookie(self, ensemble: Sequence[str], writable: Sequence[str], exclude: Collection[str] = ()) -> str:
        return next(b for b in writable if b not in ensemble and b not in exclude)
