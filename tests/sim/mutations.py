"""The deliberately broken protocol variants ("mutants") the simulation must catch, one per plausible bug.

A mutant is a rule switched off in production code, injected by the simulator exactly as it injects the
default rules: `BookieRules` of the bookie's request machine (`bookie.core.machine`), `WriterRules` of the
writer machine (`client.protocol.writer_machine`, which `client/writer.py` and the simulated writer both
run), `RecoveryRules` of the recovery machine (`client.protocol.recovery`) and its close
(`transforms.decide_recovery_close_conflict`), `ReaderRules` of the read decisions (`client.protocol.reads`:
the bound, the LAC reads' fence flag, the digest check, which `client/reader.py` and the simulated reader
both take) and `LogRules` of a new log writer's takeover (`client.log.core.takeover`, which
`client.log.ledgers.seal_tail` and the simulated log successor both follow). No simulated actor has a
switch of its own.
`python -m tests.sim.runner --mutation NAME` runs a mutant; `make sim-mutants` measures how often each one
violates the oracle over a seed range (the bar: at least `BAR` of the seeds).
"""

from __future__ import annotations

from bkledger.bookie.core.machine import DEFAULT_RULES as BOOKIE_DEFAULTS
from bkledger.bookie.core.machine import BookieRules
from bkledger.client.log.core.takeover import DEFAULT_LOG_RULES, LogRules
from bkledger.client.protocol.reads import DEFAULT_READER_RULES, ReaderRules
from bkledger.client.protocol.recovery import DEFAULT_RULES, RecoveryRules
from bkledger.client.protocol.writer_machine import DEFAULT_WRITER_RULES, WriterRules

#: The smallest share of seeds in which every mutant must violate the oracle.
BAR = 0.03

#: mutation name -> the rule it breaks and how.
MUTATIONS: dict[str, str] = {
    "ack-before-sync": "R8: a bookie acknowledges an add before its fsync",
    "unknown-as-negative": "R18: recovery counts timeouts and errors as NoSuchEntry",
    "no-write-back": "R19: recovery closes without writing recovered entries back",
    "no-fence-reads": "R18: recovery reads lack the fence flag (BookKeeper PR #2616)",
    "fence-shortcut": "R15: a bookie answers a fencing read before its fence is durable",
    "no-coverage": "R16: fencing stops at the first answer, not at quorum coverage",
    "ensemble-change-no-cas": "R9: the writer stores an ensemble change without the version CAS",
    "lac-before-quorum": "R6: the writer advances the LAC on one ack instead of Qa",
    "silent-replace-no-cas": "R9: the writer replaces a silent bookie (add timeout) without the version CAS",
    "complete-out-of-order": "R6: the writer completes an add before the adds below it",
    "read-past-lac": "R11: a reader of an open ledger returns entries above its LAC",
    "reader-fences": "R12: an open without recovery sends fencing reads",
    "close-no-adopt": "R20: a recoverer that lost the close race overwrites the stored close",
    "log-no-fence": "R28: a new log writer seals the previous tail at its LAC without fencing it",
    "fence-not-persisted": "R15: a bookie keeps its fence in memory only (lost on restart)",
    "no-digest-check": "R7: a reader returns a copy without verifying its digest",
    "rewrite-allowed": "issue 41: a bookie overwrites an entry it holds with a buggy client's other bytes",
    "flush-drops-fence": "R15: a bookie whose storage flush fails forgets the fences made since its last flush",
}


def recovery_rules(mutation: str) -> RecoveryRules:
    """The RecoveryRules a mutant injects into the real recovery machine (DEFAULT_RULES for the others)."""
    return {
        "no-fence-reads": RecoveryRules(fence_reads=False),
        "unknown-as-negative": RecoveryRules(unknown_as_negative=True),
        "no-coverage": RecoveryRules(fencing_coverage=False),
        "no-write-back": RecoveryRules(write_back=False),
        "close-no-adopt": RecoveryRules(adopt_stored_close=False),
    }.get(mutation, DEFAULT_RULES)


def writer_rules(mutation: str) -> WriterRules:
    """The WriterRules a mutant injects into the production writer machine (the defaults for the others)."""
    return {
        "ensemble-change-no-cas": WriterRules(ensemble_change_cas=False),
        "lac-before-quorum": WriterRules(ack_quorum=False),
        "silent-replace-no-cas": WriterRules(silent_replacement_cas=False),
        "complete-out-of-order": WriterRules(in_order=False),
    }.get(mutation, DEFAULT_WRITER_RULES)


def bookie_rules(mutation: str) -> BookieRules:
    """The BookieRules a mutant injects into the real bookie machine (the defaults for the others)."""
    return {
        "ack-before-sync": BookieRules(ack_after_sync=False),
        "fence-shortcut": BookieRules(fence_barrier=False),
        "fence-not-persisted": BookieRules(journal_fence=False),
        "rewrite-allowed": BookieRules(refuse_rewrites=False),
        "flush-drops-fence": BookieRules(keep_fence_on_failed_flush=False),
    }.get(mutation, BOOKIE_DEFAULTS)


def reader_rules(mutation: str) -> ReaderRules:
    """The ReaderRules a mutant injects into the production read decisions (the defaults for the others)."""
    return {
        "read-past-lac": ReaderRules(lac_bound=False),
        "reader-fences": ReaderRules(open_never_fences=False),
        "no-digest-check": ReaderRules(verify_digest=False),
    }.get(mutation, DEFAULT_READER_RULES)


def log_rules(mutation: str) -> LogRules:
    """The LogRules a mutant injects into a new log writer's takeover (the defaults for the others)."""
    return {"log-no-fence": LogRules(fence_previous_tail=False)}.get(mutation, DEFAULT_LOG_RULES)
