"""bench.aims: every run is printed with its own limit and whether it met the aim; the spread never hides a
run (the rule of issues 44 item 6 and 42 item 7: report every run and the spread, never the best draw)."""

from __future__ import annotations

from bench.aims import Aim, aim_rows, latency_rows, percentile
from bench.core import Row


def test_each_run_is_judged_against_its_own_limit():
    rows = aim_rows("b", "fig", "MB/s", [(8.0, 10.0), (5.0, 10.0), (9.0, 9.0)], Aim(">=", 0.8), "vs x")
    assert [r.figure for r in rows] == ["fig: run 1", "fig: run 2", "fig: run 3", "fig: spread"]
    assert [r.ratio for r in rows[:3]] == [0.8, 0.5, 1.0]
    assert rows[0].why.endswith("aim ratio >= 0.8: met")
    assert rows[1].why.endswith("aim ratio >= 0.8: NOT met")
    spread = rows[3]
    assert spread.limit is None and spread.value == 8.0             # the median run, not the best
    assert "ratio min 0.5 / median 0.8 / max 1" in spread.why
    assert spread.why.endswith("met in 2 of 3 runs")


def test_an_aim_on_the_value_itself():
    rows = aim_rows("b", "behind", "entries", [(0.0, None), (2.0, None), (0.0, None)], Aim("<=", 0, on="value"), "w")
    assert [r.why.rsplit(": ", 1)[-1] for r in rows[:3]] == ["met", "NOT met", "met"]
    assert "ratio" not in rows[3].why and rows[3].why.endswith("met in 2 of 3 runs")


def test_latency_rows_print_every_run_and_the_spread_of_p50_and_p99():
    runs = [[0.001 * i for i in range(1, 101)], [0.002 * i for i in range(1, 101)], [0.003] * 10]
    rows = latency_rows("b", "ack", runs, "one CAS")
    by_figure = {r.figure: r for r in rows}
    assert by_figure["ack: run 1 p99"].value == 99.0 and "p50 50.00" in by_figure["ack: run 1 p99"].why
    assert by_figure["ack: run 2 p99"].value == 198.0
    assert by_figure["ack: p50 spread"].value == 50.0                  # median of 50, 100, 3
    assert by_figure["ack: p99 spread"].why.startswith("min 3.00 / median 99.00 / max 198.00 ms over 3 runs")
    assert percentile([1.0], 0.99) == 1.0


def test_a_row_not_measured_has_no_ratio():
    row = Row("b", "seam", None, "rows/s", 5.0, "not measured")
    assert row.ratio is None and row.as_dict()["value"] is None
