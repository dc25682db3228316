"""Three real bookies for the client-side benchmarks, and the sizes those benchmarks use per mode.

A LocalCluster (real ZooKeeper + three bookie processes, journalSyncData=true like bookie_session),
started on first use and stopped by the run's cleanup stack. All three bookies journal to the same
disk, so a replicated add (E=3 Qw=3 Qa=2) costs that disk Qw journal writes: the limit of replicated
adds is the raw append + fdatasync speed divided by Qw. The benchmarks that share it (replicated_add,
ledger_read, recovery_time) leave ledgers written here in `ClusterSession.ledgers`. add_latency runs
each open loop in a cluster of its own (`fresh_cluster_session`), removed right after.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

from bench.bookie_session import journal_write_bytes, start_cluster
from bench.core import Context, KiB, MiB
from bkledger.bookie.local.cluster import LocalCluster

_KEY = "cluster3"
PASSWORD = b"pw"
ENSEMBLE, WRITE_QUORUM, ACK_QUORUM = 3, 3, 2
ENTRY_SIZE = 1 * KiB


@dataclasses.dataclass(frozen=True)
class ClientSizes:
    """How long / how much the client-side benchmarks run in one mode (full, quick, tiny)."""

    add_seconds: float          # per writer count of replicated_add (the run's Settings.add_seconds)
    latency_seconds: float      # per load level of add_latency
    tail_seconds: float         # the writer's time in the tailing read
    recovery_repeats: int       # recoveries per case (healthy / paused); the median is reported
    preload_entries: int        # acknowledged entries before the writer is killed
    inflight_entries: int       # adds in flight when it is killed
    rss_bytes: int              # payload written to the lone bookie of bookie_rss
    latency_rounds: int         # open-loop runs per load level of add_latency; each is printed
    peak_rounds: int            # closed-loop runs whose median is the peak add_latency's loads are taken of
    peak_probes: int            # open-loop runs at most that cap that median at what an open loop sustains

    @staticmethod
    def of(ctx: Context) -> ClientSizes:
        mode, add = ctx.settings.mode, ctx.settings.add_seconds
        if mode == "tiny":
            return ClientSizes(add, 0.5, 0.5, 1, 200, 1_000, 8 * MiB, 1, 1, 1)
        if mode == "quick":
            return ClientSizes(add, 2.0, 2.0, 1, 1_000, 1_000, 64 * MiB, 1, 1, 2)
        return ClientSizes(add, 10.0, 10.0, 3, 5_000, 1_000, 1024 * MiB, 5, 3, 3)   # issue 48: 5 runs per load


@dataclasses.dataclass
class WrittenLedger:
    """A closed ledger written by a benchmark, entries 0 .. entries - 1 of `payload_size` bytes."""

    ledger_id: int
    entries: int
    payload_size: int


@dataclasses.dataclass
class ClusterSession:
    cluster: LocalCluster
    ledgers: dict[str, WrittenLedger] = dataclasses.field(default_factory=dict)
    facts: dict[str, float] = dataclasses.field(default_factory=dict)  # e.g. the measured add peak

    @property
    def uri(self) -> str:
        return self.cluster.metadata_service_uri

    def journal_bytes(self) -> int:
        """Journal bytes the three bookies have written since they started."""
        return sum(journal_write_bytes(b) for b in self.cluster.bookies)

    def pids(self) -> list[int]:
        return [b.pid for b in self.cluster.bookies]


def cluster_session(ctx: Context) -> ClusterSession:
    """The run's three-bookie cluster, started now if this is the first benchmark that needs it."""
    found = ctx.shared.get(_KEY)
    if isinstance(found, ClusterSession):
        return found
    session = ClusterSession(start_cluster(ctx, "cluster3", 3, shared=_KEY))
    ctx.shared[_KEY] = session
    return session


@contextlib.contextmanager
def fresh_cluster_session(ctx: Context, dirname: str, bookies: int = 3,
                          conf: dict[str, str] | None = None) -> Iterator[ClusterSession]:
    """A cluster of its own for one measurement, stopped and its data removed when it ends: every run
    starts alike, and the run's disk holds only what later benchmarks read (an open loop at 80% of
    peak writes about 6 GB; three of them per load level filled this machine's disk)."""
    with contextlib.ExitStack() as stack:
        yield ClusterSession(start_cluster(ctx, dirname, bookies, stack=stack, conf=conf))
