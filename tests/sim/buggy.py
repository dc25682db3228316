"""A buggy client (issue 41 item 7): requests no correct client sends, at random moments of the chaos phase.

Mirrors the hostile and buggy requests of issue 41, each made harmless by a rule the oracle can see broken:

- "rewrite": the entry an oracle-known bookie holds durably is added again, with the ledger's master key, the
  recovery flag and a validly digested payload of other bytes: what a buggy recovery, or anyone who knows
  the password, would send. The bookie must refuse it (`decisions.check_rewrites`, EBADREQ); a bookie that
  stored it would hold bytes the writer did not make (oracle 4) and could serve them (oracle 2).
- "wild": adds with entry ids no writer sends (2^32, 2^41, 2^62) to a ledger of the client's own, and to the
  simulated ledger with a key of its own (EUA; sent only to a bookie that knows the ledger, as an unknown
  ledger's first add would record its key). A bookie may refuse them (EBADREQ) or store them in the client's
  ledger: either way the simulated ledger's data is untouched.
- "fence": fencing reads of ledger ids nobody created, with a foreign key: they create those ledgers fenced
  (R15) and must leave the simulated ledger alone.
- "fenced_add": a ledger of the client's own is fenced at one bookie, and a plain add to it follows later:
  the bookie must refuse it (EFENCED, R15) whatever happened in between (a failed storage flush, a restart);
  a bookie that stores it breaks its fence promise (oracle 6).

Its choices come from a random source of its own (seeded from the run's seed), so the other actors draw the
same numbers as before until it sends its first request.
"""

from __future__ import annotations

import random

from bkledger.client.protocol.digest import DigestManager, master_key, package_entry
from bkledger.client.protocol.status import StatusCode
from tests.sim.actors import Actor
from tests.sim.messages import AddRequest, AddResponse, Payload, ReadRequest, ReadResponse
from tests.sim.net import Network
from tests.sim.oracle import Oracle
from tests.sim.world import World

WILD_IDS = (1 << 32, 1 << 41, 1 << 62)
FOREIGN_KEY = master_key(b"someone else")


class BuggyClient(Actor):
    """Sends `budget` bad requests, one every `gap` time units or so; answers are only traced."""

    def __init__(self, world: World, net: Network, oracle: Oracle, ledger_id: int, bookies: list[str],
                 digest: DigestManager, password: bytes, rng: random.Random, budget: int) -> None:
        super().__init__("buggy", world, net, oracle, ledger_id)
        self.bookies = bookies
        self.digest = digest
        self.key = master_key(password)
        self.rng = rng
        self.budget = budget
        self.refused_rewrites = 0

    def start(self) -> None:
        self.later(self.rng.randint(20, 400), "misbehaves", self._act)

    def _act(self) -> None:
        if self.budget <= 0:
            return
        self.budget -= 1
        kind = self.rng.choice(("rewrite", "wild", "fence", "fenced_add"))
        getattr(self, f"_{kind}")()
        self.later(self.rng.randint(30, 300), "misbehaves", self._act)

    def _send(self, bookie: str, payload: Payload) -> None:
        def answered(reply: Payload) -> None:
            assert isinstance(reply, AddResponse | ReadResponse)
            name = StatusCode(reply.status).name if reply.status in set(StatusCode) else str(reply.status)
            self.world.note(f"buggy: {bookie} answered {payload.label()} with {name}")
            if isinstance(payload, AddRequest) and payload.recovery and reply.status == StatusCode.EBADREQ:
                self.refused_rewrites += 1

        self.call(bookie, payload, answered, lambda: None)

    def _rewrite(self) -> None:
        held = sorted(e for e, holders in self.oracle.copies.items() if holders)
        if not held:
            return
        entry_id = self.rng.choice(held)
        bookie = self.rng.choice(sorted(self.oracle.copies[entry_id]))
        forged = package_entry(self.digest, self.ledger_id, entry_id, entry_id - 1, 0, b"FORGED-by-buggy-client")
        self._send(bookie, AddRequest(self.ledger_id, entry_id, self.key, forged, recovery=True))

    def _wild(self) -> None:
        bookie = self.rng.choice(self.bookies)
        entry_id = self.rng.choice(WILD_IDS)
        own = self.ledger_id + 1 + self.rng.randrange(4)          # a ledger of its own, never the simulated one
        body = package_entry(self.digest, own, entry_id, entry_id - 1, 0, b"wild")
        self._send(bookie, AddRequest(own, entry_id, self.key, body, recovery=False))
        knowing = sorted({b for holders in self.oracle.copies.values() for b in holders})
        if knowing:     # only a bookie that knows the ledger's key: to any other the first add would squat it
            body = package_entry(self.digest, self.ledger_id, entry_id, entry_id - 1, 0, b"wild")
            self._send(self.rng.choice(knowing), AddRequest(self.ledger_id, entry_id, FOREIGN_KEY, body,
                                                            recovery=False))

    def _fence(self) -> None:
        unknown = self.ledger_id + 100 + self.rng.randrange(1000)
        for bookie in self.bookies:
            self._send(bookie, ReadRequest(unknown, -1, fence=True, master_key=FOREIGN_KEY))

    def _fenced_add(self) -> None:
        own = self.ledger_id + 10 + self.rng.randrange(4)
        bookie = self.rng.choice(self.bookies)
        self._send(bookie, ReadRequest(own, -1, fence=True, master_key=self.key))
        body = package_entry(self.digest, own, 0, -1, 0, b"after the fence")
        self.later(self.rng.randint(20, 1000), "adds to a ledger it fenced",
                   lambda: self._send(bookie, AddRequest(own, 0, self.key, body, recovery=False)))
