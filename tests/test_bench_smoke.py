"""Smoke test of the benchmark harness: `python -m bench.run` runs, prints its table, writes its JSON.

Benchmarks are not tests, so no figure is checked against a target here: only that the harness works
end to end (a real ZooKeeper and one real bookie process) and that every figure is a positive number.
BKLEDGER_BENCH_TINY=1 cuts every measurement to a fraction of a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent


def test_quick_bench_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "BKLEDGER_BENCH_TINY": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "disk_limit,bookie_add",
         "--json", str(out), "--dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    header = done.stdout.splitlines()[0]
    for column in ("benchmark", "figure", "value", "unit", "limit", "ratio", "compared to/why"):
        assert column in header
    assert "disk_limit" in done.stdout and "bookie_add" in done.stdout

    report = json.loads(out.read_text())
    assert report["mode"] == "tiny"
    assert report["errors"] == {}
    assert report["machine"]["cores"] >= 1 and report["machine"]["memory_bytes"] > 0
    rows = report["rows"]
    assert {r["benchmark"] for r in rows} == {"disk_limit", "bookie_add"}
    figures = {(r["benchmark"], r["figure"], r["unit"]) for r in rows}
    for size in ("4 KiB", "64 KiB", "256 KiB", "1 MiB"):
        assert ("disk_limit", f"append+fdatasync {size} groups", "MB/s") in figures
        assert ("disk_limit", f"append+fdatasync {size} groups", "fsyncs/s") in figures
    for entries in ("1 KiB entries", "100 B entries"):
        assert ("bookie_add", f"{entries}: entries/s", "entries/s") in figures
        assert ("bookie_add", f"{entries}: journal MB/s", "MB/s") in figures
    for row in rows:
        assert row["value"] > 0, row
        if row["benchmark"] == "bookie_add":
            assert row["limit"] > 0 and row["ratio"] > 0, row
    assert not list(tmp_path.glob("bkledger-bench-*")), "the data dir was not removed"
    for chart in ("bench-latency.svg", "bench-ratios.svg"):      # bench.charts, drawn beside the JSON
        assert (tmp_path / chart).read_text().startswith("<svg"), chart
    # bookie_add is the last benchmark of this run that uses the shared bookie: it is stopped and its
    # disk freed right after, not at the end of the run
    assert report["data_dir_bytes_after"]["bookie_add"] < 1024 * 1024, report["data_dir_bytes_after"]


def test_tiny_client_benchmarks(tmp_path: Path) -> None:
    """The three-bookie benchmarks: replicated adds through the real client (ratio to fsync / Qw) and
    recovery of a ledger whose writer was killed -9 with adds in flight, healthy and with a paused bookie."""
    out = tmp_path / "bench.json"
    env = {**os.environ, "BKLEDGER_BENCH_TINY": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "replicated_add,recovery_time",
         "--json", str(out), "--dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["errors"] == {}
    rows = report["rows"]
    assert {r["benchmark"] for r in rows} == {"replicated_add", "recovery_time"}
    figures = {(r["benchmark"], r["figure"], r["unit"]) for r in rows}
    for writers in ("1 writer (1 ledger, 1 thread)", "8 writers (1 client, 8 ledgers, a thread each)"):
        assert ("replicated_add", f"{writers}, 1 KiB: entries/s", "entries/s") in figures
        assert ("replicated_add", f"{writers}, 1 KiB: payload MB/s", "MB/s") in figures
    assert ("recovery_time", "open with recovery, healthy", "ms") in figures
    assert ("recovery_time", "open with recovery, 1 bookie paused (SIGSTOP)", "ms") in figures
    for row in rows:
        assert row["value"] > 0 and row["limit"] > 0 and row["ratio"] > 0, row
    assert not list(tmp_path.glob("bkledger-bench-*")), "the data dir was not removed"
    held = report["data_dir_bytes_after"]     # the shared three bookies stay for recovery_time, then go
    assert held["replicated_add"] > 1024 * 1024 and held["recovery_time"] < 1024 * 1024, held


def test_tiny_add_latency_tells_its_tails(tmp_path: Path) -> None:
    """Issue 48 item 2: each open-loop run is printed with its p50/p99/p999, the floor measured beside it
    (raw fdatasync on the same disk), the transport floor run after it (bench.transport_floor), GC pauses
    and CPU steal; the spread of the runs; and the stage
    attribution of the worst run's p99 adds (client.add_trace joined with the bookies' slow-add logs)."""
    out = tmp_path / "bench.json"
    env = {**os.environ, "BKLEDGER_BENCH_TINY": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "add_latency", "--json", str(out),
         "--dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["errors"] == {}
    figures = {r["figure"]: r for r in report["rows"]}
    # the loads are fractions of a peak measured in the latency runs' own conditions, a row of its own
    peak = figures["peak the loads are fractions of (1 writer, what the open loop sustains)"]
    assert peak["value"] > 0 and "on fresh clusters, traced as the latency runs" in peak["why"], peak
    assert "open loops at " in peak["why"] and " acknowledged)" in peak["why"], peak   # the one probe of tiny
    for load in ("20%", "80%"):
        label = next(f.split(":")[0] for f in figures if f.startswith(f"{load} of peak"))
        scheduled = figures[f"{label}: acknowledged rate"]["limit"]
        assert scheduled == pytest.approx(int(load[:2]) / 100 * peak["value"]), (scheduled, peak)
        run = figures[f"{label}: run 1 p99"]
        assert "floor (raw append+fdatasync" in run["why"] and "GC" in run["why"] and "steal" in run["why"], run
        assert run["limit"] > 0, run           # the floor's p99, measured meanwhile
        assert "transport floor (the same open loop" in run["why"], run
        assert "requests/s at " in run["why"] and " ms of CPU each" in run["why"], run   # each bookie's spend
        against = figures[f"{label}: p99 against the transport floor"]
        assert against["limit"] > 0 and against["value"] > 0, against
        for name in ("p50", "p99", "p999"):
            assert figures[f"{label}: {name} spread"]["why"].startswith("min "), figures[f"{label}: {name} spread"]
        worst = figures[f"{label}: the worst run's p99 adds by stage"]
        for stage in ("queue", "send_wait", "bookie", "complete"):
            assert f"{stage} " in worst["why"], worst
    runs = [r for r in report["add_latency_runs"] if "run" in r]
    assert len(runs) == 2 and all(r["floor_ms"]["p50"] > 0 and r["gc_pauses_ms"] is not None for r in runs), runs
    assert all(0 < r["transport_ms"]["p50"] <= r["transport_ms"]["p99"] for r in runs), runs
    assert all(len(r["bookies"]) == 3 and all(b["requests_per_s"] > 0 and b["cpu_ms_per_request"] > 0
                                              for b in r["bookies"]) for r in runs), runs
    attributions = [r["attribution"] for r in report["add_latency_runs"] if "attribution" in r]
    assert len(attributions) == 2 and all(a["adds"] >= 1 for a in attributions), attributions


def _tiny_run(tmp_path: Path, only: str, timeout: float) -> dict[str, Any]:
    out = tmp_path / "bench.json"
    env = {**os.environ, "BKLEDGER_BENCH_TINY": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", only, "--json", str(out), "--dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    assert report["errors"] == {}
    assert not list(tmp_path.glob("bkledger-bench-*")), "the data dir was not removed"
    return report


def _aimed(figures: dict[str, dict[str, Any]], figure: str, runs: int = 3) -> None:
    """Every run of an aimed figure says whether it met its aim; the spread counts the runs that did."""
    for k in range(1, runs + 1):
        why = figures[f"{figure}: run {k}"]["why"]
        assert why.endswith((": met", ": NOT met")), why
    spread = figures[f"{figure}: spread"]["why"]
    assert "met in " in spread and f"of {runs} runs" in spread, spread


def test_tiny_log_clients(tmp_path: Path) -> None:
    """Issue 44 item 6: 8 producer processes vs one LogWriter (ratio to the writer of the same run) and their
    commit latency, a 1 MiB transaction across two logs vs the same appends, a cursor ack's latency."""
    report = _tiny_run(tmp_path, "log_clients", 300)
    figures = {r["figure"]: r for r in report["rows"]}
    producers = "8 producers (processes) into one log, 1 KiB records"
    _aimed(figures, f"{producers}: aggregate payload", runs=1)
    _aimed(figures, "transaction of 1 MiB across two logs (1 KiB records)", runs=1)
    for k in (1,):                    # the tiny form runs each figure once (full and quick: 3)
        for figure in (f"{producers}: aggregate payload: run {k}",
                       f"transaction of 1 MiB across two logs (1 KiB records): run {k}"):
            assert figures[figure]["value"] > 0 and figures[figure]["limit"] > 0, figures[figure]
        for figure in (f"{producers}: commit latency at half that throughput: run {k} p99",
                       f"cursor acknowledgement (reader.ack(position)): run {k} p99"):
            assert figures[figure]["value"] > 0 and "p50 " in figures[figure]["why"], figures[figure]
    for name in ("p50", "p99"):
        assert figures[f"cursor acknowledgement (reader.ack(position)): {name} spread"]["why"].startswith("min ")


def test_tiny_log_offload(tmp_path: Path) -> None:
    """Issue 42 item 7, the rows today's code supports: offload vs the client's write rate, Spark's Parquet
    scan of the table vs pyarrow's plain file, the table's disk bytes per payload byte, the freshness of a
    format("bkledger") read; and a format("bkledger") read of the same log before and after its offload."""
    report = _tiny_run(tmp_path, "log_offload", 420)
    figures = {r["figure"]: r for r in report["rows"]}
    label = "1 MiB log of 1 KiB records"
    for figure in (f"offload ({label})", f"Spark Parquet scan of the offloaded table folder ({label})"):
        _aimed(figures, figure, runs=1)                  # the tiny form runs once (full and quick: 3 runs)
        assert figures[f"{figure}: run 1"]["ratio"] > 0
    disk = f"disk bytes per payload byte, the table's own ({label})"
    _aimed(figures, disk, runs=1)
    assert 1.0 <= figures[f"{disk}: run 1"]["value"] < 4.0                          # a table, not 3 copies
    fresh = 'freshness: format("bkledger") last row vs the LAC at planning'
    _aimed(figures, fresh, runs=1)
    assert figures[f"{fresh}: run 1"]["value"] >= 0
    seam = f'format("bkledger") over offloaded history vs over bookies ({label})'
    _aimed(figures, seam, runs=1)
    assert figures[f"{seam}: run 1"]["value"] > 0 and figures[f"{seam}: run 1"]["limit"] > 0


def test_the_latency_curve_runs_the_full_client_at_each_rate(tmp_path: Path) -> None:
    """bench.latency_curve end to end (a real ZooKeeper, three real bookies, the full client): per run a line
    with its percentiles and the machine's and client's CPU, one with the bookies' cores, requests per
    second and CPU per request, and one per bookie with its add stages' means read from its metrics."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.latency_curve", "--rates", "200,400", "--seconds", "0.5", "--runs", "1"],
        cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path)}, capture_output=True, text=True, timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [line for line in done.stdout.splitlines() if line.startswith("full client at ")]
    assert [line.split("/s")[0] for line in runs] == ["full client at 200", "full client at 400"], done.stdout
    assert all(" p99 " in line and "busy, the client " in line for line in runs), runs
    spends = [line for line in done.stdout.splitlines() if line.startswith("  the bookies ")]
    assert len(spends) == 2 and all(" requests/s at " in line for line in spends), done.stdout
    stages = [line for line in done.stdout.splitlines() if line.startswith("  bookie ")]
    assert len(stages) == 6 and all(": stage means (ms): decide " in line for line in stages), stages
    assert list(tmp_path.glob("latency-curve-*")) == []            # its cluster's directory is removed
