"""The simulated reader: open without recovery, tail the ledger, read through the real read rules.

Mirrors BookKeeper's ReadOnlyLedgerHandle (R11-R13): it never fences and never writes metadata; it learns
the LAC from the bookies of the last fragment (ReadLastConfirmed: entry -1 reads), reads entries up to
`reads.read_bound` (LAC while open, last entry id once closed), tries the bookies of each write set in the
order `reads.read_order` gives, with the real speculative-read core (`speculative.SequenceRead`: asks the
next bookie once `speculative_timeout` passed without an answer, the first valid copy wins;
`BookieHealth`: recently slow bookies are read last) and takes every copy through `reads.received_entry`
(R7: verified by `digest.unpack_entry`). Its bound, its LAC reads' fence flag and that check are decided
by the production functions with the `ReaderRules` injected (a mutant's: tests.sim.mutations.reader_rules).
Every entry it returns goes to the oracle (oracle 2 and 3). The final reader reads a closed ledger whole.
"""

from __future__ import annotations

from bkledger.client.errors import DigestMismatchError
from bkledger.client.protocol.digest import DigestManager
from bkledger.client.protocol.metadata import LedgerMetadata, LedgerState
from bkledger.client.protocol.reads import (
    DEFAULT_READER_RULES,
    EntryReadAttempt,
    ReaderRules,
    check_read_range,
    lac_read_fences,
    read_bound,
    read_order,
    received_entry,
)
from bkledger.client.protocol.speculative import (
    BookieHealth,
    MarkSlow,
    ReadDone,
    ReadFailed,
    SendRead,
    SequenceRead,
    SpeculativeAction,
    SpeculativePolicy,
)
from bkledger.client.protocol.status import StatusCode
from tests.sim.actors import Actor
from tests.sim.messages import Payload, ReadRequest, ReadResponse
from tests.sim.net import Network
from tests.sim.oracle import Oracle
from tests.sim.world import World

BATCH = 6


class Reader(Actor):
    """A tailing reader (final=False, polls forever) or the end-of-run reader (final=True, reads all once)."""

    def __init__(self, name: str, world: World, net: Network, oracle: Oracle, ledger_id: int,
                 digest: DigestManager, *, final: bool = False, speculative_timeout: int = 15,
                 key: bytes = b"", rules: ReaderRules = DEFAULT_READER_RULES) -> None:
        super().__init__(name, world, net, oracle, ledger_id)
        self.digest = digest
        self.speculative_timeout = speculative_timeout
        self.key = key                  # the master key: sent only if the rules make LAC reads fence (R12)
        self.rules = rules
        self.policy = SpeculativePolicy(speculative_timeout, 4 * speculative_timeout)
        self.health = BookieHealth(expiry=200)    # reorderReadSequenceEnabled: recently slow bookies last
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

        fence = lac_read_fences(self.rules)        # R12: never (the reader-fences mutant: always)
        for bookie in ensemble:
            self.call(bookie, ReadRequest(self.ledger_id, -1, fence, self.key if fence else b""), reply,
                      lambda: answered(None))

    def _read_next(self, md: LedgerMetadata, count: int) -> None:
        bound = read_bound(md, self.lac, self.rules)
        entry_id = self.next_entry
        if entry_id > bound or (count >= BATCH and not self.final):
            if self.final and entry_id > bound:
                self.done = True
            else:
                self._round_over()
            return
        check_read_range(md, self.lac, entry_id, entry_id, self.rules)
        attempt = EntryReadAttempt(self.ledger_id, entry_id, read_order(md, entry_id))
        self._fetch(md, attempt, count)

    def _fetch(self, md: LedgerMetadata, attempt: EntryReadAttempt, count: int) -> None:
        """R13 with speculation, decided by the real `speculative.SequenceRead`: ask the first bookie; after
        the speculative timeout without an answer also ask the next one; the first copy whose digest verifies
        wins, later answers are dropped; the entry fails only once every bookie of the write set failed."""
        entry_id = attempt.entry_id
        seq = SequenceRead(self.health.order(read_order(md, entry_id), self.world.now), self.policy)
        copies: dict[str, bytes] = {}
        armed: list[float] = []

        def execute(actions: list[SpeculativeAction]) -> None:
            for action in actions:
                if isinstance(action, SendRead):
                    send(action.bookie_id, action.speculative)
                elif isinstance(action, MarkSlow):
                    self.health.on_slow_all(action.bookie_ids, self.world.now)
                elif isinstance(action, ReadDone):
                    self.oracle.on_reader_entry(self.name, entry_id, copies[action.bookie_id], md, self.lac)
                    self.got[entry_id] = copies[action.bookie_id]
                    self.next_entry = entry_id + 1
                    self._read_next(md, count + 1)
                elif isinstance(action, ReadFailed):
                    for bookie, status in action.errors:
                        attempt.on_failure(bookie, status)
                    self.failures += 1
                    self.world.note(f"{self.name}: entry {entry_id} unreadable: {type(attempt.error()).__name__}")
                    self._round_over()
            arm()

        def arm() -> None:
            deadline = seq.deadline
            if deadline is not None and not seq.finished and deadline not in armed:
                armed.append(deadline)
                self.later(max(0, int(deadline) - self.world.now), f"speculative timer e{entry_id}",
                           lambda: execute(seq.on_timer(self.world.now)))

        def got(bookie: str, payload: Payload) -> None:
            assert isinstance(payload, ReadResponse)
            if payload.status != StatusCode.EOK or payload.body is None:
                execute(seq.on_failure(bookie, payload.status, self.world.now))
                return
            try:
                copies[bookie] = self._payload(entry_id, payload.body)
            except DigestMismatchError:
                self.world.note(f"{self.name}: digest mismatch for e{entry_id} from {bookie}")
                self.health.on_slow(bookie, self.world.now)
                execute(seq.on_failure(bookie, StatusCode.DIGEST_MISMATCH, self.world.now))
                return
            execute(seq.on_success(bookie))

        def send(bookie: str, speculative: bool) -> None:
            if speculative:
                self.world.note(f"{self.name}: speculative read of e{entry_id} from {bookie}")
            self.call(bookie, ReadRequest(self.ledger_id, entry_id, False, b""), lambda p: got(bookie, p),
                      lambda: execute(seq.on_failure(bookie, StatusCode.TIMEOUT, self.world.now)))

        execute(seq.start(self.world.now))

    def _payload(self, entry_id: int, body: bytes) -> bytes:
        """The entry's payload after the digest check (R7; the no-digest-check mutant's rules skip it)."""
        return bytes(received_entry(self.digest, self.ledger_id, entry_id, body, self.rules).payload)
