"""Per-log figures (issue 45 item 5): ledgers, bytes, entries and the age of the last commit of every log,
exported by the elected auditor's autorecovery daemon (bookie.log_metrics), read from the logs' records in
ZooKeeper at logMetricsInterval, segments re-read only for logs whose head changed."""

from __future__ import annotations

import time

import pytest

from bkledger.bookie.log_metrics import LogFiguresReader
from tests.integration.bookie_util import wait_for
from tests.integration.test_metrics import Samples, client, scrape, value

pytestmark = pytest.mark.integration

RECORD = b"r" * 100


def write_log(bk, name: str, ledgers: int, per_ledger: int, close: bool = True):
    writer = bk.open_log_writer(name, ensemble_size=1, write_quorum=1, ack_quorum=1)
    for n in range(ledgers):
        for _ in range(per_ledger):
            writer.append(RECORD)
        if n < ledgers - 1:
            writer.roll()
    if close:
        writer.close()
    return writer


def test_the_auditor_exports_figures_of_each_log(cluster_factory):
    cluster = cluster_factory(2, conf={"logMetricsInterval": "1"}, autorecovery=True)
    ports = [b.autorecovery_metrics_port for b in cluster.bookies]
    with client(cluster.metadata_service_uri) as bk:
        write_log(bk, "orders", ledgers=3, per_ledger=20)
        tail = write_log(bk, "events", ledgers=1, per_ledger=5, close=False)     # one open ledger
        written_at = time.time()

        def exported() -> tuple[Samples, list[Samples]] | None:
            scraped = [scrape(p) for p in ports]      # every daemon serves: the cluster's `up` waited for it
            auditors = [s for s in scraped if value(s, "auditor_IS_AUDITOR") == 1]
            if len(auditors) != 1 or value(auditors[0], "bkledger_log_entries", log="orders") != 60 \
                    or value(auditors[0], "bkledger_log_ledgers", log="events") != 1:
                return None                        # (a round may have run between the two logs' writes)
            return auditors[0], [s for s in scraped if s is not auditors[0]]

        auditor, others = wait_for(exported, 60, "the auditor to export the figures of both logs")
        assert value(auditor, "bkledger_log_ledgers", log="orders") == 3
        assert value(auditor, "bkledger_log_open_ledgers", log="orders") == 0
        assert value(auditor, "bkledger_log_bytes", log="orders") >= 60 * len(RECORD)
        assert value(auditor, "bkledger_log_ledgers", log="events") == 1
        assert value(auditor, "bkledger_log_open_ledgers", log="events") == 1
        assert value(auditor, "bkledger_log_entries", log="events") == 0          # not sealed yet
        assert value(auditor, "bkledger_logs") == 2
        commit = value(auditor, "bkledger_log_last_commit_timestamp_seconds", log="orders")
        assert written_at - 60 < commit <= written_at + 1
        assert 0 <= value(auditor, "bkledger_log_last_commit_age_seconds", log="orders") < 60
        # the other daemon exports none: one series per log reaches Prometheus
        assert not any(name.startswith("bkledger_log") for s in others for name, _ in s)
        tail.close()                                       # seals the open ledger: its figures follow
        wait_for(lambda: value(scrape_auditor(ports), "bkledger_log_entries", log="events") == 5, 30,
                 "the figures of log 'events' to count its sealed ledger")


def scrape_auditor(ports: list[int]) -> Samples:
    for port in ports:
        samples = scrape(port)
        if value(samples, "auditor_IS_AUDITOR") == 1:
            return samples
    return {}


def test_a_round_reads_segments_only_of_changed_logs(cluster_factory):
    """Heads in multiRead requests each round; a log's ledger list only when its head version moved."""
    cluster = cluster_factory(1)
    with client(cluster.metadata_service_uri) as bk:
        for n in range(5):
            write_log(bk, f"log-{n}", ledgers=1, per_ledger=2)
        reader = LogFiguresReader(bk.store, max_logs=4)
        first = reader.refresh()
        assert sorted(first) == ["log-0", "log-1", "log-2", "log-3"]            # max_logs, by name
        assert reader.segment_reads == 4 and reader.total_logs == 5
        assert reader.refresh() == first and reader.segment_reads == 4            # nothing changed: no reads
        write_log(bk, "log-2", ledgers=1, per_ledger=3)
        again = reader.refresh()
        assert reader.segment_reads == 5
        assert again["log-2"].entries == 5 and again["log-2"].ledgers == 2
        assert again["log-2"].last_commit_ms >= first["log-2"].last_commit_ms
        assert again["log-1"] is first["log-1"]


def test_segment_reads_per_round_are_bounded_and_no_log_starves(cluster_factory):
    """With a budget of 2 segment znodes a round, 5 new logs of one segment each are read 2, 2, then 1 a
    round, the ones never read first; those waiting are counted as deferred."""
    cluster = cluster_factory(1)
    with client(cluster.metadata_service_uri) as bk:
        for n in range(5):
            write_log(bk, f"log-{n}", ledgers=1, per_ledger=1)
        reader = LogFiguresReader(bk.store, max_segments=2)
        seen = []
        for expected_reads, expected_deferred in ((2, 3), (4, 1), (5, 0)):
            figures = reader.refresh()
            assert (reader.segment_reads, reader.deferred) == (expected_reads, expected_deferred)
            seen.append(set(figures))
        assert seen[0] < seen[1] < seen[2] == {f"log-{n}" for n in range(5)}
        assert reader.refresh() == {name: reader.figures[name] for name in seen[2]}
        assert reader.segment_reads == 5                                           # nothing changed since
