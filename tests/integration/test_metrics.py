"""Metrics and the admin HTTP API against real bookie and autorecovery processes (issue 17 items 4, 5, 7).

Metrics are scraped over HTTP and parsed with Prometheus's own text parser; counters must move by at least
what the test did. The local cluster gives every bookie a metrics port and an admin port, and every
autorecovery daemon its own metrics port (`bkledger local up` does the same).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig
from bkledger.client.metrics import NO_METRICS
from tests.integration.bookie_util import wait_for
from tests.integration.conftest import FAST_CLIENT
from tests.integration.ops_util import OnBookies

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return parse(response.read().decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def http(port: int, path: str, method: str = "GET", body: object = None,
         token: str | None = None) -> tuple[int, object]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read().decode(), exc.code
    return status, (json.loads(raw) if raw.startswith(("{", "[")) else raw)



def client(uri: str, **kwargs) -> BookKeeper:
    return BookKeeper(uri, config=ClientConfig.from_options(FAST_CLIENT), **kwargs)


def test_bookie_metrics_count_what_the_test_did(cluster_factory):
    """Adds and reads on E=Qw=3 ledgers: every bookie's add counters move by every entry and byte, the
    journal reports groups and fsyncs, the directories grow, and reads are counted where they were served."""
    cluster = cluster_factory(3)
    ports = [b.metrics_port for b in cluster.bookies]
    assert all(ports)
    before = [scrape(p) for p in ports]
    entries, payload = 300, b"m" * 1000
    with client(cluster.metadata_service_uri) as bk:
        handle = bk.create_ledger(3, 3, 2, password=b"pw")
        for fut in [handle.add_entry_async(payload) for _ in range(entries)]:
            fut.result(30)
        handle.close()
        got = list(bk.open_ledger(handle.ledger_id, b"pw", recovery=False).read_entries(0, entries - 1))
        assert len(got) == entries
        writer = bk.create_ledger(3, 3, 3, password=b"pw")
        writer.add_entry(b"x")
        bk.open_ledger(writer.ledger_id, b"pw", recovery=True)          # fences on every bookie
    after = [scrape(p) for p in ports]
    read_total = 0.0
    for b, a in zip(before, after, strict=True):
        def delta(name: str, _b: Samples = b, _a: Samples = a, **labels: str) -> float:
            return value(_a, name, **labels) - value(_b, name, **labels)

        assert delta("bookie_BOOKIE_ADD_ENTRY_total") >= entries + 1
        assert delta("bookie_BOOKIE_ADD_ENTRY_BYTES_total") >= entries * len(payload)
        assert delta("bookkeeper_server_ADD_ENTRY_REQUEST_count", success="true") >= 1
        assert delta("bookkeeper_server_ADD_ENTRY_REQUEST_sum", success="true") > 0
        assert delta("bookie_journal_JOURNAL_SYNC_count") >= 1
        assert delta("bookie_journal_JOURNAL_FORCE_WRITE_GROUPING_COUNT_count") >= 1
        assert delta("bookie_journal_JOURNAL_WRITE_BYTES_total") >= entries * len(payload)
        assert delta("bookkeeper_server_READ_ENTRY_FENCE_REQUEST_total") >= 1
        written = [k for k in a if k[0] == "bookie_ledger_dir_written_bytes_total"]
        assert len(written) == 1 and a[written[0]] >= entries * len(payload)
        assert [v for k, v in a.items() if k[0] == "bookie_ledger_dir_entry_log_write_failures_total"] == [0]
        logs = [k for k in a if k[0] == "bookie_ledger_dir_entry_log_bytes"]
        assert a[logs[0]] >= entries * len(payload)
        assert value(a, "bookie_gc_ACTIVE_LEDGER_TOTAL") >= 2
        assert value(a, "bookie_SERVER_STATUS") == 1
        assert value(a, "bookie_ADD_ENTRY_IN_PROGRESS") == 0
        read_total += delta("bookie_BOOKIE_READ_ENTRY_total")
    assert read_total >= entries


def test_admin_http_endpoints(cluster_factory):
    """/heartbeat, /metrics, bookie info and state, list_bookies, the autorecovery endpoints, JSON errors;
    the state-changing endpoint is refused while no admin token is configured."""
    cluster = cluster_factory(2)
    bookie = cluster.bookies[0]
    port = bookie.http_port
    assert port and port != bookie.metrics_port
    assert http(port, "/heartbeat") == (200, "OK\n")
    status, info = http(port, "/api/v1/bookie/info")
    assert status == 200 and isinstance(info, dict)
    assert info["bookieId"] == bookie.bookie_id and info["state"] == "writable"
    assert info["freeSpace"] > 0 and info["totalSpace"] >= info["freeSpace"]
    assert {d["path"] for d in info["directories"] if d["kind"] == "ledger"} == set(bookie.ledger_dirs)
    assert [d["path"] for d in info["directories"] if d["kind"] == "journal"] == [bookie.journal_dir]
    status, state = http(port, "/api/v1/bookie/state")
    assert status == 200 and isinstance(state, dict)
    assert state["running"] is True and state["readOnly"] is False and state["shuttingDown"] is False
    assert http(port, "/api/v1/bookie/list_bookies?type=rw") == (200, {b.bookie_id: "rw" for b in cluster.bookies})
    assert http(port, "/api/v1/autorecovery/who_is_auditor") == (200, {"auditor": None})   # no daemons here
    assert http(port, "/api/v1/autorecovery/status") == (200, {"enabled": True})
    assert http(port, "/api/v1/autorecovery/list_under_replicated_ledger") == (200, {"count": 0, "ledgers": []})
    assert "bookie_SERVER_STATUS" in {k[0] for k in parse(str(http(port, "/metrics")[1]))}
    status, err = http(port, "/api/v1/nope")
    assert status == 404 and isinstance(err, dict) and "/api/v1/bookie/info" in err["error"]
    assert http(port, "/metrics", method="POST", body={})[0] == 405
    status, err = http(port, "/api/v1/bookie/state/readonly", method="PUT", body={"readOnly": True}, token="x")
    assert status == 403 and isinstance(err, dict) and "httpServerAdminToken" in err["error"]
    assert http(port, "/api/v1/bookie/state/readonly") == (200, {"readOnly": False})
    status_text = subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", "local", "status", "--dir",
                                  str(cluster.base_dir)], capture_output=True, text=True, timeout=60, check=True).stdout
    for b in cluster.bookies:       # `local status` shows where each process serves
        assert f"http://127.0.0.1:{b.metrics_port}/metrics" in status_text
        assert f"http://127.0.0.1:{b.http_port}/api/v1" in status_text


def test_read_only_through_admin_api_needs_the_token(cluster_factory):
    """PUT bookie/state/readonly: 401 without or with a wrong token (nothing changes); with it the bookie
    goes read-only (registration, state, SERVER_STATUS) and back."""
    cluster = cluster_factory(1, conf={"httpServerAdminToken": "s3cret"})
    bookie = cluster.bookies[0]
    port = bookie.http_port
    path = "/api/v1/bookie/state/readonly"
    assert http(port, path, "PUT", {"readOnly": True})[0] == 401
    assert http(port, path, "PUT", {"readOnly": True}, token="wrong")[0] == 401
    assert http(port, path, "PUT", {"readOnly": "yes"}, token="s3cret")[0] == 400
    assert http(port, path) == (200, {"readOnly": False})
    with client(cluster.metadata_service_uri) as bk:
        assert bk.store.writable_bookies() == [bookie.bookie_id]
        assert http(port, path, "PUT", {"readOnly": True}, token="s3cret") == (200, {"readOnly": True})
        assert bk.store.readonly_bookies() == [bookie.bookie_id] and bk.store.writable_bookies() == []
        assert value(scrape(bookie.metrics_port), "bookie_SERVER_STATUS") == 0
        status, state = http(port, "/api/v1/bookie/state")
        assert isinstance(state, dict) and state["readOnly"] and state["adminReadOnly"]
        assert http(port, path, "PUT", {"readOnly": False}, token="s3cret") == (200, {"readOnly": False})
        assert bk.store.writable_bookies() == [bookie.bookie_id]
        assert value(scrape(bookie.metrics_port), "bookie_SERVER_STATUS") == 1


def test_autorecovery_metrics_follow_a_lost_bookie(cluster_factory):
    """Kill a bookie (and its daemon) holding 3 closed ledgers: one daemon reports being the auditor and an
    audit after the kill; the workers' re-replicated ledger counts add up to 3 and the under-replicated
    gauge comes back to 0."""
    conf = {"zkTimeout": "3000", "lostBookieRecoveryDelay": "1", "rwRereplicateBackoffMs": "300"}
    cluster = cluster_factory(4, conf=conf, autorecovery=True)
    # the cluster's `up` returns once every daemon serves its metrics: the first scrape finds them all
    assert [value(scrape(b.autorecovery_metrics_port), "autorecovery_ENABLED") for b in cluster.bookies] == [1] * 4
    victim = cluster.bookies[3]
    with client(cluster.metadata_service_uri, placement=OnBookies([victim.bookie_id])) as bk:
        for _ in range(3):
            handle = bk.create_ledger(3, 2, 2, password=b"pw")
            for i in range(40):
                handle.add_entry(f"entry {i}".encode())
            handle.close()
            assert victim.bookie_id in handle.metadata.fragments[0].ensemble
    ports = [b.autorecovery_metrics_port for b in cluster.bookies[:3]]
    assert all(ports)
    killed_at = time.time()
    cluster.stop_autorecovery(3)
    cluster.kill_bookie(3)

    def settled() -> list[Samples] | None:
        now = [scrape(p) for p in ports]
        done = sum(value(s, "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED_total") for s in now)
        marked = value(now[0], "auditor_NUM_UNDER_REPLICATED_LEDGERS")
        return now if done >= 3 and marked == 0 else None

    final = wait_for(settled, 90, "the workers to re-replicate 3 ledgers")
    auditors = [s for s in final if value(s, "auditor_IS_AUDITOR") == 1]
    assert len(auditors) == 1
    assert value(auditors[0], "auditor_AUDITS_total") >= 1
    assert value(auditors[0], "auditor_LAST_AUDIT_TIMESTAMP_SECONDS") >= killed_at
    assert sum(value(s, "replication_worker_NUM_ENTRIES_WRITTEN_total") for s in final) >= 3 * 26  # 26|27 of 40 each
    assert sum(value(s, "replication_worker_NUM_BYTES_WRITTEN_total") for s in final) > 0
    assert all(value(s, "autorecovery_ENABLED") == 1 for s in final)


def test_client_metrics_in_the_applications_registry(cluster_factory):
    """adds, reads, ensemble changes and recoveries counted into the registry passed in; two clients share
    it; a client without one counts nothing."""
    cluster = cluster_factory(4)
    registry = CollectorRegistry()
    uri = cluster.metadata_service_uri
    first = [b.bookie_id for b in cluster.bookies[:3]]
    with client(uri, metrics_registry=registry, placement=OnBookies(first)) as bk, \
            client(uri, metrics_registry=registry) as other, client(uri) as plain:
        assert plain._ctx.metrics is NO_METRICS
        handle = bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(50):
            handle.add_entry(f"a{i}".encode())
        cluster.kill_bookie(0)
        for i in range(10):
            handle.add_entry(f"b{i}".encode())           # the first of these changes the ensemble
        assert len(list(other.open_ledger(handle.ledger_id, b"pw", recovery=False).read_entries(0, 49))) == 50
        recovered = other.open_ledger(handle.ledger_id, b"pw", recovery=True)    # fences and closes it
        assert len(list(recovered.read_entries(0, 59))) == 60
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "bookkeeper_client_ADD_ENTRY_total") >= 60
    assert value(samples, "bookkeeper_client_READ_ENTRY_total") >= 60
    assert value(samples, "bookkeeper_client_NUM_ENSEMBLE_CHANGE_total") >= 1
    assert value(samples, "bookkeeper_client_LEDGER_RECOVER_total") >= 1
    assert value(samples, "bookkeeper_client_ADD_ENTRY_FAILED_total") == 0
    assert ("bookkeeper_client_SPECULATIVE_READ_COUNT_total", ()) in samples


def test_client_counts_speculative_reads(cluster_factory):
    """A paused first bookie of the read order, connected before the pause: the read goes on
    speculatively, and the registry says so."""
    cluster = cluster_factory(3)
    registry = CollectorRegistry()
    uri = cluster.metadata_service_uri
    with client(uri) as writer:
        handle = writer.create_ledger(3, 3, 2, password=b"pw")
        for fut in [handle.add_entry_async(b"s%d" % i) for i in range(100)]:
            fut.result(30)
        handle.close()
    first = next(b for b in cluster.bookies if b.bookie_id == handle.metadata.fragments[0].ensemble[0])
    options = ClientConfig.from_options({**FAST_CLIENT, "speculativeReadTimeout": 200})
    with BookKeeper(uri, config=options, metrics_registry=registry) as bk:
        list(bk.open_ledger(handle.ledger_id, b"pw", recovery=False).read_entries(0, 0))   # connected first:
        cluster.signal_bookie(first.index, signal.SIGSTOP)    # a new one to a paused bookie is passed over
        try:
            got = list(bk.open_ledger(handle.ledger_id, b"pw", recovery=False).read_entries(0, 99))
        finally:
            cluster.signal_bookie(first.index, signal.SIGCONT)
    assert [bytes(e.payload) for e in got] == [b"s%d" % i for i in range(100)]
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "bookkeeper_client_SPECULATIVE_READ_COUNT_total") >= 1
    assert value(samples, "bookkeeper_client_READ_ENTRY_total") >= 100
