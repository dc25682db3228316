"""bench.peak: the closed loops' median is the peak only where an open loop keeps up at it (issue 48 item 3)."""

from __future__ import annotations

import pytest

from bench.peak import BELOW_ACKED, KEPT_UP, Peak, Probe, describe, next_probe


def search(peak: Peak, limit: int, acknowledged: list[float]) -> list[float]:
    """Drive the search as the bench does, each probe acknowledging the next of `acknowledged`."""
    rates = []
    answers = iter(acknowledged)
    while (rate := next_probe(peak, limit)) is not None:
        rates.append(rate)
        peak.probes.append(Probe(rate, next(answers)))
    return rates


def test_a_median_the_open_loop_keeps_up_at_is_the_peak() -> None:
    peak = Peak([99_993.0, 106_952.0, 119_222.0], 2e6)
    assert search(peak, 3, [106_000.0]) == [106_952.0]
    assert peak.rate == 106_952.0 and peak.closed == 106_952.0
    assert "the highest that kept up" in describe(peak) and "106,952 (0.99 acknowledged)" in describe(peak)


def test_a_probe_that_fell_behind_steps_below_what_it_acknowledged() -> None:
    """17:18's pass: 80% of a 135k median fell behind at 86.8k acknowledged; the search does not take 135k."""
    peak = Peak([124_946.0, 135_466.0, 137_939.0], None)
    rates = search(peak, 3, [90_000.0, 84_000.0])
    assert rates == [135_466.0, pytest.approx(90_000.0 * BELOW_ACKED)]
    assert peak.rate == pytest.approx(90_000.0 * BELOW_ACKED)      # 85,500 kept up: 84,000 >= 0.97 of it
    assert peak.probes[-1].kept_up and not peak.probes[0].kept_up


def test_the_search_stops_at_its_limit_and_says_when_nothing_kept_up() -> None:
    peak = Peak([100_000.0], None)
    rates = search(peak, 2, [80_000.0, 60_000.0])
    assert rates == [100_000.0, pytest.approx(76_000.0)]
    assert peak.rate == pytest.approx(60_000.0 * BELOW_ACKED)      # not probed: the words say so
    assert "none kept up" in describe(peak) and "not confirmed" in describe(peak)


def test_kept_up_is_a_share_of_the_scheduled_rate() -> None:
    assert Probe(1000.0, 1000.0 * KEPT_UP).kept_up
    assert not Probe(1000.0, 1000.0 * KEPT_UP - 1).kept_up
    assert Probe(1000.0, 1200.0).kept_up                            # a late start acknowledges faster


def test_no_probe_leaves_the_median() -> None:
    peak = Peak([3.0, 1.0, 2.0], None)
    assert search(peak, 0, []) == [] and peak.rate == 2.0
    assert "no open-loop probe" in describe(peak)
