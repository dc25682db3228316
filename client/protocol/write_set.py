"""Write sets: which ensemble members store an entry (R5).

Mirrors BookKeeper's RoundRobinDistributionSchedule: the write set of entry e is the Qw consecutive
ensemble indices starting at `e mod E`, wrapping around. Everything here works on ensemble *indices*;
the caller maps them to bookie ids through the fragment that holds the entry.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator


@functools.lru_cache(maxsize=4096)
def _write_set_from(start: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    return tuple((start + i) % ensemble_size for i in range(write_quorum))


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    """R5: the ensemble indices that store entry_id, in write-set order (first index = entry_id mod E)."""
    if not 1 <= write_quorum <= ensemble_size:
        raise ValueError(f"need 1 <= write_quorum ({write_quorum}) <= ensemble_size ({ensemble_size})")
    if entry_id < 0:
        raise ValueError(f"entry ids start at 0, got {entry_id}")
    return _write_set_from(entry_id % ensemble_size, ensemble_size, write_quorum)


def all_write_sets(ensemble_size: int, write_quorum: int) -> tuple[tuple[int, ...], ...]:
    """The E distinct write sets of an ensemble (one per starting index), each of Qw indices."""
    return tuple(_write_set_from(s, ensemble_size, write_quorum) for s in range(ensemble_size))


def bookie_holds(index: int, entry_id: int, ensemble_size: int, write_quorum: int) -> bool:
    """True when the bookie at ensemble `index` is in the write set of entry_id."""
    return (index - entry_id) % ensemble_size < write_quorum


def entries_for_index(index: int, first_entry_id: int, last_entry_id: int,
                      ensemble_size: int, write_quorum: int) -> Iterator[int]:
    """The entry ids in [first_entry_id, last_entry_id] that the bookie at `index` stores, ascending.

    Entry e is stored at `index` when (index - e) mod E < Qw, i.e. e mod E is one of the Qw residues
    index, index-1, ..., index-Qw+1 (mod E).
    """
    residues = sorted({(index - k) % ensemble_size for k in range(write_quorum)})
    base = first_entry_id - first_entry_id % ensemble_size
    while base <= last_entry_id:
        for r in residues:
            e = base + r
            if first_entry_id <= e <= last_entry_id:
                yield e
        base += ensemble_size
