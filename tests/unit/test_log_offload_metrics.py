"""Offload figures among the per-log metrics (issue 42 item 5): offload lag in bytes and seconds and the
offloaded bytes, exported only for logs with tiered history; and the `describe` lines of the policy and of
the bookie copies waiting for their deletion."""

from __future__ import annotations

from prometheus_client.core import Metric

from bkledger.bookie.log_metrics import LogFigures, LogFiguresReader, log_metric_families
from bkledger.client.log.core import offload_policy as op
from bkledger.client.log.offloader import describe_copies


def samples(families: list[Metric], name: str) -> dict[str, float]:
    return {s.labels["log"]: s.value for fam in families if fam.name == name for s in fam.samples}


def test_offload_lag_and_offloaded_bytes_are_exported_for_tiered_logs_only():
    reader = LogFiguresReader(store=None, max_logs=10)       # type: ignore[arg-type,unused-ignore]  # figures by hand
    reader.figures = {
        "plain": LogFigures("plain", 2, 0, 10, 2, 0, 0, 1),
        "tiered": LogFigures("tiered", 3, 1, 70, 7, 0, 0, 1, op.OffloadLag(40, 1_000_000, 30)),
    }
    reader.refreshed_at = 1.0
    families = list(log_metric_families(reader, now=1_010.0))
    assert samples(families, "bkledger_log_offload_lag_bytes") == {"tiered": 40}
    assert samples(families, "bkledger_log_offload_lag_seconds") == {"tiered": 10.0}
    assert samples(families, "bkledger_log_offloaded_bytes") == {"tiered": 30}


def test_describe_says_how_many_bookie_copies_wait_and_when_the_first_is_due():
    found = [op.Copies("offloaded-00000002", (5, 6), 1_000), op.Copies("offloaded-00000001", (3,), 0)]
    assert describe_copies([], 10) == []
    assert describe_copies(found, 3600) == ["bookie copies       3 ledgers of 2 offload runs wait for deletion; "
                                            "the first due 1970-01-01 01:00:00 UTC"]
    assert describe_copies(found, None)[0].endswith("kept (deletion lag: keep)")
