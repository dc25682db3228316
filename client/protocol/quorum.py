"""Ack quorums and quorum coverage (R6, R16, R18).

Mirrors BookKeeper's QuorumCoverageSet / AckSet of RoundRobinDistributionSchedule. Quorum coverage of a
set of responding bookies: no write set is left with an ack quorum (Qa) of bookies that did not respond,
i.e. every write set holds at least `Qw - Qa + 1` responders. Fencing is complete when the fenced bookies
cover the ensemble (R16); an entry is unrecoverable when `Qw - Qa + 1` bookies of its write set said
NoSuchEntry / NoSuchLedger (R18). See seed 000 ("Closing Ledgers Safely") for the table of thresholds.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from bkledger.client.protocol.write_set import all_write_sets, write_set


def coverage_threshold(write_quorum: int, ack_quorum: int) -> int:
    """Responses needed from one cohort (write set) so that no ack quorum of it is left out: Qw - Qa + 1."""
    return write_quorum - ack_quorum + 1


def covered(responded: Collection[int], ensemble_size: int, write_quorum: int, ack_quorum: int) -> bool:
    """R16: True when every write set of the ensemble has at least Qw - Qa + 1 responders.

    Equivalently: there is no set of Qa bookies inside one write set that all did not respond.
    `responded` holds ensemble indices.
    """
    need = coverage_threshold(write_quorum, ack_quorum)
    if len(responded) < need:
        return False
    if write_quorum == ensemble_size:
        return sum(1 for i in range(ensemble_size) if i in responded) >= need
    for members in all_write_sets(ensemble_size, write_quorum):
        if sum(1 for i in members if i in responded) < need:
            return False
    return True


def ack_quorum_reached(acked: Iterable[int], entry_id: int, ensemble_size: int,
                       write_quorum: int, ack_quorum: int) -> bool:
    """R6: True when at least Qa distinct bookies of entry_id's write set acknowledged it."""
    members = write_set(entry_id, ensemble_size, write_quorum)
    return len(set(acked).intersection(members)) >= ack_quorum


def entry_negative(negatives: Collection[int], write_quorum: int, ack_quorum: int) -> bool:
    """R18: an entry is unrecoverable once Qw - Qa + 1 bookies of its write set explicitly lack it."""
    return len(negatives) >= coverage_threshold(write_quorum, ack_quorum)
