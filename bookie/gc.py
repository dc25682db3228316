"""Garbage collection on a bookie: deleted ledgers, dead entry logs, compaction.

Mirrors BookKeeper's GarbageCollectorThread with the ScanAndCompareGarbageCollector. Every `gcWaitTime` ms
(or longer: the wait after a round is at least 19 times as long as its step 1 took, so listing the
cluster's ledgers takes at most 5% of the thread however many there are):

1. Ledger GC (scan and compare): list the ledgers held locally FIRST, then the ledgers in the metadata
   store (flat or hierarchical: the store walks its manager's tree). A local ledger missing from the
   metadata listing is re-checked (`verifyMetadataOnGc`: read its znode right before deleting) and only
   then dropped from storage. Listing local ledgers first means a ledger created after the metadata
   listing cannot be collected: a bookie only holds a ledger whose metadata already existed. If the
   metadata listing fails, nothing is deleted this round.
2. Over-replicated ledgers (every `gcOverreplicatedLedgerWaitTime` ms, as BookKeeper's
   `gcOverReplicatedLedgers`): a CLOSED ledger held here that no fragment names this bookie any more
   (its data was re-replicated elsewhere while this bookie was presumed lost) is dropped once two checks,
   one interval apart, saw it so at the same metadata version, under the ledger's under-replication lock
   (so no replication worker copies it here meanwhile) and after a last re-read in that lock.
3. Entry-log GC: per entry log (never the active one) the live bytes are the sizes of the index slots
   pointing into it. A log with no live byte is deleted. A log whose live ratio is below
   `minorCompactionThreshold` (every `minorCompactionInterval` s) or `majorCompactionThreshold` (every
   `majorCompactionInterval` s) is compacted: live entries are copied to the active log, the index is
   repointed, and the old file deleted once the index is checkpointed. Space comes back on disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from bkledger.bookie.config import BookieConfig
from bkledger.bookie.storage import LedgerStorage
from bkledger.bookie.thread_guard import FAILURES
from bkledger.client.errors import BKError, NoSuchLedgerError
from bkledger.client.meta.store import MetadataStore
from bkledger.client.meta.underreplication import UnderReplicationManager

log = logging.getLogger("bkledger.gc")


GC_SHARE = 0.05        # at most this share of the GC thread's time goes to listing the cluster's ledgers


def next_round_wait(gc_wait_s: float, last_listing_s: float) -> float:
    """Seconds until the next round: `gcWaitTime`, or longer when the last round's ledger GC was slow, so
    that it takes at most GC_SHARE of the time. It lists every ledger in ZooKeeper: with 100,000 ledgers
    in the cluster, three idle bookies doing it every second used more than a core. Compaction is not
    counted: it is paced by its own intervals, and its work is what brings disk space back."""
    return max(gc_wait_s, last_listing_s * (1 - GC_SHARE) / GC_SHARE)


@dataclasses.dataclass
class GcRound:
    ledgers_deleted: list[int] = dataclasses.field(default_factory=list)
    logs_removed: int = 0
    logs_compacted: int = 0
    entries_moved: int = 0
    bytes_freed: int = 0


class GarbageCollector:
    def __init__(self, storage: LedgerStorage, store: MetadataStore, config: BookieConfig,
                 on_ledger_deleted: Callable[[int], None] | None = None) -> None:
        self.storage = storage
        self.store = store
        self.config = config
        self.on_ledger_deleted = on_ledger_deleted
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        now = time.monotonic()
        self._last_minor = now
        self._last_major = now
        self.rounds = 0
        self.last_listing_s = 0.0          # how long the last round's ledger GC (the metadata listing) took
        self.minor_compactions = 0          # compaction passes (metrics)
        self.major_compactions = 0
        self.total = GcRound()
        self._last_overreplicated = now
        self._overreplicated_seen: dict[int, int] = {}    # ledger -> metadata version at the last check

    # ---- one round -----------------------------------------------------------------------
    def collect_ledgers(self) -> list[int]:
        local = self.storage.ledgers()                   # local first: see the module docstring
        if not local:
            return []
        try:
            in_metadata = set(self.store.list_ledgers())
        except BKError as exc:
            log.warning("cannot list ledgers in the metadata store, no ledger GC this round: %s", exc)
            return []
        deleted = []
        for ledger_id in local:
            if ledger_id in in_metadata:
                continue
            if self.config.verifyMetadataOnGc:
                try:
                    self.store.read_ledger(ledger_id)
                    continue                              # it exists after all: keep it
                except NoSuchLedgerError:
                    pass
                except BKError as exc:
                    log.warning("cannot verify ledger %d, kept: %s", ledger_id, exc)
                    continue
            self._delete_local(ledger_id)
            deleted.append(ledger_id)
        if deleted:
            log.info("garbage-collected %d deleted ledger(s): %s", len(deleted), deleted[:20])
        return deleted

    def collect_overreplicated(self) -> list[int]:
        """Step 2 of the module docstring; the ledgers dropped."""
        now = time.monotonic()
        wait = self.config.gcOverreplicatedLedgerWaitTime / 1000.0
        if wait <= 0 or now - self._last_overreplicated < wait:
            return []
        self._last_overreplicated = now
        seen, self._overreplicated_seen = self._overreplicated_seen, {}
        dropped = []
        for ledger_id in self.storage.ledgers():
            version = self._moved_away(ledger_id)
            if version is None:
                continue
            if seen.get(ledger_id) != version:
                self._overreplicated_seen[ledger_id] = version      # first sighting: drop it next time
            elif self._drop_locked(ledger_id, version):
                dropped.append(ledger_id)
        if dropped:
            log.info("dropped %d over-replicated ledger(s) no fragment places here: %s", len(dropped), dropped[:20])
        return dropped

    def _moved_away(self, ledger_id: int) -> int | None:
        """The metadata version if the ledger is CLOSED and names this bookie in no fragment, else None."""
        try:
            md, version = self.store.read_ledger(ledger_id)
        except BKError:                 # deleted (the ledger GC's business) or unreadable: keep it
            return None
        me = self.config.bookie_id
        if not md.is_closed or any(me in fragment.ensemble for fragment in md.fragments):
            return None
        return version

    def _drop_locked(self, ledger_id: int, version: int) -> bool:
        ur = UnderReplicationManager(self.store)
        try:
            if not ur.try_lock(ledger_id, self.config.bookie_id):
                return False                                        # a replication worker has it
        except BKError as exc:
            log.warning("cannot lock over-replicated ledger %d, kept: %s", ledger_id, exc)
            return False
        try:
            if self._moved_away(ledger_id) != version:
                return False
            self._delete_local(ledger_id)
            return True
        finally:
            with contextlib.suppress(BKError):
                ur.release_lock(ledger_id)

    def _delete_local(self, ledger_id: int) -> None:
        if self.on_ledger_deleted is not None:
            self.on_ledger_deleted(ledger_id)
        else:
            self.storage.delete_ledger(ledger_id)

    def collect_entry_logs(self, force_major: bool = False) -> GcRound:
        out = GcRound()
        now = time.monotonic()
        cfg = self.config
        minor = cfg.minorCompactionInterval > 0 and now - self._last_minor >= cfg.minorCompactionInterval
        major = force_major or (cfg.majorCompactionInterval > 0
                                and now - self._last_major >= cfg.majorCompactionInterval)
        threshold = cfg.majorCompactionThreshold if major else cfg.minorCompactionThreshold if minor else 0.0
        candidates = []
        for dir_index, log_id, live, total in self.storage.entry_log_usage():
            if live == 0:
                candidates.append((dir_index, log_id))
            elif total > 0 and live / total < threshold:
                moved, _ = self.storage.compact_entry_log(dir_index, log_id)
                out.entries_moved += moved
                out.logs_compacted += 1
                candidates.append((dir_index, log_id))
        if major:
            self._last_major = self._last_minor = now
            self.major_compactions += 1
        elif minor:
            self._last_minor = now
            self.minor_compactions += 1
        before = len(candidates)
        out.bytes_freed = self.storage.remove_dead_entry_logs(candidates)
        out.logs_removed = before if out.bytes_freed else 0
        if out.bytes_freed or out.logs_compacted:
            log.info("entry-log GC: %d log(s) compacted (%d entries moved), %d bytes freed",
                     out.logs_compacted, out.entries_moved, out.bytes_freed)
        return out

    def run_once(self, force_major: bool = False) -> GcRound:
        started = time.monotonic()
        deleted = self.collect_ledgers()
        self.last_listing_s = time.monotonic() - started
        deleted += self.collect_overreplicated()
        result = self.collect_entry_logs(force_major)
        result.ledgers_deleted = deleted
        self.rounds += 1
        self.total.ledgers_deleted += deleted
        self.total.logs_removed += result.logs_removed
        self.total.logs_compacted += result.logs_compacted
        self.total.entries_moved += result.entries_moved
        self.total.bytes_freed += result.bytes_freed
        return result

    # ---- thread --------------------------------------------------------------------------
    def _loop(self) -> None:
        interval = self.config.gcWaitTime / 1000.0
        while not self._stop.wait(interval):
            with FAILURES.guard("gc", "a garbage-collection round"):   # never takes the bookie down
                self.run_once()
            interval = next_round_wait(self.config.gcWaitTime / 1000.0, self.last_listing_s)

    def start(self) -> GarbageCollector:
        if self.config.gcWaitTime > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="gc", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> bool:
        """Ask the GC thread to stop after its round and wait up to `timeout` s; False if it still runs (a
        round waiting for an unreachable ZooKeeper: it is a daemon thread, and storage refuses it once
        closed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            return not self._thread.is_alive()
        return True
