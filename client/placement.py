"""Ensemble placement: which bookies a new ledger or an ensemble change gets.

Mirrors BookKeeper's DefaultEnsemblePlacementPolicy (random among writable bookies). A policy is an
object with `new_ensemble` and `replace_bookie`, so a rack- or load-aware one can be passed in.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from typing import Protocol

from bkledger.client.errors import NotEnoughBookiesError


class PlacementPolicy(Protocol):
    def new_ensemble(self, ensemble_size: int, writable: Sequence[str], exclude: Collection[str] = ()) -> list[str]: ...

    def replace_bookie(
        self, ensemble: Sequence[str], writable: Sequence[str], exclude: Collection[str] = ()
    ) -> str: ...


class RandomPlacementPolicy:
    def __init__(self, seed: int | None = None):
        self._rng = random.Random(seed)

    def new_ensemble(self, ensemble_size: int, writable: Sequence[str], exclude: Collection[str] = ()) -> list[str]:
        candidates = sorted(set(writable) - set(exclude))
        if len(candidates) < ensemble_size:
            raise NotEnoughBookiesError(
                f"need {ensemble_size} writable bookies for the ensemble but only {len(candidates)} are available "
                f"({', '.join(candidates) or 'none'}); start more bookies or lower ensemble_size"
            )
        return self._rng.sample(candidates, ensemble_size)

    def replace_bookie(self, ensemble: Sequence[str], writable: Sequence[str], exclude: Collection[str] = ()) -> str:
        candidates = sorted(set(writable) - set(ensemble) - set(exclude))
        if not candidates:
            raise NotEnoughBookiesError(
                "no writable bookie outside the ensemble to replace a failed one; start another bookie"
            )
        return self._rng.choice(candidates)
