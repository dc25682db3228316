"""The auditor: watches bookie registrations and marks the ledgers of lost bookies under-replicated (R31).

Mirrors BookKeeper's Auditor. Only the elected daemon runs it (see `daemon`). It compares the registered
bookies (writable and read-only) between ticks; a bookie that disappears is audited after
`lostBookieRecoveryDelay` seconds (the value in `underreplication/lostBookieRecoveryDelay` if set, else
the configured one) unless it registers again meanwhile, in which case nothing happens. Auditing lists
every ledger and marks each one that names the bookie in any fragment, with all of its unregistered
bookies as missing replicas. On election, and every `auditorPeriodicCheckInterval` seconds, it also
scans the metadata for bookies that are named but not registered (what a previous auditor may have left
half done), with the same delay.
"""

from __future__ import annotations

import contextlib
import logging
import time

from client.admin import Admin
from client.errors import NoSuchLedgerError

log = logging.getLogger("bkledger.auditor")


class Auditor:
    def __init__(self, admin: Admin, default_delay_s: int, periodic_check_s: float) -> None:
        self.admin = admin
        self.ur = admin.underreplication
        self.default_delay_s = default_delay_s
        self.periodic_check_s = periodic_check_s
        self._last_registered: set[str] | None = None
        self._known: set[str] = set()          # every bookie seen registered: a departure is never missed
        self._pending: dict[str, float] = {}     # lost bookie -> monotonic time its audit is due
        self._audited: set[str] = set()
        self._next_full_check = 0.0
        self.audits = 0

    def _delay(self) -> float:
        return float(self.ur.lost_bookie_recovery_delay(self.default_delay_s))

    def _lose(self, bookie: str, now: float, why: str) -> None:
        if bookie in self._pending or bookie in self._audited:
            return
        delay = self._delay()
        self._pending[bookie] = now + delay
        log.info("bookie %s %s: auditing its ledgers in %.1fs unless it comes back", bookie, why, delay)

    def tick(self) -> None:
        """One round: note lost and returned bookies, run the audits that are due."""
        now = time.monotonic()
        registered = self.admin.registered_bookies()
        self._known |= registered
        for bookie in sorted(self._known - registered):    # (_lose skips pending and audited ones)
            self._lose(bookie, now, "disappeared")
        for bookie in sorted(set(self._pending) & registered):
            del self._pending[bookie]
            log.info("bookie %s came back within the delay: no audit", bookie)
        self._audited -= registered
        self._last_registered = registered
        if now >= self._next_full_check:
            self._next_full_check = now + self.periodic_check_s
            for bookie in sorted(self._bookies_in_metadata() - registered):
                self._lose(bookie, now, "is named in ledger metadata but not registered")
        if not self.ur.is_enabled():
            return
        for bookie, due in sorted(self._pending.items()):
            if now >= due:
                self.audit(bookie)
                del self._pending[bookie]
                self._audited.add(bookie)

    def _bookies_in_metadata(self) -> set[str]:
        named: set[str] = set()
        for ledger_id in self.admin.store.list_ledgers():
            with contextlib.suppress(NoSuchLedgerError):
                md, _ = self.admin.store.read_ledger(ledger_id)
                for fragment in md.fragments:
                    named.update(fragment.ensemble)
        return named

    def audit(self, bookie: str) -> int:
        """Mark every ledger that names `bookie`; returns how many were (newly or already) marked."""
        registered = self.admin.registered_bookies()
        if bookie in registered:
            return 0
        marked = 0
        for ledger_id in self.admin.store.list_ledgers():
            try:
                md, _ = self.admin.store.read_ledger(ledger_id)
            except NoSuchLedgerError:
                continue
            named = {b for f in md.fragments for b in f.ensemble}
            if bookie not in named:
                continue
            self.ur.mark(ledger_id, sorted(named - registered))
            marked += 1
        self.audits += 1
        log.info("audit of lost bookie %s: %d ledger(s) marked under-replicated", bookie, marked)
        return marked
