"""Is an add's tail a matter of load? add_latency's open loop at several rates, with what each process spent.

add_latency measures two loads (20% and 80% of a peak); this runs the same open loop (the full client, E=3
Qw=3 Qa=2, 1 KiB, traced as add_latency traces) at the rates given, on one LocalCluster of three bookies
with the bench's settings, and prints for each run its p50/p99/p999, how busy the machine was, the client
process's cores, the cores, requests per second and CPU per request of each bookie over the timed window,
each bookie's add stages' means over it (bench.client_add.BookieMeter, whose spends add_latency prints too)
and the load of the bookies' disk (bench.disk.DiskLoadMeter). Under the client's Nagle rule (one AddRequest
unanswered per bookie while fewer than addPipelineMinBytes are), the requests per second follow the round
trip, not the rate: if the CPU and the tail stay where they are as the rate falls, the tail is the fixed
cost of a request on this machine, not queueing behind load. `--set KEY=VALUE` puts a bookie setting over
the bench's, to compare two settings on the same machine (e.g. `--set addStreamPort=-1`: adds over gRPC).

`python -m bench.latency_curve --rates 5000,10000,20000 --seconds 10 --runs 2`
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from bench import transport_floor
from bench.bookie_floor import runs_count
from bench.bookie_session import CONF_OVERRIDES
from bench.client_add import open_loop
from bench.cluster3 import ClusterSession
from bench.tails import describe_loop, describe_spends, percentile
from bkledger.bookie.local.cluster import ClusterError, LocalCluster

MAX_RATE = 1_000_000.0


def rates(text: str) -> list[float]:
    """'5000,10000' -> [5000.0, 10000.0]: adds/s, each above 0 and at most MAX_RATE."""
    found = []
    for word in text.split(","):
        try:
            rate = float(word)
        except ValueError:
            rate = 0.0
        if not 0 < rate <= MAX_RATE:
            raise argparse.ArgumentTypeError(f"each rate must be a number of adds/s above 0 and at most "
                                             f"{MAX_RATE:.0f}, not {word!r} (in {text!r})")
        found.append(rate)
    return found


def setting(text: str) -> tuple[str, str]:
    """'KEY=VALUE' -> (KEY, VALUE): a bookie setting over the bench's (the bookie checks the value)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"must be KEY=VALUE (a bookie setting), not {text!r}")
    return key.strip(), value.strip()


def describe_run(rate: float, latencies: list[float], achieved: float, busy: float | None,
                 client_cores: float | None, loop_cores: float | None = None,
                 loop_runqueue: float | None = None) -> str:
    """One run's line: the rate, p50/p99/p999 (ms), the machine's busy share, the client's cores and its
    event loop thread's time on a core and waiting for one."""
    q = [1000 * percentile(latencies, f) for f in (0.5, 0.99, 0.999)]
    machine = f"the machine {busy:.0%} busy" if busy is not None else "the machine's load unknown"
    client = f"the client {client_cores:.2f} cores" if client_cores is not None else "the client's cores unknown"
    if client_cores is not None and loop_cores is not None:
        client += f" (its event loop thread {describe_loop(loop_cores, loop_runqueue)})"
    return (f"full client at {rate:.0f}/s (acknowledged {achieved:.0f}/s): p50 {q[0]:.2f} p99 {q[1]:.2f} "
            f"p999 {q[2]:.2f} ms; {machine}, {client}")


def _runs(args: argparse.Namespace, directory: str) -> None:
    cluster = LocalCluster(directory)
    try:
        cluster.up(3, {**CONF_OVERRIDES, **dict(args.set)})
        session = ClusterSession(cluster)
        for rate in args.rates:
            for _ in range(args.runs):
                result = open_loop(session, rate, args.seconds)
                steal = result.steal
                print(describe_run(rate, result.latencies, result.achieved, steal.busy if steal else None,
                                   steal.process_cores if steal else None, steal.loop_cores if steal else None,
                                   steal.loop_runqueue if steal else None), flush=True)
                print(f"  {describe_spends(result.bookies)}", flush=True)
                if result.disk is not None:
                    print(f"  {result.disk.describe()}", flush=True)
                for i, spend in enumerate(result.bookies):
                    print(f"  bookie {i}: {spend.stage_means}", flush=True)
    finally:
        cluster.down(wipe=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency_curve", description=__doc__.split("\n")[0])
    parser.add_argument("--rates", type=rates, default=[5000.0, 10000.0, 20000.0], help="adds/s, comma-separated")
    parser.add_argument("--seconds", type=transport_floor.positive, default=10.0, help="of each run")
    parser.add_argument("--runs", type=runs_count, default=2, help="runs per rate (1 to 100)")
    parser.add_argument("--set", type=setting, action="append", default=[], metavar="KEY=VALUE",
                        help="a bookie setting over the bench's, e.g. addStreamPort=-1 (repeatable)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="latency-curve-") as directory:
        try:
            _runs(args, directory)
        except ClusterError as exc:      # a --set the bookies refuse, say
            print(f"python -m bench.latency_curve: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
