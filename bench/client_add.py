"""replicated_add and add_latency: the real client (`client.BookKeeper`) adding to three real bookies.

replicated_add: closed loop, E=3 Qw=3 Qa=2, 1 KiB entries, with 1 writer (one ledger fed by one
thread) and with 8 writers (one BookKeeper client, 8 ledgers, each fed by its own thread); in flight
at most 20,000 adds in all (maxOutstandingAdds 20,000 for 1 ledger, 2,500 per ledger for 8). All three
bookies journal to one disk, so the limit is the raw append + fdatasync speed at the bookies' average
group size (journal bytes / fdatasync calls counted by perf; 256 KiB without perf), divided by Qw.

add_latency: open loop at 20 % and 80 % of a 1-writer peak measured in this run in the latency runs'
conditions (the median of three closed loops on fresh clusters, traced, capped by the highest rate an open
loop sustained in a few probes; `_peak`, bench.peak):
a timer thread schedules adds at fixed intervals whatever the completions do, and an add's latency is
its acknowledgement time minus its scheduled time (so a stall is charged to every add scheduled
behind it). Only every SAMPLE_EVERY-th add (and the last) carries a completion callback that records
its time: the peak is measured with no callback at all, and one per add (a closure in the timer thread,
a call on the client's event loop) took enough of the client's loop that an open loop at 80 % of the
peak fell behind (0.80-0.87 of its adds/s acknowledged, p99 1.6-2.5 s); with one in eight it keeps up
(1.00). The client has the peak's settings (maxOutstandingAdds 20,000, the same tracing). The limit is the time of
one fdatasync at the group size the bookies made at that load. Beside each run, bench.tails measures the
floor (raw fdatasync on the same disk, meanwhile), GC pauses and CPU steal, and prints every run, the spread
and the stage attribution of the worst run's p99 adds (issue 48). After each run, bench.transport_floor
runs the same open loop at the same rate through three echo servers (the same processes, threads and
gRPC streams, with no protocol and no disk): what this design's transport costs, beside what the disk does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from bench import tails, transport_floor
from bench.bookie_floor import StageTotals, process_cpu_seconds, scrape_stage_totals, stage_means
from bench.cluster3 import (
    ACK_QUORUM,
    ENSEMBLE,
    ENTRY_SIZE,
    PASSWORD,
    WRITE_QUORUM,
    ClientSizes,
    ClusterSession,
    WrittenLedger,
    cluster_session,
    fresh_cluster_session,
)
from bench.core import MB, Context, KiB, Row, size_label, timer_loop
from bench.disk import DiskLoad, DiskLoadMeter, measure_fsync_limit
from bench.peak import Peak, Probe, next_probe
from bench.peak import describe as describe_peak
from bench.syscount import SyscallCounter
from bkledger.bookie import config as bkconfig
from bkledger.bookie.add_trace import STAGES as BOOKIE_STAGES
from bkledger.client import BookKeeper
from bkledger.client.ledger_handle import LedgerHandle

FDATASYNC = "syscalls:sys_enter_fdatasync"
TOTAL_IN_FLIGHT = 20_000
WRITER_COUNTS = (1, 8)
LOADS = (0.2, 0.8)
LATENCY_AIMS_MS = {(0.2, "p50"): 2.0, (0.2, "p99"): 10.0, (0.8, "p99"): 50.0}   # issue 15
ACK_TIMEOUT = 120.0
TICK = 0.001  # s, the open loop's timer period
SAMPLE_EVERY = 8   # the open loop times adds 0, 8, 16, ... (acknowledgements come in entry order)
PEAK_TRACE_RATE = 200_000   # adds/s the peak's closed loop keeps traces for (above any peak seen here)
REFERENCE_GROUP = 256 * KiB
PEAK_FIGURE = "peak the loads are fractions of (1 writer, what the open loop sustains)"
QUORUM = f"E={ENSEMBLE} Qw={WRITE_QUORUM} Qa={ACK_QUORUM}"


class BookieMeter:
    """`with BookieMeter(session) as m: ...` then `m.spends`: each bookie's tails.BookieSpend meanwhile, from its
    process's CPU time and its bookie_ADD_ENTRY_STAGE histograms (as bench.bookie_floor reads them: the
    batches traced, one per request, and each stage's mean), scraped once before and once after. Under the
    client's Nagle rule a bookie gets about a request per round trip whatever the rate, so this is what
    says whether a run's machine was busy with the adds or with the requests (bench.latency_curve)."""

    def __init__(self, session: ClusterSession) -> None:
        self.session = session
        self.spends: list[tails.BookieSpend] = []
        self._before: list[tuple[float, StageTotals]] = []
        self._start = 0.0

    def __enter__(self) -> BookieMeter:
        with contextlib.suppress(OSError):          # no /proc or no metrics page: the spends stay unknown
            self._before = [(process_cpu_seconds(b.pid), scrape_stage_totals(b.metrics_port))
                            for b in self.session.cluster.bookies]
        self._start = time.monotonic()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        took = time.monotonic() - self._start
        if exc_type is not None or not self._before or took <= 0:
            return                                  # a failed run's error is the one to see, not ours
        spends = []
        try:
            for bookie, (cpu, stages) in zip(self.session.cluster.bookies, self._before, strict=True):
                used, after = process_cpu_seconds(bookie.pid) - cpu, scrape_stage_totals(bookie.metrics_port)
                served = after[BOOKIE_STAGES[0]][0] - stages[BOOKIE_STAGES[0]][0]     # its traced add batches
                each = 1000 * used / served if served > 0 else None
                spends.append(tails.BookieSpend(used / took, served / took, each, stage_means(stages, after)))
        except OSError:
            return
        self.spends = spends


class GroupMeter:
    """`with GroupMeter(session) as m: ...` then `m.group_bytes`: the bookies' average journal group
    (journal bytes grown / fdatasync calls of all three bookies), or None with `m.why_not`."""

    def __init__(self, session: ClusterSession) -> None:
        self.session = session
        self.group_bytes: float | None = None
        self.journal_bytes = 0
        self.why_not = SyscallCounter.available()
        self._stack = contextlib.ExitStack()
        self._counters: list[SyscallCounter] = []
        self._before = 0

    def __enter__(self) -> GroupMeter:
        if not self.why_not:
            self._counters = [self._stack.enter_context(SyscallCounter(pid)) for pid in self.session.pids()]
        self._before = self.session.journal_bytes()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        self.journal_bytes = self.session.journal_bytes() - self._before
        if self.why_not:
            return
        fsyncs = sum(c.counts.get(FDATASYNC, 0) for c in self._counters)
        if fsyncs:
            self.group_bytes = self.journal_bytes / fsyncs
        else:
            self.why_not = "perf counted no fdatasync calls"


def round_group(nbytes: float) -> int:
    """A measured average group rounded to whole KiB (at least 4 KiB): the size a limit is taken at."""
    return max(4 * KiB, round(nbytes / KiB) * KiB)


# ---- replicated_add ---------------------------------------------------------------------------


@dataclasses.dataclass
class ThroughputResult:
    writers: int
    entries: int
    seconds: float
    journal_bytes: int           # grown on the three bookies together
    group_bytes: float | None
    why_not: str
    ledger: WrittenLedger         # the first writer's ledger (closed)


def _writer_loop(lh: LedgerHandle, payload: bytes, deadline: float, out: dict[int, int],
                 last: list[Future[int]]) -> None:
    count = 0
    future: Future[int] | None = None
    while time.perf_counter() < deadline:
        future = lh.add_entry_async(payload)
        count += 1
    out[lh.ledger_id] = count
    if future is not None:
        last.append(future)


def closed_loop(session: ClusterSession, writers: int, seconds: float,
                client_conf: dict[str, Any] | None = None) -> ThroughputResult:
    """`writers` ledgers of one client (maxOutstandingAdds split between them, then `client_conf`), each
    fed by its own thread for `seconds`; all adds acknowledged."""
    payload = os.urandom(ENTRY_SIZE)
    bk = BookKeeper(session.uri, maxOutstandingAdds=max(1, TOTAL_IN_FLIGHT // writers), **(client_conf or {}))
    try:
        handles = [bk.create_ledger(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM, password=PASSWORD) for _ in range(writers)]
        counts: dict[int, int] = {}
        last: list[Future[int]] = []
        with GroupMeter(session) as meter:
            start = time.perf_counter()
            threads = [threading.Thread(target=_writer_loop, args=(lh, payload, start + seconds, counts, last),
                                        name=f"bench-writer-{i}") for i, lh in enumerate(handles)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for future in last:  # a ledger's failure is sticky: its last add fails too
                future.result(ACK_TIMEOUT)
            elapsed = time.perf_counter() - start
        entries = sum(counts.values())
        for lh in handles:
            lh.close()
            if lh.last_entry_id + 1 != counts.get(lh.ledger_id):
                raise RuntimeError(f"ledger {lh.ledger_id} closed at entry {lh.last_entry_id}, "
                                   f"{counts.get(lh.ledger_id)} adds were acknowledged")
        first = handles[0]
        ledger = WrittenLedger(first.ledger_id, first.last_entry_id + 1, ENTRY_SIZE)
    finally:
        bk.close()
    return ThroughputResult(writers, entries, elapsed, meter.journal_bytes, meter.group_bytes, meter.why_not, ledger)


def _describe(writers: int) -> str:
    if writers == 1:
        return "1 writer (1 ledger, 1 thread)"
    return f"{writers} writers (1 client, {writers} ledgers, a thread each)"


def _throughput_rows(ctx: Context, session: ClusterSession, res: ThroughputResult) -> list[Row]:
    name = "replicated_add"
    label = f"{_describe(res.writers)}, {size_label(ENTRY_SIZE)}"
    entries_s = res.entries / res.seconds
    payload_mb_s = res.entries * ENTRY_SIZE / res.seconds / MB
    per_entry = res.journal_bytes / WRITE_QUORUM / max(res.entries, 1)   # journal bytes per entry per bookie
    ref_mb_s, _ = ctx.fsync_limit(REFERENCE_GROUP, measure_fsync_limit)
    ref = (f"raw append+fdatasync of {size_label(REFERENCE_GROUP)} groups / Qw={WRITE_QUORUM}"
           " (all bookies share the disk)")
    setup = f"{QUORUM}, maxOutstandingAdds {TOTAL_IN_FLIGHT // res.writers}/ledger"
    if res.group_bytes is None:
        at, limit_mb_s = REFERENCE_GROUP, ref_mb_s
        same = f"{ref} (group size unknown: {res.why_not})"
    else:
        at = round_group(res.group_bytes)
        limit_mb_s, _ = ctx.fsync_limit(at, measure_fsync_limit)
        same = (f"raw append+fdatasync of {size_label(at)} groups (the bookies' average) / Qw={WRITE_QUORUM}"
                " (all bookies share the disk)")
    rows = [
        Row(name, f"{label}: entries/s", entries_s, "entries/s", limit_mb_s * MB / WRITE_QUORUM / per_entry,
            f"{same}, in entries of {per_entry:.0f} journal bytes; {setup}"),
        Row(name, f"{label}: payload MB/s", payload_mb_s, "MB/s", limit_mb_s / WRITE_QUORUM,
            f"{same}; payload only (issue 3 aim: >= 0.5)"),
    ]
    if at != REFERENCE_GROUP:
        rows.append(Row(name, f"{label}: payload MB/s", payload_mb_s, "MB/s", ref_mb_s / WRITE_QUORUM, ref))
    if res.group_bytes is not None:
        conf = bkconfig.parse_properties(Path(session.cluster.bookies[0].conf).read_text())
        threshold = int(conf.get("journalBufferedWritesThreshold", "0"))
        rows.append(Row(name, f"{label}: journal group", res.group_bytes / KiB, "KiB", threshold / KiB or None,
                        "journal bytes / fdatasync calls of the 3 bookies (perf) vs journalBufferedWritesThreshold"))
    return rows


def run_throughput(ctx: Context) -> list[Row]:
    session = cluster_session(ctx)
    seconds = ClientSizes.of(ctx).add_seconds
    rows: list[Row] = []
    for writers in WRITER_COUNTS:
        res = closed_loop(session, writers, seconds)
        if writers == 1:
            session.facts["peak_entries_s"] = res.entries / res.seconds
            if res.group_bytes is not None:
                session.facts["peak_group_bytes"] = res.group_bytes
            session.ledgers["replicated_add"] = res.ledger
        rows.extend(_throughput_rows(ctx, session, res))
    return rows


# ---- add_latency ------------------------------------------------------------------------------


@dataclasses.dataclass
class LatencyResult:
    rate: float                   # the scheduled rate, entries/s
    achieved: float               # entries acknowledged / (last ack - start)
    latencies: list[float]        # seconds, sorted: the sampled adds
    count: int                    # adds scheduled
    group_bytes: float | None
    why_not: str
    timed: list[tuple[int, float]] = dataclasses.field(default_factory=list)   # (entry id, s) of the sampled adds
    traces: list[dict[str, object]] = dataclasses.field(default_factory=list)  # the client's traced adds
    bookie_logs: dict[str, list[dict[str, object]]] = dataclasses.field(default_factory=dict)  # by bookie id
    floor: tails.FloorProbe | None = None          # raw fdatasync latencies on the same disk, meanwhile
    gc: tails.GcPauses | None = None
    steal: tails.CpuSteal | None = None
    transport: list[float] | None = None           # s, ascending: bench.transport_floor at this rate, right after
    bookies: list[tails.BookieSpend] = dataclasses.field(default_factory=list)   # each bookie's, over the timed window
    disk: DiskLoad | None = None                  # the bookies' disk meanwhile (everyone's I/O on it)
    disk_why_not: str = ""


def _schedule(lh: LedgerHandle, payload: bytes, rate: float, count: int, start: float,
              done: list[float], errors: list[BaseException]) -> None:
    """The timer thread: entry i is due at start + i / rate. It sleeps until the next add is due (at most
    max(TICK, 1 / rate)) and submits every add due by then, whatever the acknowledgements are doing: at
    rates above 1 / TICK it wakes about once per due add (every 50 us at 20,000 adds/s), as a producer
    thread adding one entry at a time would, and competes for the GIL with the client's loop. Every
    SAMPLE_EVERY-th add and the last record their acknowledgement time in `done`; a failed add fails
    every later one (a ledger's failure is sticky), so the last one reports it if no sample did."""

    def acked(index: int) -> Callable[[Future[int]], None]:
        def callback(future: Future[int]) -> None:
            done[index] = time.perf_counter()
            exc = future.exception()
            if exc is not None:
                errors.append(exc)
        return callback

    def submit(first: int, end: int) -> None:
        for i in range(first, end):
            future = lh.add_entry_async(payload)
            if (i + 1) % SAMPLE_EVERY == 0 or i == count - 1:     # entry i + 1: the ones the client traces
                future.add_done_callback(acked(i))

    timer_loop(submit, rate, count, start, max(TICK, 1.0 / rate), stopped=lambda: bool(errors))


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """What this process holds before a run (the earlier runs' results, traces and clients' leftovers) is
    moved out of the collector's reach for the run (gc.freeze), so that collections during the run scan
    only what the run allocates: without it, the full collections of a heap grown by earlier runs took
    4.0 s of a 10 s run at 80% of peak by the first such run and 11.2 s by the fifth, the open loop fell
    behind and the percentiles measured the bench's own heap, not the client."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def open_loop(session: ClusterSession, rate: float, seconds: float, floor_group: int = 16 * KiB,
              data_dir: Path | None = None) -> LatencyResult:
    """One open-loop run. The client traces the adds the bench times (entries 0, 8, 16, ...: client.add_trace,
    every one kept); beside it run the floor probe (groups of `floor_group` bytes in `data_dir`), the
    client process's GC pauses, the machine's CPU steal (bench.tails) and the load of the bookies' disk
    (bench.disk.DiskLoadMeter)."""
    payload = os.urandom(ENTRY_SIZE)
    count = max(10, int(rate * seconds))
    done = [0.0] * count
    errors: list[BaseException] = []
    with BookKeeper(session.uri, maxOutstandingAdds=TOTAL_IN_FLIGHT, **_traced(count)) as bk:   # as the peak's
        lh = bk.create_ledger(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM, password=PASSWORD)
        lh.add_entry(payload)  # the connections are up before the clock starts
        probes = contextlib.ExitStack()
        with probes, GroupMeter(session) as meter:
            first = session.cluster.bookies[0]
            floor = probes.enter_context(tails.FloorProbe(data_dir or Path(first.journal_dir), floor_group, seconds,
                                                          first.metrics_port))
            probes.enter_context(_frozen_heap())    # before GcPauses: its own full collection is not the run's
            gc_pauses, steal = probes.enter_context(tails.GcPauses()), probes.enter_context(tails.CpuSteal())
            bookies = probes.enter_context(BookieMeter(session))
            disk = probes.enter_context(DiskLoadMeter(first.journal_dir))
            start = time.perf_counter() + 0.05
            timer = threading.Thread(target=_schedule, args=(lh, payload, rate, count, start, done, errors),
                                     name="bench-open-loop")
            timer.start()
            timer.join()
            deadline = time.monotonic() + ACK_TIMEOUT
            while not errors and done[-1] == 0.0 and time.monotonic() < deadline:
                time.sleep(0.01)
        traces = [a for a in bk.slow_adds() if a["ledger_id"] == lh.ledger_id]
        lh.close()
    bookie_logs = tails.bookie_slow_adds({b.bookie_id: b.http_port for b in session.cluster.bookies if b.http_port})
    if errors:
        raise RuntimeError(f"an add failed at {rate:.0f} entries/s: {errors[0]!r}")
    if done[-1] == 0.0:
        raise RuntimeError(f"adds at {rate:.0f} entries/s were not acknowledged within {ACK_TIMEOUT:.0f} s")
    timed = [(i + 1, t - (start + i / rate)) for i, t in enumerate(done) if t]     # the sampled adds
    achieved = count / (max(done) - start)
    return LatencyResult(rate, achieved, sorted(latency for _, latency in timed), count, meter.group_bytes,
                         meter.why_not, timed, traces, bookie_logs, floor, gc_pauses, steal, bookies=bookies.spends,
                         disk=disk.load, disk_why_not=disk.why_not)


CDF_FRACTIONS = (0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999)


def percentile(ordered: list[float], fraction: float) -> float:
    """The nearest-rank percentile of an ascending list."""
    return ordered[min(len(ordered) - 1, max(0, int(round(fraction * len(ordered))) - 1))]


def _traced(adds: int) -> dict[str, Any]:
    """The client settings of the latency runs beyond maxOutstandingAdds: every SAMPLE_EVERY-th add traced
    and kept (client.add_trace), for `adds` adds."""
    return {"addTraceSampleEvery": SAMPLE_EVERY, "slowAddThresholdMs": 0.0, "slowAddLogSize": adds // SAMPLE_EVERY + 16}


def _peak(ctx: Context) -> Peak:
    """The peak in the latency runs' own conditions: `peak_rounds` closed loops of one writer, each on a
    fresh cluster with the bookies' and the client's tracing on, for as long as one latency run, the heap
    frozen as in one; their median, capped by what an open loop sustains (bench.peak): up to `peak_probes`
    open-loop runs on fresh clusters, from that median down. replicated_add's peak is one 20 s draw on the
    shared cluster, and such draws ranged 98k-149k adds/s on this machine; the median of three ranged
    93k-135k between passes, and 80% of a high one was past what the open loop sustained."""
    sizes = ClientSizes.of(ctx)
    results = []
    traced = _traced(int(PEAK_TRACE_RATE * sizes.latency_seconds))
    for i in range(sizes.peak_rounds):
        with fresh_cluster_session(ctx, f"latency-peak-{i}", conf=tails.BOOKIE_TRACE_CONF) as fresh, _frozen_heap():
            results.append(closed_loop(fresh, 1, sizes.latency_seconds, traced))
    results.sort(key=lambda r: r.entries / r.seconds)
    median = results[len(results) // 2]
    peak = Peak([r.entries / r.seconds for r in results], median.group_bytes)
    floor_group = round_group(median.group_bytes or 64 * KiB)
    while (rate := next_probe(peak, sizes.peak_probes)) is not None:
        with fresh_cluster_session(ctx, f"latency-probe-{len(peak.probes)}", conf=tails.BOOKIE_TRACE_CONF) as fresh:
            probe = open_loop(fresh, rate, sizes.latency_seconds, floor_group, ctx.data_dir)
        peak.probes.append(Probe(rate, probe.achieved))
    return peak


def run_latency(ctx: Context) -> list[Row]:
    """Each load level runs `latency_rounds` times, each on a fresh cluster; each percentile is the median
    of the rounds' (one round's disk hiccup swung the 80% p99 between 56 and 103 ms from run to run), the
    worst round's p99 is printed beside it, and every round by bench.tails.run_rows."""
    session = cluster_session(ctx)
    peak = _peak(ctx)
    if peak.group_bytes is not None:
        session.facts["peak_group_bytes"] = peak.group_bytes
    rows = [_peak_row(session, peak)]
    with transport_floor.echo_servers() as echo_ports:
        for load in LOADS:
            rows.extend(_latency_at(ctx, session, peak.rate, load, echo_ports))
    return rows


def _peak_row(session: ClusterSession, peak: Peak) -> Row:
    """The peak the loads are taken of, against replicated_add's 1-writer peak when that ran."""
    runs = ", ".join(f"{r:,.0f}" for r in peak.runs)
    shared = session.facts.get("peak_entries_s")
    against = (f"against replicated_add's 1-writer run ({shared:,.0f}/s, one {QUORUM} draw on the shared cluster)"
               if shared else "replicated_add did not run")
    return Row("add_latency", PEAK_FIGURE, peak.rate, "entries/s", shared,
               f"closed loops on fresh clusters, traced as the latency runs: {runs} (median {peak.closed:,.0f}); "
               f"{describe_peak(peak)}; {against}")


def _latency_at(ctx: Context, session: ClusterSession, peak: float, load: float, echo_ports: list[int]) -> list[Row]:
    """One load level: its runs (each followed by a transport floor run through `echo_ports`) and rows."""
    sizes = ClientSizes.of(ctx)
    rows: list[Row] = []
    results = []
    floor_group = round_group(session.facts.get("peak_group_bytes", 64 * KiB) * load)   # until one is measured
    for i in range(sizes.latency_rounds):
        with fresh_cluster_session(ctx, f"latency-{load:.0%}-{i}", conf=tails.BOOKIE_TRACE_CONF) as fresh:
            results.append(open_loop(fresh, peak * load, sizes.latency_seconds, floor_group, ctx.data_dir))
        results[-1].transport = transport_floor.measure(echo_ports, peak * load, sizes.latency_seconds,
                                                        SAMPLE_EVERY, TICK)
        groups = [r.group_bytes for r in results if r.group_bytes is not None]
        floor_group = round_group(statistics.median(groups)) if groups else floor_group
    res = results[0]
    measured = [r.group_bytes for r in results if r.group_bytes is not None]
    if not measured:
        at = 4 * KiB
        group_note = f"group size unknown ({res.why_not}): one fdatasync of {size_label(at)}"
    else:
        at = round_group(statistics.median(measured))
        group_note = f"one raw append+fdatasync of {size_label(at)} (the bookies' average group at this load)"
    _, fsyncs_s = ctx.fsync_limit(at, measure_fsync_limit)
    fsync_ms = 1000.0 / fsyncs_s
    label = f"{load:.0%} of peak ({res.rate:,.0f} adds/s, open loop, {QUORUM}, {size_label(ENTRY_SIZE)})"
    rounds = f"median of {len(results)} runs of {sizes.latency_seconds:g} s" if len(results) > 1 else \
        f"one run of {sizes.latency_seconds:g} s"
    for name, fraction in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999)):
        per_round = [percentile(r.latencies, fraction) * 1000 for r in results]
        value = statistics.median(per_round)
        rows.append(Row("add_latency", f"{label}: {name}", value, "ms", fsync_ms,
                        f"{name} ({rounds}) / {group_note}; latency = ack - scheduled time"))
        aim_ms = LATENCY_AIMS_MS.get((load, name))
        if aim_ms is not None:
            rows.append(Row("add_latency", f"{label}: {name} vs aim", value, "ms", aim_ms,
                            f"issue 15 aim at {load:.0%} of peak: {name} <= {aim_ms:g} ms (ratio <= 1; {rounds})"))
        if name == "p99" and len(results) > 1:
            runs = ", ".join(f"{v:.1f}" for v in per_round)
            rows.append(Row("add_latency", f"{label}: p99, the worst run", max(per_round), "ms",
                            aim_ms if aim_ms is not None else fsync_ms,
                            f"each run's p99: {runs} ms; against "
                            + (f"the aim {aim_ms:g} ms" if aim_ms is not None else "one fdatasync")))
    cdf = ctx.facts.setdefault("add_latency_cdf", {})   # drawn by bench.charts as the latency CDF
    assert isinstance(cdf, dict)
    cdf[label] = [[f, statistics.median([percentile(r.latencies, f) * 1000 for r in results])]
                  for f in CDF_FRACTIONS]
    rows.extend(tails.run_rows(ctx, label, results))
    achieved = min(r.achieved for r in results)
    rows.append(Row("add_latency", f"{label}: acknowledged rate", achieved, "entries/s", res.rate,
                    f"the scheduled rate, the slowest run ({res.count} adds, {len(res.latencies)} timed per run; "
                    f"{load:.0%} of the peak {peak:,.0f}/s)"))
    return rows
