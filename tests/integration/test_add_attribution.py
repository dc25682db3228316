"""Where an add spends its time (issue 48 item 1): a real stall in one stage is named by the attribution.

A slow fdatasync (strace fault injection on the bookie process) must show on the bookie as the `fsync`
stage of its slow-add log (`/api/v1/bookie/slow_adds`) and of its stage histogram, and on the client as
the `bookie` stage of `BookKeeper.slow_adds()`. A paused bookie (SIGSTOP) must show on the client as the
`bookie` stage while the bookie's own log, which only starts counting once it reads the request, holds no
slow batch for it: the time went before the bookie had the request. Both sides stamp with CLOCK_MONOTONIC, so
the client's `sent_ns` / `acked_ns` and the bookie's `receivedNs` / `repliedNs` split what is outside the
bookie into the way there and the way back (bench.tails.attribute): the pause is on the way there.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from typing import Any

import pytest

from bench.tails import attribute
from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig
from tests.integration.conftest import FAST_CLIENT
from tests.integration.test_bookie_durability import _strace, needs_strace

pytestmark = pytest.mark.integration

TRACE_ALL = {**FAST_CLIENT, "addTraceSampleEvery": 1, "slowAddThresholdMs": 100.0}
PAYLOAD = b"a" * 1024


def bookie_slow_adds(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/bookie/slow_adds", timeout=10) as response:
        assert response.status == 200
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def stage_sum(port: int, stage: str) -> float:
    """bookie_ADD_ENTRY_STAGE_sum{stage=...} scraped from the bookie's metrics (ms)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "bookie_ADD_ENTRY_STAGE_sum" and sample.labels.get("stage") == stage:
                return float(sample.value)
    return 0.0


def covering(batches: list[dict[str, Any]], ledger_id: int, entry_id: int) -> list[dict[str, Any]]:
    return [b for b in batches if b["ledgerId"] == ledger_id and b["firstEntryId"] <= entry_id <= b["lastEntryId"]]


@needs_strace
def test_slow_fsync_is_attributed_to_fsync(cluster_factory):
    """Every fdatasync of the bookie delayed 200 ms: its slow batches name `fsync`, the fsync histogram
    grows by at least that, and the client names the `bookie` stage of the same adds."""
    cluster = cluster_factory(1)
    bookie = cluster.bookies[0]
    bk = BookKeeper(cluster.metadata_service_uri, config=ClientConfig.from_options(TRACE_ALL))
    try:
        lh = bk.create_ledger(1, 1, 1, password=b"pw")
        for _ in range(5):
            lh.add_entry(PAYLOAD)                      # warm: connection, ledger, journal file
        fsync_before = stage_sum(bookie.http_port, "fsync")
        fast = {a["entry_id"] for a in bk.slow_adds()}
        tracer = _strace(bookie.pid, "delay_enter=200000")
        try:
            slow_ids = [lh.add_entry(PAYLOAD) for _ in range(3)]
        finally:
            tracer.send_signal(signal.SIGINT)
            tracer.wait(10)
        answer = bookie_slow_adds(bookie.http_port)
        client = {a["entry_id"]: a for a in bk.slow_adds() if a["entry_id"] not in fast}
    finally:
        bk.close()
    assert answer["thresholdMs"] == 50.0 and answer["sampleEvery"] == 1
    for entry_id in slow_ids:
        batches = covering(answer["slowAdds"], lh.ledger_id, entry_id)
        assert batches, f"entry {entry_id} is not in the bookie's slow-add log: {answer}"
        for batch in batches:
            assert batch["slowestStage"] == "fsync", batch
            assert batch["stagesMs"]["fsync"] >= 180, batch
        add = client.get(entry_id)
        assert add is not None, f"entry {entry_id} is not in the client's slow-add log: {client}"
        assert add["slowest_stage"] == "bookie", add
        assert add["stages_ms"]["bookie"] >= 180, add
        assert add["deciding_bookie"] == bookie.bookie_id, add
        there, back = batches[0]["receivedNs"] - add["sent_ns"], add["acked_ns"] - batches[0]["repliedNs"]
        # One clock, so the stall is inside the bookie. The client stamps `sent` when its write returns, after
        # the kernel has the bytes: the bookie may read them first (CI saw -0.44 ms), never by 10 ms.
        assert -10e6 < there < 100e6 and 0 <= back < 100e6, (add, batches)
    att = attribute([client[i] for i in slow_ids], {bookie.bookie_id: answer["slowAdds"]})
    assert att["bookie_ms"]["fsync"] >= 180 and att["to_bookie_ms"] < 100 and att["from_bookie_ms"] < 100, att
    assert stage_sum(bookie.http_port, "fsync") - fsync_before >= 3 * 180


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_paused_bookie_is_attributed_to_the_bookie_stage(cluster_factory):
    """The bookie stopped (SIGSTOP) for 0.5 s while an add is on its way: the client names the `bookie`
    stage (sent -> acknowledged), the bookie's slow-add log has no slow batch for that entry, and the batch
    it logged (it logs every one here) puts the pause on the way there."""
    cluster = cluster_factory(1, {"slowAddThresholdMs": "0"})
    bookie = cluster.bookies[0]
    bk = BookKeeper(cluster.metadata_service_uri, config=ClientConfig.from_options(TRACE_ALL))
    try:
        lh = bk.create_ledger(1, 1, 1, password=b"pw")
        for _ in range(5):
            lh.add_entry(PAYLOAD)
        os.kill(bookie.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 10
            while not _stopped(bookie.pid):
                assert time.monotonic() < deadline, "the bookie did not stop"
                time.sleep(0.01)
            future = lh.add_entry_async(PAYLOAD)
            time.sleep(0.5)                            # the stall itself: the bookie stays stopped this long
        finally:
            os.kill(bookie.pid, signal.SIGCONT)
        entry_id = future.result(10)
        client = {a["entry_id"]: a for a in bk.slow_adds()}
        answer = bookie_slow_adds(bookie.http_port)
    finally:
        bk.close()
    add = client.get(entry_id)
    assert add is not None, f"entry {entry_id} is not in the client's slow-add log: {client}"
    assert add["slowest_stage"] == "bookie", add
    assert add["stages_ms"]["bookie"] >= 450, add
    assert add["stages_ms"]["queue"] < 100 and add["stages_ms"]["send_wait"] < 100, add
    times = add["bookies"][bookie.bookie_id]
    assert times["sent_ms"] is not None and times["sent_ms"] < 100, add       # written to the stream at once ...
    assert times["acked_ms"] >= 450, add                                       # ... answered after the pause
    there = covering(answer["slowAdds"], lh.ledger_id, entry_id)
    assert there and all(b["totalMs"] < 450 for b in there), f"the bookie counted the pause as its own: {there}"
    att = attribute([add], {bookie.bookie_id: there})
    assert att["on_bookie"] == 1 and att["to_bookie_ms"] >= 450 and att["from_bookie_ms"] < 100, att
