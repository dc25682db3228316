"""bench.charts: the two SVG charts `make bench` draws beside its results (issue 43 item 3: docs/performance.md
shows a latency CDF and the ratios against their limits), tested on a small fake report."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from bench.charts import chart_paths, latency_cdf_svg, latency_points, main, ratio_bars, ratios_svg, write_charts

SVG = "{http://www.w3.org/2000/svg}"

FAKE = {
    "started": "2026-11-27T00:00:00+00:00",
    "rows": [
        {"benchmark": "disk_limit", "figure": "append+fdatasync 4 KiB groups", "value": 20.0, "unit": "MB/s",
         "limit": None, "ratio": None, "why": "the limit itself"},
        {"benchmark": "bookie_add", "figure": "1 KiB entries: payload MB/s <fast & cheap>", "value": 300.0,
         "unit": "MB/s", "limit": 1000.0, "ratio": 0.3, "why": "raw fsync"},
        {"benchmark": "add_latency", "figure": "20% of peak: p50", "value": 5.0, "unit": "ms", "limit": 0.25,
         "ratio": 20.0, "why": ""},
        {"benchmark": "add_latency", "figure": "20% of peak: p50 vs aim", "value": 5.0, "unit": "ms",
         "limit": 2.0, "ratio": 2.5, "why": ""},
        {"benchmark": "add_latency", "figure": "20% of peak: p99", "value": 10.0, "unit": "ms", "limit": 0.25,
         "ratio": 40.0, "why": ""},
        {"benchmark": "add_latency", "figure": "20% of peak: p999", "value": 13.0, "unit": "ms", "limit": 0.25,
         "ratio": 52.0, "why": ""},
        {"benchmark": "add_latency", "figure": "80% of peak: p50", "value": 17.0, "unit": "ms", "limit": 0.5,
         "ratio": 34.0, "why": ""},
        {"benchmark": "add_latency", "figure": "80% of peak: p99", "value": 44.0, "unit": "ms", "limit": 0.5,
         "ratio": 88.0, "why": ""},
    ],
}


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)          # well-formed XML, so a browser and GitHub render it
    assert root.tag == f"{SVG}svg"
    return root


def test_latency_points_come_from_the_percentile_rows_in_order() -> None:
    points = latency_points(FAKE)
    assert points == {"20% of peak": [(0.5, 5.0), (0.99, 10.0), (0.999, 13.0)],
                      "80% of peak": [(0.5, 17.0), (0.99, 44.0)]}


def test_latency_points_prefer_the_recorded_cdf() -> None:
    report = {**FAKE, "add_latency_cdf": {"20% of peak": [[0.9, 8.0], [0.1, 3.0], [0.5, 5.0]]}}
    assert latency_points(report) == {"20% of peak": [(0.1, 3.0), (0.5, 5.0), (0.9, 8.0)]}


def test_latency_cdf_draws_one_line_per_load_level_rising_with_latency() -> None:
    root = _parse(latency_cdf_svg(FAKE))
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 2
    for line in lines:
        xy = [tuple(map(float, p.split(","))) for p in line.attrib["points"].split()]
        assert [x for x, _ in xy] == sorted(x for x, _ in xy), "latency grows along the line"
        assert [y for _, y in xy] == sorted((y for _, y in xy), reverse=True), "so does the fraction (SVG y is down)"
    texts = "".join(root.itertext())
    assert "20% of peak" in texts and "80% of peak" in texts and "0.999" in texts


def test_ratio_bars_are_every_row_with_a_limit() -> None:
    bars = ratio_bars(FAKE)
    assert [label for label, _ in bars][0] == "bookie_add: 1 KiB entries: payload MB/s <fast & cheap>"
    assert len(bars) == 7, "the disk_limit row has no limit and no bar"
    root = _parse(ratios_svg(FAKE))
    rects = [r for r in root.findall(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(rects) == 7
    widths = {r.find(f"{SVG}title").text.rsplit(": ", 1)[0]: float(r.attrib["width"]) for r in rects}  # type: ignore[union-attr]
    assert widths["add_latency: 80% of peak: p99"] > widths["add_latency: 20% of peak: p50"] > \
        widths["bookie_add: 1 KiB entries: payload MB/s <fast & cheap>"], "a longer bar for a larger ratio"
    assert "<fast &amp; cheap>" not in ratios_svg(FAKE) and "&lt;fast &amp; cheap&gt;" in ratios_svg(FAKE)


def test_an_empty_report_still_gives_valid_charts_that_say_so() -> None:
    assert "no add_latency figures" in "".join(_parse(latency_cdf_svg({"rows": []})).itertext())
    assert "no figure with a limit" in "".join(_parse(ratios_svg({})).itertext())


def test_write_charts_puts_both_beside_the_json(tmp_path: Path) -> None:
    results = tmp_path / "20261127T000000Z.json"
    results.write_text(json.dumps(FAKE))
    assert main([str(results)]) == 0
    latency, ratios = chart_paths(results)
    assert latency.name == "20261127T000000Z-latency.svg" and ratios.name == "20261127T000000Z-ratios.svg"
    _parse(latency.read_text())
    _parse(ratios.read_text())
    assert write_charts(FAKE, tmp_path / "latest.json") == [tmp_path / "latest-latency.svg",
                                                           tmp_path / "latest-ratios.svg"]
