"""A simulated bookie: the real request machine, decisions and journal record codec over a simulated disk.

Mirrors bkledger's `bookie.server` / `bookie.bookie.Bookie` as a driver of the same pure machine,
`bookie.core.machine.BookieMachine`: it decides each add and fencing read, numbers what it journals, and says
which replies a completed fsync releases (add acks R8, fence answers R15, and every refusal based on a fence);
this actor only runs its effects on a simulated journal (`tests.sim.disk`). A failed fsync answers the waiting
requests EIO and leaves the bookie failed until restart. A crash drops unsynced bytes (maybe leaving a torn
tail); restart rebuilds entries, master keys, fenced flags and the max LAC by replaying the journal (R22, R23)
and starts a new machine, as a restarted process does. A ledger-storage flush that fails (fault class
"flush_fails") is told to the machine, which keeps every fence (R15).

A corrupting bookie (fault class "corrupt") flips a byte of every entry it returns to readers, as a bad disk
or NIC would: readers must reject the copy by its digest and read another one. A bookie with read errors
(fault class "read_errors": its ledger disk fails while the journal disk works) answers entry reads EIO at
once; adds, fences and LAC reads go on.

An add that would change the bytes of an entry the bookie already holds (journaled, durable or not) is
refused EBADREQ by the real `decisions.check_rewrites`, as the real bookie's storage thread does.

`rules` are the machine's `BookieRules`: a mutant (tests.sim.mutations.bookie_rules) turns one off.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import assert_never

from bkledger.bookie.core import decisions
from bkledger.bookie.core import machine as bm
from bkledger.bookie.core import records as rec
from bkledger.client.protocol.status import NEGATIVE_STATUSES, StatusCode
from tests.sim.disk import SimJournal
from tests.sim.messages import AddRequest, AddResponse, Envelope, ReadRequest, ReadResponse
from tests.sim.net import Network
from tests.sim.oracle import Oracle
from tests.sim.world import Event, World

_LAC = struct.Struct(">q")
MAX_ENTRY_SIZE = 1 << 16
ENTRY_ID_WINDOW = 1 << 30          # the bookie's default entryIdWindow
ENTRY_ID_LIMIT = (1 << 40) // 24   # ids whose index slot fits a 1 TiB index file (24-byte slots)
LIMITS = bm.AddLimits(MAX_ENTRY_SIZE, ENTRY_ID_WINDOW, ENTRY_ID_LIMIT)


@dataclasses.dataclass(frozen=True)
class Token:
    """The machine's reply token here: who asked what."""

    dst: str
    req_id: int
    req: AddRequest | ReadRequest


class SimBookie:
    """One bookie: in-memory ledger state, a SimJournal, and the machine that holds replies until fsync."""

    def __init__(self, name: str, world: World, net: Network, oracle: Oracle, *,
                 rules: bm.BookieRules = bm.DEFAULT_RULES, group_wait: int = 4) -> None:
        self.name = name
        self.rules = rules
        self.corrupt = False          # fault injection: entries read back have a flipped byte
        self.read_errors = False      # fault injection: the ledger disk fails reads (EIO), the journal still works
        self.group_wait = group_wait  # journalMaxGroupWaitMSec: the longest an append waits for its fsync
        self.world = world
        self.net = net
        self.oracle = oracle
        self.journal = SimJournal()
        self.machine: bm.BookieMachine[Token] = bm.BookieMachine(LIMITS, rules)
        self.up = True
        self.paused = False
        self.failed = False           # a fsync failed: everything is answered EIO until restart
        self.fail_next_sync = False   # fault injection
        self.keys: dict[int, bytes] = {}
        self.fenced: set[int] = set()
        self.entries: dict[int, dict[int, bytes]] = {}
        self.written: dict[int, dict[int, bytes]] = {}     # entries as journaled (what ledger storage holds)
        self.max_lac: dict[int, int] = {}
        self._journaled: list[tuple[int, int]] = []        # (machine sequence, journal end after it), unsynced
        self._sync_event: Event | None = None
        self._sync_due = False

    # ---- Node -----------------------------------------------------------------------------------
    def is_up(self) -> bool:
        return self.up

    def is_paused(self) -> bool:
        return self.paused

    def deliver(self, src: str, env: Envelope) -> None:
        payload = env.payload
        if isinstance(payload, AddRequest):
            self._on_add(Token(src, env.req_id, payload))
        elif isinstance(payload, ReadRequest):
            self._on_read(Token(src, env.req_id, payload))

    # ---- requests -----------------------------------------------------------------------------------
    def _on_add(self, token: Token) -> None:
        req = token.req
        assert isinstance(req, AddRequest)
        if self.failed:
            self._answer(token, StatusCode.EIO)
            return
        size = len(req.body)
        known_last = max(self.written.get(req.ledger_id, {}), default=-1)
        self._run(self.machine.on_add(token, req.ledger_id, [req.entry_id], [size], req.body,
                                      master_key=req.master_key, view=self._view(req.ledger_id),
                                      known_last=known_last, recovery_add=req.recovery))

    def _on_read(self, token: Token) -> None:
        req = token.req
        assert isinstance(req, ReadRequest)
        if self.failed:
            self._answer(token, StatusCode.EIO)
        elif not req.fence:
            self._answer(token, StatusCode.EOK)
        else:
            effects = self.machine.on_fence(token, req.ledger_id, req.master_key, self._view(req.ledger_id))
            self._run(effects)
            if any(isinstance(e, bm.MarkFenced) for e in effects) and self.up:
                self.world.hazard("fence_journaled", self)

    def _answer(self, token: Token, status: int) -> None:
        """Send a reply the machine released (or one it never saw: a failed bookie's EIO, a plain read).
        An EFENCED add refusal and a fencing read's EOK tell the client the ledger is fenced: oracle 6 holds
        the bookie to that from the moment it is sent."""
        req = token.req
        payload: AddResponse | ReadResponse
        if isinstance(req, AddRequest):
            payload = AddResponse(StatusCode(status))
            if status == StatusCode.EFENCED:
                self.oracle.on_fence_promised(self.name, req.ledger_id)
            elif status == StatusCode.EOK and not req.recovery and req.ledger_id == self.oracle.ledger_id:
                self.oracle.on_bookie_acked(self.name, req.entry_id)
        elif status != StatusCode.EOK:
            payload = ReadResponse(StatusCode(status))
        else:
            payload = self._read_answer(req)     # computed now: a fencing read sees what its fence covers
            if req.fence:
                self.oracle.on_fence_promised(self.name, req.ledger_id)
        self.net.send(self.name, token.dst, Envelope(token.req_id, payload))

    def _run(self, effects: list[bm.Effect[Token]]) -> None:
        """Run the machine's effects here, on the simulated disk and network."""
        for effect in effects:
            match effect:
                case bm.Reply(token=token, status=status):
                    self._answer(token, status)
                case bm.StoreAdd():
                    self._store(effect)
                case bm.AdvanceLac(ledger_id=ledger_id, lac=lac):
                    if lac > self.max_lac.get(ledger_id, -1):
                        self.max_lac[ledger_id] = lac
                case bm.MarkFenced(ledger_id=ledger_id, master_key=key, record_key=record_key):
                    if record_key:
                        self.keys.setdefault(ledger_id, key)
                    self.fenced.add(ledger_id)      # later adds see it at once; the answer waits for the fsync
                    self.oracle.on_fenced(self.name, ledger_id)
                case bm.JournalFence(seq=seq, ledger_id=ledger_id, master_key=key, record_key=record_key):
                    if record_key:
                        self._append(rec.encode_ledger_key(ledger_id, key))
                    self._journaled.append((seq, self._append(rec.encode_fence(ledger_id))))
                case bm.JournalBarrier(seq=seq):
                    self._barrier(seq)
                case bm.ForgetFence(ledger_id=ledger_id):
                    self.fenced.discard(ledger_id)
                case bm.JournalLac():
                    raise AssertionError("the simulated clients send no explicit LAC")
                case _:
                    assert_never(effect)

    def _store(self, effect: bm.StoreAdd[Token]) -> None:
        """The add the machine just accepted (its `_on_add` request) goes to storage and the journal."""
        seq = effect.seq
        req = effect.token.req
        assert isinstance(req, AddRequest)
        held = self.written.get(req.ledger_id, {}).get(req.entry_id)
        stored = {} if held is None or not effect.check_rewrites else {req.entry_id: held}
        why = decisions.check_rewrites([req.entry_id], [len(req.body)], req.body, stored)
        if why:
            self._run(self.machine.on_not_journaled(seq, StatusCode.EBADREQ, why))
            return
        self.written.setdefault(req.ledger_id, {})[req.entry_id] = req.body
        if not req.recovery:
            self.oracle.on_add_accepted(self.name, req.ledger_id, req.entry_id)
        if effect.record_key:
            self.keys.setdefault(req.ledger_id, req.master_key)
            self._append(rec.encode_ledger_key(req.ledger_id, req.master_key))
        end = self._append(rec.encode_add_batch(req.ledger_id, [req.entry_id], [len(req.body)], req.body))
        self._journaled.append((seq, end))

    def _barrier(self, seq: int) -> None:
        """An empty synced record: complete at once if everything appended is durable, else with the next fsync."""
        end = self.journal.end
        if end <= self.journal.synced and not self._journaled:
            self._run(self.machine.on_synced(seq))
        else:
            self._journaled.append((seq, end))

    def flush_failed(self) -> None:
        """Fault: a ledger-storage flush (checkpoint) fails; the journal is kept."""
        if self.up and not self.failed:
            self._run(self.machine.on_flush_failed())

    def _read_answer(self, req: ReadRequest) -> ReadResponse:
        known = req.ledger_id in self.keys or req.ledger_id in self.entries
        lac = self.max_lac.get(req.ledger_id, -1)
        if self.read_errors and req.entry_id >= 0:
            return ReadResponse(StatusCode.EIO, None, lac)
        if req.entry_id < 0:
            return ReadResponse(StatusCode.EOK if known else StatusCode.ENOLEDGER, None, lac)
        body = self.entries.get(req.ledger_id, {}).get(req.entry_id)
        status = decisions.decide_read(body is not None, known)
        if req.recovery and status in NEGATIVE_STATUSES and req.ledger_id == self.oracle.ledger_id:
            self.oracle.on_recovery_negative(self.name, req.entry_id)
        if body is not None and self.corrupt:
            flip = len(body) - 1
            body = body[:flip] + bytes([body[flip] ^ 0x5A])
        return ReadResponse(status, body, lac)

    def _view(self, ledger_id: int) -> decisions.LedgerView | None:
        key = self.keys.get(ledger_id)
        return None if key is None else decisions.LedgerView(key, ledger_id in self.fenced)

    # ---- journal and group commit ---------------------------------------------------------------------
    def _append(self, record: bytes) -> int:
        end = self.journal.append(record)
        if self._sync_event is None:
            self._sync_event = self.world.at(self.world.between(1, self.group_wait), f"{self.name} fsync", self._fsync)
        return end

    def _fsync(self) -> None:
        self._sync_event = None
        if not self.up or self.failed:
            return
        if self.paused:
            self._sync_due = True
            return
        if self.fail_next_sync:
            self._fsync_failed()
            return
        old, new = self.journal.sync()
        for record in self.journal.records_between(old, new):
            self._apply(record)
        done = [seq for seq, end in self._journaled if end <= new]
        self._journaled = [(seq, end) for seq, end in self._journaled if end > new]
        for seq in done:
            self._run(self.machine.on_synced(seq))

    def _fsync_failed(self) -> None:
        """The fsync failed: the machine answers every waiting request EIO, unsynced bytes are lost (some may
        have reached the disk), and the bookie refuses everything until it restarts."""
        self.fail_next_sync = False
        self.failed = True
        kept = self.journal.lose_unsynced(self.world.rng, torn=self.world.chance(0.5), junk=False)
        self.world.note(f"{self.name} fsync failed (EIO), {kept} unsynced bytes reached the disk")
        first = self._journaled[0][0] if self._journaled else 0
        self._journaled.clear()
        self._run(self.machine.on_sync_failed(first, "fsync failed"))

    def _apply(self, record: rec.Record) -> None:
        """Apply one durable journal record to the served state (live after fsync, and on replay)."""
        if isinstance(record, rec.LedgerKeyRecord):
            self.keys.setdefault(record.ledger_id, record.master_key)
        elif isinstance(record, rec.FenceRecord):
            self.fenced.add(record.ledger_id)
        elif isinstance(record, rec.AddBatchRecord):
            ledger = self.entries.setdefault(record.ledger_id, {})
            offset = 0
            for entry_id, size in zip(record.entry_ids.tolist(), record.sizes.tolist(), strict=True):
                body = bytes(record.data[offset:offset + size])
                offset += size
                ledger[entry_id] = body
                self.oracle.on_bookie_stored(self.name, record.ledger_id, entry_id, body)
                lac = _LAC.unpack_from(body, 16)[0]
                if lac > self.max_lac.get(record.ledger_id, -1):
                    self.max_lac[record.ledger_id] = lac

    # ---- faults -----------------------------------------------------------------------------------------
    def crash(self) -> None:
        """kill -9: held replies and unsynced bytes are gone; a torn tail or junk may be left on disk."""
        if not self.up:
            return
        self.up = False
        self.paused = False
        self.net.drop_held(self.name)
        self._journaled.clear()
        self.machine = bm.BookieMachine(LIMITS, self.rules)     # what it held dies with the process
        if self._sync_event is not None:
            self._sync_event.cancel()
            self._sync_event = None
        rng = self.world.rng
        kept = self.journal.lose_unsynced(rng, torn=self.world.chance(0.6), junk=self.world.chance(0.2))
        self.world.note(f"{self.name} crashed, {kept} unsynced/junk bytes left on disk")

    def restart(self) -> None:
        """Start again: replay the journal (the valid prefix only, R23) to rebuild the ledger state."""
        if self.up and not self.failed:
            return
        if self.up:
            self.crash()
        self.keys.clear()
        self.fenced.clear()
        self.entries.clear()
        self.max_lac.clear()
        self._sync_due = False
        records, cut = self.journal.replay()
        for record in records:
            self._apply(record)
        self.written = {ledger_id: dict(held) for ledger_id, held in self.entries.items()}
        self.up = True
        self.failed = False
        self.world.note(f"{self.name} restarted: replayed {len(records)} records, cut {cut} tail bytes")

    def set_group_wait(self, wait: int) -> None:
        """The journal disk changed speed: the fsync now due is rescheduled within the new wait."""
        self.group_wait = wait
        if self._sync_event is not None:
            self._sync_event.cancel()
            self._sync_event = self.world.at(self.world.between(1, wait), f"{self.name} fsync", self._fsync)

    def pause(self) -> None:
        if self.up:
            self.paused = True

    def resume(self) -> None:
        if not self.paused:
            return
        self.paused = False
        self.net.release_held(self.name)
        if self._sync_due:
            self._sync_due = False
            self._fsync()
