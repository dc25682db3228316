"""bench.tails: the stage attribution joins the client's traces with the deciding bookie's batches."""

from __future__ import annotations

import signal
import time
from typing import Any

from bench.tails import attribute, describe_attribution, percentile


def client_add(entry_id: int, bookie_ms: float, deciding: str = "b1", latency_ms: float = 0.0) -> dict[str, Any]:
    total = 3.5 + bookie_ms
    return {"ledger_id": 4, "entry_id": entry_id, "deciding_bookie": deciding, "total_ms": total,
            "latency_ms": latency_ms or total,
            "stages_ms": {"queue": 1.0, "send_wait": 2.0, "bookie": bookie_ms, "complete": 0.5}}


def batch(first: int, last: int, fsync_ms: float) -> dict[str, Any]:
    stages = {"decide": 0.2, "handoff": 0.3, "storage": 0.5, "journal_queue": 0.0, "journal_write": 0.0,
              "fsync": fsync_ms, "to_loop": 0.0, "reply": 0.0}
    return {"ledgerId": 4, "firstEntryId": first, "lastEntryId": last, "totalMs": sum(stages.values()),
            "stagesMs": stages}


def test_the_deciding_bookies_batch_explains_the_bookie_stage():
    adds = [client_add(8, 50.0, latency_ms=253.5), client_add(16, 60.0, latency_ms=363.5),
            client_add(24, 70.0, deciding="b2", latency_ms=73.5)]
    logs = {"b1": [batch(0, 9, 40.0), batch(10, 19, 50.0)], "b2": []}    # b2 logged nothing: fast there
    att = attribute(adds, logs)
    assert att["adds"] == 3 and att["on_bookie"] == 2
    assert att["client_ms"]["bookie"] == 60.0
    assert att["bookie_ms"]["fsync"] == 45.0                   # median of the two found
    assert att["outside_bookie_ms"] == 9.0                     # 50 - 41 and 60 - 51
    assert att["before_client_ms"] == 200.0                    # scheduled -> queued: 200, 300, 0
    text = describe_attribution(att, 300, 2.0)
    assert "bookie 60.0" in text and "fsync 45.0" in text and "of 300 timed" in text


def test_the_stamps_split_the_outside_into_the_way_there_and_back():
    """One clock on both sides: received - sent is the way there, acked - replied the way back; a record
    without the stamps (an older bookie) leaves the split out of the row rather than guessing it."""
    add = {**client_add(8, 50.0), "sent_ns": 1_000_000_000, "acked_ns": 1_050_000_000}
    logged = {**batch(0, 9, 40.0), "receivedNs": 1_007_000_000, "repliedNs": 1_048_000_000}
    att = attribute([add], {"b1": [logged]})
    assert att["to_bookie_ms"] == 7.0 and att["from_bookie_ms"] == 2.0 and att["outside_bookie_ms"] == 9.0
    assert "the way there, until the bookie's loop read the request, 7.0" in describe_attribution(att, 10, 2.0)
    unstamped = attribute([client_add(8, 50.0)], {"b1": [batch(0, 9, 40.0)]})
    assert unstamped["to_bookie_ms"] is None and unstamped["from_bookie_ms"] is None
    assert "the way there" not in describe_attribution(unstamped, 10, 2.0)


def test_no_logged_batch_says_so():
    att = attribute([client_add(8, 5.0)], {"b1": []})
    assert att["on_bookie"] == 0
    assert "no deciding bookie logged them" in describe_attribution(att, 10, 2.0)
    assert percentile([], 0.99) == 0.0 and percentile([1.0, 2.0, 3.0], 0.5) == 2.0


def test_the_floor_probe_keeps_to_its_byte_budget(tmp_path) -> None:
    """At 80% of peak the journal's groups are megabytes: the probe must measure the disk, not load it
    (unbudgeted it wrote 600 MB/s beside journals writing 200). Groups of 4 MiB for 0.5 s: at most
    FLOOR_BYTES_PER_S for the time, one group more, not one every FLOOR_INTERVAL (100 groups)."""
    from bench import tails

    handler = signal.getsignal(signal.SIGTERM)        # the probe process stops on SIGTERM: restore ours
    try:
        found = tails._probe(str(tmp_path), 4 * 1024 * 1024, tails.FLOOR_INTERVAL, 0.5)
    finally:
        signal.signal(signal.SIGTERM, handler)
    written = sum(found["groups"])
    assert len(found["groups"]) >= 1 and written <= tails.FLOOR_BYTES_PER_S * 0.5 + 4 * 1024 * 1024


def test_cpu_watch_reports_this_process_and_the_machine() -> None:
    from bench import tails

    with tails.CpuSteal() as watch:
        deadline = time.perf_counter() + 0.2
        while time.perf_counter() < deadline:     # busy: this process uses about one core meanwhile
            pass
    assert watch.process_cores is not None and 0.0 < watch.process_cores < 1.5     # one busy thread (shared CPUs)
    assert watch.busy is not None and 0.0 < watch.busy <= 1.0
    assert "the client's process" in watch.describe()
    assert watch.loop_cores is None                 # no client here: no loop thread to speak of


def test_cpu_watch_counts_the_client_loop_threads_apart() -> None:
    """A busy thread named as a client's loop thread is counted, as one thread; this (main) thread, asleep,
    adds nothing to it."""
    import threading

    from bench import tails

    started, stop = threading.Event(), threading.Event()

    def spin() -> None:
        started.set()
        while not stop.is_set():
            pass

    loop = threading.Thread(target=spin, name=tails.LOOP_THREAD_PREFIX + "-test", daemon=True)
    loop.start()
    assert started.wait(10)
    try:
        with tails.CpuSteal() as watch:
            time.sleep(0.5)
    finally:
        stop.set()
        loop.join(10)
    assert watch.loop_cores is not None and 0.2 < watch.loop_cores < 1.2      # one thread
    assert watch.loop_runqueue is not None and 0.0 <= watch.loop_runqueue < 0.8   # this kernel keeps schedstat
    assert watch.loop_cores + watch.loop_runqueue < 1.2                         # one thread's time, not more
    assert f"its event loop thread {watch.loop_cores:.2f} on a core, " in watch.describe()


class _RecordingStream:
    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes]] = []

    def send(self, request: int, data: bytes) -> None:
        self.sent.append((request, data))


def test_the_transport_floor_completes_an_add_at_the_second_answer_of_three() -> None:
    """bench.transport_floor stands for E=3 Qa=2: everything queued leaves as one request to every server,
    and its adds are done when the second server answers, not the first or the third."""
    from bench.transport_floor import FloorLoop

    floor = FloorLoop([], 3)
    streams = [_RecordingStream() for _ in range(3)]
    floor._streams = streams  # type: ignore[assignment]
    floor._incoming = [(0, b"a"), (1, b"b")]
    floor._drain()
    assert [s.sent for s in streams] == [[(0, b"ab")]] * 3
    floor.answered(0)
    assert floor.done[:2] == [0.0, 0.0]
    floor.answered(0)
    assert floor.done[0] > 0.0 and floor.done[1] == floor.done[0] and floor.done[2] == 0.0
    floor.answered(0)
    assert floor._answers == {} and floor._members == {}
    floor.loop.close()


def test_the_bookie_floor_splits_a_backlog_as_the_client_does() -> None:
    """bench.bookie_floor's stream sent everything queued as one message; behind a stall at 90,000 adds/s
    that passed the bookie's message limit, the bookie refused it and the floor never answered. Now a
    message holds the oldest drains up to MAX_REQUEST_BYTES (at least one), in order; the echo floor still
    sends everything queued."""
    from bench.bookie_floor import BookieStream
    from bench.transport_floor import FloorStream
    from bkledger.client.bookie_client import MAX_REQUEST_BYTES

    third = MAX_REQUEST_BYTES // 3
    stream = BookieStream(None, 0)  # type: ignore[arg-type]
    for request, size in enumerate([third, third, third, third, 2 * MAX_REQUEST_BYTES]):
        stream.queued.append((request, (7, request, [size], b"x" * size)))
    assert [[r for r, _ in stream._take()] for _ in range(3)] == [[0, 1, 2], [3], [4]]
    assert not stream.queued
    echo = FloorStream(None, 0)  # type: ignore[arg-type]
    echo.queued.extend([(0, b"a" * MAX_REQUEST_BYTES), (1, b"b" * MAX_REQUEST_BYTES)])
    assert [r for r, _ in echo._take()] == [0, 1] and not echo.queued


def test_the_transport_floor_cli_refuses_a_rate_or_time_that_is_not_above_zero(capsys) -> None:
    """A rate of 0 divided by zero in the timer, and a negative time ran nothing: both are refused first."""
    import pytest

    from bench.transport_floor import main

    for argv in (["--rate", "0"], ["--rate", "-5"], ["--seconds", "nan"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert "must be a number above 0" in capsys.readouterr().err


def test_a_group_file_appends_each_commit_whole_and_in_order(tmp_path) -> None:
    """bench.disk.GroupFile (the journaled floor's, the fsync probe's and the fsync limit's file): each
    commit lands after the one before, whole; O_DIRECT pads the file to whole blocks, so the data is its
    prefix, and the buffered way writes exactly the data."""
    from bench.disk import GroupFile

    for direct in (True, False):
        path = tmp_path / f"group-{direct}"
        file = GroupFile(path, direct)
        file.commit(b"first ")
        file.commit(b"second")
        file.close()
        data = path.read_bytes()
        assert data.startswith(b"first second")
        assert data[len(b"first second"):].strip(b"\0") == b""
        if not file.direct:
            assert data == b"first second"


def test_the_floor_clis_refuse_a_journal_dir_or_run_count_they_cannot_use(tmp_path, capsys) -> None:
    """A --journal that is not a writable directory would have killed each echo server at its start (the
    floor then waited out its ready timeout); --runs 0 ran nothing; a rate of 0, NaN or a word would have
    started a cluster for an open loop it could not schedule. Each is refused first, naming it."""
    import pytest

    from bench import bookie_floor, latency_curve, transport_floor

    for main, argv in ((transport_floor.main, ["--journal", str(tmp_path / "missing")]),
                       (bookie_floor.main, ["--runs", "0"]), (bookie_floor.main, ["--runs", "x"]),
                       (latency_curve.main, ["--rates", "5000,0"]), (latency_curve.main, ["--rates", "fast"]),
                       (latency_curve.main, ["--rates", "5000,nan"]), (latency_curve.main, ["--runs", "101"]),
                       (latency_curve.main, ["--set", "addStreamPort"]), (latency_curve.main, ["--set", "=3"])):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert argv[1] in capsys.readouterr().err


def test_the_bookie_floor_sends_drains_as_one_batch_a_bookie_accepts() -> None:
    """bench.bookie_floor: two drains queued behind an unanswered request leave as one AddRequest of one
    AddBatch (one answer per request, as the floor counts), with consecutive entry ids and packaged
    entries whose headers the bookie's own checks accept."""
    from bench.bookie_floor import BookieFloorLoop, encode_request
    from bkledger.bookie.core import decisions
    from bkledger.bookie.request_guard import parse_add_stream

    floor = BookieFloorLoop([], 5)
    drains = [floor.request_data([b"a" * 10, b"b" * 20]), floor.request_data([b"c" * 30])]
    batches = parse_add_stream(encode_request(drains))
    assert isinstance(batches, list) and len(batches) == 1
    batch = batches[0]
    assert batch.ledger_id == floor.ledger_id and list(batch.entry_ids) == [0, 1, 2]
    assert decisions.check_batch_shape(batch.ledger_id, batch.entry_ids, batch.sizes, len(batch.data), 1 << 20) == ""
    assert decisions.check_headers(batch.ledger_id, batch.entry_ids, batch.sizes, batch.data) == ("", 1)
    other = BookieFloorLoop([], 5)
    assert other.ledger_id != floor.ledger_id     # each run writes a ledger of its own
    floor.loop.close()
    other.loop.close()


def test_the_bookie_floor_reads_each_stage_mean_from_the_bookies_own_metrics() -> None:
    """bench.bookie_floor: a run's stage means and CPU per request come from the difference of two scrapes
    of the bookie's bookie_ADD_ENTRY_STAGE histograms (the text its metrics page serves)."""
    from prometheus_client import generate_latest

    from bench.bookie_floor import describe_bookie, stage_totals
    from bkledger.bookie import metrics
    from bkledger.bookie.add_trace import STAGES

    registry = metrics.new_registry()
    stats = metrics.ServerStats(registry)
    assert describe_bookie(stage_totals(""), stage_totals(""), 1.0, 1.0).startswith("no add batch traced")
    for histogram in stats.add_stages:
        histogram.observe(1.0)                      # one batch before the run
    before = stage_totals(generate_latest(registry).decode())
    for _ in range(4):                              # four batches in the run: handoff 3 ms, fsync 0.5, the rest 0
        for stage, histogram in zip(STAGES, stats.add_stages, strict=True):
            histogram.observe({"handoff": 3.0, "fsync": 0.5}.get(stage, 0.0))
    after = stage_totals(generate_latest(registry).decode())
    text = describe_bookie(before, after, cpu_seconds=0.006, seconds=2.0)
    assert text.startswith("2 requests/s, 1.50 ms of CPU each;"), text
    assert "decide 0.00, handoff 3.00, storage 0.00" in text and "fsync 0.50" in text, text


def test_the_latency_curve_reads_its_rates_and_prints_each_run_as_one_line() -> None:
    """bench.latency_curve: --rates is a comma-separated list of adds/s, each above 0 and finite; a run's
    line carries the rate, the percentiles of its sorted latencies (ms), the machine's busy share and the
    client's cores, and says so when /proc gave neither."""
    from bench.latency_curve import describe_run, rates

    assert rates("5000,10000.5") == [5000.0, 10000.5]
    line = describe_run(5000.0, [0.001 * i for i in range(1, 1001)], 4998.0, 0.84, 0.58)
    assert line.startswith("full client at 5000/s (acknowledged 4998/s): p50 ") and "p99 990" in line, line
    assert line.endswith("the machine 84% busy, the client 0.58 cores"), line
    assert "the machine's load unknown, the client's cores unknown" in describe_run(1.0, [0.01], 1.0, None, None)
    assert "the client 0.58 cores (its event loop thread 0.41 on a core, 0.20 waiting for one)" in describe_run(
        1.0, [0.01], 1.0, 0.8, 0.58, 0.41, 0.2)
    assert describe_run(1.0, [0.01], 1.0, 0.8, 0.58, 0.41).endswith("(its event loop thread 0.41 on a core)")


def test_the_bookies_spend_is_printed_per_bookie_and_unknown_without_figures() -> None:
    """add_latency's run line carries each bookie's cores, requests per second and CPU per request
    (bench.client_add.BookieMeter); a bookie that traced nothing shows '?' and no meter says unknown."""
    from bench.tails import BookieSpend, describe_spends

    spends = [BookieSpend(0.304, 262.4, 1.144), BookieSpend(0.29, 255.0, None)]
    assert describe_spends(spends) == "the bookies 0.30, 0.29 cores, 262, 255 requests/s at 1.14, ? ms of CPU each"
    assert describe_spends([]) == "the bookies' CPU unknown"


def _counters(writes: int, sectors: int, write_ms: int, busy_ms: int, weighted_ms: int) -> list[int]:
    """/proc/diskstats counters of one device: reads (4), writes (4), in flight, busy ms, weighted ms."""
    return [7, 0, 56, 3, writes, 0, sectors, write_ms, 1, busy_ms, weighted_ms]


def test_the_disk_load_is_read_from_two_snapshots_of_the_devices_counters() -> None:
    """Over 2 s: 1,000 writes of 1,000,000 sectors (512 MB) that took 3,000 ms of queue and service, the
    device busy 1.5 s with 4,000 request-ms in flight: 256 MB/s, 500 writes/s, 3 ms each, 2 in flight."""
    from bench.disk import disk_load

    before = _counters(writes=5_000, sectors=10_000, write_ms=900, busy_ms=100, weighted_ms=2_000)
    after = _counters(writes=6_000, sectors=1_010_000, write_ms=3_900, busy_ms=1_600, weighted_ms=6_000)
    load = disk_load(before, after, 2.0)
    assert load is not None
    assert (load.written_mb_per_s, load.writes_per_s, load.ms_per_write) == (256.0, 500.0, 3.0)
    assert (load.in_flight, load.busy) == (2.0, 0.75)
    assert load.describe() == ("the disk wrote 256 MB/s in 500 requests/s of 3.00 ms each (mean, queued and "
                               "served), 2.0 in flight, busy 75%")
    idle = disk_load(before, before, 2.0)
    assert idle is not None and idle.ms_per_write == 0.0        # no writes: no time per write, not a division
    assert disk_load(after, before, 2.0) is None                 # counters that went back: a replaced device
    assert disk_load(before, after, 0.0) is None


def test_the_disk_load_meter_sees_this_processs_writes_or_says_why_not(tmp_path) -> None:
    """On a block device, a synced 4 MiB write shows as written bytes; elsewhere (tmpfs) the meter says the
    device is not in /proc/diskstats instead of a load."""
    import os

    from bench.disk import DiskLoadMeter

    with DiskLoadMeter(tmp_path) as meter:
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, os.urandom(4 << 20))
            os.fsync(fd)
        finally:
            os.close(fd)
    if meter.load is None:
        assert "is not in /proc/diskstats" in meter.why_not
    else:
        assert meter.load.written_mb_per_s > 0 and meter.load.writes_per_s > 0
