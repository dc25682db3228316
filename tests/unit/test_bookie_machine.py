"""The bookie's request machine (bookie.core.machine): replies only after the journal sequence that covers
them (R8, R15), EIO for everything waiting on a failed sync, fences kept by a failed flush; random
interleavings of adds, fences, sync completions, refusals and failures (hypothesis) and a few exact cases.
A tiny driver here plays the journal: sequences complete in order, as the real journal's callbacks do."""

from __future__ import annotations

import dataclasses
from typing import assert_never

from hypothesis import given, settings
from hypothesis import strategies as st

from bkledger.bookie.core import decisions
from bkledger.bookie.core import machine as bm
from bkledger.proto import bookie_pb2 as pb

KEY = b"k" * 20
LIMITS = bm.AddLimits(max_entry_size=1 << 16, entry_id_window=1 << 20, max_entry_id=1 << 40)


@dataclasses.dataclass(frozen=True)
class Req:
    n: int
    kind: str          # "add" or "fence"
    ledger_id: int


class Driver:
    """Runs the machine's effects in memory (the journal: `unsynced`, completed in order) and checks every
    reply against the sequences completed when it leaves."""

    def __init__(self, rules: bm.BookieRules = bm.DEFAULT_RULES) -> None:
        self.machine: bm.BookieMachine[Req] = bm.BookieMachine(LIMITS, rules)
        self.keys: dict[int, bytes] = {}
        self.fenced: set[int] = set()
        self.unsynced: list[int] = []            # sequences queued to the journal, in order
        self.completed: set[int] = set()
        self.add_seqs: set[int] = set()
        self.failed_at: int | None = None
        self.cover: dict[int, int] = {}          # request -> the sequence queued for it
        self.before: dict[int, set[int]] = {}    # request -> the sequences queued before it arrived
        self.fence_seq: dict[int, int] = {}      # ledger -> its fence's sequence
        self.answers: dict[int, int] = {}
        self.violations: list[str] = []
        self.count = 0
        self.current: Req | None = None
        self.next_entry: dict[int, int] = {}

    def view(self, ledger_id: int) -> decisions.LedgerView | None:
        key = self.keys.get(ledger_id)
        return None if key is None else decisions.LedgerView(key, ledger_id in self.fenced)

    def _new(self, kind: str, ledger_id: int) -> Req:
        req = self.current = Req(self.count, kind, ledger_id)
        self.before[req.n] = set(self.unsynced)
        self.count += 1
        return req

    def add(self, ledger_id: int) -> None:
        req = self._new("add", ledger_id)
        entry_id = self.next_entry.get(ledger_id, 0)
        self.next_entry[ledger_id] = entry_id + 1
        body = decisions.HEADER.pack(ledger_id, entry_id, entry_id - 1, 0)
        self.run(self.machine.on_add(req, ledger_id, [entry_id], [len(body)], body, master_key=KEY,
                                     view=self.view(ledger_id), known_last=entry_id - 1))

    def fence(self, ledger_id: int) -> None:
        req = self._new("fence", ledger_id)
        self.run(self.machine.on_fence(req, ledger_id, KEY, self.view(ledger_id)))

    def sync(self) -> None:
        if self.unsynced:
            seq = self.unsynced.pop(0)
            self.completed.add(seq)
            self.run(self.machine.on_synced(seq))

    def refuse(self) -> None:
        """Storage refuses the newest queued add before the journal reached it (out of order, as the real
        storage thread's EntryRewriteError)."""
        adds = [seq for seq in self.unsynced if seq in self.add_seqs]
        if adds:
            seq = adds[-1]
            self.unsynced.remove(seq)
            self.completed.add(seq)               # completes without a record: nothing needs it durable
            self.run(self.machine.on_not_journaled(seq, pb.EBADREQ, "rewrite"))

    def fail(self) -> None:
        if self.unsynced:
            seq = self.unsynced[0]
            self.failed_at = seq if self.failed_at is None else self.failed_at
            rest, self.unsynced = self.unsynced, []
            for failed in rest:                   # the real journal fails every later record too
                self.run(self.machine.on_sync_failed(failed, "EIO"))

    def run(self, effects: list[bm.Effect[Req]]) -> None:
        for effect in effects:
            match effect:
                case bm.Reply(token=req, status=status):
                    self.check_reply(req, status)
                case bm.StoreAdd(token=req, seq=seq):
                    self.add_seqs.add(seq)
                    self.queue(req, seq)
                case bm.MarkFenced(ledger_id=ledger_id, master_key=key, record_key=record_key):
                    if record_key:
                        self.keys.setdefault(ledger_id, key)
                    self.fenced.add(ledger_id)
                case bm.JournalFence(seq=seq, ledger_id=ledger_id):
                    assert self.current is not None
                    self.fence_seq[ledger_id] = seq
                    self.queue(self.current, seq)
                case bm.JournalBarrier(seq=seq):
                    assert self.current is not None
                    self.queue(self.current, seq)
                case bm.JournalLac(token=req, seq=seq):
                    self.queue(req, seq)
                case bm.AdvanceLac():
                    pass
                case bm.ForgetFence(ledger_id=ledger_id):
                    self.fenced.discard(ledger_id)
                case _:
                    assert_never(effect)

    def queue(self, req: Req, seq: int) -> None:
        self.unsynced.append(seq)
        self.cover[req.n] = seq

    def check_reply(self, req: Req, status: int) -> None:
        if req.n in self.answers:
            self.violations.append(f"request {req.n} answered twice")
        self.answers[req.n] = status
        if req.kind == "add" and status == pb.EOK:
            self.keys.setdefault(req.ledger_id, KEY)
        if status == pb.EOK:       # its own sequence, and (a fence) everything queued before it
            need = {self.cover.get(req.n, 0)} | (self.before[req.n] if req.kind == "fence" else set())
        elif status == pb.EFENCED:
            need = {self.fence_seq.get(req.ledger_id, 0)}
        else:
            need = set()
        if need - self.completed - {0}:
            self.violations.append(f"{req} answered {status} before sequences {sorted(need - self.completed)}")
        if self.failed_at is not None and status != pb.EIO and max(need, default=0) >= self.failed_at:
            self.violations.append(f"{req} answered {status} after the sync of sequence {self.failed_at} failed")


def make_driver(rules: bm.BookieRules = bm.DEFAULT_RULES) -> Driver:
    return Driver(rules)


OPS = st.lists(st.tuples(st.sampled_from(["add", "fence", "sync", "sync", "sync", "refuse", "fail"]),
                         st.integers(1, 3)), max_size=60)


def play(driver: Driver, ops: list[tuple[str, int]]) -> None:
    for op, ledger_id in ops:
        if op == "add":
            driver.add(ledger_id)
        elif op == "fence":
            driver.fence(ledger_id)
        elif op == "sync":
            driver.sync()
        elif op == "refuse":
            driver.refuse()
        elif op == "fail" and ledger_id == 1:    # failures rarer than syncs
            driver.fail()


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_no_reply_before_its_covering_sync_and_eio_after_a_failed_one(ops: list[tuple[str, int]]) -> None:
    """R8, R15: an add's ack, a fence's answer and an EFENCED refusal leave only once every sequence up to
    the one that covers them has completed; after a failed sync, everything waiting is answered EIO; every
    request is answered exactly once when the journal has caught up."""
    driver = make_driver()
    play(driver, ops)
    while driver.unsynced:
        driver.sync()
    assert driver.violations == []
    assert set(driver.answers) == set(range(driver.count)), "a request was never answered"
    assert driver.machine.waiting == 0


def test_the_checker_catches_the_bookie_mutants() -> None:
    """The checker above is not vacuous: "ack-before-sync" answers an add before its sync, "fence-shortcut"
    a fencing read before the adds queued ahead of it are durable."""
    driver = make_driver(bm.BookieRules(ack_after_sync=False))
    play(driver, [("add", 1)])
    assert driver.violations and "before sequences" in driver.violations[0]
    driver = make_driver(bm.BookieRules(fence_barrier=False))
    play(driver, [("fence", 1), ("sync", 1), ("add", 2), ("fence", 1)])
    assert driver.violations and "before sequences" in driver.violations[0]


def test_an_add_refused_out_of_order_waits_for_the_sequences_before_it() -> None:
    """Nothing is answered past a sequence that has not completed, not even a refusal."""
    driver = make_driver()
    play(driver, [("add", 1), ("add", 1), ("refuse", 1)])
    assert driver.answers == {}
    driver.sync()
    assert driver.answers == {0: pb.EOK, 1: pb.EBADREQ}


def test_a_failed_sync_answers_eio_and_so_does_every_later_request() -> None:
    driver = make_driver()
    play(driver, [("add", 1), ("fence", 2), ("add", 1), ("fail", 1), ("add", 3), ("fence", 3)])
    assert driver.answers == {0: pb.EIO, 1: pb.EIO, 2: pb.EIO, 3: pb.EIO, 4: pb.EIO}
    assert driver.violations == []


def test_efenced_waits_for_the_fence_to_be_durable_then_goes_at_once() -> None:
    """R15: a plain add refused because of a fence leaves only after the fence's sync."""
    driver = make_driver()
    play(driver, [("add", 1), ("sync", 1), ("fence", 1), ("add", 1)])
    assert driver.answers == {0: pb.EOK}
    driver.sync()
    assert driver.answers == {0: pb.EOK, 1: pb.EOK, 2: pb.EFENCED}
    play(driver, [("add", 1)])
    assert driver.answers[3] == pb.EFENCED


def test_a_fencing_read_of_a_fenced_ledger_waits_for_a_barrier() -> None:
    """R15: already fenced in memory is not enough; "fence-shortcut" answers at once."""
    for rules, answered in ((bm.DEFAULT_RULES, False), (bm.BookieRules(fence_barrier=False), True)):
        driver = make_driver(rules)
        play(driver, [("fence", 1), ("sync", 1), ("add", 2), ("fence", 1)])
        assert (2 in driver.answers) == answered


def test_a_failed_flush_keeps_the_fence() -> None:
    """R15: a checkpoint whose flush fails forgets no fence ("flush-drops-fence" does)."""
    for rules, kept in ((bm.DEFAULT_RULES, True), (bm.BookieRules(keep_fence_on_failed_flush=False), False)):
        driver = make_driver(rules)
        play(driver, [("fence", 1), ("sync", 1)])
        driver.run(driver.machine.on_flush_failed())
        play(driver, [("add", 1), ("sync", 1)])
        assert (driver.answers[1] == pb.EFENCED) == kept


def test_a_fence_not_journaled_is_a_mutant_only() -> None:
    driver = make_driver()
    effects = driver.machine.on_fence(Req(0, "fence", 1), 1, KEY, None)
    assert [type(e) for e in effects] == [bm.MarkFenced, bm.JournalFence]
    effects = make_driver(bm.BookieRules(journal_fence=False)).machine.on_fence(Req(0, "fence", 1), 1, KEY, None)
    assert [type(e) for e in effects] == [bm.MarkFenced, bm.JournalBarrier]


def test_bad_requests_are_answered_at_once_with_their_reason() -> None:
    """R26: a malformed batch never reaches the journal."""
    machine: bm.BookieMachine[str] = bm.BookieMachine(LIMITS)
    [reply] = machine.on_add("t", 1, [0], [10], b"x" * 10, master_key=KEY, view=None, known_last=-1)
    assert isinstance(reply, bm.Reply) and reply.status == pb.EBADREQ and "header" in reply.reason
    body = decisions.HEADER.pack(1, 1 << 30, 0, 0)
    [reply] = machine.on_add("t", 1, [1 << 30], [len(body)], body, master_key=KEY, view=None, known_last=-1)
    assert isinstance(reply, bm.Reply) and reply.status == pb.EBADREQ and "known range" in reply.reason


def test_an_explicit_lac_is_answered_and_known_after_its_sync() -> None:
    machine: bm.BookieMachine[str] = bm.BookieMachine(LIMITS)
    view = decisions.LedgerView(KEY, False)
    assert machine.on_write_lac("t", 1, KEY, None, 5) == [bm.Reply("t", pb.ENOLEDGER)]
    [journal] = machine.on_write_lac("t", 1, KEY, view, 5)
    assert isinstance(journal, bm.JournalLac)
    assert machine.on_synced(journal.seq) == [bm.AdvanceLac(1, 5), bm.Reply("t", pb.EOK)]
