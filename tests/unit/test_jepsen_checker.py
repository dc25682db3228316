"""The Jepsen-style checker (`tests.integration.jepsen.checker`, issue 44 item 5) on hand-made histories:
a clean run passes, and each anomaly (lost, failed-visible, duplicate, phantom, order, torn, cursor-ahead,
dirty-read, consumed) is caught; an ambiguous outcome (info, or an invoke never completed) is never
counted as lost nor as failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jepsen import checker
from tests.integration.jepsen.checker import Observed, Stored
from tests.integration.jepsen.history import History, read_histories

Event = dict[str, Any]


def send(writer: str, seq: int, outcome: str | None = "ok") -> list[Event]:
    op = f"{writer}.{seq}"
    out: list[Event] = [{"worker": writer, "type": "invoke", "f": "send", "op": op, "id": [writer, seq]}]
    return out + ([{"type": outcome, "f": "send", "op": op}] if outcome else [])


def txn(txid: str, cursor: str, src: list[tuple[str, int]], ack: tuple[int, int], outcome: str | None = "ok",
        processed: bool = True) -> list[Event]:
    ids = [list(s) for s in src]
    out: list[Event] = [{"worker": cursor, "type": "ok", "f": "process", "cursor": cursor, "pos": list(ack),
                         "ids": ids}] if processed else []
    out.append({"type": "invoke", "f": "txn", "op": txid, "txid": txid, "cursor": cursor, "src": ids,
                "ack": list(ack)})
    return out + ([{"type": outcome, "f": "txn", "op": txid}] if outcome else [])


def a_log(*ids: tuple[str, int], ledger: int = 10) -> list[Stored]:
    return [Stored((ledger, i), {"w": w, "s": s}) for i, (w, s) in enumerate(ids)]


def outputs(out: str, *items: tuple[str, str, tuple[str, int]], ledger: int = 20) -> list[Stored]:
    return [Stored((ledger, i), {"tx": tx, "svc": svc, "src": list(src), "out": out})
            for i, (tx, svc, src) in enumerate(items)]


A3 = (("p0.1", 0), ("p0.1", 1), ("p1.1", 0))


def clean_world() -> tuple[list[Event], Observed]:
    """Three sends acknowledged; svc0 transformed the first two in one transaction and acked past them."""
    events = [*send("p0.1", 0), *send("p0.1", 1), *send("p1.1", 0),
              *txn("t1", "svc0", [A3[0], A3[1]], (10, 2))]
    both = [("t1", "svc0", A3[0]), ("t1", "svc0", A3[1])]
    return events, Observed(a_log(*A3), outputs("B", *both), outputs("C", *both), {"svc0": (10, 2)},
                            frozenset({"svc0"}))


def kinds(events: list[Event], observed: Observed) -> list[str]:
    return sorted({a.kind for a in checker.check(events, observed)})


def replaced(observed: Observed, **changes: Any) -> Observed:
    fields = {"a": observed.a, "b": observed.b, "c": observed.c, "cursors": observed.cursors,
              "services": observed.services, **changes}
    return Observed(**fields)


def test_a_clean_run_has_no_anomaly():
    assert kinds(*clean_world()) == []


def test_an_acknowledged_send_missing_is_lost():
    events, observed = clean_world()
    assert kinds(events, replaced(observed, a=a_log(*A3[:2]))) == ["lost"]


def test_ambiguous_sends_are_never_lost_nor_failed():
    """info, and an invoke with no completion (the worker was killed), may or may not be in the log."""
    events, observed = clean_world()
    events += [*send("p2.1", 0, "info"), *send("p2.1", 1, None)]
    assert kinds(events, observed) == []
    assert kinds(events, replaced(observed, a=a_log(*A3, ("p2.1", 0), ("p2.1", 1)))) == []


def test_a_failed_send_that_is_visible_is_caught():
    events, observed = clean_world()
    events += send("p2.1", 0, "fail")
    assert kinds(events, observed) == []
    assert kinds(events, replaced(observed, a=a_log(*A3, ("p2.1", 0)))) == ["failed-visible"]


def test_a_record_twice_is_a_duplicate_and_one_never_sent_a_phantom():
    events, observed = clean_world()
    assert kinds(events, replaced(observed, a=a_log(*A3, ("p1.1", 0)))) == ["duplicate"]
    assert kinds(events, replaced(observed, a=a_log(*A3, ("p9.1", 0)))) == ["phantom"]


def test_a_producers_records_out_of_sequence_order_are_caught():
    events, observed = clean_world()
    swapped = a_log(A3[1], A3[0], A3[2])
    found = checker.check(events, replaced(observed, a=swapped, cursors={"svc0": None}, services=frozenset()))
    assert [a.kind for a in found] == ["order"] and "p0.1" in found[0].detail


@pytest.mark.parametrize("outcome, kind", [("ok", "lost"), ("info", None), (None, None)])
def test_a_transaction_absent_from_b_and_c(outcome: str | None, kind: str | None):
    """Absent everywhere: lost if acknowledged; fine if its outcome is unknown (all-or-nothing holds)."""
    events = [*send("p0.1", 0), *txn("t1", "svc0", [("p0.1", 0)], (10, 1), outcome)]
    observed = Observed(a_log(("p0.1", 0)), [], [], {"svc0": None}, frozenset())
    assert kinds(events, observed) == ([kind] if kind else [])


def test_a_failed_transaction_that_is_visible_is_caught():
    events = [*send("p0.1", 0), *txn("t1", "svc0", [("p0.1", 0)], (10, 1), "fail")]
    item = ("t1", "svc0", ("p0.1", 0))
    observed = Observed(a_log(("p0.1", 0)), outputs("B", item), outputs("C", item), {"svc0": None}, frozenset())
    assert kinds(events, observed) == ["failed-visible"]


@pytest.mark.parametrize("outcome", ["ok", "info", "fail", None])
def test_a_transaction_in_b_and_not_c_or_partly_is_torn(outcome: str | None):
    events = [*send("p0.1", 0), *send("p0.1", 1), *txn("t1", "svc0", [("p0.1", 0), ("p0.1", 1)], (10, 2),
                                                        outcome)]
    first, second = ("t1", "svc0", ("p0.1", 0)), ("t1", "svc0", ("p0.1", 1))
    a = a_log(("p0.1", 0), ("p0.1", 1))
    b_only = Observed(a, outputs("B", first, second), [], {"svc0": None}, frozenset())
    partly = Observed(a, outputs("B", first), outputs("C", first), {"svc0": None}, frozenset())
    assert kinds(events, b_only) == ["torn"]
    assert kinds(events, partly) == ["torn"]


def test_a_transform_twice_in_an_output_is_a_duplicate():
    events, observed = clean_world()
    events += txn("t2", "svc0", [A3[1]], (10, 2))
    again = ("t2", "svc0", A3[1])
    both = [("t1", "svc0", A3[0]), ("t1", "svc0", A3[1]), again]
    found = kinds(events, replaced(observed, b=outputs("B", *both), c=outputs("C", *both)))
    assert "duplicate" in found and "consumed" not in found


def test_a_cursor_ahead_of_what_its_consumer_processed_is_caught():
    """A cursor past records its consumer never recorded as processed; a new cursor standing at the first
    record (acknowledging nothing) is not ahead."""
    events, observed = clean_world()
    assert kinds(events, replaced(observed, cursors={"svc0": (10, 3)}, services=frozenset())) == ["cursor-ahead"]
    reader = [{"worker": "rd0", "type": "ok", "f": "process", "cursor": "rd0", "pos": [10, 1],
               "ids": [list(A3[0])]}]
    assert kinds(events + reader, replaced(observed, cursors={**observed.cursors, "rd0": (10, 1)})) == []
    assert kinds(events + reader, replaced(observed, cursors={**observed.cursors, "rd0": (11, 0)})) == \
        ["cursor-ahead"]
    assert kinds(events, replaced(observed, cursors={**observed.cursors, "rd0": (10, 0)})) == []
    assert kinds(events, replaced(observed, cursors={**observed.cursors, "rd0": (10, 1)})) == ["cursor-ahead"]


def test_a_processed_record_that_the_log_does_not_hold_is_a_dirty_read():
    events, observed = clean_world()
    events.append({"worker": "rd0", "type": "ok", "f": "process", "cursor": "rd0", "pos": [10, 4],
                   "ids": [["p7.1", 0]]})
    assert kinds(events, observed) == ["dirty-read"]


def test_a_service_whose_cursor_and_outputs_disagree_is_caught():
    """Cursor past a record it never transformed (ack without its appends), or outputs of a record
    beyond its cursor (appends without their ack)."""
    events, observed = clean_world()
    events.append({"worker": "svc0", "type": "ok", "f": "process", "cursor": "svc0", "pos": [10, 3],
                   "ids": [list(A3[2])]})
    assert kinds(events, replaced(observed, cursors={"svc0": (10, 3)})) == ["consumed"]
    assert kinds(events, replaced(observed, cursors={"svc0": (10, 1)})) == ["consumed"]


def test_histories_survive_a_torn_last_line(tmp_path: Path):
    """A worker killed mid-write leaves a partial last line: it is skipped, the rest is read."""
    path = tmp_path / "w.jsonl"
    hist = History(path, "p0", 1)
    hist.write("invoke", "send", op="p0.1.0", id=["p0.1", 0])
    hist.close()
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"type": "ok", "op": "p0.1.0"})[:10])
    events = read_histories([path, tmp_path / "missing.jsonl"])
    assert [e["type"] for e in events] == ["invoke"]
    assert checker.operations(events)["p0.1.0"].outcome == "info"
