"""recovery_time: how long `open_ledger(id, recovery=True)` takes after the writer died, E=3 Qw=3 Qa=2.

A writer process (bench.recovery_writer) adds and acknowledges some entries, queues 1,000 more and
is killed with SIGKILL as they reach the bookies. Another client then opens the ledger: first with
recovery=False (metadata + LAC from the bookies: the floor of any open, the limit of the healthy
case), then with recovery=True (fence, read past the LAC, write back, close), timed. The same again
with one bookie of the ensemble paused (SIGSTOP) after the plain open, so the client's connection to
it is up and silent: recovery needs only Qa answers and must not wait for a timeout, so the paused
case is compared to the healthy one (paused / healthy). The median of the repeats is reported.
"""

from __future__ import annotations

import dataclasses
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.bookie_add import BenchError
from bench.cluster3 import ACK_QUORUM, ENSEMBLE, PASSWORD, WRITE_QUORUM, ClientSizes, ClusterSession, cluster_session
from bench.core import Context, Row
from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig

PAUSED_BOOKIE = 1
WRITER_TIMEOUT = 120.0
REPO = Path(__file__).resolve().parent.parent


@dataclasses.dataclass
class Recovery:
    plain_open: float      # s, open_ledger(recovery=False)
    recovery: float        # s, open_ledger(recovery=True)
    preloaded_last: int    # last entry the dead writer saw acknowledged before queuing the in-flight adds
    recovered_last: int    # last entry id of the closed ledger


def kill_writer(session: ClusterSession, preload: int, inflight: int) -> tuple[int, int]:
    """Run a writer that dies with `inflight` adds in flight; (ledger id, last entry acknowledged before)."""
    cmd = [sys.executable, "-m", "bench.recovery_writer", session.uri, str(ENSEMBLE), str(WRITE_QUORUM),
           str(ACK_QUORUM), str(preload), str(inflight)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=WRITER_TIMEOUT, check=False)
    lines = dict(line.split(None, 1) for line in done.stdout.splitlines() if " " in line)
    if done.returncode != -signal.SIGKILL or "LEDGER" not in lines or "READY" not in lines:
        raise BenchError(f"recovery writer ended with {done.returncode}: {done.stdout[-300:]} {done.stderr[-600:]}")
    return int(lines["LEDGER"]), int(lines["READY"])


def recover(session: ClusterSession, sizes: ClientSizes, paused: bool) -> Recovery:
    ledger_id, preloaded = kill_writer(session, sizes.preload_entries, sizes.inflight_entries)
    with BookKeeper(session.uri) as bk:
        start = time.perf_counter()
        bk.open_ledger(ledger_id, PASSWORD, recovery=False)
        plain = time.perf_counter() - start
        if paused:
            session.cluster.signal_bookie(PAUSED_BOOKIE, signal.SIGSTOP)
        try:
            start = time.perf_counter()
            handle = bk.open_ledger(ledger_id, PASSWORD, recovery=True)
            elapsed = time.perf_counter() - start
        finally:
            if paused:
                session.cluster.signal_bookie(PAUSED_BOOKIE, signal.SIGCONT)
    if not handle.is_closed or handle.last_entry_id < preloaded:
        raise BenchError(f"ledger {ledger_id} recovered to {handle.last_entry_id}, {preloaded} was acknowledged")
    return Recovery(plain, elapsed, preloaded, handle.last_entry_id)


def run(ctx: Context) -> list[Row]:
    session = cluster_session(ctx)
    sizes = ClientSizes.of(ctx)
    healthy = [recover(session, sizes, paused=False) for _ in range(sizes.recovery_repeats)]
    paused = [recover(session, sizes, paused=True) for _ in range(sizes.recovery_repeats)]
    healthy_s = statistics.median(r.recovery for r in healthy)
    paused_s = statistics.median(r.recovery for r in paused)
    plain_s = statistics.median(r.plain_open for r in healthy)
    recovered = statistics.median(r.recovered_last - r.preloaded_last for r in healthy + paused)
    defaults = ClientConfig()
    setup = (f"E={ENSEMBLE} Qw={WRITE_QUORUM} Qa={ACK_QUORUM}, writer killed -9 with {sizes.inflight_entries:,} adds "
             f"in flight after {sizes.preload_entries:,} acknowledged; median of {sizes.recovery_repeats}; "
             f"the recovered ledger ends {recovered:.0f} entries past the last acknowledged one")
    return [
        Row("recovery_time", "open with recovery, healthy", healthy_s * 1000, "ms", plain_s * 1000,
            f"open_ledger(recovery=False) of the same ledger, same client (metadata + LAC); {setup}"),
        Row("recovery_time", "open with recovery, 1 bookie paused (SIGSTOP)", paused_s * 1000, "ms", healthy_s * 1000,
            f"the healthy recovery: paused / healthy. Waiting for the paused bookie would cost >= fenceTimeout "
            f"{defaults.fenceTimeout:.0f} s / readTimeout {defaults.readTimeout:.0f} s"),
    ]
