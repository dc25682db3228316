"""The simulated reader: open without recovery, tail the ledger, read through the real read rules.

Mirrors BookKeeper's ReadOnlyLedgerHandle (R11-R13): it never fences and never writes metadata; it learns
the LAC from the bookies of the last fragment (ReadLastConfirmed: entry -1 reads), reads entries up to
`reads.read_bound` (LAC while open, last entry id once closed), tries the bookies of each write set in the
order `reads.read_order` gives (`EntryReadAttempt`), and verifies every copy with `digest.unpack_entry`.
Every entry it returns goes to the oracle (oracle 2 and 3). The final reader reads a closed ledger whole.
"""

from __future__ import annotations

from client.errors import DigestMismatchError
from client.protocol.digest import DigestManager, unpack_entry
from client.protocol.metadata import LedgerMetadata, LedgerState
from client.protocol.reads import EntryReadAttempt, check_read_range, read_bound, read_order
from client.protocol.status import StatusCode
from tests.sim.actors import Actor
from tests.sim.messages import Payload, ReadRequest, ReadResponse
from tests.sim.net import Network
from tests.sim.oracle import Oracle
from tests.sim.world import World

BATCH = 6


class Reader(Actor):
    """A tailing reader (final=False, polls forever) or the end-of-run reader (final=True, reads all once)."""

    def __init__(self, name: str, world: World, net: Network, oracle: Oracle, ledger_id: int,
                 digest: DigestManager, *, final: bool = False) -> None:
        super().__init__(name, world, net, oracle, ledger_id)
        self.digest = digest
        self.final = final
        self.lac = -1
        self.next_entry = 0
        self.got: dict[int, bytes] = {}
        self.done = False
        self.failures = 0
        self.stopped = False

    def start(self) -> None:
        self.later(self.world.between(5, 30), "poll", self._poll)

    def _poll(self) -> None:
        if self.stopped or self.done:
            return
        self.read_md(self._on_md, self._round_over)

    def _round_over(self) -> None:
        if not self.stopped and not self.done:
            self.later(self.world.between(10, 40), "poll", self._poll)

    def _on_md(self, _version: int, md: LedgerMetadata) -> None:
        if md.state is LedgerState.CLOSED:
            self._read_next(md, 0)
            return
        if self.final:
            self._round_over()
            return
        ensemble = md.last_fragment.ensemble
        waiting = {"left": len(ensemble)}

        def answered(lac: int | None) -> None:
            if lac is not None and lac > self.lac:
                self.lac = lac       # LAC only grows (R6, R12)
            waiting["left"] -= 1
            if waiting["left"] == 0:
                self._read_next(md, 0)

        def reply(payload: Payload) -> None:
            assert isinstance(payload, ReadResponse)
            answered(payload.lac if payload.status == StatusCode.EOK else None)

        for bookie in ensemble:
            self.call(bookie, ReadRequest(self.ledger_id, -1, False, b""), reply, lambda: answered(None))

    def _read_next(self, md: LedgerMetadata, count: int) -> None:
        bound = read_bound(md, self.lac)
        entry_id = self.next_entry
        if entry_id > bound or (count >= BATCH and not self.final):
            if self.final and entry_id > bound:
                self.done = True
            else:
                self._round_over()
            return
        check_read_range(md, self.lac, entry_id, entry_id)
        attempt = EntryReadAttempt(self.ledger_id, entry_id, read_order(md, entry_id))
        bookie = attempt.next_bookie()
        assert bookie is not None
        self._try(md, attempt, bookie, count)

    def _try(self, md: LedgerMetadata, attempt: EntryReadAttempt, bookie: str, count: int) -> None:
        entry_id = attempt.entry_id

        def failed(status: int) -> None:
            following = attempt.on_failure(bookie, status)
            if following is not None:
                self._try(md, attempt, following, count)
                return
            self.failures += 1
            self.world.note(f"{self.name}: entry {entry_id} unreadable: {type(attempt.error()).__name__}")
            self._round_over()

        def reply(payload: Payload) -> None:
            assert isinstance(payload, ReadResponse)
            if payload.status != StatusCode.EOK or payload.body is None:
                failed(payload.status)
                return
            try:
                entry = unpack_entry(self.digest, self.ledger_id, entry_id, payload.body)
            except DigestMismatchError:
                failed(StatusCode.DIGEST_MISMATCH)
                return
            data = bytes(entry.payload)
            self.oracle.on_reader_entry(self.name, entry_id, data, md, self.lac)
            self.got[entry_id] = data
            self.next_entry = entry_id + 1
            self._read_next(md, count + 1)

        self.call(bookie, ReadRequest(self.ledger_id, entry_id, False, b""), reply,
                  lambda: failed(StatusCode.TIMEOUT))
