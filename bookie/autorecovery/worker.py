"""The replication worker: copies under-replicated ledgers' fragments to the local bookie (R32, R33).

Mirrors BookKeeper's ReplicationWorker. Each round it lists the marks, takes the ephemeral lock of one
ledger at a time (`underreplication/locks/urL...`; a held lock means another worker has it), re-reads
the mark, and copies every fragment naming a lost replica to its local bookie (`client.admin`), CAS-ing
each new ensemble. When the metadata no longer names a lost replica the mark is deleted (only if nobody
changed it meanwhile), then the lock is released. A ledger it cannot finish (the local bookie is already
in the fragment, a copy failed) is released and retried after `rwRereplicateBackoffMs`. The last
fragment of an OPEN ledger is left alone until `openLedgerRereplicationGracePeriod` has passed since the
ledger was marked; then the ledger is fenced and closed (open with recovery) and replicated (R33). The
worker only works while its local bookie is registered writable.
"""

from __future__ import annotations

import logging
import time

from bkledger.client.admin import Admin, ReplicationStats
from bkledger.client.errors import BKError
from bkledger.client.meta.underreplication import UnderReplicated

log = logging.getLogger("bkledger.replication")


class ReplicationWorker:
    def __init__(self, admin: Admin, local_bookie: str, grace_ms: int, backoff_ms: int) -> None:
        self.admin = admin
        self.ur = admin.underreplication
        self.local = local_bookie
        self.grace_ms = grace_ms
        self.backoff_s = backoff_ms / 1000.0
        self._skip_until: dict[int, float] = {}
        self.stats = ReplicationStats()
        self.replicated: list[int] = []

    def tick(self) -> int:
        """One round over the marks; returns how many ledgers this worker finished."""
        if not self.ur.is_enabled() or self.local not in self.admin.store.writable_bookies():
            return 0
        finished = 0
        now = time.monotonic()
        for mark in self.ur.list_marked():
            if self._skip_until.get(mark.ledger_id, 0.0) > now:
                continue
            if self.ur.lock_owner(mark.ledger_id) is not None or not self.ur.try_lock(mark.ledger_id, self.local):
                continue
            try:
                finished += self._process(mark.ledger_id)
            except (BKError, OSError, TimeoutError) as exc:
                log.warning("ledger %d: re-replication failed, retrying later: %s", mark.ledger_id, exc)
                self._skip_until[mark.ledger_id] = time.monotonic() + self.backoff_s
            finally:
                self.ur.release_lock(mark.ledger_id)
        return finished

    def _process(self, ledger_id: int) -> int:
        mark = self.ur.get_mark(ledger_id)   # re-read under the lock
        if mark is None:
            return 0
        lost = set(mark.replicas) - self.admin.registered_bookies()
        if not lost:
            log.info("ledger %d: its missing replicas %s are back; unmarking", ledger_id, list(mark.replicas))
            self.ur.unmark(ledger_id, mark.version)
            return 0
        if self.local in lost:
            return 0
        grace_left = self._grace_left(mark)
        outcome = self.admin.replicate_ledger(ledger_id, lost, target=self.local, fence_open=grace_left <= 0,
                                              stats=self.stats)
        if outcome.done:
            if self.ur.unmark(ledger_id, mark.version):
                log.info("ledger %d re-replicated to %s (lost %s)", ledger_id, self.local, sorted(lost))
                self.replicated.append(ledger_id)
                self._skip_until.pop(ledger_id, None)
                return 1
            return 0
        wait = min(max(grace_left, 0.05), self.backoff_s) if outcome.waiting_open else self.backoff_s
        log.info("ledger %d not finished here (%s); retry in %.1fs", ledger_id, outcome.reason, wait)
        self._skip_until[ledger_id] = time.monotonic() + wait
        return 0

    def _grace_left(self, mark: UnderReplicated) -> float:
        """Seconds until the grace period of an open ledger's last fragment is over (from the mark time)."""
        return (mark.ctime_ms + self.grace_ms) / 1000.0 - time.time()
