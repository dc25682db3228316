"""Properties of the pure rules of transactions and cursors (issue 44 item 5: "properties in the
deterministic simulation where the rules are pure"), over interleavings hypothesis chooses.

Transactions (`client.log.core.transactions`): several transactions append to logs B and C and acknowledge
cursors, committing as `client.log.transaction.Transaction.commit` does (one multi: every log's list at
the version read, each cursor at the version of its ack, the marker), interleaved with each other and
with lost answers (before or after the multi was applied) and ZooKeeper unreachable for the read-back.
Each step's decision is the pure rules': `next_phase`, `after_failed_commit`, `outcome_after_unknown`,
`late_ledgers` / `with_sealed_ledgers_appended` (R27). Whatever the schedule, a transaction is applied at
most once, all of it or nothing, exactly when its marker exists; its reported outcome is never wrong;
and one that met no fault of its own commits.

Cursors (`client.log.core.cursors.held_cut`): whatever the ledgers, cursors and quota, retention deletes
no record a cursor within its quota has not acknowledged, never the last ledger, and every cursor it
does take records from is reported lost with exactly those ledgers.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Generator

from hypothesis import given, settings
from hypothesis import strategies as st

from bkledger.client.errors import InvalidLogUpdateError
from bkledger.client.log.core import cursors as cc
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import transactions as tc
from bkledger.client.log.core.meta import LogLedger, LogMetadata, Position

FAULTS = ("ok", "ok", "ok", "lost-before", "lost-after", "unreachable")


def closed(ledger_id: int) -> lm.ClosedLedger:
    return (ledger_id, 2, 30, 1000)


@dataclasses.dataclass
class World:
    """ZooKeeper as the transactions see it: the logs' lists (with versions), cursors, markers."""

    metas: dict[str, LogMetadata]
    versions: dict[str, int]
    cursors: dict[str, tuple[Position | None, int]]
    markers: set[str] = dataclasses.field(default_factory=set)
    applied: list[str] = dataclasses.field(default_factory=list)
    ids: itertools.count[int] = dataclasses.field(default_factory=lambda: itertools.count(1))

    def multi(self, txid: str, new: dict[str, tuple[int, LogMetadata]], cursor: str, ack: Position,
              version: int) -> bool:
        """One multi-operation: every check passes and all is applied, or nothing is."""
        if txid in self.markers or self.cursors[cursor][1] != version:
            return False
        if any(self.versions[name] != seen for name, (seen, _) in new.items()):
            return False
        for name, (_, meta) in new.items():
            self.metas[name], self.versions[name] = meta, self.versions[name] + 1
        self.cursors[cursor] = (ack, version + 1)
        self.markers.add(txid)
        self.applied.append(txid)
        return True


@dataclasses.dataclass
class Tx:
    txid: str
    ledgers: dict[str, int]            # log -> the ledger it lists (re-homed: a copy's id)
    made: set[int]                     # every ledger it wrote or copied
    cursor: str
    ack: Position
    version: int                       # the cursor's version when the transaction acknowledged it
    faults: list[str] = dataclasses.field(default_factory=list)
    outcome: str = ""


def commit(world: World, tx: Tx) -> Generator[None, str, None]:
    """The commit, step by step as the driver runs it: yields before reading the logs (receiving this
    attempt's fault) and between that read and its multi (others may commit meanwhile)."""
    phase = tc.next_phase(tc.Phase.OPEN, tc.Event.COMMIT, tx.txid)
    for attempt in range(tc.COMMIT_ATTEMPTS):
        fault = yield
        tx.faults.append(fault)
        seen = {name: (world.versions[name], world.metas[name]) for name in tx.ledgers}
        try:
            new = {name: (version, lm.with_sealed_ledgers_appended(meta, [closed(tx.ledgers[name])], 5))
                   for name, (version, meta) in seen.items()}
        except InvalidLogUpdateError:
            late = lm.late_ledgers({n: m for n, (_, m) in seen.items()}, {n: [i] for n, i in tx.ledgers.items()})
            if tc.after_failed_commit(attempt, late, False) is not tc.Step.REHOME:
                break
            for name in late:                                   # copied above the log's tail
                tx.ledgers[name] = next(world.ids)
                tx.made.add(tx.ledgers[name])
            continue
        yield
        applied = fault != "lost-before" and world.multi(tx.txid, new, tx.cursor, tx.ack, tx.version)
        if fault in ("lost-before", "lost-after", "unreachable"):
            tx.outcome = _read_back(world, tx, fault)            # the answer was lost: decided by the marker
            return
        if applied or tx.txid in world.markers:
            tx.outcome = "committed"
            tc.next_phase(phase, tc.Event.COMMITTED, tx.txid)
            return
        if world.cursors[tx.cursor][1] != tx.version:             # another consumer acknowledged it
            break
        if tc.after_failed_commit(attempt, {}, True) is not tc.Step.RETRY:
            break
    tx.outcome = "failed"
    tc.next_phase(phase, tc.Event.FAILED, tx.txid)


def _read_back(world: World, tx: Tx, fault: str) -> str:
    if fault == "unreachable":
        return "unknown"
    got = tc.outcome_after_unknown(tx.txid in world.markers)
    return "committed" if got is tc.Outcome.COMMITTED else "failed"


def begin(world: World, index: int, logs: list[str], cursor: str) -> Tx:
    """A transaction's appends (a ledger per log, created now) and its ack (at the cursor's version now)."""
    ledgers = {name: next(world.ids) for name in logs}
    stored, version = world.cursors[cursor]
    ack = Position(1000, index + 1)
    tc.check_forward(stored, ack, "a", cursor)
    return Tx(f"tx{index}", ledgers, set(ledgers.values()), cursor, ack, version)


def run(world: World, txs: list[Tx], schedule: list[tuple[int, str]]) -> None:
    steps = {tx.txid: commit(world, tx) for tx in txs}
    live = {}
    for tx in txs:
        next(steps[tx.txid])
        live[tx.txid] = steps[tx.txid]
    for index, fault in [*schedule, *[(i, "ok") for i in range(len(txs)) for _ in range(4 * tc.COMMIT_ATTEMPTS)]]:
        txid = txs[index % len(txs)].txid
        if txid in live:
            try:
                live[txid].send(fault)
            except StopIteration:
                del live[txid]
    assert not live, "a commit did not finish within its bound"


tx_specs = st.lists(st.tuples(st.sampled_from([["b"], ["c"], ["b", "c"]]), st.sampled_from(["k0", "k1", "k2", "k3"])),
                    min_size=1, max_size=4)
schedules = st.lists(st.tuples(st.integers(0, 3), st.sampled_from(FAULTS)), max_size=40)


@settings(max_examples=400, deadline=None)
@given(tx_specs, schedules)
def test_interleaved_transactions_with_lost_answers_apply_once_all_or_nothing(specs, schedule):
    """R27: interleaved commits of transactions over B, C and cursors, answers lost before or after the
    multi, ZooKeeper unreachable for the read-back: each transaction is applied at most once and all of it
    (every log lists exactly one of its ledgers, its cursor moves) or none of it, exactly when its marker
    exists; "committed" is never said of one not applied nor "failed" of one applied; a cursor holds the
    ack of the last transaction applied on it; one that met no fault and no rival on its cursor commits."""
    world = World({n: lm.new_log(n, 0) for n in "bc"}, {"b": 0, "c": 0}, {f"k{i}": (None, 0) for i in range(4)})
    txs = [begin(world, i, logs, cursor) for i, (logs, cursor) in enumerate(specs)]
    run(world, txs, schedule)
    for tx in txs:
        applied = tx.txid in world.markers
        assert world.applied.count(tx.txid) == int(applied)
        for name in "bc":
            listed = [i for i in world.metas[name].ledger_ids if i in tx.made]
            assert len(listed) == (int(applied) if name in tx.ledgers else 0), (tx, name, listed)
        assert tx.outcome in (("committed", "unknown") if applied else ("failed", "unknown")), tx
        rivals = [o for o in txs if o is not tx and o.cursor == tx.cursor]
        if not rivals and all(f == "ok" for f in tx.faults):
            assert tx.outcome == "committed", tx
    for cursor, (position, _) in world.cursors.items():
        last = [tx.ack for txid in world.applied for tx in txs if tx.txid == txid and tx.cursor == cursor]
        assert position == (last[-1] if last else None)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 100), min_size=1, max_size=6), st.booleans())
def test_acks_in_one_transaction_only_move_forward(entries, _):
    """Several acks of one cursor in a transaction keep the furthest; one that goes back is refused."""
    earlier: Position | None = None
    for entry in entries:
        later = Position(7, entry)
        if earlier is not None and later < earlier:
            try:
                tc.merged_ack(earlier, later, "a", "k")
            except tc.CursorMovedBackError:
                continue
            raise AssertionError("an ack moving the cursor back was accepted")
        earlier = tc.merged_ack(earlier, later, "a", "k")
    assert earlier == Position(7, max(entries))


# ---- cursors and retention -------------------------------------------------------------------------
ledger_sizes = st.lists(st.tuples(st.integers(1, 5), st.integers(1, 500)), min_size=1, max_size=6)


def log_of(sizes: list[tuple[int, int]], open_tail: bool) -> LogMetadata:
    """Ledgers 10, 20, ... with (entries, bytes) each; the last one open if `open_tail`."""
    ledgers, first = [], 0
    for i, (entries, size) in enumerate(sizes):
        is_open = open_tail and i == len(sizes) - 1
        ledgers.append(LogLedger(10 * (i + 1), created_ms=1000 * (i + 1), first_position=first,
                                 entries=None if is_open else entries, size=None if is_open else size,
                                 closed_ms=None if is_open else 1000 * (i + 2)))
        first += entries
    return LogMetadata("a", 0, tuple(ledgers))


def positions(sizes: list[tuple[int, int]]) -> list[Position]:
    return [Position(10 * (i + 1), e) for i, (entries, _) in enumerate(sizes) for e in range(entries + 1)]


@settings(max_examples=400, deadline=None)
@given(ledger_sizes, st.booleans(), st.integers(0, 6), st.data(), st.one_of(st.none(), st.integers(0, 1500)))
def test_retention_never_takes_what_a_cursor_within_quota_holds(sizes, open_tail, proposed, data, quota):
    """Whatever the ledgers, cursors and quota: the cut deletes at most `proposed` ledgers and never the
    last; no ledger holding a record before which a cursor within its quota stands; and a cursor it takes
    unacknowledged records from is reported lost with exactly the ledgers taken from it."""
    meta = log_of(sizes, open_tail)
    spots = [None, *positions(sizes)]
    cursors = [cc.CursorState(f"k{i}", data.draw(st.sampled_from(spots))) for i in range(data.draw(st.integers(0, 3)))]
    cut = cc.held_cut(meta, proposed, cursors, quota)
    assert 0 <= cut.count <= min(proposed, len(meta.ledgers) - 1)
    gone = meta.ledgers[:cut.count]
    for cursor in cursors:
        taken = tuple(led.ledger_id for led in gone if _needs(cursor.position, led))
        over = quota is not None and cc.lag(meta, cursor.position, None, 0).bytes > quota
        if taken:
            assert over and cut.lost.get(cursor.name) == taken, (cursor, cut)
        else:
            assert cursor.name not in cut.lost, (cursor, cut)


def _needs(position: Position | None, led: LogLedger) -> bool:
    """The cursor has not acknowledged every record of the (sealed) ledger."""
    if position is None:
        return True
    return position.ledger_id < led.ledger_id or (position.ledger_id == led.ledger_id
                                                  and position.entry_id < (led.entries or 0))
