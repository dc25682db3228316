"""examples/grafana-dashboard.json (issue 45 item 5): every metric name its PromQL expressions and
variables use is one a real bookie, autorecovery daemon (the elected auditor) or client exports, scraped
from a real local cluster (the client's registry in-process: it is the application's)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from bkledger.client.metrics import add_default_collectors
from tests.integration.bookie_util import wait_for
from tests.integration.test_log_figures import write_log
from tests.integration.test_metrics import Samples, client, parse, scrape, value

pytestmark = pytest.mark.integration

DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana-dashboard.json"
NOT_METRICS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
               "offset", "inf", "nan"}
# what the issue asks the dashboard to show, one series (at least) each
REQUIRED = {"bookie_BOOKIE_ADD_ENTRY_total", "bookkeeper_server_ADD_ENTRY_REQUEST_bucket",
            "bookie_journal_JOURNAL_SYNC_bucket", "bookie_SERVER_STATUS", "bookie_ledger_dir_free_bytes",
            "bookie_LAST_CHECKPOINT_TIMESTAMP_SECONDS", "bookkeeper_client_ADD_ENTRY_total",
            "auditor_NUM_UNDER_REPLICATED_LEDGERS", "bkledger_log_bytes", "bkledger_log_ledgers",
            "bkledger_log_entries", "bkledger_log_last_commit_age_seconds", "process_cpu_seconds_total",
            "process_resident_memory_bytes"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers left once strings, label matchers,
    `by (...)` groupings, range selectors, Grafana variables, numbers and function calls are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        rest = text[match.end():].lstrip()
        start = match.start()
        if rest.startswith("(") or (start and (text[start - 1].isdigit() or text[start - 1] == ".")):
            continue                                     # a function, or the exponent of a number
        if match.group().lower() not in NOT_METRICS:
            names.add(match.group())
    return names


def dashboard_names(dashboard: dict) -> set[str]:
    names: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            names |= metric_names(target["expr"])
    for variable in dashboard["templating"]["list"]:
        query = variable.get("definition", "")
        names |= {m.group(1) for m in re.finditer(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)", query)}
    return names


def test_metric_names_come_out_of_promql():
    expr = ('histogram_quantile(0.99, sum by (le, instance) (rate(a_bucket{success="true",x=~"$v"}[$__rate_interval])))'
            ' / ignoring(job) b_total offset 5m and time() - c_SECONDS > 1e3')
    assert metric_names(expr) == {"a_bucket", "b_total", "c_SECONDS"}


def test_every_metric_the_dashboard_names_is_exported(cluster_factory):
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    used = dashboard_names(dashboard)
    assert used >= REQUIRED, REQUIRED - used

    cluster = cluster_factory(1, conf={"logMetricsInterval": "1", "gcWaitTime": "1000"}, autorecovery=True)
    registry = CollectorRegistry()
    with client(cluster.metadata_service_uri, metrics_registry=registry) as bk:
        write_log(bk, "orders", ledgers=2, per_ledger=10)
        handle = bk.create_ledger(1, 1, 1, password=b"pw")
        handle.add_entry(b"x")
        handle.close()
    add_default_collectors(registry)                     # as the application's default registry has them
    client_names = set(parse(generate_latest(registry).decode()))

    def auditor() -> Samples | None:
        samples = scrape(cluster.bookies[0].autorecovery_metrics_port)     # up: `up` waited for it
        return samples if value(samples, "bkledger_log_ledgers", log="orders") == 2 else None

    exported: set[str] = set()
    for samples in (scrape(cluster.bookies[0].metrics_port), wait_for(auditor, 60, "the auditor's log figures")):
        exported |= {name for name, _ in samples}
    exported |= {name for name, _ in client_names}
    missing = used - exported
    assert not missing, f"the dashboard names metrics nobody exports: {sorted(missing)}"
