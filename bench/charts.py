"""Charts of a `make bench` run: two SVG files drawn next to the results JSON, in pure Python (no plotting library).

- `<stem>-latency.svg`: the latency CDF of the add_latency runs, one line per load level. The y axis is in
  "nines" (0.5, 0.9, 0.99, 0.999: -log10(1 - fraction)), so the tail gets as much room as the median; the x
  axis is the latency in ms on a log scale. The points come from `add_latency_cdf` of the report (many
  fractions, written by bench.client_add) or, in reports older than that, from the p50/p99/p999 rows.
- `<stem>-ratios.svg`: every row that has a limit, as a bar of value / limit on a log scale, with the line at
  1 (the limit) marked.

`python -m bench.charts bench/results/latest.json` draws them for an existing report; `bench.run` calls
`write_charts` after each run. The functions that make the SVG text are pure (a report in, a string out).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

Report = Mapping[str, object]
Points = list[tuple[float, float]]          # (fraction of adds, latency in ms)

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
FONT = 'font-family="sans-serif" font-size="11"'
PERCENTILE_ROWS = {"p50": 0.5, "p99": 0.99, "p999": 0.999}
MAX_NINES = 4.0                              # the CDF's y axis ends at 0.9999


def _rows(report: Report) -> list[Mapping[str, object]]:
    rows = report.get("rows", [])
    return [r for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []


def latency_points(report: Report) -> dict[str, Points]:
    """Each add_latency load level's CDF points, ascending by fraction."""
    cdf = report.get("add_latency_cdf")
    if isinstance(cdf, Mapping) and cdf:
        return {str(label): sorted((float(f), float(ms)) for f, ms in points) for label, points in cdf.items()}
    found: dict[str, Points] = {}
    for row in _rows(report):
        label, _, name = str(row.get("figure", "")).rpartition(": ")
        value = row.get("value")
        if row.get("benchmark") == "add_latency" and name in PERCENTILE_ROWS and isinstance(value, int | float):
            found.setdefault(label, []).append((PERCENTILE_ROWS[name], float(value)))
    return {label: sorted(points) for label, points in found.items()}


def ratio_bars(report: Report) -> list[tuple[str, float]]:
    """(benchmark: figure, ratio) of every row compared to a limit, in the report's order."""
    bars = []
    for row in _rows(report):
        ratio = row.get("ratio")
        if isinstance(ratio, int | float) and ratio > 0:
            bars.append((f"{row.get('benchmark')}: {row.get('figure')}", float(ratio)))
    return bars


def _nines(fraction: float) -> float:
    return min(MAX_NINES, -math.log10(max(1e-12, 1.0 - fraction)))


def _log_ticks(low: float, high: float) -> list[float]:
    """1-2-5 ticks covering [low, high]; powers of ten only when it spans more than three decades."""
    ticks = []
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    for exponent in range(first, last + 1):
        for mantissa in (1, 2, 5) if last - first <= 3 else (1,):
            tick = mantissa * 10.0 ** exponent
            if low <= tick <= high:
                ticks.append(tick)
    return ticks


def _fmt(value: float) -> str:
    return f"{value:g}" if value >= 0.01 else f"{value:.0e}"


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {FONT}>',
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        *body,
        "</svg>",
        "",
    ])


def latency_cdf_svg(report: Report, width: int = 720, height: int = 400) -> str:
    """The CDF chart: x = latency (ms, log scale), y = fraction of adds at or below it (nines scale)."""
    series = {label: pts for label, pts in latency_points(report).items() if pts}
    title = f"add latency CDF, bench run {report.get('started', '?')}"
    left, right, top, bottom = 60, 20, 30, 50 + 16 * len(series)
    plot_w, plot_h = width - left - right, height - top - bottom
    if plot_h < 100:
        height += 100 - plot_h
        plot_h = 100
    body = [f'<text x="{left}" y="18" font-size="13">{escape(title)}</text>']
    values = [ms for pts in series.values() for _, ms in pts if ms > 0]
    if not values:
        body.append(f'<text x="{left}" y="{top + plot_h // 2}">no add_latency figures in this run</text>')
        return _svg(width, height, body, title)
    low, high = 10 ** math.floor(math.log10(min(values))), 10 ** math.ceil(math.log10(max(values)))
    if high <= low:
        high = low * 10

    def x(ms: float) -> float:
        return left + plot_w * (math.log10(max(ms, low)) - math.log10(low)) / (math.log10(high) - math.log10(low))

    def y(fraction: float) -> float:
        return top + plot_h * (1 - _nines(fraction) / MAX_NINES)

    body.append(f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>')
    for tick in _log_ticks(low, high):
        body.append(f'<line x1="{x(tick):.1f}" y1="{top}" x2="{x(tick):.1f}" y2="{top + plot_h}" stroke="#eee"/>')
        body.append(f'<text x="{x(tick):.1f}" y="{top + plot_h + 14}" text-anchor="middle">{_fmt(tick)}</text>')
    for fraction in (0.0, 0.5, 0.9, 0.99, 0.999, 0.9999):
        body.append(f'<line x1="{left}" y1="{y(fraction):.1f}" x2="{left + plot_w}" y2="{y(fraction):.1f}" '
                    f'stroke="#eee"/>')
        body.append(f'<text x="{left - 4}" y="{y(fraction) + 4:.1f}" text-anchor="end">{fraction:g}</text>')
    body.append(f'<text x="{left + plot_w / 2:.0f}" y="{top + plot_h + 30}" text-anchor="middle">'
                "latency, ms (log scale)</text>")
    body.append(f'<text x="14" y="{top + plot_h / 2:.0f}" text-anchor="middle" '
                f'transform="rotate(-90 14 {top + plot_h / 2:.0f})">fraction of adds at or below</text>')
    for index, (label, points) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        path = " ".join(f"{x(ms):.1f},{y(f):.1f}" for f, ms in points)
        body.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        body.extend(f'<circle cx="{x(ms):.1f}" cy="{y(f):.1f}" r="2.5" fill="{colour}"/>' for f, ms in points)
        legend_y = top + plot_h + 46 + 16 * index
        body.append(f'<rect x="{left}" y="{legend_y - 9}" width="12" height="10" fill="{colour}"/>')
        body.append(f'<text x="{left + 18}" y="{legend_y}">{escape(label)}</text>')
    return _svg(width, height, body, title)


def ratios_svg(report: Report, width: int = 900, bar_height: int = 14) -> str:
    """One bar per row with a limit: value / limit on a log scale; the line at 1 is the limit."""
    bars = ratio_bars(report)
    title = f"each figure against its limit (value / limit), bench run {report.get('started', '?')}"
    label_w, right, top = 470, 50, 40
    plot_w = width - label_w - right
    height = top + bar_height * max(1, len(bars)) + 40
    body = [f'<text x="8" y="18" font-size="13">{escape(title)}</text>']
    if not bars:
        body.append(f'<text x="8" y="{top + 12}">no figure with a limit in this run</text>')
        return _svg(width, height, body, title)
    ratios = [r for _, r in bars]
    low = 10 ** math.floor(math.log10(min(min(ratios), 0.1)))
    high = 10 ** math.ceil(math.log10(max(max(ratios), 10.0)))

    def x(ratio: float) -> float:
        return label_w + plot_w * (math.log10(ratio) - math.log10(low)) / (math.log10(high) - math.log10(low))

    bottom = top + bar_height * len(bars)
    for tick in _log_ticks(low, high):
        body.append(f'<line x1="{x(tick):.1f}" y1="{top}" x2="{x(tick):.1f}" y2="{bottom}" stroke="#eee"/>')
        body.append(f'<text x="{x(tick):.1f}" y="{bottom + 14}" text-anchor="middle">{_fmt(tick)}</text>')
    body.append(f'<text x="{label_w + plot_w / 2:.0f}" y="{bottom + 30}" text-anchor="middle">'
                "value / limit (log scale; 1 = at the limit)</text>")
    for index, (label, ratio) in enumerate(bars):
        y = top + bar_height * index
        short = label if len(label) <= 78 else label[:44] + "..." + label[-31:]   # keep the figure's end
        colour = COLOURS[0]
        body.append(f'<text x="{label_w - 6}" y="{y + bar_height - 3}" text-anchor="end" font-size="10">'
                    f"<title>{escape(label)}</title>{escape(short)}</text>")
        x0, x1 = x(low), x(ratio)
        body.append(f'<rect x="{x0:.1f}" y="{y + 2}" width="{max(1.0, x1 - x0):.1f}" height="{bar_height - 4}" '
                    f'fill="{colour}"><title>{escape(label)}: {ratio:.3g}</title></rect>')
        shown = f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.2g}"
        body.append(f'<text x="{x1 + 3:.1f}" y="{y + bar_height - 3}" font-size="9">{shown}</text>')
    body.append(f'<line x1="{x(1):.1f}" y1="{top - 4}" x2="{x(1):.1f}" y2="{bottom}" stroke="black" '
                'stroke-dasharray="4 3"/>')
    return _svg(width, height, body, title)


def chart_paths(json_path: Path) -> tuple[Path, Path]:
    """Where the two charts of a results file go: beside it, named after it."""
    return (json_path.with_name(f"{json_path.stem}-latency.svg"), json_path.with_name(f"{json_path.stem}-ratios.svg"))


def write_charts(report: Report, json_path: Path) -> list[Path]:
    """Write both charts next to `json_path`; returns their paths."""
    latency_path, ratios_path = chart_paths(json_path)
    latency_path.write_text(latency_cdf_svg(report))
    ratios_path.write_text(ratios_svg(report))
    return [latency_path, ratios_path]


def main(argv: Sequence[str] | None = None) -> int:
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: python -m bench.charts RESULTS.json [...]", file=sys.stderr)
        return 2
    for path in paths:
        written = write_charts(json.loads(path.read_text()), path)
        print(f"charts: {', '.join(str(p) for p in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
