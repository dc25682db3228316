"""The auditor: watches bookie registrations and marks the ledgers of lost bookies under-replicated (R31).

Mirrors BookKeeper's Auditor. Only the elected daemon runs it (see `daemon`). It compares the registered
bookies (writable and read-only) with every bookie it knows of: the ones it has seen registered and the
ones with a cookie (a bookie writes its cookie before it registers, so one that registers and goes again
between two ticks is not missed). A known bookie that is not registered is audited after
`lostBookieRecoveryDelay` seconds (the value in `underreplication/lostBookieRecoveryDelay` if set, else
the configured one) unless it registers again meanwhile, in which case nothing happens. Auditing lists
every ledger and marks each one that names the bookie in any fragment, with all of its unregistered
bookies as missing replicas. On election, and every `auditorPeriodicCheckInterval` seconds, it also
scans the metadata for bookies that are named but not registered (what a previous auditor may have left
half done), with the same delay.
"""

from __future__ import annotations

import logging
import time

from bkledger.bookie.core.lost_bookies import LostBookies
from bkledger.client.admin import Admin

log = logging.getLogger("bkledger.auditor")


class Auditor:
    def __init__(self, admin: Admin, default_delay_s: int, periodic_check_s: float) -> None:
        self.admin = admin
        self.ur = admin.underreplication
        self.default_delay_s = default_delay_s
        self.periodic_check_s = periodic_check_s
        self.state = LostBookies()
        self._last_registered: set[str] | None = None
        self._next_full_check = 0.0
        self.audits = 0

    def _delay(self) -> float:
        return float(self.ur.lost_bookie_recovery_delay(self.default_delay_s))

    def tick(self) -> None:
        """One round: note lost and returned bookies, run the audits that are due."""
        now = time.monotonic()
        registered = self.admin.registered_bookies()
        if registered != self._last_registered:
            log.info("registered bookies: %s", ", ".join(sorted(registered)) or "none")
            self._last_registered = registered
        delay = self._delay()
        events = self.state.observe(now, delay, registered, set(self.admin.store.cookie_bookies()))
        if now >= self._next_full_check:
            self._next_full_check = now + self.periodic_check_s
            events += self.state.named_but_unregistered(now, delay, self._bookies_in_metadata(), registered)
        for event in events:
            log.info("%s", event)
        if not self.ur.is_enabled():
            return
        for bookie in self.state.due(now):
            self.audit(bookie)
            self.state.audited_now(bookie)

    def _bookies_in_metadata(self) -> set[str]:
        named: set[str] = set()
        for _, md in self.admin.store.ledgers_with_metadata():
            for fragment in md.fragments:
                named.update(fragment.ensemble)
        return named

    def audit(self, bookie: str) -> int:
        """Mark every ledger that names `bookie`; returns how many were (newly or already) marked."""
        registered = self.admin.registered_bookies()
        if bookie in registered:
            return 0
        marked = 0
        for ledger_id, md in self.admin.store.ledgers_with_metadata():
            named = {b for f in md.fragments for b in f.ensemble}
            if bookie not in named:
                continue
            self.ur.mark(ledger_id, sorted(named - registered))
            marked += 1
        self.audits += 1
        log.info("audit of lost bookie %s: %d ledger(s) marked under-replicated", bookie, marked)
        return marked
