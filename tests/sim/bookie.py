"""A simulated bookie: the real request decisions and journal record codec over a simulated disk.

Mirrors bkledger's `bookie.bookie.Bookie` / BookKeeper's Bookie: adds, fences and master keys are journaled
as real records (`bookie.core.records`); each request is decided by `bookie.core.decisions`; a reply that
depends on the journal (add acks R8, fence answers R15, and every refusal based on a fence) is released only
after the simulated fsync that covers it. A failed fsync answers the waiting requests EIO and leaves the
bookie failed until restart. A crash drops unsynced bytes (maybe leaving a torn tail); restart rebuilds
entries, master keys, fenced flags and the max LAC by replaying the journal (R22, R23).

A corrupting bookie (fault class "corrupt") flips a byte of every entry it returns to readers, as a bad disk
or NIC would: readers must reject the copy by its digest and read another one. A bookie with read errors
(fault class "read_errors": its ledger disk fails while the journal disk works) answers entry reads EIO at
once; adds, fences and LAC reads go on.

An add that would change the bytes of an entry the bookie already holds (journaled, durable or not) is
refused EBADREQ by the real `decisions.check_rewrites`, as the real bookie's storage thread does.

`mutation` selects a deliberately broken bookie for mutation tests only: "ack-before-sync", "fence-shortcut"
(answers a fencing read at once when the ledger is already fenced in memory, before that fence and the adds
journaled ahead of it are durable and readable), "fence-not-persisted" (the fence lives in memory only),
"rewrite-allowed" (an entry it holds is overwritten by an add with other bytes).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from bkledger.bookie.core import decisions
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

Answer = Callable[[], AddResponse | ReadResponse]


def _const(payload: AddResponse | ReadResponse) -> Answer:
    return lambda: payload


class SimBookie:
    """One bookie: in-memory ledger state, a SimJournal, and replies held until fsync."""

    def __init__(self, name: str, world: World, net: Network, oracle: Oracle, *, mutation: str = "none",
                 group_wait: int = 4) -> None:
        self.name = name
        self.fence_shortcut = mutation == "fence-shortcut"
        self.fence_in_memory = mutation == "fence-not-persisted"
        self.corrupt = False          # fault injection: entries read back have a flipped byte
        self.read_errors = False      # fault injection: the ledger disk fails reads (EIO), the journal still works
        self.group_wait = group_wait  # journalMaxGroupWaitMSec: the longest an append waits for its fsync
        self.world = world
        self.net = net
        self.oracle = oracle
        self.ack_before_sync = mutation == "ack-before-sync"
        self.rewrite_allowed = mutation == "rewrite-allowed"
        self.journal = SimJournal()
        self.up = True
        self.paused = False
        self.failed = False           # a fsync failed: everything is answered EIO until restart
        self.fail_next_sync = False   # fault injection
        self.keys: dict[int, bytes] = {}
        self.fenced: set[int] = set()
        self.entries: dict[int, dict[int, bytes]] = {}
        self.written: dict[int, dict[int, bytes]] = {}     # entries as journaled (what ledger storage holds)
        self.max_lac: dict[int, int] = {}
        # (offset needed, dest, req, answer, promise, entry id a normal add's ack acknowledges)
        self._held: list[tuple[int, str, int, Answer, int | None, int | None]] = []
        self._sync_event: Event | None = None
        self._probing = False
        self._sync_due = False

    # ---- Node -----------------------------------------------------------------------------------
    def is_up(self) -> bool:
        return self.up

    def is_paused(self) -> bool:
        return self.paused

    def deliver(self, src: str, env: Envelope) -> None:
        payload = env.payload
        if isinstance(payload, AddRequest):
            self._on_add(src, env.req_id, payload)
        elif isinstance(payload, ReadRequest):
            self._on_read(src, env.req_id, payload)

    # ---- requests -----------------------------------------------------------------------------------
    def _reply(self, dst: str, req_id: int, answer: Answer, need: int = 0, promise: int | None = None,
               acked: int | None = None) -> None:
        """Send `answer()` now, or once the journal is synced up to `need` (the answer is computed then, so a
        fencing read sees every add journaled before its fence). `promise`: the ledger this answer tells the
        client is fenced (oracle 6 holds the bookie to it from the moment it is sent)."""
        if need <= self.journal.synced or self.ack_before_sync:
            self._send(dst, req_id, answer(), promise, acked)
        else:
            self._held.append((need, dst, req_id, answer, promise, acked))

    def _send(self, dst: str, req_id: int, payload: AddResponse | ReadResponse, promise: int | None,
              acked: int | None = None) -> None:
        if promise is not None:
            self.oracle.on_fence_promised(self.name, promise)
        if acked is not None:
            self.oracle.on_bookie_acked(self.name, acked)
        self.net.send(self.name, dst, Envelope(req_id, payload))

    def _on_add(self, src: str, req_id: int, req: AddRequest) -> None:
        if self.failed:
            self._reply(src, req_id, _const(AddResponse(StatusCode.EIO)))
            return
        size = len(req.body)
        why = decisions.check_batch_shape(req.ledger_id, [req.entry_id], [size], size, MAX_ENTRY_SIZE)
        if not why:
            why, max_lac = decisions.check_headers(req.ledger_id, [req.entry_id], [size], req.body)
        if not why:   # R26: wild entry ids (the buggy client's 2^32, 2^41, 2^62), as the real bookie refuses them
            known_last = max(self.written.get(req.ledger_id, {}), default=-1)
            why = decisions.check_entry_range(req.entry_id, known_last, max_lac, ENTRY_ID_WINDOW, ENTRY_ID_LIMIT)
        if why:
            self._reply(src, req_id, _const(AddResponse(StatusCode.EBADREQ)))
            return
        check = decisions.decide_add(self._view(req.ledger_id), req.master_key, recovery_add=req.recovery,
                                     high_priority=False, read_only=False)
        if check.status == StatusCode.EFENCED:
            # The refusal relies on the fence: it may only leave once the fence is durable (R15, oracle 6).
            self._reply(src, req_id, _const(AddResponse(check.status)), self.journal.end, promise=req.ledger_id)
            return
        if check.status != StatusCode.EOK:
            self._reply(src, req_id, _const(AddResponse(check.status)))
            return
        held = self.written.get(req.ledger_id, {}).get(req.entry_id)
        stored = {} if held is None or self.rewrite_allowed else {req.entry_id: held}
        if decisions.check_rewrites([req.entry_id], [size], req.body, stored):
            self._reply(src, req_id, _const(AddResponse(StatusCode.EBADREQ)))
            return
        self.written.setdefault(req.ledger_id, {})[req.entry_id] = req.body
        if not req.recovery:
            self.oracle.on_add_accepted(self.name, req.ledger_id, req.entry_id)
        if check.record_key:
            self.keys.setdefault(req.ledger_id, req.master_key)
            self._append(rec.encode_ledger_key(req.ledger_id, req.master_key))
        end = self._append(rec.encode_add_batch(req.ledger_id, [req.entry_id], [size], req.body))
        self._reply(src, req_id, _const(AddResponse(StatusCode.EOK)), end,
                    acked=None if req.recovery or req.ledger_id != self.oracle.ledger_id else req.entry_id)

    def _on_read(self, src: str, req_id: int, req: ReadRequest) -> None:
        if self.failed:
            self._reply(src, req_id, _const(ReadResponse(StatusCode.EIO)))
            return
        if not req.fence:
            self._reply(src, req_id, _const(self._read_answer(req)))
            return
        check = decisions.decide_fence(self._view(req.ledger_id), req.master_key)
        if check.status != StatusCode.EOK:
            self._reply(src, req_id, _const(ReadResponse(check.status)))
            return
        if check.record_key:
            self.keys.setdefault(req.ledger_id, req.master_key)
            self._append(rec.encode_ledger_key(req.ledger_id, req.master_key))
        if check.newly_fenced:
            self.fenced.add(req.ledger_id)      # later adds see it at once; the answer waits for the fsync
            self.oracle.on_fenced(self.name, req.ledger_id)
            if not self.fence_in_memory:
                self._append(rec.encode_fence(req.ledger_id))
            self.world.hazard("fence_journaled", self)
        if self.fence_shortcut and not check.newly_fenced:
            # Mutation: answer at once because the ledger is already fenced in memory, although that fence
            # (and the adds journaled before it) may not be durable and visible yet.
            self._reply(src, req_id, _const(self._read_answer(req)), 0, promise=req.ledger_id)
            return
        self._reply(src, req_id, lambda: self._read_answer(req), self.journal.end, promise=req.ledger_id)

    def _read_answer(self, req: ReadRequest) -> ReadResponse:
        known = req.ledger_id in self.keys or req.ledger_id in self.entries
        lac = self.max_lac.get(req.ledger_id, -1)
        if self.read_errors and req.entry_id >= 0:
            return ReadResponse(StatusCode.EIO, None, lac)
        if req.entry_id < 0:
            return ReadResponse(StatusCode.EOK if known else StatusCode.ENOLEDGER, None, lac)
        body = self.entries.get(req.ledger_id, {}).get(req.entry_id)
        status = decisions.decide_read(body is not None, known)
        if (req.recovery and status in NEGATIVE_STATUSES and req.ledger_id == self.oracle.ledger_id
                and not self._probing):
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
        held, self._held = self._held, []
        for need, dst, req_id, answer, promise, acked in held:
            if need <= new:
                self._send(dst, req_id, answer(), promise, acked)
            else:
                self._held.append((need, dst, req_id, answer, promise, acked))

    def _fsync_failed(self) -> None:
        """The fsync failed: every waiting request is answered EIO, unsynced bytes are lost (some may have
        reached the disk), and the bookie refuses everything until it restarts."""
        self.fail_next_sync = False
        self.failed = True
        kept = self.journal.lose_unsynced(self.world.rng, torn=self.world.chance(0.5), junk=False)
        self.world.note(f"{self.name} fsync failed (EIO), {kept} unsynced bytes reached the disk")
        held, self._held = self._held, []
        for _need, dst, req_id, answer, _promise, _acked in held:
            status = StatusCode.EIO
            self._probing = True        # answer() is only looked at, never sent: the oracle must not see it
            is_add = isinstance(answer(), AddResponse)
            self._probing = False
            payload = AddResponse(status) if is_add else ReadResponse(status)
            self.net.send(self.name, dst, Envelope(req_id, payload))

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
        self._held.clear()
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
