"""Command line of the simulation.

- `--seeds N [--first F]` runs seeds F..F+N-1 quietly, one report per violation, and prints
  "N seeds, V violations"; the first violation is shrunk (the smallest chaos-step budget that still fails)
  and printed with its trace and the shortest replay command (`make sim SEED=S STEPS=K`).
- `--seed S` replays one seed verbosely, printing the trace of every event (what `make sim SEED=S` runs).
- `--mutation M` runs with one deliberately broken rule (tests.sim.mutations.MUTATIONS).
- `--mutants` measures every mutant over the seed range and prints the table (mutation, seeds, violations,
  rate); the exit status is 1 if a mutant's rate is below `--bar` (what `make sim-mutants` runs).
  `--stop-early` stops a mutant as soon as it has enough violations to pass the bar (for CI).
- `--jobs J` spreads the seeds over J worker processes (default: one per core); with --mutants, the
  mutants (each one's seeds in order in one process). Each seed is still one deterministic
  single-threaded run; the workers only say which seeds failed, and the parent re-runs the failing ones to
  print them, so the output does not depend on J.

The exit status is 1 when any seed violated the oracle (or, with --mutants, when a mutant escaped).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

from tests.sim.mutations import BAR, MUTATIONS
from tests.sim.scenario import RunResult, SimOptions, run_seed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.runner", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=200, help="run N seeds (default 200)")
    parser.add_argument("--first", type=int, default=0, help="first seed of --seeds (default 0)")
    parser.add_argument("--seed", type=int, default=None, help="replay this one seed verbosely")
    parser.add_argument("--steps", type=int, default=SimOptions.steps, help="chaos-phase step budget")
    parser.add_argument("--quiet", action="store_true", help="with --seed: no trace, summary only")
    parser.add_argument("--mutation", choices=["none", *MUTATIONS], default="none",
                        help="run with a deliberately broken protocol rule (to show the oracle catches it)")
    parser.add_argument("--mutants", action="store_true", help="measure every mutant over the seed range")
    parser.add_argument("--only", default="", help="with --mutants: comma-separated mutants to measure")
    parser.add_argument("--bar", type=float, default=BAR, help=f"with --mutants: lowest rate (default {BAR})")
    parser.add_argument("--stop-early", action="store_true",
                        help="with --mutants: stop a mutant once it has enough violations to pass the bar")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes for a seed range (default: one per core)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.seed is not None:
        result = run_seed(args.seed, SimOptions(steps=args.steps, mutation=args.mutation, verbose=not args.quiet))
        report(result)
        print(f"trace hash {result.trace_hash}")
        return 1 if result.violation else 0
    if args.mutants:
        names = [n for n in args.only.split(",") if n] or list(MUTATIONS)
        return mutants_table(names, args.first, args.seeds, args.bar, args.steps, stop_early=args.stop_early,
                             jobs=args.jobs)
    return run_range(args.first, args.seeds, SimOptions(steps=args.steps, mutation=args.mutation), jobs=args.jobs)


#: Seeds per task handed to a worker process.
CHUNK = 25


def _failing_seeds(task: tuple[int, int, int, str]) -> list[int]:
    """Worker: the seeds of first..first+count-1 that violate the oracle (the result object stays here)."""
    first, count, steps, mutation = task
    options = SimOptions(steps=steps, mutation=mutation)
    return [seed for seed in range(first, first + count) if run_seed(seed, options).violation is not None]


def failing_seeds(first: int, count: int, options: SimOptions, jobs: int = 1) -> Iterator[list[int]]:
    """The failing seeds of the range, one list per chunk of CHUNK seeds, in seed order; with jobs > 1 the
    chunks run in worker processes (each seed is the same deterministic run wherever it runs)."""
    tasks = [(start, min(CHUNK, first + count - start), options.steps, options.mutation)
             for start in range(first, first + count, CHUNK)]
    if jobs <= 1 or len(tasks) <= 1:
        yield from map(_failing_seeds, tasks)
        return
    pool = ProcessPoolExecutor(max_workers=jobs)
    try:
        futures = [pool.submit(_failing_seeds, task) for task in tasks]
        for future in futures:
            yield future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)   # a caller that stops early cancels the rest


def run_range(first: int, count: int, options: SimOptions, jobs: int = 1) -> int:
    started = time.monotonic()
    violations: list[RunResult] = []
    for failed in failing_seeds(first, count, options, jobs):
        for seed in failed:
            result = run_seed(seed, options)
            violations.append(result)
            print(result.summary, flush=True)
    elapsed = time.monotonic() - started
    print(f"{count} seeds ({first}..{first + count - 1}), {len(violations)} violations ({elapsed:.1f}s, "
          f"{count / max(elapsed, 1e-9):.0f} seeds/s, {max(jobs, 1)} jobs)")
    if violations:
        shortest = shrink(violations[0].seed, options)
        print(f"\nfirst violation, shrunk to {shortest.steps} steps:")
        report(shortest)
        print("other failing seeds: " + ", ".join(str(r.seed) for r in violations[1:11]))
    return 1 if violations else 0


def shrink(seed: int, options: SimOptions) -> RunResult:
    """The failing run of `seed` with the smallest chaos-step budget that still violates the oracle (a
    bisection over --steps; runs are deterministic, so the replay command reproduces it)."""
    best = run_seed(seed, options)
    low, high = 0, options.steps
    while low + 1 < high:
        mid = (low + high) // 2
        result = run_seed(seed, SimOptions(steps=mid, mutation=options.mutation))
        if result.violation is not None:
            best, high = result, mid
        else:
            low = mid
    return best


def mutants_table(names: list[str], first: int, count: int, bar: float, steps: int, *,
                  stop_early: bool = False, jobs: int = 1, significance: float | None = None) -> int:
    """Run each mutant over seeds first..first+count-1; print the table; 1 if one is below the bar. With
    `significance`, 1 only if one is significantly below it: so few violations that a mutant whose true
    rate is the bar would show them with at most that probability (a check that does not flake). With
    jobs > 1 the mutants run side by side, each in one worker process, its chunks in seed order: a mutant
    that stops early wastes no chunk run ahead of need, and the table does not depend on `jobs`."""
    need = math.ceil(bar * count) if significance is None else significant_need(bar, count, significance)
    rule = "" if significance is None else f", failing only below it at p <= {significance}"
    print(f"seeds {first}..{first + count - 1}, bar {bar:.0%} ({need} of {count}{rule})"
          + (", stopping a mutant once it passes" if stop_early else ""))
    print(f"{'mutation':<24} {'seeds':>6} {'violations':>10} {'rate':>7}  first seeds")
    escaped = []
    started = time.monotonic()
    tasks = [(name, first, count, steps, need if stop_early else None) for name in names]
    for name, (caught, ran) in zip(names, _catch_each(tasks, jobs), strict=True):
        rate = len(caught) / ran
        ok = len(caught) >= need
        if not ok:
            escaped.append(name)
        print(f"{name:<24} {ran:>6} {len(caught):>10} {rate:>7.1%}  {' '.join(map(str, caught[:4]))}"
              + ("" if ok else "   BELOW THE BAR"), flush=True)
    print(f"({time.monotonic() - started:.1f}s)")
    if escaped:
        print(f"mutants below the bar: {', '.join(escaped)}; replay one with "
              f"`python -m tests.sim.runner --seeds {count} --first {first} --mutation {escaped[0]}`")
    return 1 if escaped else 0


def significant_need(bar: float, count: int, significance: float) -> int:
    """The most violations k such that fewer than k in `count` seeds happen with probability <=
    `significance` when the true rate is `bar` (binomial lower tail)."""
    def below(k: int) -> float:
        return sum(math.comb(count, i) * bar ** i * (1 - bar) ** (count - i) for i in range(k))
    need = 0
    while need < count and below(need + 1) <= significance:
        need += 1
    return need


def _catch_each(tasks: list[tuple[str, int, int, int, int | None]], jobs: int) -> Iterator[tuple[list[int], int]]:
    """_catch of each task, in the tasks' order; with jobs > 1, one task per worker process at a time."""
    if jobs <= 1 or len(tasks) <= 1:
        yield from map(_catch, tasks)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        yield from pool.map(_catch, tasks)


def _catch(task: tuple[str, int, int, int, int | None]) -> tuple[list[int], int]:
    """(seeds where mutant `name` violated the oracle, seeds run), its chunks run one after another; stops
    after the chunk where `enough` violations were reached, if given (whole chunks of CHUNK seeds)."""
    name, first, count, steps, enough = task
    caught: list[int] = []
    ran = 0
    for start in range(first, first + count, CHUNK):
        size = min(CHUNK, first + count - start)
        caught.extend(_failing_seeds((start, size, steps, name)))
        ran += size
        if enough is not None and len(caught) >= enough:
            break
    return caught, ran


def report(result: RunResult) -> None:
    print(result.summary)
    if result.violation is not None:
        print(result.violation)


if __name__ == "__main__":
    sys.exit(main())
