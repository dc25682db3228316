"""The status page's pure parts (bookie.status_page): inline SVG charts and sections that fail alone."""

from __future__ import annotations

from bkledger.bookie.status_page import _section, bar_chart, render_page
from bkledger.client.meta.errors import MetadataStoreError


def test_bar_chart_escapes_labels_and_scales_to_the_limit() -> None:
    svg = bar_chart([("<script>alert(1)</script>", 50.0), ("b&c", 100.0)], unit="%", limit=100.0, mark=95.0,
                    mark_label="diskUsageThreshold")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "b&amp;c" in svg
    assert svg.count("<rect") == 2 and "stroke-dasharray" in svg and "95.0%" in svg
    assert bar_chart([]) == ""


def test_a_failing_section_says_so_and_the_page_still_renders() -> None:
    def broken() -> str:
        raise MetadataStoreError("ZooKeeper at 127.0.0.1:1 unreachable")

    page = render_page([("Logs", _section(broken)), ("Bookies", _section(lambda: "<p>fine</p>"))])
    assert "not available: ZooKeeper at 127.0.0.1:1 unreachable" in page and "<p>fine</p>" in page
    assert "<script" not in page
