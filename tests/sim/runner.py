"""Command line of the simulation.

- `--seeds N [--first F]` runs seeds F..F+N-1 quietly, one report per violation, and prints
  "N seeds, V violations"; the first violation is shrunk (the smallest chaos-step budget that still fails)
  and printed with its trace and the shortest replay command (`make sim SEED=S STEPS=K`).
- `--seed S` replays one seed verbosely, printing the trace of every event (what `make sim SEED=S` runs).
- `--mutation M` runs with one deliberately broken rule (tests.sim.mutations.MUTATIONS).
- `--mutants` measures every mutant over the seed range and prints the table (mutation, seeds, violations,
  rate); the exit status is 1 if a mutant's rate is below `--bar` (what `make sim-mutants` runs).
  `--stop-early` stops a mutant as soon as it has enough violations to pass the bar (for CI).

The exit status is 1 when any seed violated the oracle (or, with --mutants, when a mutant escaped).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

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
        return mutants_table(names, args.first, args.seeds, args.bar, args.steps, stop_early=args.stop_early)
    return run_range(args.first, args.seeds, SimOptions(steps=args.steps, mutation=args.mutation))


def run_range(first: int, count: int, options: SimOptions) -> int:
    started = time.monotonic()
    violations: list[RunResult] = []
    for seed in range(first, first + count):
        result = run_seed(seed, options)
        if result.violation:
            violations.append(result)
            print(result.summary)
    elapsed = time.monotonic() - started
    print(f"{count} seeds ({first}..{first + count - 1}), {len(violations)} violations ({elapsed:.1f}s)")
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
                  stop_early: bool = False) -> int:
    """Run each mutant over seeds first..first+count-1; print the table; 1 if one is below the bar."""
    need = math.ceil(bar * count)
    print(f"seeds {first}..{first + count - 1}, bar {bar:.0%} ({need} of {count})"
          + (", stopping a mutant once it passes" if stop_early else ""))
    print(f"{'mutation':<24} {'seeds':>6} {'violations':>10} {'rate':>7}  first seeds")
    escaped = []
    started = time.monotonic()
    for name in names:
        options = SimOptions(steps=steps, mutation=name)
        caught: list[int] = []
        ran = 0
        for seed in range(first, first + count):
            ran += 1
            if run_seed(seed, options).violation is not None:
                caught.append(seed)
                if stop_early and len(caught) >= need:
                    break
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


def report(result: RunResult) -> None:
    print(result.summary)
    if result.violation is not None:
        print(result.violation)


if __name__ == "__main__":
    sys.exit(main())
