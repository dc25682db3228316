"""The checker of the Jepsen-style test (pure: no I/O). Given the workers' histories (`history`) and what
the logs and cursors hold after healing, it lists every anomaly:

- `lost`: a send acknowledged (ok) whose record is not in log A; a transaction acknowledged whose records
  are not all in B and C;
- `failed-visible`: a send or a transaction that definitely failed (fail) whose records are visible;
- `duplicate`: a producer's (writer, seq) more than once in A, a service's transformed record (service,
  source, output log) more than once in B or C;
- `phantom`: a record nobody invoked;
- `order`: records of one producer incarnation not in its sequence order in A;
- `torn`: a transaction (of unknown outcome, or any) whose records are in B and not C, or partly in either;
- `cursor-ahead`: a cursor past a record of A that its consumers never recorded as processed;
- `dirty-read`: a record a consumer processed that is not in the log after healing;
- `consumed`: a service's cursor and its outputs disagree: the records of A before its cursor are not
  exactly those it transformed into B and C (appends and ack are one transaction).

Records: in A `{"w": writer, "s": seq}`; in B and C `{"tx": txid, "svc": cursor, "src": [w, s],
"out": "B"|"C"}`. Positions are `[ledger_id, entry_id]`, compared as tuples (a log's ledger ids grow).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Pos = tuple[int, int]
RecordId = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class Anomaly:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


@dataclasses.dataclass(frozen=True)
class Stored:
    """A record read back after healing: its position in its log and its decoded value (None: not ours)."""

    position: Pos
    value: Mapping[str, Any] | None


@dataclasses.dataclass(frozen=True)
class Observed:
    """What the cluster holds after healing: log A (producers), B and C (services' outputs), the cursors."""

    a: Sequence[Stored]
    b: Sequence[Stored]
    c: Sequence[Stored]
    cursors: Mapping[str, Pos | None]
    services: frozenset[str] = frozenset()        # the cursors of consume-transform-produce services


@dataclasses.dataclass(frozen=True)
class Op:
    """An invoked operation and how it ended: ok, fail or info (no completion seen: info)."""

    invoke: Mapping[str, Any]
    outcome: str


def operations(events: Iterable[Mapping[str, Any]]) -> dict[str, Op]:
    """Each invoked operation (by its `op` id) with its outcome; completions without an invoke ignored."""
    invokes: dict[str, Mapping[str, Any]] = {}
    ends: dict[str, str] = {}
    for event in events:
        op = event.get("op")
        if not isinstance(op, str):
            continue
        if event.get("type") == "invoke":
            invokes[op] = event
        elif event.get("type") in ("ok", "fail", "info"):
            ends[op] = str(event["type"])
    return {op: Op(inv, ends.get(op, "info")) for op, inv in invokes.items()}


def _pos(raw: Any) -> Pos | None:
    return None if raw is None else (int(raw[0]), int(raw[1]))


def _rid(raw: Any) -> RecordId:
    return (str(raw[0]), int(raw[1]))


def a_ids(a: Sequence[Stored]) -> list[tuple[RecordId, Pos]]:
    return [((str(r.value["w"]), int(r.value["s"])), r.position) for r in a
            if r.value is not None and "w" in r.value]


def check_sends(ops: Mapping[str, Op], a: Sequence[Stored]) -> list[Anomaly]:
    """lost / failed-visible / duplicate / phantom / order in log A."""
    found = a_ids(a)
    counts = Counter(rid for rid, _ in found)
    out = [Anomaly("duplicate", f"record {rid} is {n} times in A") for rid, n in counts.items() if n > 1]
    sends = {_rid(op.invoke["id"]): op for op in ops.values() if op.invoke.get("f") == "send"}
    for rid, op in sorted(sends.items()):
        if op.outcome == "ok" and rid not in counts:
            out.append(Anomaly("lost", f"send {rid} was acknowledged (op {op.invoke['op']}) but is not in A"))
        if op.outcome == "fail" and rid in counts:
            out.append(Anomaly("failed-visible", f"send {rid} failed (op {op.invoke['op']}) but is in A"))
    out += [Anomaly("phantom", f"record {rid} in A was never sent") for rid in counts if rid not in sends]
    return out + producer_order(found)


def producer_order(found: Sequence[tuple[RecordId, Pos]]) -> list[Anomaly]:
    """Each writer's records in A in its sequence order."""
    last: dict[str, tuple[int, Pos]] = {}
    out = []
    for (writer, seq), pos in sorted(found, key=lambda item: item[1]):
        before = last.get(writer)
        if before is not None and before[0] > seq:
            out.append(Anomaly("order", f"writer {writer}: seq {seq} at {pos} follows seq {before[0]} at "
                                        f"{before[1]}"))
        last[writer] = (seq, pos) if before is None or seq > before[0] else before
    return out


def _outputs(log: Sequence[Stored], out_name: str) -> dict[str, list[tuple[str, RecordId]]]:
    """A service output log's records grouped by transaction: (service cursor, source record) each."""
    by_tx: dict[str, list[tuple[str, RecordId]]] = defaultdict(list)
    for record in log:
        if record.value is not None and record.value.get("out") == out_name:
            by_tx[str(record.value["tx"])].append((str(record.value["svc"]), _rid(record.value["src"])))
    return by_tx


def check_transactions(ops: Mapping[str, Op], b: Sequence[Stored], c: Sequence[Stored]) -> list[Anomaly]:
    """lost / failed-visible / torn / phantom / duplicate over the services' transactions in B and C."""
    got = {"B": _outputs(b, "B"), "C": _outputs(c, "C")}
    txns = {str(op.invoke["txid"]): op for op in ops.values() if op.invoke.get("f") == "txn"}
    out = []
    for out_name, by_tx in got.items():
        counts = Counter((svc, rid) for items in by_tx.values() for svc, rid in items)
        out += [Anomaly("duplicate", f"{out_name} holds the transform of {rid} by {svc} {n} times")
                for (svc, rid), n in counts.items() if n > 1]
        out += [Anomaly("phantom", f"{out_name} holds records of transaction {tx} that was never invoked")
                for tx in by_tx if tx not in txns]
    for txid, op in sorted(txns.items()):
        want = sorted((str(op.invoke["cursor"]), _rid(s)) for s in op.invoke["src"])
        seen = {name: sorted(got[name].get(txid, [])) for name in got}
        whole = {name: items == want for name, items in seen.items()}
        none = {name: not items for name, items in seen.items()}
        if not (all(whole.values()) or all(none.values())):
            out.append(Anomaly("torn", f"transaction {txid} ({op.outcome}): {len(want)} records invoked, B "
                                       f"holds {len(seen['B'])}, C holds {len(seen['C'])}"))
        elif op.outcome == "ok" and not all(whole.values()):
            out.append(Anomaly("lost", f"transaction {txid} was acknowledged but B and C do not hold it"))
        elif op.outcome == "fail" and not all(none.values()):
            out.append(Anomaly("failed-visible", f"transaction {txid} failed but B and C hold its records"))
    return out


def check_cursors(events: Iterable[Mapping[str, Any]], observed: Observed) -> list[Anomaly]:
    """cursor-ahead and dirty-read: what each consumer recorded as processed (before it acknowledged).
    A cursor at P acknowledges the records before P: each of them must be one its consumers processed
    (a new cursor stands at the first record it will read, acknowledging nothing)."""
    processed: dict[str, set[RecordId]] = defaultdict(set)
    found = a_ids(observed.a)
    in_a = {rid for rid, _ in found}
    out = []
    for event in events:
        if event.get("f") != "process" or event.get("type") != "ok":
            continue
        cursor, ids = str(event["cursor"]), [_rid(raw) for raw in event.get("ids", [])]
        processed[cursor].update(ids)
        out += [Anomaly("dirty-read", f"{event['worker']} (cursor {cursor}) processed {rid}, which A does not "
                                      "hold") for rid in ids if rid not in in_a]
    for cursor, pos in sorted(observed.cursors.items()):
        ahead = [(p, rid) for rid, p in found if pos is not None and p < pos and rid not in processed[cursor]]
        if ahead:
            out.append(Anomaly("cursor-ahead", f"cursor {cursor} is at {pos}, past {len(ahead)} records its "
                                               f"consumers never processed (the first {ahead[0][1]} at "
                                               f"{ahead[0][0]})"))
    return out


def check_consumed(observed: Observed) -> list[Anomaly]:
    """Each service's cursor and outputs agree: the A records before its cursor are exactly the sources
    it transformed into B, and into C (appends and ack commit in one transaction)."""
    out = []
    for svc in sorted(observed.services):
        cursor = observed.cursors.get(svc)
        below = {rid for rid, pos in a_ids(observed.a) if cursor is not None and pos < cursor}
        for name, log in (("B", observed.b), ("C", observed.c)):
            done = {rid for items in _outputs(log, name).values() for s, rid in items if s == svc}
            missing, extra = sorted(below - done), sorted(done - below)
            if missing or extra:
                out.append(Anomaly("consumed", f"service {svc} (cursor at {cursor}): {name} lacks "
                                               f"{missing[:5]} ({len(missing)}) and holds {extra[:5]} "
                                               f"({len(extra)}) beyond it"))
    return out


def check(events: Sequence[Mapping[str, Any]], observed: Observed) -> list[Anomaly]:
    """Every anomaly of the run (empty: the histories and the cluster agree)."""
    ops = operations(events)
    return [*check_sends(ops, observed.a), *check_transactions(ops, observed.b, observed.c),
            *check_cursors(events, observed), *check_consumed(observed)]


def summary(events: Sequence[Mapping[str, Any]]) -> dict[str, Counter[str]]:
    """How many operations of each kind ended ok / fail / info (to show the run was not vacuous)."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for op in operations(events).values():
        out[str(op.invoke.get("f"))][op.outcome] += 1
    return dict(out)
