"""Command line of the simulation: `python -m tests.sim.runner --seeds N [--seed S] [--steps K]`.

`--seeds N` runs seeds 0..N-1 (quietly, one line per violation) and prints "N seeds, V violations";
`--seed S` replays one seed verbosely, printing the trace of every event, then the summary (this is what
`make sim SEED=S` runs). The exit status is 1 when any seed violated the oracle.
"""

from __future__ import annotations

import argparse
import sys
import time

from client.protocol.recovery import RecoveryRules
from tests.sim.scenario import RunResult, SimOptions, run_seed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.runner", description=__doc__)
    parser.add_argument("--seeds", type=int, default=200, help="run seeds 0..N-1 (default 200)")
    parser.add_argument("--seed", type=int, default=None, help="replay this one seed verbosely")
    parser.add_argument("--steps", type=int, default=SimOptions.steps, help="chaos-phase step budget")
    parser.add_argument("--first", type=int, default=0, help="first seed of --seeds (default 0)")
    parser.add_argument("--quiet", action="store_true", help="with --seed: no trace, summary only")
    parser.add_argument("--mutation", choices=["none", "no-fence-reads", "unknown-as-negative", "no-coverage",
                                               "no-write-back", "ack-before-sync", "fence-shortcut"], default="none",
                        help="run with a deliberately broken protocol rule (to show the oracle catches it)")
    return parser.parse_args(argv)


def options_for(mutation: str, steps: int, verbose: bool) -> SimOptions:
    rules = {
        "no-fence-reads": RecoveryRules(fence_reads=False),
        "unknown-as-negative": RecoveryRules(unknown_as_negative=True),
        "no-coverage": RecoveryRules(fencing_coverage=False),
        "no-write-back": RecoveryRules(write_back=False),
    }.get(mutation, RecoveryRules())
    return SimOptions(steps=steps, rules=rules, ack_before_sync=mutation == "ack-before-sync",
                      fence_shortcut=mutation == "fence-shortcut", verbose=verbose, mutation=mutation)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.seed is not None:
        result = run_seed(args.seed, options_for(args.mutation, args.steps, not args.quiet))
        report(result)
        print(f"trace hash {result.trace_hash}")
        return 1 if result.violation else 0
    started = time.monotonic()
    options = options_for(args.mutation, args.steps, False)
    violations: list[RunResult] = []
    for seed in range(args.first, args.first + args.seeds):
        result = run_seed(seed, options)
        if result.violation:
            violations.append(result)
            report(result)
    elapsed = time.monotonic() - started
    print(f"{args.seeds} seeds, {len(violations)} violations ({elapsed:.1f}s)")
    if violations:
        print("replay: " + ", ".join(f"make sim SEED={r.seed}" for r in violations[:10]))
    return 1 if violations else 0


def report(result: RunResult) -> None:
    print(result.summary)
    if result.violation is not None:
        print(result.violation)


if __name__ == "__main__":
    sys.exit(main())
