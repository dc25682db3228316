"""log_clients: Python applications as producers and consumers (issue 44 item 6), limits from the same run.

A 3-bookie LocalCluster (journalSyncData=true; every ledger E=3 Qw=2 Qa=2, the clients' default). Each
figure is measured in at least 3 runs (full and quick; the smoke test's tiny form too); every run is
printed with its aim and whether it met it, then the spread (bench.aims).

- 8 producers (`bk.open_log_producer`, default bounds: 1 MiB / 10,000 records / 5 ms linger) of 1 KiB
  records into ONE log, each in a process of its own (bench.producer_workers: threads would share one
  GIL), against ONE `LogWriter` (envelope 1, as a producer's records; its own process) appending the same
  records, pipelined: aggregate payload MB/s, aim >= 0.8. The two take turns within each run.
- the producers' commit latency: each of the 8 sends at an open-loop rate of half that run's aggregate
  (/ 8); a record's latency runs from its scheduled send to its future's Position (its batch's ledger
  committed into the log): p50/p99 per run and their spread. Latency at full throughput would be queueing.
- a transaction of 1 MiB across two logs (`with bk.transaction() as tx:` 512 records of 1 KiB to each)
  against the same appends without one (two open LogWriters, envelope 2 as the transaction's ledgers,
  waiting for every acknowledgement): MB/s, aim >= 0.8. The transaction's ledgers are created inside it,
  the writers' before timing: what a transaction costs over a writer that is already open.
- a cursor acknowledgement (`reader.ack(position)`: one ZooKeeper CAS) after each record read: p50/p99.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from bench.aims import Aim, aim_rows, latency_rows
from bench.cluster3 import fresh_cluster_session
from bench.core import MB, Context, KiB, MiB, Row
from bench.producer_workers import Workers

NAME = "log_clients"
PRODUCERS = 8
RECORD = 1 * KiB
TX_BYTES = 1 * MiB
CONF = {"journalSyncData": "true"}


@dataclasses.dataclass(frozen=True)
class Sizes:
    runs: int
    per_producer: int          # records each producer sends per throughput run
    paced_seconds: float       # length of the open-loop latency run
    transactions: int          # transactions (and as many plain rounds) per run
    acks: int                  # cursor acknowledgements per run

    @staticmethod
    def of(mode: str) -> Sizes:
        if mode == "tiny":
            return Sizes(3, 100, 0.5, 2, 10)
        if mode == "quick":
            return Sizes(3, 1_000, 2.0, 4, 50)
        return Sizes(3, 5_000, 5.0, 16, 200)


def _mb_s(nbytes: float, seconds: float) -> float:
    return nbytes / seconds / MB


def producer_rows(uri: str, sizes: Sizes) -> list[Row]:
    workers = Workers(uri, PRODUCERS)
    try:
        return _producer_rows(workers, sizes)
    finally:
        workers.stop()


def _producer_rows(workers: Workers, sizes: Sizes) -> list[Row]:
    total = PRODUCERS * sizes.per_producer
    timeout = 60.0 + total * RECORD / (0.2 * MB)            # bounded even on a slow, loaded disk
    throughput: list[tuple[float, float]] = []
    latencies: list[list[float]] = []
    for run in range(1, sizes.runs + 1):
        start, end = workers.writer(("write", f"writer-{run}", total, RECORD), timeout)
        writer = _mb_s(total * RECORD, end - start)
        spans = workers.producers(("produce", f"producers-{run}", sizes.per_producer, RECORD), timeout)
        seconds = max(e for _, e in spans) - min(s for s, _ in spans)
        throughput.append((_mb_s(total * RECORD, seconds), writer))
        rate = 0.5 * total / seconds / PRODUCERS
        count = max(20, int(rate * sizes.paced_seconds))
        answers = workers.producers(("paced", f"paced-{run}", rate, count, RECORD), timeout)
        latencies.append([x for answer in answers for x in answer])
    label = f"{PRODUCERS} producers (processes) into one log, 1 KiB records"
    return [
        *aim_rows(NAME, f"{label}: aggregate payload", "MB/s", throughput, Aim(">=", 0.8),
                  f"vs one LogWriter (its own process, envelope 1, pipelined) of the same {total:,} records, "
                  "same run; producer bounds 1 MiB / 10,000 records / 5 ms"),
        *latency_rows(NAME, f"{label}: commit latency at half that throughput", latencies,
                      "send (scheduled, open loop) -> its ledger committed into the log"),
    ]


def transaction_rows(bk: Any, sizes: Sizes) -> list[Row]:
    value = os.urandom(RECORD)
    half = TX_BYTES // RECORD // 2
    runs: list[tuple[float, float]] = []
    for run in range(1, sizes.runs + 1):
        tx_seconds = plain_seconds = 0.0
        with bk.open_log_writer(f"plain-a-{run}", envelope=2) as wa, \
                bk.open_log_writer(f"plain-b-{run}", envelope=2) as wb:
            for _ in range(sizes.transactions):        # the two take turns, round by round
                started = time.perf_counter()
                with bk.transaction() as tx:
                    for _ in range(half):
                        tx.append(f"tx-a-{run}", value)
                        tx.append(f"tx-b-{run}", value)
                tx_seconds += time.perf_counter() - started
                started = time.perf_counter()
                futures = [f for _ in range(half) for f in (wa.append_async(value), wb.append_async(value))]
                for future in futures:
                    future.result(120)
                plain_seconds += time.perf_counter() - started
        nbytes = sizes.transactions * TX_BYTES
        runs.append((_mb_s(nbytes, tx_seconds), _mb_s(nbytes, plain_seconds)))
    return aim_rows(NAME, "transaction of 1 MiB across two logs (1 KiB records)", "MB/s", runs, Aim(">=", 0.8),
                    f"vs the same appends to two open LogWriters, all acknowledged; {sizes.transactions} of each "
                    "per run, taking turns")


def ack_rows(bk: Any, sizes: Sizes) -> list[Row]:
    value = os.urandom(RECORD)
    runs: list[list[float]] = []
    for run in range(1, sizes.runs + 1):
        name = f"cursor-{run}"
        with bk.open_log_writer(name) as writer:
            for future in [writer.append_async(value) for _ in range(sizes.acks)]:
                future.result(120)
        seconds: list[float] = []
        with bk.open_log_reader(name, cursor="bench") as reader:
            for _ in range(sizes.acks):
                if reader.read_next(timeout=30) is None:
                    raise RuntimeError(f"log {name}: a record written was not read within 30 s")
                position = reader.position
                started = time.perf_counter()
                reader.ack(position)
                seconds.append(time.perf_counter() - started)
        runs.append(seconds)
    return latency_rows(NAME, "cursor acknowledgement (reader.ack(position))", runs,
                        "one ZooKeeper CAS of the cursor after each record read")


def run(ctx: Context) -> list[Row]:
    from bkledger.client import BookKeeper

    sizes = Sizes.of(ctx.settings.mode)
    with fresh_cluster_session(ctx, "log-clients-cluster", conf=CONF) as session:
        rows = producer_rows(session.uri, sizes)
        with BookKeeper(session.uri) as bk:
            rows += transaction_rows(bk, sizes)
            rows += ack_rows(bk, sizes)
    return rows
