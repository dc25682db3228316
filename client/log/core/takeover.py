"""How a new log writer seals the previous writer's tail (R28): the log layer's protocol rule, pure.

A new writer of a log (LogWriter, a producer's or a transaction's commit, append_ledgers) first seals every
ledger the log does not record as sealed: it opens each with recovery, which fences the old writer's
bookies, recovers what a quorum holds and closes the ledger (R14-R20), so that the old writer can add
nothing more and the end it records is final. `tail_seal` says how; `client.log.ledgers.seal_tail` runs it on
real bookies and the simulated log successor (tests.sim.recoverer) on simulated ones. `LogRules` are the
switches: anything but the defaults is a known bug, injected only by the simulation's mutants and their tests.
"""

from __future__ import annotations

import dataclasses
import enum


@dataclasses.dataclass(frozen=True)
class LogRules:
    """Protocol switches of the log layer. Anything but the defaults is a known bug, for tests only."""

    fence_previous_tail: bool = True   # R28: the previous tail is sealed by a fencing recovery (False: its
    #                                    end is the LAC a plain read finds, and the old writer goes on adding)


DEFAULT_LOG_RULES = LogRules()


class TailSeal(enum.Enum):
    """How the previous tail ledger is sealed."""

    RECOVER = "recover"     # open with recovery: fence, recover, close at the recovered last entry (R28)
    READ_LAC = "read_lac"   # a known bug: open without recovery and take its LAC as the end; nothing fenced


def tail_seal(rules: LogRules = DEFAULT_LOG_RULES) -> TailSeal:
    """R28: a new log writer seals the previous tail with a fencing recovery (READ_LAC only with the rule off)."""
    return TailSeal.RECOVER if rules.fence_previous_tail else TailSeal.READ_LAC
