"""The bookie floor of add_latency: bench.transport_floor's open loop through three real bookies.

The same client shape as the transport floor (a timer thread, one asyncio loop thread, at most one request
unanswered per server, an add done at the second of three answers), but each request is a real AddRequest:
one AddBatch of the drained adds, packaged with their headers and CRC32C digests as the client packages
them, on each bookie's add port (as the client sends them; `--grpc`: on gRPC's AddStream). There is
no LedgerHandle, no writer machine, no future per add and no ledger metadata (a bookie takes adds to a
ledger it has not seen; the first add names the master key). So
of what add_latency measures above the transport floor, this floor holds the bookie's part (its request
path, storage, journal and fdatasync) and leaves out the client's.

`python -m bench.bookie_floor --rate R --seconds S --runs N` starts a LocalCluster of three bookies (the
bench's bookie settings) and prints each run's p50/p99/p999 and the CPU each bookie used, and per bookie
its requests per second, its CPU per request and the mean of each of its add stages (bookie.add_trace,
read from its metrics: every batch is traced).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import tempfile
import time
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench import transport_floor
from bench.bookie_session import CONF_OVERRIDES
from bench.tails import percentile
from bkledger.bookie.add_trace import STAGES
from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client.add_port import AddPortCall
from bkledger.client.bookie_client import MAX_REQUEST_BYTES
from bkledger.client.protocol.digest import DigestManager, package_batch
from bkledger.proto import bookie_pb2 as pb

MASTER_KEY = b"bench-bookie-floor-k"
_LEDGER_IDS = itertools.count(1)
_DIGEST = DigestManager("CRC32C")

Drained = tuple[int, int, list[int], bytes]     # (ledger id, first entry id, packaged sizes, packaged entries)


class BookieStream(transport_floor.FloorStream):
    """A bookie's AddStream: the drains queued meanwhile leave as one AddRequest of one AddBatch (their
    entry ids are consecutive), so each request gets one answer, as the floor counts them; a backlog
    larger than the client's MAX_REQUEST_BYTES leaves in several, as the client splits it."""

    method = "/bkledger.v1.Bookie/AddStream"
    max_request_bytes = MAX_REQUEST_BYTES      # a bookie refuses larger messages; the client splits at this

    def nbytes(self, chunk: Any) -> int:
        return len(chunk[3])

    def encode(self, queued: list[Any]) -> bytes:
        return encode_request(queued)


def encode_request(drains: list[Drained]) -> bytes:
    ledger_id, first = drains[0][0], drains[0][1]
    sizes = [size for _, _, drained, _ in drains for size in drained]
    batch = pb.AddBatch(ledger_id=ledger_id, master_key=MASTER_KEY, entry_ids=range(first, first + len(sizes)),
                        sizes=sizes, data=b"".join(blob for _, _, _, blob in drains))
    return pb.AddRequest(batches=[batch]).SerializeToString()


class AddPortStream(BookieStream):
    """The same requests on the bookie's add port (bookie.add_port), as the client sends them when the
    bookie has one; `port` is the add port."""

    async def start(self) -> None:
        call = AddPortCall(f"bookie at {self.port}", "127.0.0.1", self.port, transport_floor.MAX_MESSAGE)
        await call.open(transport_floor.READY_TIMEOUT)
        self.call: Any = call
        self.channel: Any = _Closer(call)
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._write()), loop.create_task(self._read())]


class _Closer:
    def __init__(self, call: AddPortCall) -> None:
        self.call = call

    async def close(self) -> None:
        self.call.close()


class BookieFloorLoop(transport_floor.FloorLoop):
    """Each run writes a ledger of its own; a drain's adds get the next entry ids."""

    stream_class: type[transport_floor.FloorStream] = BookieStream

    def __init__(self, ports: list[int], count: int) -> None:
        super().__init__(ports, count)
        self.ledger_id = next(_LEDGER_IDS)
        self.next_entry = 0

    def request_data(self, payloads: list[bytes]) -> Drained:
        first = self.next_entry
        self.next_entry += len(payloads)
        blob, sizes = package_batch(_DIGEST, self.ledger_id, first, first - 1, 0, payloads)
        return self.ledger_id, first, sizes, blob


class AddPortFloorLoop(BookieFloorLoop):
    """The same on the bookies' add ports (`ports`: theirs)."""

    stream_class = AddPortStream


StageTotals = dict[str, tuple[float, float]]     # stage -> (batches observed, ms in all)


def stage_totals(metrics_text: str) -> StageTotals:
    """Each add stage's (count, sum in ms) from a bookie's Prometheus text (bookie_ADD_ENTRY_STAGE)."""
    totals: dict[str, list[float]] = {stage: [0.0, 0.0] for stage in STAGES}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            stage = sample.labels.get("stage", "")
            if stage in totals and sample.name == "bookie_ADD_ENTRY_STAGE_count":
                totals[stage][0] = sample.value
            elif stage in totals and sample.name == "bookie_ADD_ENTRY_STAGE_sum":
                totals[stage][1] = sample.value
    return {stage: (count, ms) for stage, (count, ms) in totals.items()}


def describe_bookie(before: StageTotals, after: StageTotals, cpu_seconds: float, seconds: float) -> str:
    """One bookie over a run: requests/s, CPU per request and each stage's mean (ms)."""
    requests = after[STAGES[0]][0] - before[STAGES[0]][0]
    if requests <= 0:
        return NOTHING_TRACED
    return (f"{requests / seconds:.0f} requests/s, {1000 * cpu_seconds / requests:.2f} ms of CPU each; "
            f"{stage_means(before, after)}")


NOTHING_TRACED = "no add batch traced (addTraceSampleEvery=0 or metrics off?)"


def stage_means(before: StageTotals, after: StageTotals) -> str:
    """'stage means (ms): decide 0.07, handoff 0.21, ...' of the batches traced between two scrapes."""
    requests = after[STAGES[0]][0] - before[STAGES[0]][0]
    if requests <= 0:
        return NOTHING_TRACED
    means = ", ".join(f"{stage} {(after[stage][1] - before[stage][1]) / requests:.2f}" for stage in STAGES)
    return f"stage means (ms): {means}"


def scrape_stage_totals(metrics_port: int) -> StageTotals:
    if not metrics_port:
        return stage_totals("")
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
        return stage_totals(answer.read().decode())


def process_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")     # utime + stime


def _runs(args: argparse.Namespace, directory: str) -> None:
    cluster = LocalCluster(directory)
    try:
        cluster.up(3, dict(CONF_OVERRIDES))
        grpc_ports = [bookie.port for bookie in cluster.bookies]
        add_ports = [bookie.add_port for bookie in cluster.bookies]
        ports, loop_class = (grpc_ports, BookieFloorLoop) if args.grpc else (add_ports, AddPortFloorLoop)
        for _ in range(args.runs):
            stages_before = [scrape_stage_totals(b.metrics_port) for b in cluster.bookies]
            before, start = [process_cpu_seconds(b.pid) for b in cluster.bookies], time.monotonic()
            lat = transport_floor.measure(ports, args.rate, args.seconds, loop_class=loop_class)
            took = time.monotonic() - start
            used = [process_cpu_seconds(b.pid) - was for b, was in zip(cluster.bookies, before, strict=True)]
            cores = ", ".join(f"{seconds / took:.2f}" for seconds in used)
            q = [1000 * percentile(lat, f) for f in (0.5, 0.99, 0.999)]
            print(f"bookie floor at {args.rate:.0f}/s: p50 {q[0]:.2f} p99 {q[1]:.2f} p999 {q[2]:.2f} ms "
                  f"({len(lat)} timed); bookies' cores {cores}", flush=True)
            for i, (bookie, was) in enumerate(zip(cluster.bookies, stages_before, strict=True)):
                print(f"  bookie {i}: {describe_bookie(was, scrape_stage_totals(bookie.metrics_port), used[i], took)}",
                      flush=True)
    finally:
        cluster.down(wipe=True)


def runs_count(text: str) -> int:
    try:
        runs = int(text)
    except ValueError:
        runs = 0
    if not 1 <= runs <= 100:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 100, not {text!r}")
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bookie_floor", description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=transport_floor.positive, default=5000.0, help="adds/s")
    parser.add_argument("--seconds", type=transport_floor.positive, default=10.0, help="of each run")
    parser.add_argument("--runs", type=runs_count, default=3, help="runs of --seconds each (1 to 100)")
    parser.add_argument("--grpc", action="store_true", help="send on gRPC's AddStream, not on the add port")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bookie-floor-") as directory:
        _runs(args, directory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
