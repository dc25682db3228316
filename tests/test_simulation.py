"""Deterministic simulation of the protocol core (DESIGN.md "Tests"; PROTOCOL.md "The oracle", 1-7).

Runs the real client/bookie core machines (PendingAdds, LedgerRecovery, transforms, reads, digest, bookie
decisions, journal record codec) through `tests.sim`: simulated network, disk and metadata store, random
faults, the oracle checked after every step. A failing seed prints its replay command
(`make sim SEED=<seed>`).

The mutant test runs every deliberately broken rule (tests.sim.mutations: a rule switched off in production
code: BookieRules, WriterRules, RecoveryRules, ReaderRules, LogRules) over a fresh random seed range and
requires each to violate the oracle in at least 3% of the seeds (`make sim-mutants` prints the same table
for any range).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bkledger.bookie.core.records import encode_add_batch, encode_fence, encode_ledger_key
from tests.sim import SimOptions, run_seed
from tests.sim.disk import SimJournal
from tests.sim.mutations import BAR, MUTATIONS
from tests.sim.runner import main as runner_main
from tests.sim.runner import mutants_table, significant_need
from tests.sim.scenario import Simulation

ROOT = Path(__file__).resolve().parent.parent

#: Seeds that every build must pass.
FIXED_SEEDS = list(range(300))
FRESH_SEEDS = 20
#: The mutant check in CI: a fresh random seed range of this size per mutant, run on up to two worker
#: processes, a mutant stopping as soon as it reached the bar (3%: 18 violations). The rarest mutants are
#: caught in about 4-8% of seeds; a mutant with a true rate of 6% fails this check with probability 2e-4,
#: at 5% 6e-3 (binomial). 1000 seeds would make that 1e-5 and 7e-4 but take about twice as long (~130 s on
#: a loaded 2-core machine). The world was tuned on seeds 0-2999.
MUTANT_SEEDS = 600
MUTANT_JOBS = min(2, os.cpu_count() or 1)
MUTANT_SIGNIFICANCE = 0.001   # fail when a mutant is significantly below the bar (7 of 600 at 3%), not by chance
TUNED_BELOW = 3000


def _assert_holds(seed: int, options: SimOptions = SimOptions()) -> None:
    result = run_seed(seed, options)
    assert result.violation is None, f"{result.summary}\n{result.violation}"


@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_fixed_seed_holds_the_oracle(seed: int) -> None:
    """Oracle 1-7 after every step of a fixed seed (faults: crashes, pauses, fsync errors, partitions, lost
    ZooKeeper answers, writer crash, concurrent recoveries)."""
    _assert_holds(seed)


def test_fresh_random_seeds_hold_the_oracle() -> None:
    """A few new seeds every run, so the suite keeps exploring; a failure names the seed to replay."""
    seeds = [random.SystemRandom().randrange(2**32) for _ in range(FRESH_SEEDS)]
    print(f"fresh simulation seeds: {seeds}")
    for seed in seeds:
        result = run_seed(seed)
        assert result.violation is None, (f"fresh seed {seed} failed; replay with `make sim SEED={seed}`\n"
                                          f"{result.summary}\n{result.violation}")


def test_same_seed_same_run() -> None:
    """Determinism: one seed, one run (same trace hash); another seed, another run."""
    first, again, other = run_seed(7), run_seed(7), run_seed(8)
    assert first.trace_hash == again.trace_hash
    assert first.steps == again.steps
    assert first.trace_hash != other.trace_hash


def test_run_does_not_depend_on_the_hash_seed() -> None:
    """Determinism across processes: PYTHONHASHSEED (set/dict order of strings) does not change a run."""
    hashes = set()
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-m", "tests.sim.runner", "--seed", "11", "--quiet"], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=120, check=True).stdout
        hashes.add(next(line for line in out.splitlines() if line.startswith("trace hash")))
    assert len(hashes) == 1


def test_runner_summary_and_replay(capsys: pytest.CaptureFixture[str]) -> None:
    """`--seeds N` prints "N seeds, 0 violations"; `--seed S` prints the trace of that run."""
    assert runner_main(["--seeds", "3"]) == 0
    assert "3 seeds (0..2), 0 violations" in capsys.readouterr().out
    assert runner_main(["--seed", "2", "--steps", "300"]) == 0
    out = capsys.readouterr().out
    assert "setup:" in out and "trace hash" in out


def test_buggy_client_requests_leave_the_oracle_clean() -> None:
    """Issue 41 item 7: in the seeds with a buggy client (wild entry ids, rewrites of held entries with other
    bytes, fences of unknown ids) the oracle holds, and the bookies refused its rewrites (EBADREQ); the
    "rewrite-allowed" mutant, a bookie without that rule, is caught by oracle 4 (the mutant test)."""
    refused = present = 0
    for seed in range(30):
        sim = Simulation(seed, SimOptions())
        sim.run()
        if sim.buggy is not None:
            present += 1
            refused += sim.buggy.refused_rewrites
    assert present >= 5 and refused > 0


def test_sim_journal_replay_stops_at_torn_tail() -> None:
    """R23 in the simulated disk: a crash keeps a torn prefix of unsynced records; replay keeps the whole
    records before it and cuts the rest, so the next append lands after the valid prefix."""
    journal = SimJournal()
    journal.append(encode_ledger_key(1, b"k" * 20))
    body = b"\x00" * 40
    journal.append(encode_add_batch(1, [0], [len(body)], body))
    journal.sync()
    journal.append(encode_fence(1))
    journal.append(encode_add_batch(1, [1], [len(body)], body))
    durable = journal.synced
    journal.unsynced = journal.unsynced[:-5]   # the last record is torn
    journal.durable += journal.unsynced
    journal.unsynced.clear()
    records, cut = journal.replay()
    assert [type(r).__name__ for r in records] == ["LedgerKeyRecord", "AddBatchRecord", "FenceRecord"]
    assert cut > 0 and journal.synced > durable


def test_every_mutant_is_caught_on_a_fresh_seed_range(capsys: pytest.CaptureFixture[str]) -> None:
    """Each deliberately broken rule (tests.sim.mutations: R6, R8, R9, R11, R12, R15, R16, R18, R19, R20, R28,
    R7) violates the oracle on a seed range never used while tuning the world, at a rate not significantly
    below 3% (fewer than 7 of 600 fails: a mutant at 3% does that with p <= 0.001, one at 1% in 6 runs of
    10); `make sim-mutants` holds the strict 3% bar. The range is random and printed, so a failure replays
    with `make sim-mutants FROM=<first> SEEDS=<n>`."""
    first = random.SystemRandom().randrange(TUNED_BELOW, 2**31)
    status = mutants_table(list(MUTATIONS), first, MUTANT_SEEDS, BAR, SimOptions.steps, stop_early=True,
                           jobs=MUTANT_JOBS, significance=MUTANT_SIGNIFICANCE)
    out = capsys.readouterr().out
    print(out)
    assert status == 0, f"a mutant escaped; replay with `make sim-mutants FROM={first} SEEDS={MUTANT_SEEDS}`\n{out}"


def test_the_significant_bar_is_the_binomial_lower_tail() -> None:
    assert significant_need(0.03, 600, 0.001) == 7
    assert significant_need(0.03, 600, 1.0) == 600 and significant_need(0.03, 600, 0.0) == 0


def test_a_violation_prints_the_shrunk_replay(capsys: pytest.CaptureFixture[str]) -> None:
    """A failing range prints the first violation shrunk to fewer chaos steps, with its trace and the
    `make sim SEED=... MUTATION=... STEPS=...` command that replays exactly it."""
    assert runner_main(["--seeds", "40", "--first", "0", "--mutation", "lac-before-quorum"]) == 1
    out = capsys.readouterr().out
    assert "shrunk to" in out and "replay: make sim SEED=" in out and "MUTATION=lac-before-quorum" in out
    assert "last trace lines" in out


def test_mutant_options_reject_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown mutation"):
        SimOptions(mutation="no-such-bug")
