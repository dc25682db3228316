"""R15-R20: the recovery state machine (fencing coverage, start point, positive/negative/unknown, write-back,
close), driven against in-memory bookies."""

from __future__ import annotations

import collections
import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkledger.client.errors import BadPasswordError, LedgerRecoveryError
from bkledger.client.protocol.digest import DigestManager, package_entry
from bkledger.client.protocol.metadata import LedgerMetadata
from bkledger.client.protocol.pending_adds import NeedEnsembleChange
from bkledger.client.protocol.recovery import (
    CloseLedger,
    LedgerRecovery,
    Phase,
    RecoveryFailed,
    RecoveryRules,
    SendFenceRead,
    SendRecoveryRead,
    WriteBack,
)
from bkledger.client.protocol.status import StatusCode
from bkledger.client.protocol.transforms import (
    close_after_recovery,
    closed,
    new_ledger_metadata,
    to_in_recovery,
    with_ensemble_change,
)
from bkledger.client.protocol.write_set import write_set

DIGEST = DigestManager("crc32c", b"pw")
LEDGER = 7


@dataclasses.dataclass
class Cluster:
    """In-memory bookies: stored entries, fenced flags, and which bookies are down or hung."""

    stored: dict[str, dict[int, bytes]] = dataclasses.field(default_factory=lambda: collections.defaultdict(dict))
    down: set[str] = dataclasses.field(default_factory=set)       # answer UNAVAILABLE
    hung: set[str] = dataclasses.field(default_factory=set)       # never answer
    broken: dict[str, int] = dataclasses.field(default_factory=dict)  # answer this status to reads
    fenced: set[str] = dataclasses.field(default_factory=set)
    failing_writes: set[str] = dataclasses.field(default_factory=set)  # fail write-backs with EIO
    writes: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    fence_reads: list[str] = dataclasses.field(default_factory=list)

    def lac(self, bookie: str) -> int:
        entries = self.stored.get(bookie, {})
        if not entries:
            return -1
        return max(int.from_bytes(body[16:24], "big", signed=True) for body in entries.values())


def write(cluster: Cluster, md: LedgerMetadata, payloads: list[bytes], copies: dict[int, set[int]] | None = None,
          lacs: list[int] | None = None) -> None:
    """Store entries as a writer would: entry i on the indices copies[i] of its write set (default all)."""
    length = 0
    for entry_id, payload in enumerate(payloads):
        length += len(payload)
        lac = lacs[entry_id] if lacs else entry_id - 1
        body = package_entry(DIGEST, LEDGER, entry_id, lac, length, payload)
        ensemble = md.fragment_for(entry_id).ensemble
        members = write_set(entry_id, md.ensemble_size, md.write_quorum)
        for index in (copies or {}).get(entry_id, set(members)):
            cluster.stored[ensemble[index]][entry_id] = body


def run(md: LedgerMetadata, cluster: Cluster, rules: RecoveryRules = RecoveryRules(), window: int = 4,
        seed: int | None = None, on_action=None) -> tuple[LedgerRecovery, CloseLedger | RecoveryFailed | None]:
    """Drive a LedgerRecovery to its end, delivering answers FIFO (or shuffled with `seed`)."""
    rec = LedgerRecovery(md, DIGEST, rules, read_window=window)
    rng = random.Random(seed)
    inbox: list = []
    result: CloseLedger | RecoveryFailed | None = None
    fresh = (f"new{i}" for i in range(1000))

    def execute(actions):
        nonlocal result
        for action in actions:
            if on_action:
                on_action(action)
            if isinstance(action, SendFenceRead):
                inbox.append(("fence", action))
            elif isinstance(action, SendRecoveryRead):
                inbox.append(("read", action))
            elif isinstance(action, WriteBack):
                for index, bookie in zip(action.indices, action.bookie_ids, strict=True):
                    inbox.append(("write", (action.entry_id, index, bookie, action.body)))
            elif isinstance(action, NeedEnsembleChange):
                new = list(rec.local_metadata.last_fragment.ensemble)
                for i in action.failed_indices:
                    new[i] = next(fresh)
                inbox.append(("change", new))
            elif isinstance(action, CloseLedger | RecoveryFailed):
                assert result is None, "recovery must end once"
                result = action

    def answer(kind, payload):
        if kind == "change":
            return rec.on_ensemble_changed(payload)
        if kind == "fence":
            bookie = payload.bookie_id
            cluster.fence_reads.append(bookie)
            if bookie in cluster.hung:
                return []
            if bookie in cluster.down:
                return rec.on_fence_response(payload.index, StatusCode.UNAVAILABLE)
            cluster.fenced.add(bookie)
            return rec.on_fence_response(payload.index, StatusCode.EOK, cluster.lac(bookie))
        if kind == "read":
            bookie = payload.bookie_id
            if bookie in cluster.hung:
                return []
            if bookie in cluster.down:
                return rec.on_read_response(payload.entry_id, payload.index, StatusCode.UNAVAILABLE)
            if bookie in cluster.broken:
                return rec.on_read_response(payload.entry_id, payload.index, cluster.broken[bookie])
            if payload.fence:
                cluster.fenced.add(bookie)
            body = cluster.stored.get(bookie, {}).get(payload.entry_id)
            if body is None:
                return rec.on_read_response(payload.entry_id, payload.index, StatusCode.ENOENTRY)
            return rec.on_read_response(payload.entry_id, payload.index, StatusCode.EOK, body)
        entry_id, index, bookie, body = payload
        if bookie in cluster.hung:
            return []
        if bookie in cluster.down:
            return rec.on_write_error(entry_id, bookie, StatusCode.UNAVAILABLE)
        if bookie in cluster.failing_writes:
            return rec.on_write_error(entry_id, bookie, StatusCode.EIO)
        cluster.stored[bookie][entry_id] = body
        cluster.writes.append((entry_id, bookie))
        return rec.on_write_ack(entry_id, bookie)

    execute(rec.start())
    while inbox and result is None:
        item = inbox.pop(rng.randrange(len(inbox)) if seed is not None else 0)
        execute(answer(*item))
    return rec, result


def _md(e=3, qw=3, qa=2) -> LedgerMetadata:
    bookies = [f"b{i}" for i in range(e)]
    return to_in_recovery(new_ledger_metadata(LEDGER, bookies, e, qw, qa, "crc32c", b"pw", 0))


PAYLOADS = [b"p%d" % i for i in range(6)]


def test_happy_path_closes_at_the_last_written_entry():
    """R15-R20: fence every bookie, read forward from the LAC, stop at the first negative, close."""
    md = _md()
    cluster = Cluster()
    write(cluster, md, PAYLOADS)
    rec, result = run(md, cluster)
    assert result == CloseLedger(5, sum(map(len, PAYLOADS)), ())
    assert rec.start_entry_id == 4             # highest piggy-backed LAC
    assert ({e for e, _ in cluster.writes}) == {5}   # only entries above the start point are written back
    assert rec.phase is Phase.CLOSING


def test_empty_ledger_closes_at_minus_one():
    """R17/R18: nothing written: start at -1, entry 0 is negative, close with last entry -1, length 0."""
    md = _md()
    _, result = run(md, Cluster())
    assert result == CloseLedger(-1, 0, ())


def test_hung_bookie_does_not_block_recovery():
    """R16/R18 (oracle 7): a paused bookie (E=3 Qw=3 Qa=2) is never waited for once thresholds are met."""
    md = _md()
    cluster = Cluster(hung={"b2"})
    write(cluster, md, PAYLOADS)
    rec, result = run(md, cluster)
    assert isinstance(result, CloseLedger) and result.last_entry_id == 5
    assert rec.fenced_indices == {0, 1}


def test_fencing_needs_quorum_coverage():
    """R16: with two of three bookies down (Qa=2) an ack quorum stays unfenced: recovery fails, no close."""
    md = _md()
    cluster = Cluster(down={"b1", "b2"})
    write(cluster, md, PAYLOADS)
    _, result = run(md, cluster)
    assert isinstance(result, RecoveryFailed) and isinstance(result.error, LedgerRecoveryError)


def test_fencing_completes_at_coverage_without_waiting_for_the_rest():
    """R16: reads start as soon as fenced bookies cover the ensemble, before slower bookies answer."""
    md = _md()
    rec = LedgerRecovery(md, DIGEST)
    assert [a.bookie_id for a in rec.start()] == ["b0", "b1", "b2"]
    assert rec.on_fence_response(0, StatusCode.EOK, 3) == []
    actions = rec.on_fence_response(1, StatusCode.EIO, 5)     # an error: not fenced, its LAC is ignored
    assert actions == []
    actions = rec.on_fence_response(2, StatusCode.EFENCED)      # already fenced counts as fenced
    assert rec.phase is Phase.READING and rec.start_entry_id == 3
    assert {a.entry_id for a in actions if isinstance(a, SendRecoveryRead)} == {3, 4, 5, 6, 7, 8, 9, 10}
    assert all(a.fence for a in actions if isinstance(a, SendRecoveryRead))
    assert rec.on_fence_response(1, StatusCode.EOK, 9) == []  # late answers change nothing


def test_wrong_password_fails_recovery():
    """R15/R26: a bookie answering EUA to the fencing read means the wrong password."""
    rec = LedgerRecovery(_md(), DIGEST)
    rec.start()
    [action] = rec.on_fence_response(0, StatusCode.EUA)
    assert isinstance(action, RecoveryFailed) and isinstance(action.error, BadPasswordError)


@pytest.mark.parametrize("e,qw,qa,down,ok", [
    (5, 3, 2, {"b3"}, True),
    (5, 3, 2, {"b3", "b4"}, False),     # two bookies sharing a write set
    (5, 3, 2, {"b1", "b4"}, False),     # in a ring of 5, any two bookies share a write set of 3
])
def test_five_bookie_scenarios(e, qw, qa, down, ok):
    """R16/R18 scenario: E=5 Qw=3 Qa=2: one bookie down recovers; two sharing a write set do not close."""
    md = _md(e, qw, qa)
    cluster = Cluster(down=set(down))
    write(cluster, md, PAYLOADS * 2)
    _, result = run(md, cluster)
    if ok:
        assert isinstance(result, CloseLedger) and result.last_entry_id == 11
    else:
        assert isinstance(result, RecoveryFailed)
        cluster.down = {"b4"}                                  # bring one back: recovery succeeds
        _, again = run(md, cluster)
        assert isinstance(again, CloseLedger) and again.last_entry_id == 11


def test_single_copy_is_positive_and_written_back():
    """R18/R19: one valid copy makes an entry recoverable; it is written back to its whole write set."""
    md = _md()
    cluster = Cluster()
    write(cluster, md, PAYLOADS, copies={5: {2}}, lacs=[-1, 0, 1, 2, 3, 3])
    backs: list[WriteBack] = []
    rec, result = run(md, cluster, on_action=lambda a: backs.append(a) if isinstance(a, WriteBack) else None)
    assert isinstance(result, CloseLedger) and result.last_entry_id == 5
    assert [(w.entry_id, set(w.bookie_ids)) for w in backs] == [(4, {"b0", "b1", "b2"}), (5, {"b0", "b1", "b2"})]
    assert rec.start_entry_id == 3
    assert sum(5 in cluster.stored[b] for b in ("b0", "b1", "b2")) >= 2   # closed once Qa copies exist


def test_unknown_aborts_without_closing():
    """R18: no positive and fewer than Qw-Qa+1 explicit negatives once all answered: abort, do not close."""
    md = _md()
    cluster = Cluster(broken={"b0": StatusCode.EIO, "b2": StatusCode.EUNKNOWNLEDGERSTATE})
    write(cluster, md, PAYLOADS[:3], copies={0: {0, 1, 2}, 1: {0, 1, 2}, 2: {0, 2}})
    rec, result = run(md, cluster)
    assert isinstance(result, RecoveryFailed)
    assert isinstance(result.error, LedgerRecoveryError)
    assert "entry 2" in str(result.error)
    assert rec.phase is Phase.FAILED


def test_unknown_as_negative_switch_truncates():
    """R18: the test-only switch unknown_as_negative reproduces the historic truncation bug."""
    md = _md()
    cluster = Cluster(broken={"b0": StatusCode.EIO, "b2": StatusCode.EIO})
    write(cluster, md, PAYLOADS[:3], copies={0: {0, 1, 2}, 1: {0, 1, 2}, 2: {0, 2}})
    _, result = run(md, cluster, rules=RecoveryRules(unknown_as_negative=True))
    assert isinstance(result, CloseLedger) and result.last_entry_id == 1   # entry 2 (maybe acked) lost


def test_digest_mismatch_is_unknown_not_positive():
    """R18: a copy whose digest fails is neither positive nor negative."""
    md = _md()
    cluster = Cluster()
    write(cluster, md, PAYLOADS[:3])
    for bookie in ("b0", "b1"):
        body = bytearray(cluster.stored[bookie][2])
        body[-1] ^= 0xFF
        cluster.stored[bookie][2] = bytes(body)
    del cluster.stored["b2"][2]
    rec, result = run(md, cluster)
    assert rec.start_entry_id == 1
    assert isinstance(result, RecoveryFailed)


def test_negative_decided_without_hung_bookie():
    """R18: Qw-Qa+1 explicit negatives decide at once, even if another bookie never answers."""
    md = _md()
    rec = LedgerRecovery(md, DIGEST, read_window=1)
    rec.start()
    rec.on_fence_response(0, StatusCode.ENOLEDGER, -1)
    actions = rec.on_fence_response(1, StatusCode.ENOLEDGER, -1)
    assert [a.entry_id for a in actions] == [0, 0, 0]
    assert rec.on_read_response(0, 0, StatusCode.ENOENTRY) == []
    assert rec.on_read_response(0, 1, StatusCode.ENOLEDGER) == [CloseLedger(-1, 0, ())]


def test_start_point_is_at_least_the_last_fragment_start():
    """R17: bookies of a new last fragment know no LAC: start at its first entry - 1, read from the old one."""
    md0 = new_ledger_metadata(LEDGER, ["b0", "b1", "b2"], 3, 3, 2, "crc32c", b"pw", 0)
    md = to_in_recovery(with_ensemble_change(md0, 4, {2: "b3"}))
    cluster = Cluster()
    write(cluster, md, PAYLOADS[:4], lacs=[-1] * 4)  # entries 0..3 on b0, b1, b2; piggy-backed LACs lag
    reads: list[SendRecoveryRead] = []
    rec, result = run(md, cluster, on_action=lambda a: reads.append(a) if isinstance(a, SendRecoveryRead) else None)
    assert rec.start_entry_id == 3
    assert isinstance(result, CloseLedger) and result.last_entry_id == 3
    assert result.length == sum(map(len, PAYLOADS[:4]))
    assert {r.bookie_id for r in reads if r.entry_id == 3} == {"b0", "b1", "b2"}   # the first fragment


def test_write_back_failure_changes_ensemble_locally():
    """R19/R20: a bookie failing a write-back is replaced in a local fragment carried by the close, and
    pending write-backs are resent to the replacement only."""
    md = _md(4, 3, 3)
    cluster = Cluster(failing_writes={"b3"})
    write(cluster, md, PAYLOADS, copies={4: {0}, 5: {1}}, lacs=[-1, 0, 1, 2, 3, 3])
    writes_seen: list[WriteBack] = []
    _, result = run(md, cluster, on_action=lambda a: writes_seen.append(a) if isinstance(a, WriteBack) else None)
    assert isinstance(result, CloseLedger) and result.last_entry_id == 5
    assert len(result.new_fragments) == 1
    fragment = result.new_fragments[0]
    assert fragment.first_entry_id == 5 and "b3" not in fragment.ensemble
    replacement = fragment.ensemble[3]
    resent = [w for w in writes_seen if replacement in w.bookie_ids]
    assert resent and all(w.bookie_ids == (replacement,) for w in resent)
    assert 5 in cluster.stored[replacement]
    closed_md = close_after_recovery(md, result.last_entry_id, result.length, result.new_fragments)
    assert closed_md.fragments == (md.fragments[0], fragment)
    assert closed_md.last_entry_id == 5


def test_write_back_switch_skips_write_back():
    """R19: with write_back disabled (test-only switch) the close happens without rewriting entries."""
    md = _md()
    cluster = Cluster()
    write(cluster, md, PAYLOADS, copies={5: {1}}, lacs=[-1, 0, 1, 2, 3, 3])
    _, result = run(md, cluster, rules=RecoveryRules(write_back=False))
    assert isinstance(result, CloseLedger) and cluster.writes == []


def test_fence_reads_switch_clears_the_fence_flag():
    """R18: recovery reads carry the fence flag unless the test-only switch turns it off."""
    md = _md()
    rec = LedgerRecovery(md, DIGEST, RecoveryRules(fence_reads=False))
    rec.start()
    rec.on_fence_response(0, StatusCode.EOK, -1)
    actions = rec.on_fence_response(1, StatusCode.EOK, -1)
    assert actions and not any(a.fence for a in actions if isinstance(a, SendRecoveryRead))


def test_closed_metadata_is_refused():
    """R14: a CLOSED ledger is used as is; there is nothing to recover."""
    md = new_ledger_metadata(LEDGER, ["b0", "b1", "b2"], 3, 3, 2, "crc32c", b"pw", 0)
    with pytest.raises(ValueError):
        LedgerRecovery(closed(md, -1, 0), DIGEST)


@st.composite
def _scenario(draw):
    e = draw(st.integers(1, 5))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    n = draw(st.integers(0, 8))
    copies = {}
    for entry_id in range(n):
        members = write_set(entry_id, e, qw)
        copies[entry_id] = set(draw(st.sets(st.sampled_from(members), max_size=qw)))
    acked_end = -1
    for entry_id in range(n):
        if len(copies[entry_id]) >= qa and acked_end == entry_id - 1:
            acked_end = entry_id
    lacs, lac = [], -1
    for entry_id in range(n):
        lac = max(lac, draw(st.integers(-1, min(entry_id - 1, acked_end))))
        lacs.append(lac)
    down = draw(st.sets(st.sampled_from([f"b{i}" for i in range(e)])))
    hung = draw(st.sets(st.sampled_from([f"b{i}" for i in range(e)])))
    return e, qw, qa, n, copies, acked_end, lacs, down, hung - down, draw(st.integers(1, 4)), draw(st.integers(0, 99))


@settings(max_examples=400, deadline=None)
@given(_scenario())
def test_recovery_never_truncates(scenario):
    """R16-R20 and oracle 1/7: recovery either fails without closing, or closes at or above every
    acknowledged entry and below any entry nobody has, after which each recovered entry sits on an ack
    quorum; with every bookie up it always finishes."""
    e, qw, qa, n, copies, acked_end, lacs, down, hung, window, seed = scenario
    md = _md(e, qw, qa)
    cluster = Cluster(down=down, hung=hung)
    write(cluster, md, [b"x%d" % i for i in range(n)], copies=copies, lacs=lacs)
    rec, result = run(md, cluster, window=window, seed=seed)
    present = [i for i in range(n) if copies[i]]
    if isinstance(result, CloseLedger):
        assert result.last_entry_id >= acked_end, "truncated an acknowledged entry"
        assert result.last_entry_id <= (max(present) if present else -1)
        assert result.length == sum(len(b"x%d" % i) for i in range(result.last_entry_id + 1))
        for entry_id in range(rec.start_entry_id + 1, result.last_entry_id + 1):
            ensemble = close_after_recovery(md, result.last_entry_id, result.length,
                                            result.new_fragments).fragment_for(entry_id).ensemble
            holders = [ensemble[i] for i in write_set(entry_id, e, qw) if entry_id in cluster.stored[ensemble[i]]]
            assert len(holders) >= qa
    elif result is None:
        assert hung, "recovery may only stall on bookies that never answer"
    else:
        assert isinstance(result, RecoveryFailed)
    if not down and not hung:
        assert isinstance(result, CloseLedger), "all bookies up: recovery must finish"
