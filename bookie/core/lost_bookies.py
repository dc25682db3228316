"""Which bookies the auditor must audit, and when: the pure part of the auditor (R31).

`LostBookies` is fed what the driver read from ZooKeeper (registered bookies, bookies with a cookie, bookies
named in ledger metadata) with the time, and answers with events to log and the bookies whose audit is
due. A bookie is known once it was seen registered or has a cookie (a bookie writes its cookie before it
registers, so one that registers and goes again between two observations is still known). A known bookie
that is not registered is audited `delay` seconds later unless it registers again meanwhile; once audited
it is not audited again until it has registered and gone once more.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LostBookies:
    seen: set[str] = field(default_factory=set)          # seen registered
    known: set[str] = field(default_factory=set)         # seen registered, or with a cookie
    pending: dict[str, float] = field(default_factory=dict)   # lost bookie -> time its audit is due
    audited: set[str] = field(default_factory=set)

    def lose(self, bookie: str, now: float, delay: float, why: str) -> str | None:
        """Schedule an audit of `bookie`; the event to log, or None if it is already pending or audited."""
        if bookie in self.pending or bookie in self.audited:
            return None
        self.pending[bookie] = now + delay
        return f"bookie {bookie} {why}: auditing its ledgers in {delay:.1f}s unless it comes back"

    def observe(self, now: float, delay: float, registered: set[str], cookies: set[str]) -> list[str]:
        """Note departures and returns; the events to log."""
        events = []
        self.seen |= registered
        self.known |= registered | cookies
        for bookie in sorted(self.known - registered):
            why = "disappeared" if bookie in self.seen else "has a cookie but is not registered"
            event = self.lose(bookie, now, delay, why)
            if event is not None:
                events.append(event)
        for bookie in sorted(set(self.pending) & registered):
            del self.pending[bookie]
            events.append(f"bookie {bookie} came back within the delay: no audit")
        self.audited -= registered
        return events

    def named_but_unregistered(self, now: float, delay: float, named: set[str], registered: set[str]) -> list[str]:
        """The periodic check: bookies named in ledger metadata that are not registered."""
        events = []
        for bookie in sorted(named - registered):
            event = self.lose(bookie, now, delay, "is named in ledger metadata but not registered")
            if event is not None:
                events.append(event)
        return events

    def due(self, now: float) -> list[str]:
        """The bookies whose audit is due now (call `audited_now` once each is done)."""
        return [bookie for bookie, at in sorted(self.pending.items()) if now >= at]

    def audited_now(self, bookie: str) -> None:
        self.pending.pop(bookie, None)
        self.audited.add(bookie)
