"""log_scale: logs of many ledgers: commit latency by log length, planning, small-ledger reads, compaction.

Figures (issue 14), each compared to a limit measured in the same run:
- commit latency (one sink-like commit: append a sealed ledger + a batch marker, one ZooKeeper
  transaction) of a log of 1k, 10k and 100k ledgers (quick: 500 / 2k / 10k), median of repeated
  commits, against the smallest log's latency: the stored form keeps it flat (aim: ratio <= 1.5). Each
  length is a log of its own and their commits take turns, so all three medians come from the same
  minutes (measured one after the other, a ZooKeeper round trip of 2-5 ms moved the ratio from 0.86 to
  1.74 between runs). Metadata only (a real ZooKeeper, no bookies: the ledger ids are not backed by
  ledgers, and each log's ids are its own).
- planning time of a Spark batch read of a 100k-ledger log (quick: 10k) against 2 s, and the schema
  discovery before it (`load()`; the log records each ledger's envelope version, as commits do).
- Spark read (count) of N one-entry ledgers (10,000 full, 1,000 quick, 200 tiny) against the same rows
  in one ledger (aim: ratio >= 0.5): small ledgers are coalesced into few tasks.
- compaction throughput (payload bytes/s of `compact_log` on those N ledgers) against the client's
  write rate of the same rows into one ledger (pipelined adds, E=3 Qw=2 Qa=2).
"""

from __future__ import annotations

import concurrent.futures
import statistics
import time
from collections.abc import Mapping
from typing import Any

from bench.core import MB, Context, Row
from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client.log.core.meta import LogMetadata

NAME = "log_scale"
SIZES = {"full": (1_000, 10_000, 100_000), "quick": (500, 2_000, 10_000), "tiny": (100, 300, 1_000)}
SMALL = {"full": 10_000, "quick": 1_000, "tiny": 200}
COMMITS = {"full": 30, "quick": 15, "tiny": 5}
BATCH = 2_000
VALUE = 100


def _fill(store: Any, name: str, upto: int, have: int) -> None:
    from bkledger.client.log.core import meta as lm
    from bkledger.client.log.store import update_logs

    while have < upto:
        count = min(BATCH, upto - have)
        ledgers = [(i, 0, VALUE, 1) for i in range(have + 1, have + count + 1)]
        bare = dict.fromkeys(range(have + 1, have + count + 1), 0)       # as a commit records them
        def append(metas: Mapping[str, LogMetadata], ledgers: list[tuple[int, int, int, int]] = ledgers,
                   bare: dict[int, int] = bare) -> dict[str, LogMetadata]:
            return {name: lm.with_sealed_ledgers_appended(metas[name], ledgers, 2, envelopes=bare)}

        update_logs(store, [name], append, create=True)
        have += count


def _commit_ms(store: Any, names: list[str], next_id: int, repeats: int) -> dict[str, float]:
    """Median ms of a commit to each log; the logs take turns, commit by commit (ids from next_id on)."""
    from bkledger.client.log.core import meta as lm
    from bkledger.client.log.store import update_logs

    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats):
        for name in names:
            def commit(metas: Mapping[str, LogMetadata], name: str = name, i: int = i,
                       ledger_id: int = next_id) -> dict[str, LogMetadata]:
                appended = lm.with_sealed_ledgers_appended(metas[name], [(ledger_id, 0, VALUE, 1)], 3,
                                                           envelopes={ledger_id: 0})
                return {name: lm.with_batch_marker(appended, "bench", i)}

            started = time.perf_counter()
            update_logs(store, [name], commit)
            times[name].append(time.perf_counter() - started)
            next_id += 1
    return {name: statistics.median(t) * 1000 for name, t in times.items()}


def metadata_rows(ctx: Context, uri: str) -> list[Row]:
    from bkledger.client.meta.store import MetadataStore
    from bkledger.spark_connector.batch_reader import discover_schema, plan
    from bkledger.spark_connector.clients import drop_client
    from bkledger.spark_connector.read_options import parse_read_options

    sizes = SIZES.get(ctx.settings.mode, SIZES["quick"])
    repeats = COMMITS.get(ctx.settings.mode, 15)
    rows: list[Row] = []
    with MetadataStore(uri) as store:
        names = {size: "scale" if size == sizes[-1] else f"scale-{size}" for size in sizes}
        first = 0
        for size in sizes:                      # each log's ledger ids follow the previous log's
            _fill(store, names[size], first + size, first)
            first += size
        medians = _commit_ms(store, list(names.values()), first + 1, repeats)
        latencies = {size: medians[names[size]] for size in sizes}
        have = sizes[-1] + repeats               # the ledgers of the log that planning reads
        smallest = latencies[sizes[0]]
        for size in sizes:
            rows.append(Row(NAME, f"commit latency, log of {size:,} ledgers", latencies[size], "ms", smallest,
                            f"vs the {sizes[0]:,}-ledger log; aim <= 1.5 (bytes per commit do not grow)"))
        opts = parse_read_options({"metadataServiceUri": uri, "log": "scale", "failOnDataLoss": "false"})
        try:
            started = time.perf_counter()
            discover_schema(opts)
            discovery = time.perf_counter() - started
            started = time.perf_counter()
            parts = plan(opts)
            planning = time.perf_counter() - started
        finally:      # planning leaves this process's shared client open: close it while ZooKeeper is up
            drop_client(uri)
        rows.append(Row(NAME, f"planning a {have:,}-ledger log ({len(parts)} partitions)", planning, "s", 2.0,
                        "limit 2 s (issue 14); closed ledgers planned from the log's own records"))
        rows.append(Row(NAME, "schema discovery of that log (load())", discovery, "s", 2.0,
                        "the planning limit; each ledger's envelope version from the log's own records"))
    return rows


def _small_ledgers(bk: Any, count: int) -> list[int]:
    def one(i: int) -> int:
        lh = bk.create_ledger(3, 2, 2)
        lh.add_entry(b"%0*d" % (VALUE, i))
        lh.close()
        return int(lh.ledger_id)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return sorted(pool.map(one, range(count)))


def data_rows(ctx: Context, cluster: LocalCluster) -> list[Row]:
    from bench.spark_batch import start_spark
    from bkledger.client import BookKeeper, append_ledgers

    count = SMALL.get(ctx.settings.mode, 1_000)
    uri = cluster.metadata_service_uri
    spark = start_spark()                 # before any client: the JVM is forked without gRPC threads
    ctx.stack.callback(spark.stop)
    with BookKeeper(uri) as bk:
        ids = _small_ledgers(bk, count)
        for start in range(0, count, 500):
            append_ledgers(bk, "small", ids[start:start + 500])
        started = time.perf_counter()
        with bk.open_log_writer("one", ensemble_size=3, write_quorum=2, ack_quorum=2) as w:
            for fut in [w.append_async(b"%0*d" % (VALUE, i)) for i in range(count)]:
                fut.result(60)
        write_rate = count * VALUE / (time.perf_counter() - started) / MB

        def read(log: str) -> float:
            df = spark.read.format("bkledger").options(metadataServiceUri=uri, log=log).load()
            started = time.perf_counter()
            assert df.count() == count
            return count / (time.perf_counter() - started)

        read("one")                                                     # warm the session's workers
        one, small = read("one"), read("small")
        started = time.perf_counter()
        done = bk.compact_log("small", target_bytes=1 << 30, min_ledgers=2, grace_s=0)
        compaction = done.replaced and count * VALUE / (time.perf_counter() - started) / MB
    return [
        Row(NAME, f"Spark read of {count:,} one-entry ledgers", small, "rows/s", one,
            "vs the same rows in one ledger; aim >= 0.5 (small ledgers coalesced into few tasks)"),
        Row(NAME, f"compaction of {count:,} one-entry ledgers", float(compaction), "MB/s", write_rate,
            "vs the client's write rate of the same rows into one ledger (E=3 Qw=2 Qa=2)"),
    ]


def run(ctx: Context) -> list[Row]:
    cluster = LocalCluster(ctx.data_dir / "log-scale-cluster")
    ctx.stack.callback(cluster.down)
    cluster.up(3, {"journalSyncData": "true"})
    data = data_rows(ctx, cluster)
    return [*metadata_rows(ctx, cluster.metadata_service_uri), *data]
