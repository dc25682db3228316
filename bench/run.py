"""`python -m bench.run [--quick] [--only NAME,...] [--json PATH] [--dir DIR] [--group-sizes 4K,1M]`.

Runs the registered benchmarks in order, prints one table (benchmark, figure, value, unit, limit,
ratio, compared to/why) and writes it with the machine's facts as JSON to `bench/results/<UTC time>.json`
and `bench/results/latest.json` (or only to PATH with --json), with two SVG charts beside each (bench.charts:
a latency CDF and the ratios against their limits). Benchmarks are not tests: nothing here checks a number;
a benchmark that fails is reported and makes the exit status 1.

To add a benchmark: write a function `(Context) -> list[Row]` and append it to `BENCHMARKS`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench import (
    bookie_add,
    bookie_read,
    bookie_rss,
    client_add,
    client_bulk,
    disk,
    ledger_read,
    log_clients,
    log_offload,
    log_scale,
    metrics_overhead,
    recovery_time,
    rereplication,
    slow_bookie,
    spark_batch,
    tls,
)
from bench.charts import write_charts
from bench.core import Benchmark, Context, Row, Settings, size_label
from bench.machine import machine_facts

BENCHMARKS: list[tuple[str, Benchmark]] = [
    ("disk_limit", disk.run),
    ("bookie_add", bookie_add.run),
    ("bookie_read", bookie_read.run),
    ("replicated_add", client_add.run_throughput),
    ("bulk_add", client_bulk.run),
    ("add_latency", client_add.run_latency),
    ("ledger_read", ledger_read.run),
    ("recovery_time", recovery_time.run),
    ("bookie_rss", bookie_rss.run),
    ("spark_batch", spark_batch.run),
    ("rereplication", rereplication.run),
    ("tls", tls.run),
    ("metrics_overhead", metrics_overhead.run),
    ("slow_bookie", slow_bookie.run),
    ("log_scale", log_scale.run),
    ("log_clients", log_clients.run),
    ("log_offload", log_offload.run),
]

RESULTS_DIR = Path(__file__).resolve().parent / "results"
COLUMNS = ("benchmark", "figure", "value", "unit", "limit", "ratio", "compared to/why")
_UNITS = {"": 1, "B": 1, "K": 1024, "KIB": 1024, "M": 1024**2, "MIB": 1024**2}


def parse_size(text: str) -> int:
    """'4K' / '64KiB' / '1M' / '4096' -> bytes."""
    raw = text.strip().upper()
    digits = raw.rstrip("KMIB")
    unit = raw[len(digits):]
    if not digits.isdigit() or unit not in _UNITS or int(digits) <= 0:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: use e.g. 4K, 64KiB, 1M or 4096")
    return int(digits) * _UNITS[unit]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    names = [name for name, _ in BENCHMARKS]
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[2])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, under 2 minutes in all")
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(names)}")
    parser.add_argument("--json", type=Path, help="write the results here instead of bench/results/")
    parser.add_argument("--dir", type=Path, help="parent of the temporary data dir (default: /tmp)")
    parser.add_argument("--group-sizes", default="", help="disk_limit group sizes, e.g. 4K,64K,256K,1M,4M")
    args = parser.parse_args(argv)
    only = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(only) - set(names))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(names)}")
    args.only = only or names
    try:
        args.group_sizes = [parse_size(s) for s in args.group_sizes.split(",") if s.strip()]
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    return args


# ---- table ------------------------------------------------------------------------------------


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 100:
        return f"{value:.0f}"
    if size >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def render_table(rows: list[Row]) -> str:
    cells = [(r.benchmark, r.figure, fmt(r.value), r.unit, fmt(r.limit),
              "-" if r.ratio is None else f"{r.ratio:.2f}", r.why) for r in rows]
    widths = [max([len(COLUMNS[i])] + [len(c[i]) for c in cells]) for i in range(len(COLUMNS) - 1)]
    right = {2, 4, 5}

    def line(values: tuple[str, ...]) -> str:
        parts = [v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=False))]
        return " | ".join([*parts, values[-1]])

    rule = "-+-".join("-" * w for w in widths) + "-+-" + "-" * len(COLUMNS[-1])
    return "\n".join([line(COLUMNS), rule, *(line(c) for c in cells)])


# ---- run --------------------------------------------------------------------------------------


#: The sessions several benchmarks share (bench.bookie_session, bench.cluster3) and who uses them: each is
#: stopped and its disk freed after the last of them, so the run holds at most these and one benchmark's
#: own clusters (all of them together came to about 70 GB, more than this machine's disk sometimes has free).
SHARED_USERS: dict[str, frozenset[str]] = {
    "bookie": frozenset({"bookie_add", "bookie_read"}),
    "cluster3": frozenset({"replicated_add", "bulk_add", "add_latency", "ledger_read", "recovery_time", "tls"}),
}


def run_benchmarks(ctx: Context, names: list[str]) -> tuple[list[Row], dict[str, str], dict[str, float]]:
    """Rows, errors and seconds by benchmark; `ctx.facts["data_dir_bytes_after"]`: what the run's
    directory held after each benchmark (shared sessions still in use)."""
    rows: list[Row] = []
    errors: dict[str, str] = {}
    seconds: dict[str, float] = {}
    held: dict[str, int] = {}
    ctx.facts["data_dir_bytes_after"] = held
    selected = [(name, bench) for name, bench in BENCHMARKS if name in names]
    for index, (name, bench) in enumerate(selected):
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        start = time.monotonic()
        before = set(ctx.data_dir.iterdir())
        with contextlib.ExitStack() as stack:      # the benchmark's own clusters stop when it ends
            ctx.stack = stack
            try:
                rows.extend(bench(ctx))
            except Exception as exc:  # one failing benchmark must not hide the others' figures
                traceback.print_exc(file=sys.stderr)
                errors[name] = f"{type(exc).__name__}: {exc}"
        ctx.stack = ctx.run_stack
        later = {n for n, _ in selected[index + 1:]}
        for key, users in SHARED_USERS.items():
            if name in users and not users & later:
                ctx.release(key)
        kept = set(ctx.kept.values())
        for path in set(ctx.data_dir.iterdir()) - before - kept:   # what the benchmark's own clusters left
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        held[name] = _bytes_under(ctx.data_dir)
        seconds[name] = round(time.monotonic() - start, 2)
        print(f"[bench] {name} done in {seconds[name]:.1f} s", file=sys.stderr, flush=True)
    return rows, errors, seconds


def _bytes_under(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def write_json(report: dict[str, object], path: Path | None, stamp: str) -> list[Path]:
    text = json.dumps(report, indent=2) + "\n"
    targets = [path] if path is not None else [RESULTS_DIR / f"{stamp}.json", RESULTS_DIR / "latest.json"]
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return targets


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings.pick(args.quick)
    if args.group_sizes:
        settings = Settings(settings.mode, settings.limit_seconds, settings.add_seconds,
                            settings.window_entries, tuple(args.group_sizes), settings.compare_group_sizes)
    started = datetime.datetime.now(datetime.UTC)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    with contextlib.ExitStack() as stack:
        data_dir = Path(tempfile.mkdtemp(prefix="bkledger-bench-", dir=args.dir))
        stack.callback(shutil.rmtree, data_dir, ignore_errors=True)  # runs last: after clusters stop
        ctx = Context(data_dir, settings, stack)
        facts = machine_facts(data_dir)
        rows, errors, seconds = run_benchmarks(ctx, args.only)
    print(render_table(rows))
    for name, error in errors.items():
        print(f"FAILED {name}: {error}")
    report: dict[str, object] = {
        "started": started.isoformat(timespec="seconds"),
        "mode": settings.mode,
        "benchmarks": args.only,
        "group_sizes": [size_label(g) for g in settings.group_sizes],
        "seconds": seconds,
        "machine": {**facts, "load_average_at_end": list(os.getloadavg())},
        **ctx.facts,
        "rows": [r.as_dict() for r in rows],
        "errors": errors,
    }
    written = write_json(report, args.json, stamp)
    print(f"results: {', '.join(str(p) for p in written)}")
    charts = [chart for path in written for chart in write_charts(report, path)]
    print(f"charts: {', '.join(str(p) for p in charts)}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
