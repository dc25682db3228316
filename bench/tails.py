"""What add_latency measures beside each open-loop run, so that a tail can be told from the machine's.

- The floor (`FloorProbe`): a process of its own appends groups of the journal's group size to a file in
  the run's data directory (the bookies' disk) and fdatasyncs each, up to 200 times a second but never
  more than FLOOR_BYTES_PER_S (a third of what one journal writes at 80% of peak), while the cluster takes
  the adds: the raw fdatasync latency distribution under the same background
  write-back, which no add can beat. It writes as the journal does (O_DIRECT where the file system
  allows it, write(2) otherwise). It runs in another process so it takes no GIL from the client. Its
  group size follows the journal's: once a second it reads a bookie's journal group histogram
  (`bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES`, sum / count over the last second).
- GC pauses of the client's process (`GcPauses`, gc.callbacks) and CPU steal (`CpuSteal`, /proc/stat).
- The transport floor (bench.transport_floor), run right after each run at its rate: printed with the run.
- The stage attribution of the slowest adds (`attribute`): the client's traces of the adds at or above
  a run's p99 (client.add_trace), joined with the deciding bookie's own stages from its slow-add log
  (`/api/v1/bookie/slow_adds`, bookie.add_trace) by ledger and entry id.

`python -m bench.tails --dir DIR --group BYTES --interval S --seconds S` is the probe process: it prints
the latencies (seconds) as JSON when it is sent SIGTERM or its time is up.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.core import Row
from bench.disk import GroupFile
from bkledger.bookie import add_trace

#: the bookies of add_latency keep every traced batch of 2 ms or more (bookie.add_trace; all batches are traced)
BOOKIE_SLOW_MS = 2.0
BOOKIE_TRACE_CONF = {"slowAddThresholdMs": str(BOOKIE_SLOW_MS), "slowAddLogSize": "200000"}
FLOOR_INTERVAL = 0.005     # s between the probe's groups: ~200 fdatasyncs/s beside three journals
#: the probe's write budget. Without it, at 80% of peak (groups of 3 MiB) it wrote 600 MB/s, three times
#: what the three journals wrote, and the runs measured the probe: p50 258 ms and 0.94 of the scheduled
#: rate with it, 27-90 ms and 1.00 without it (same client, same rate, same machine).
FLOOR_BYTES_PER_S = 24 * 1024 * 1024
CLIENT_STAGES = ("queue", "send_wait", "bookie", "complete")
BOOKIE_STAGES = add_trace.STAGES


def percentile(ordered: list[float], fraction: float) -> float:
    """The nearest-rank percentile of an ascending list (0.0 for an empty one)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, int(round(fraction * len(ordered))) - 1))]


# ---- the floor --------------------------------------------------------------------------------


class FloorProbe:
    """`with FloorProbe(directory, group_bytes, seconds) as probe: ...` then `probe.latencies` (s, sorted)."""

    def __init__(self, directory: Path, group_bytes: int, seconds: float, metrics_port: int = 0) -> None:
        self.directory = directory
        self.group_bytes = group_bytes          # the first group size; then the median of those used
        self.seconds = seconds
        self.metrics_port = metrics_port        # a bookie's metrics port: the group size follows its journal's
        self.latencies: list[float] = []
        self.error = ""
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> FloorProbe:
        args = [sys.executable, "-m", "bench.tails", "--dir", str(self.directory), "--group", str(self.group_bytes),
                "--interval", str(FLOOR_INTERVAL), "--seconds", str(self.seconds + 120),
                "--metrics-port", str(self.metrics_port)]
        self._proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      cwd=Path(__file__).resolve().parent.parent)
        assert self._proc.stdout is not None
        self._proc.stdout.readline()          # "ready": it measures from now on ("" if it died: said at exit)
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        try:
            found = json.loads(out)
            self.latencies = sorted(found["latencies"])
            if found["groups"]:
                self.group_bytes = int(statistics.median(found["groups"]))
        except (ValueError, KeyError, TypeError):
            self.error = f"the floor probe gave no figures (exit {proc.returncode}): {err.strip()[-300:]}"


GROUP_METRIC = "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES"


def _journal_groups(metrics_port: int) -> tuple[float, float] | None:
    """(bytes, groups) the bookie's journal has written so far, from its metrics; None if unreadable."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith((f"{GROUP_METRIC}_sum ", f"{GROUP_METRIC}_count ")):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    if len(found) != 2:
        return None
    return found[f"{GROUP_METRIC}_sum"], found[f"{GROUP_METRIC}_count"]


class _GroupFollower:
    """The journal's average group over the last second (rounded up to 4 KiB), read from its metrics."""

    def __init__(self, metrics_port: int, group_bytes: int) -> None:
        self.port = metrics_port
        self.group_bytes = group_bytes
        self._last = _journal_groups(metrics_port) if metrics_port else None
        self._next = time.perf_counter() + 1.0

    def update(self) -> int:
        if not self.port or time.perf_counter() < self._next:
            return self.group_bytes
        self._next = time.perf_counter() + 1.0
        now = _journal_groups(self.port)
        if now is not None and self._last is not None and now[1] > self._last[1]:
            average = (now[0] - self._last[0]) / (now[1] - self._last[1])
            self.group_bytes = max(4096, -(-int(average) // 4096) * 4096)
        self._last = now if now is not None else self._last
        return self.group_bytes


def _probe(directory: str, group_bytes: int, interval: float, seconds: float,
           metrics_port: int = 0) -> dict[str, list[float]]:
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    follower = _GroupFollower(metrics_port, group_bytes)
    print("ready", flush=True)
    data = os.urandom(group_bytes)
    fd, path = tempfile.mkstemp(prefix="floor-", suffix=".bin", dir=directory)
    os.close(fd)
    file = GroupFile(path)
    latencies: list[float] = []
    groups: list[float] = []
    try:
        start = time.perf_counter()
        due = start
        while not stop[0] and time.perf_counter() - start < seconds:
            if follower.update() != len(data):
                data = os.urandom(follower.group_bytes)
            began = time.perf_counter()
            file.commit(data)
            latencies.append(time.perf_counter() - began)
            groups.append(len(data))
            due += max(interval, len(data) / FLOOR_BYTES_PER_S)
            time.sleep(max(0.0, due - time.perf_counter()))
    finally:
        file.close()
        os.unlink(path)
    return {"latencies": latencies, "groups": groups}


# ---- GC pauses and CPU steal ------------------------------------------------------------------


class GcPauses:
    """`with GcPauses() as gcp: ...` then `gcp.pauses` (s): the collections of this process meanwhile."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self.pauses.append(time.perf_counter() - self._started)
            self._started = 0.0

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._callback)

    def describe(self) -> str:
        if not self.pauses:
            return "no GC pause"
        total, most = sum(self.pauses) * 1000, max(self.pauses) * 1000
        return f"{len(self.pauses)} GC pauses, total {total:.1f} ms, max {most:.1f} ms"


def _cpu_times() -> list[int] | None:
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    return [int(v) for v in fields[1:]] if fields and fields[0] == "cpu" else None


class CpuSteal:
    """`with CpuSteal() as s: ...` then `s.fraction`: the share of all CPU time stolen by the hypervisor;
    `s.busy`: the share of all CPU time not idle (nor waiting for I/O), and `s.process_cores`: this
    process's CPU-seconds per second meanwhile. The client of one process runs Python on one core at a
    time (the GIL), so process_cores near 1 says the client itself was the limit of the run.
    `s.loop_cores`: the part of it spent by the client's event loop threads (LOOP_THREAD_PREFIX, alive from
    start to end), the thread that sends requests and reads acknowledgements, and `s.loop_runqueue`: the
    share of the time those threads were runnable but waiting for a core (/proc schedstat; None without
    it). A loop on a core half the time and waiting for one a quarter of it is not short of work to do:
    its acks wait for the machine's cores."""

    def __init__(self) -> None:
        self.fraction: float | None = None
        self.seconds = 0.0
        self.busy: float | None = None
        self.process_cores: float | None = None
        self.loop_cores: float | None = None
        self.loop_runqueue: float | None = None
        self._before: list[int] | None = None
        self._process_before = (0.0, 0.0)
        self._loops_before: dict[int, tuple[float, float | None]] = {}

    def __enter__(self) -> CpuSteal:
        self._before = _cpu_times()
        self._loops_before = _loop_thread_times()
        self._process_before = (_process_seconds(), time.perf_counter())
        return self

    def __exit__(self, *exc: object) -> None:
        process_seconds, began = self._process_before
        wall = time.perf_counter() - began
        if wall > 0:
            self.process_cores = (_process_seconds() - process_seconds) / wall
            self._loops_after(_loop_thread_times(), wall)
        after = _cpu_times()
        if self._before is None or after is None or len(after) < 8:
            return
        delta = [a - b for a, b in zip(after, self._before, strict=False)]
        total = sum(delta[:8])            # user nice system idle iowait irq softirq steal (guest is in user)
        if total > 0:
            self.fraction = delta[7] / total
            self.seconds = delta[7] / os.sysconf("SC_CLK_TCK")
            self.busy = 1 - (delta[3] + delta[4]) / total

    def _loops_after(self, after: dict[int, tuple[float, float | None]], wall: float) -> None:
        pairs = [(before, after[t]) for t, before in self._loops_before.items() if t in after]
        if not pairs:
            return
        self.loop_cores = sum(a[0] - b[0] for b, a in pairs) / wall
        waits = [a[1] - b[1] for b, a in pairs if a[1] is not None and b[1] is not None]
        self.loop_runqueue = sum(waits) / wall if len(waits) == len(pairs) else None

    def describe(self) -> str:
        if self.fraction is None:
            return "steal unknown (no /proc/stat)"
        busy = f"; the machine {self.busy:.0%} busy" if self.busy is not None else ""
        cores = f", the client's process {self.process_cores:.2f} cores" if self.process_cores is not None else ""
        if cores and self.loop_cores is not None:
            cores += f" (its event loop thread {describe_loop(self.loop_cores, self.loop_runqueue)})"
        return f"CPU steal {self.fraction:.1%} ({self.seconds:.2f} CPU-s){busy}{cores}"


def _process_seconds() -> float:
    times = os.times()
    return times.user + times.system


LOOP_THREAD_PREFIX = "bkledger-client"      # client.runtime's event loop threads


def describe_loop(cores: float, runqueue: float | None) -> str:
    """'0.49 on a core, 0.27 waiting for one' (or only the first where the kernel keeps no schedstat)."""
    return f"{cores:.2f} on a core" + (f", {runqueue:.2f} waiting for one" if runqueue is not None else "")


def _loop_thread_times() -> dict[int, tuple[float, float | None]]:
    """Of this process's client event loop threads, by native thread id: seconds so far on a core and
    runnable on a run queue (/proc schedstat, in ns; where it is missing, stat's CPU ticks and None)."""
    found: dict[int, tuple[float, float | None]] = {}
    for thread in threading.enumerate():
        if not thread.name.startswith(LOOP_THREAD_PREFIX) or thread.native_id is None:
            continue
        task = f"/proc/self/task/{thread.native_id}"
        try:
            with open(f"{task}/schedstat") as f:
                on_core, waiting = f.read().split()[:2]
            found[thread.native_id] = (int(on_core) / 1e9, int(waiting) / 1e9)
            continue
        except (OSError, ValueError):
            pass
        try:
            with open(f"{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[thread.native_id] = ((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), None)
    return found


# ---- attribution -------------------------------------------------------------------------------


def bookie_slow_adds(http_ports: dict[str, int]) -> dict[str, list[dict[str, Any]]]:
    """Each bookie's slow-add log by bookie id ({} for a bookie that did not answer)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for bookie_id, port in http_ports.items():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/bookie/slow_adds", timeout=30) as answer:
                out[bookie_id] = json.loads(answer.read())["slowAdds"]
        except (OSError, ValueError, KeyError):
            out[bookie_id] = []
    return out


def _covering(batches: list[dict[str, Any]], ledger_id: int, entry_id: int) -> dict[str, Any] | None:
    for batch in batches:
        if batch["ledgerId"] == ledger_id and batch["firstEntryId"] <= entry_id <= batch["lastEntryId"]:
            return batch
    return None


def attribute(adds: list[dict[str, Any]], bookie_logs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Median time per stage over `adds` (client slow-add records): the client's stages, and for the adds
    whose deciding bookie logged the batch, that bookie's stages and what is left of the client's `bookie`
    stage (network both ways, the bookie's loop before it reads the request)."""
    client = {s: statistics.median([a["stages_ms"][s] for a in adds]) if adds else 0.0 for s in CLIENT_STAGES}
    lags = [a["latency_ms"] - a["total_ms"] for a in adds if "latency_ms" in a]
    before = statistics.median(lags) if lags else 0.0       # scheduled -> queued: the load generator's lag
    found: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for add in adds:
        batch = _covering(bookie_logs.get(add.get("deciding_bookie") or "", []), add["ledger_id"], add["entry_id"])
        if batch is not None:
            found.append((add, batch))
    bookie = {s: statistics.median([b["stagesMs"][s] for _, b in found]) if found else 0.0 for s in BOOKIE_STAGES}
    outside = statistics.median([a["stages_ms"]["bookie"] - b["totalMs"] for a, b in found]) if found else 0.0
    stamped = [(a, b) for a, b in found if a.get("sent_ns") and a.get("acked_ns") and b.get("receivedNs")
               and b.get("repliedNs")]
    there = statistics.median([(b["receivedNs"] - a["sent_ns"]) / 1e6 for a, b in stamped]) if stamped else None
    back = statistics.median([(a["acked_ns"] - b["repliedNs"]) / 1e6 for a, b in stamped]) if stamped else None
    return {"adds": len(adds), "on_bookie": len(found), "before_client_ms": before, "client_ms": client,
            "bookie_ms": bookie, "outside_bookie_ms": outside, "to_bookie_ms": there, "from_bookie_ms": back}


def describe_attribution(att: dict[str, Any], timed: int, threshold_ms: float) -> str:
    c, b = att["client_ms"], att["bookie_ms"]
    text = (f"before add_entry queued them (the open loop's lag: GC pauses, the GIL, a full maxOutstandingAdds "
            f"window) {att.get('before_client_ms', 0.0):.1f}, ")
    text += ", ".join(f"{s} {c[s]:.1f}" for s in CLIENT_STAGES)
    if att["on_bookie"]:
        inside = ", ".join(f"{s} {b[s]:.1f}" for s in BOOKIE_STAGES)
        text += (f"; of the bookie stage, on the deciding bookie ({att['on_bookie']} adds in its slow-add log): "
                 f"{inside}; outside it {att['outside_bookie_ms']:.1f}")
        if att.get("to_bookie_ms") is not None and att.get("from_bookie_ms") is not None:
            text += (f" (the way there, until the bookie's loop read the request, {att['to_bookie_ms']:.1f}; the way "
                     f"back, until the client's loop read the acknowledgement, {att['from_bookie_ms']:.1f})")
    else:
        text += f"; no deciding bookie logged them (each took < {threshold_ms:g} ms there)"
    return f"medians (ms) of the {att['adds']} traced adds at or above p99 (of {timed} timed): {text}"


# ---- rows ---------------------------------------------------------------------------------------


def _ms(seconds: list[float], fraction: float) -> float:
    return percentile(seconds, fraction) * 1000.0


def _floor_text(run: Any) -> str:
    floor: FloorProbe | None = run.floor
    if floor is None or not floor.latencies:
        return f"floor not measured ({floor.error if floor is not None else 'no probe'})"
    lat = floor.latencies
    return (f"floor (raw append+fdatasync of {floor.group_bytes // 1024} KiB groups (median; as the journal's) on "
            f"the same disk, meanwhile, "
            f"{len(lat)} fsyncs) p50 {_ms(lat, 0.5):.2f} / p99 {_ms(lat, 0.99):.2f} / p999 {_ms(lat, 0.999):.2f} / "
            f"max {lat[-1] * 1000:.1f} ms")


def _transport_text(run: Any) -> str:
    lat: list[float] | None = run.transport
    if not lat:
        return "transport floor not measured"
    return (f"transport floor (the same open loop through 3 echo servers, no protocol or disk, right after) "
            f"p50 {_ms(lat, 0.5):.2f} / p99 {_ms(lat, 0.99):.2f} / p999 {_ms(lat, 0.999):.2f} ms")


def _transport_rows(label: str, runs: list[Any]) -> list[Row]:
    """The median p99 of the runs against the median p99 of their transport floors (ratio: how many times)."""
    floors = [_ms(r.transport, 0.99) for r in runs if r.transport]
    if not floors:
        return []
    ours = statistics.median(_ms(r.latencies, 0.99) for r in runs)
    return [Row("add_latency", f"{label}: p99 against the transport floor", ours, "ms", statistics.median(floors),
                "median p99 of the runs / median p99 of the transport floor run after each (bench.transport_floor: "
                "the same open loop, processes and gRPC streams, no protocol, no disk): "
                + ", ".join(f"{f:.1f}" for f in floors) + " ms")]


def _p99_adds(run: Any) -> list[dict[str, Any]]:
    """The client's traces of the run's timed adds at or above its p99, each with its latency (`latency_ms`,
    from its scheduled time: it includes what came before add_entry queued it)."""
    p99 = percentile(run.latencies, 0.99)
    slow = {entry_id: latency for entry_id, latency in run.timed if latency >= p99}
    return [{**a, "latency_ms": slow[a["entry_id"]] * 1000.0} for a in run.traces if a["entry_id"] in slow]


@dataclasses.dataclass(frozen=True)
class BookieSpend:
    """What one bookie spent over an open loop's timed window: its cores, the add requests it served per
    second (its traced add batches: one per request, the run writing one ledger) and CPU per request."""

    cores: float
    requests_per_s: float
    cpu_ms_per_request: float | None     # None: no batch traced (metrics off)
    stage_means: str = ""                # its add stages' means over the window (bench.bookie_floor.stage_means)


def describe_spends(spends: list[BookieSpend]) -> str:
    """'the bookies 0.30, 0.29 cores, 262, 255 requests/s at 1.14, 1.11 ms of CPU each'."""
    if not spends:
        return "the bookies' CPU unknown"
    cores = ", ".join(f"{s.cores:.2f}" for s in spends)
    requests = ", ".join(f"{s.requests_per_s:.0f}" for s in spends)
    each = ", ".join("?" if s.cpu_ms_per_request is None else f"{s.cpu_ms_per_request:.2f}" for s in spends)
    return f"the bookies {cores} cores, {requests} requests/s at {each} ms of CPU each"


def run_rows(ctx: Any, label: str, runs: list[Any]) -> list[Row]:
    """Every run's p50/p99/p999 with its floor, GC pauses, CPU steal, the bookies' CPU per request and
    their disk's load; the spread of each percentile; the stage attribution of the worst run's p99 adds.
    The same per run in ctx.facts["add_latency_runs"]."""
    rows: list[Row] = []
    facts = ctx.facts.setdefault("add_latency_runs", [])
    for k, run in enumerate(runs, 1):
        p50, p99, p999 = (_ms(run.latencies, f) for f in (0.5, 0.99, 0.999))
        floor_p99 = _ms(run.floor.latencies, 0.99) if run.floor is not None and run.floor.latencies else None
        gc_text = run.gc.describe() if run.gc is not None else "GC not watched"
        steal_text = run.steal.describe() if run.steal is not None else "steal unknown"
        disk_text = run.disk.describe() if run.disk is not None else f"the disk's load unknown ({run.disk_why_not})"
        rows.append(Row("add_latency", f"{label}: run {k} p99", p99, "ms", floor_p99,
                        f"p50 {p50:.2f}, p99 {p99:.2f}, p999 {p999:.2f} ms ({len(run.latencies)} timed); "
                        f"limit: the floor's p99; {_floor_text(run)}; {_transport_text(run)}; client {gc_text}; "
                        f"{steal_text}; {describe_spends(run.bookies)}; {disk_text}"))
        facts.append({"label": label, "run": k, "p50_ms": p50, "p99_ms": p99, "p999_ms": p999,
                      "achieved": run.achieved, "rate": run.rate, "group_bytes": run.group_bytes,
                      "floor_group_bytes": run.floor.group_bytes if run.floor is not None else None,
                      "floor_ms": {name: _ms(run.floor.latencies, f) for name, f in
                                   (("p50", 0.5), ("p99", 0.99), ("p999", 0.999), ("max", 1.0))}
                      if run.floor is not None and run.floor.latencies else None,
                      "transport_ms": {name: _ms(run.transport, f) for name, f in
                                       (("p50", 0.5), ("p99", 0.99), ("p999", 0.999), ("max", 1.0))}
                      if run.transport else None,
                      "gc_pauses_ms": [x * 1000 for x in run.gc.pauses] if run.gc is not None else None,
                      "steal_fraction": run.steal.fraction if run.steal is not None else None,
                      "machine_busy": run.steal.busy if run.steal is not None else None,
                      "client_process_cores": run.steal.process_cores if run.steal is not None else None,
                      "client_loop_cores": run.steal.loop_cores if run.steal is not None else None,
                      "client_loop_runqueue": run.steal.loop_runqueue if run.steal is not None else None,
                      "bookies": [dataclasses.asdict(spend) for spend in run.bookies],
                      "disk": dataclasses.asdict(run.disk) if run.disk is not None else None})
    for name, fraction in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999)):
        values = sorted(_ms(r.latencies, fraction) for r in runs)
        rows.append(Row("add_latency", f"{label}: {name} spread", statistics.median(values), "ms", None,
                        f"min {values[0]:.2f} / median {statistics.median(values):.2f} / max {values[-1]:.2f} ms "
                        f"over {len(runs)} runs: " + ", ".join(f"{_ms(r.latencies, fraction):.1f}" for r in runs)))
    rows.extend(_transport_rows(label, runs))
    worst = max(runs, key=lambda r: percentile(r.latencies, 0.99))
    att = attribute(_p99_adds(worst), worst.bookie_logs)
    facts.append({"label": label, "worst_run": runs.index(worst) + 1, "attribution": att})
    floor_p99 = _ms(worst.floor.latencies, 0.99) if worst.floor is not None and worst.floor.latencies else None
    rows.append(Row("add_latency", f"{label}: the worst run's p99 adds by stage", _ms(worst.latencies, 0.99), "ms",
                    floor_p99, f"run {runs.index(worst) + 1}; "
                    + describe_attribution(att, len(worst.latencies), BOOKIE_SLOW_MS)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tails", description="the floor probe of add_latency")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--group", type=int, required=True)
    parser.add_argument("--interval", type=float, default=FLOOR_INTERVAL)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--metrics-port", type=int, default=0, help="a bookie's: follow its journal's group size")
    args = parser.parse_args(argv)
    print(json.dumps(_probe(args.dir, args.group, args.interval, args.seconds, args.metrics_port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
