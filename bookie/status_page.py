"""The read-only status page of the bookie's admin HTTP (`GET /status`): one HTML page, no token needed.

What it shows: the cluster's bookies as ZooKeeper has them (writable and read-only registrations, and
bookies with a cookie but no registration: down), this bookie's disks (journal and ledger directories,
usage against diskUsageThreshold), the logs (ledgers, bytes, entries, age of the last commit, read as the
autorecovery daemon's per-log figures are: `bookie.log_metrics`) and the under-replicated ledgers with the
elected auditor. Two charts, drawn here as inline SVG (no script, nothing fetched from the network): disk
usage per directory, and bytes per log.

It only reads. Its cost is bounded like the metrics': the logs' figures are read at most once every
`LOG_FIGURES_MAX_AGE_S` however often the page is loaded (heads in multiRead requests, segments only of
logs that changed), at most `LOG_ROWS` logs and `UR_ROWS` under-replicated ledgers are listed, and a section
whose ZooKeeper read fails says so instead of failing the page.
"""

from __future__ import annotations

import html
import logging
import threading
import time
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from bkledger.bookie.http_admin import Reply, Route, bookie_info
from bkledger.bookie.log_metrics import LogFigures, LogFiguresReader
from bkledger.client.errors import BKError

if TYPE_CHECKING:
    from bkledger.bookie.serving import BookieServerView as BookieServer

log = logging.getLogger("bkledger.status")

LOG_FIGURES_MAX_AGE_S = 10.0
LOG_ROWS = 200
UR_ROWS = 50
CHART_BARS = 12
_STYLE = """
body{font-family:sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:.9em}td,th{padding:.25em .7em;border-bottom:1px solid #eee;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}.writable{color:#17803d}.read-only{color:#b7791f}
.down{color:#c53030;font-weight:bold}.err{color:#c53030}.muted{color:#777}
"""


def status_routes(server: BookieServer) -> dict[str, Route]:
    """`/status`: registered beside the admin API's routes (GET only, so no token)."""
    page = StatusPage(server)
    return {"/status": Route(get=page.get, content_type="text/html; charset=utf-8")}


class StatusPage:
    def __init__(self, server: BookieServer) -> None:
        self.server = server
        self._figures: LogFiguresReader | None = None
        self._lock = threading.Lock()

    def get(self, _query: dict[str, str], _body: Any) -> Reply:
        return HTTPStatus.OK, render_page(self.sections()).encode()

    def sections(self) -> list[tuple[str, str]]:
        return [("Bookies", _section(self._bookies)), ("Disks of this bookie", _section(self._disks)),
                ("Logs", _section(self._logs)), ("Under-replicated ledgers", _section(self._under_replicated))]

    def _bookies(self) -> str:
        store = self.server.store
        writable, readonly = store.writable_bookies(), store.readonly_bookies()
        known = sorted(set(store.cookie_bookies()) | set(writable) | set(readonly))
        rows = []
        for bookie_id in known:
            state = "writable" if bookie_id in writable else "read-only" if bookie_id in readonly else "down"
            here = " (this bookie)" if bookie_id == self.server.config.bookie_id else ""
            rows.append([_e(bookie_id) + here, f'<span class="{state}">{state}</span>'])
        summary = (f"<p>{len(writable)} writable, {len(readonly)} read-only, "
                   f"{len(known) - len(writable) - len(readonly)} down (a cookie but no registration)</p>")
        return summary + _table(["bookie", "state"], rows)

    def _disks(self) -> str:
        info = bookie_info(self.server)
        threshold = self.server.config.diskUsageThreshold
        rows = [[d["kind"], _e(d["path"]), _bytes(d["freeSpace"]), _bytes(d["totalSpace"]),
                 f"{d['usage'] * 100:.1f}%"] for d in info["directories"]]
        chart = bar_chart([(f"{d['kind']} {d['path']}", d["usage"] * 100) for d in info["directories"]],
                          unit="%", limit=100.0, mark=threshold * 100, mark_label="diskUsageThreshold")
        return (f"<p>bookie {_e(info['bookieId'])}: {_e(info['state'])}, {info['ledgers']} ledgers</p>"
                + chart + _table(["kind", "directory", "free", "size", "usage"], rows, numeric=(2, 3, 4)))

    def _logs(self) -> str:
        figures, total = self._log_figures()
        if not total:
            return "<p class=muted>no logs</p>"
        ordered = sorted(figures.values(), key=lambda f: (-f.bytes, f.name))
        now_ms = time.time() * 1000
        rows = [[_e(f.name), str(f.ledgers), str(f.open_ledgers), _bytes(f.bytes), str(f.entries),
                 _age((now_ms - f.last_commit_ms) / 1000)] for f in ordered[:LOG_ROWS]]
        more = f"<p class=muted>{total - min(len(ordered), LOG_ROWS)} more not listed</p>" \
            if total > LOG_ROWS or total > len(ordered) else ""
        chart = bar_chart([(f.name, float(f.bytes)) for f in ordered[:CHART_BARS]], unit="B")
        return (f"<p>{total} logs; bytes and entries count sealed ledgers</p>" + chart
                + _table(["log", "ledgers", "open", "bytes", "entries", "last commit"], rows,
                         numeric=(1, 2, 3, 4, 5)) + more)

    def _log_figures(self) -> tuple[dict[str, LogFigures], int]:
        with self._lock:             # one reader, refreshed at most every LOG_FIGURES_MAX_AGE_S
            if self._figures is None:
                self._figures = LogFiguresReader(self.server.store, max_logs=LOG_ROWS)
            figures, total, at = self._figures.snapshot()
            if time.time() - at > LOG_FIGURES_MAX_AGE_S:
                self._figures.refresh()
                figures, total, at = self._figures.snapshot()
        return figures, total

    def _under_replicated(self) -> str:
        from bkledger.client.meta.underreplication import UnderReplicationManager

        ur = UnderReplicationManager(self.server.store)
        marks = ur.list_marked()
        auditor = ur.auditor()
        head = (f"<p>{len(marks)} under-replicated; autorecovery "
                f"{'enabled' if ur.is_enabled() else '<span class=down>disabled</span>'}; auditor "
                f"{_e(auditor) if auditor else '<span class=muted>none elected</span>'}</p>")
        rows = [[str(m.ledger_id), _e(", ".join(m.replicas)), _age(time.time() - m.ctime_ms / 1000)]
                for m in marks[:UR_ROWS]]
        return head + (_table(["ledger", "missing replicas", "marked"], rows) if rows else "")


def _section(build: Callable[[], str]) -> str:
    try:
        return build()
    except (BKError, OSError, TimeoutError) as exc:
        log.warning("status page: a section failed: %s", exc)
        return f'<p class="err">not available: {_e(str(exc))}</p>'


def render_page(sections: Sequence[tuple[str, str]]) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    body = "".join(f"<h2>{_e(title)}</h2>\n{content}\n" for title, content in sections)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=utf-8><title>bkledger status</title>"
            f"<style>{_STYLE}</style></head><body><h1>bkledger status</h1>"
            f"<p class=muted>read {stamp}; reload to refresh</p>\n{body}</body></html>\n")


def bar_chart(bars: Sequence[tuple[str, float]], unit: str = "", limit: float | None = None,
              mark: float | None = None, mark_label: str = "") -> str:
    """A horizontal bar chart as inline SVG: one labelled bar per (label, value), scaled to `limit` (else
    the largest value); `mark` draws a dashed line at that value (a threshold)."""
    if not bars:
        return ""
    width, label_w, bar_h, gap = 720, 260, 18, 6
    top = max([limit or 0.0, *(v for _, v in bars), mark or 0.0]) or 1.0
    height = len(bars) * (bar_h + gap) + 24
    scale = (width - label_w - 90) / top
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'style="font:12px sans-serif">']
    for i, (label, value) in enumerate(bars):
        y = i * (bar_h + gap) + 4
        out.append(f'<text x="{label_w - 8}" y="{y + 13}" text-anchor="end">{_e(_short(label, 38))}</text>'
                   f'<rect x="{label_w}" y="{y}" width="{max(value * scale, 1):.1f}" height="{bar_h}" '
                   f'fill="#3182ce"/><text x="{label_w + value * scale + 6:.1f}" y="{y + 13}">'
                   f"{_e(_amount(value, unit))}</text>")
    if mark is not None:
        x = label_w + mark * scale
        out.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height - 18}" stroke="#c53030" '
                   f'stroke-dasharray="4 3"/><text x="{x:.1f}" y="{height - 4}" fill="#c53030" '
                   f'text-anchor="middle">{_e(mark_label)} {_e(_amount(mark, unit))}</text>')
    return "".join(out) + "</svg>"


def _table(headers: list[str], rows: list[list[str]], numeric: tuple[int, ...] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{cell}</td>'
                                    for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def _amount(value: float, unit: str) -> str:
    return _bytes(value) if unit == "B" else f"{value:.1f}{unit}"


def _bytes(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} d ago"
