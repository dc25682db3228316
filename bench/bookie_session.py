"""One real bookie for the bookie benchmarks: a LocalCluster (real ZooKeeper + one bookie process).

Started on first use and stopped by the run's cleanup stack, whatever happens. Also remembers what
bookie_add wrote, so bookie_read reads it back (and writes it first when run alone).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import urllib.request
from pathlib import Path

from bench.core import Context
from bkledger.bookie import config as bkconfig
from bkledger.bookie.local.cluster import BookieProcess, LocalCluster

# journalSyncData=true: every acknowledged add is behind an fdatasync. Everything else is the default
# (journalMaxGroupWaitMSec=2, journalBufferedWritesThreshold=512 KiB, flushInterval=5000 from LocalCluster).
# No bookie GC (bookie_add writes ledgers without metadata, which GC would delete before bookie_read) and
# no autorecovery daemons (they would re-replicate behind a benchmark that stops bookies). Journals behind
# a checkpoint are removed, in 512 MB files: with BookKeeper's 5 backups of 2 GB files three bookies kept
# up to 36 GB of old journals, and once adds got faster a full run filled this machine's disk.
CONF_OVERRIDES = {"journalSyncData": "true", "gcWaitTime": "0", "autoRecoveryDaemonEnabled": "false",
                  "journalMaxBackups": "0", "journalMaxSizeMB": "512"}
JOURNAL_BYTES_METRIC = "bookie_journal_JOURNAL_WRITE_BYTES_total"


def journal_write_bytes(process: BookieProcess) -> int:
    """Journal bytes the bookie has written since it started: its JOURNAL_WRITE_BYTES counter (file sizes
    would miss journals removed after a checkpoint); the journal files' size where metrics are off."""
    if not process.metrics_port:
        return sum(p.stat().st_size for p in (Path(process.journal_dir) / "current").glob("*.txn"))
    url = f"http://127.0.0.1:{process.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith(JOURNAL_BYTES_METRIC):
            return int(float(line.rsplit(" ", 1)[1]))
    raise RuntimeError(f"{url} has no {JOURNAL_BYTES_METRIC}")
PASSWORD = b"pw"
_KEY = "bookie"


@dataclasses.dataclass
class WrittenLedger:
    ledger_id: int
    payload_size: int
    entries: int  # entry ids 0 .. entries - 1, all acknowledged


@dataclasses.dataclass
class BookieSession:
    cluster: LocalCluster
    conf: dict[str, str]
    written: dict[int, WrittenLedger] = dataclasses.field(default_factory=dict)  # by payload size

    @property
    def process(self) -> BookieProcess:
        return self.cluster.bookies[0]

    @property
    def journal_current(self) -> Path:
        return Path(self.process.journal_dir) / "current"

    @property
    def entry_log_dirs(self) -> list[Path]:
        return [Path(d) / "current" for d in self.process.ledger_dirs]

    def journal_bytes(self) -> int:
        """Journal bytes written by the bookie since it started."""
        return journal_write_bytes(self.process)

    def entry_logs(self) -> list[Path]:
        return sorted(p for d in self.entry_log_dirs for p in d.glob("*.log"))


def start_cluster(ctx: Context, dirname: str, bookies: int, shared: str | None = None,
                  stack: contextlib.ExitStack | None = None, conf: dict[str, str] | None = None) -> LocalCluster:
    """A local cluster, stopped and its directory removed by a cleanup stack even if it only half starts:
    `stack` when given, else the `shared` session's, else the benchmark's. `conf`: more bookie settings."""
    path = ctx.data_dir / dirname
    if stack is None:
        stack = ctx.stack if shared is None else ctx.shared_stack(shared, path)
    stack.callback(shutil.rmtree, path, ignore_errors=True)
    cluster = LocalCluster(path)
    stack.callback(cluster.down)  # registered before up(): a half-started cluster is stopped too
    cluster.up(bookies, {**CONF_OVERRIDES, **(conf or {})})
    return cluster


def bookie_session(ctx: Context) -> BookieSession:
    """The run's bookie, started now if this is the first benchmark that needs it."""
    found = ctx.shared.get(_KEY)
    if isinstance(found, BookieSession):
        return found
    cluster = start_cluster(ctx, "cluster", 1, shared=_KEY)
    conf = bkconfig.parse_properties(Path(cluster.bookies[0].conf).read_text())
    session = BookieSession(cluster, conf)
    ctx.shared[_KEY] = session
    ctx.facts["bookie_conf"] = {k: v for k, v in conf.items() if k.startswith(("journal", "flush", "logSize"))}
    return session
