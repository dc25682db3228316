"""R16/R18: quorum coverage, checked exhaustively against a brute-force oracle for every E <= 6."""

from __future__ import annotations

import itertools

import pytest

from bkledger.client.protocol.quorum import ack_quorum_reached, coverage_threshold, covered, entry_negative
from bkledger.client.protocol.write_set import write_set


def _oracle_covered(responded: set[int], e: int, qw: int, qa: int) -> bool:
    """Brute force: no set of Qa bookies inside one write set is entirely unresponded."""
    for start in range(e):
        members = [(start + i) % e for i in range(qw)]
        for quorum in itertools.combinations(members, qa):
            if not any(b in responded for b in quorum):
                return False
    return True


def _all_configs(max_e: int = 6):
    for e in range(1, max_e + 1):
        for qw in range(1, e + 1):
            for qa in range(1, qw + 1):
                yield e, qw, qa


def test_covered_matches_oracle_exhaustively():
    """R16: covered() equals the brute-force oracle for every E<=6, Qw<=E, Qa<=Qw and responder subset."""
    checked = 0
    for e, qw, qa in _all_configs():
        for mask in range(1 << e):
            responded = {i for i in range(e) if mask >> i & 1}
            assert covered(responded, e, qw, qa) == _oracle_covered(responded, e, qw, qa), (e, qw, qa, responded)
            checked += 1
    assert checked == sum((1 << e) * sum(range(1, e + 1)) for e in range(1, 7))


@pytest.mark.parametrize("qw,qa,needed", [(2, 1, 2), (2, 2, 1), (3, 1, 3), (3, 2, 2), (3, 3, 1),
                                          (4, 2, 3), (4, 3, 2), (4, 4, 1)])
def test_threshold_table_of_seed_000(qw, qa, needed):
    """R16/R18: the negative-responses-required table of seed 000 is (Qw - Qa) + 1."""
    assert coverage_threshold(qw, qa) == needed
    assert entry_negative(set(range(needed)), qw, qa)
    assert not entry_negative(set(range(needed - 1)), qw, qa)


def test_fencing_with_full_write_quorum_needs_e_minus_qa_plus_one():
    """R16: with E == Qw the cohort is the ensemble: (E - Qa) + 1 fenced bookies, any of them."""
    for e in range(1, 7):
        for qa in range(1, e + 1):
            for k in range(e + 1):
                for responded in itertools.combinations(range(e), k):
                    assert covered(set(responded), e, e, qa) == (k >= e - qa + 1)


def test_five_bookies_two_down_sharing_a_write_set_is_not_covered():
    """R16 scenario: E=5 Qw=3 Qa=2; one bookie down is fine, two adjacent ones are not."""
    assert covered({0, 1, 2, 3}, 5, 3, 2)
    assert not covered({0, 1, 2}, 5, 3, 2)       # 3 and 4 share write set (3, 4, 0)
    assert not covered({0, 2, 4}, 5, 3, 2)       # write set (1, 2, 3) has one responder
    assert covered({0, 1, 3, 4}, 5, 3, 2)


def test_ack_quorum_reached_counts_only_write_set_members():
    """R6: acks from bookies outside the entry's write set do not count."""
    assert write_set(1, 4, 2) == (1, 2)
    assert not ack_quorum_reached({0, 3}, 1, 4, 2, 1)
    assert ack_quorum_reached({2}, 1, 4, 2, 1)
    assert not ack_quorum_reached({1}, 1, 4, 2, 2)
    assert ack_quorum_reached({1, 2, 3}, 1, 4, 2, 2)
