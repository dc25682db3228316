"""R5: write sets are Qw consecutive ensemble indices starting at entry_id mod E."""

from __future__ import annotations

import pytest

from bkledger.client.protocol.write_set import all_write_sets, bookie_holds, entries_for_index, write_set


def test_write_set_round_robin():
    """R5: entry e goes to indices e mod E, e+1 mod E, ..., Qw of them, wrapping around."""
    assert write_set(0, 3, 2) == (0, 1)
    assert write_set(2, 3, 2) == (2, 0)
    assert write_set(7, 5, 3) == (2, 3, 4)
    assert write_set(9, 5, 3) == (4, 0, 1)
    assert write_set(4, 3, 3) == (1, 2, 0)


@pytest.mark.parametrize("ensemble_size", range(1, 7))
def test_write_set_properties(ensemble_size):
    """R5: Qw distinct indices; membership agrees with bookie_holds; E distinct sets per ensemble."""
    for qw in range(1, ensemble_size + 1):
        assert len(set(all_write_sets(ensemble_size, qw))) == ensemble_size
        for entry_id in range(3 * ensemble_size):
            members = write_set(entry_id, ensemble_size, qw)
            assert len(set(members)) == qw
            assert members[0] == entry_id % ensemble_size
            for index in range(ensemble_size):
                assert bookie_holds(index, entry_id, ensemble_size, qw) == (index in members)


@pytest.mark.parametrize("ensemble_size,qw", [(1, 1), (3, 2), (5, 3), (4, 4), (6, 1)])
def test_entries_for_index_matches_write_sets(ensemble_size, qw):
    """R5: entries_for_index lists exactly the entries whose write set contains the index, ascending."""
    for first, last in [(0, 0), (0, 20), (3, 17), (7, 6), (11, 40)]:
        for index in range(ensemble_size):
            expected = [e for e in range(first, last + 1) if index in write_set(e, ensemble_size, qw)]
            assert list(entries_for_index(index, first, last, ensemble_size, qw)) == expected


def test_write_set_rejects_bad_arguments():
    """R1/R5: a write quorum larger than the ensemble or a negative entry id is a bug."""
    with pytest.raises(ValueError):
        write_set(0, 2, 3)
    with pytest.raises(ValueError):
        write_set(-1, 3, 2)
