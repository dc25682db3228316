"""Pure log metadata transforms (R27-R30): append, seal, truncate, retention, markers, validation."""

from __future__ import annotations

import itertools

import pytest

from bkledger.client.errors import InvalidLogUpdateError, InvalidPositionError
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core.meta import LogMetadata, Position


def log_with(*spec: tuple[int, int | None, int | None], name: str = "orders") -> LogMetadata:
    """A log whose ledgers are (ledger_id, last_entry_id or None if open, size), sealed in order."""
    meta = lm.new_log(name, 1000)
    for ledger_id, last, size in spec:
        meta = lm.with_ledger_appended(meta, ledger_id, 1000 + ledger_id)
        if last is not None:
            meta = lm.with_ledger_sealed(meta, ledger_id, last, size or 0, 2000 + ledger_id)
    return meta


def test_position_total_order():
    """Positions order by ledger id, then entry id, and parse from LEDGER:ENTRY."""
    positions = [Position(lid, e) for lid, e in itertools.product([3, 1, 7], [5, 0, 2])]
    ordered = sorted(positions)
    assert ordered == sorted(positions, key=lambda p: (p.ledger_id, p.entry_id))
    assert Position(1, 99) < Position(2, 0) < Position(2, 1)
    assert Position.parse("12:3") == Position(12, 3) == Position.parse(str(Position(12, 3)))
    with pytest.raises(InvalidPositionError):
        Position.parse("12")


def test_append_fills_first_positions_once_previous_is_sealed():
    """R29: a ledger appended while the previous is open has no first position until that one closes."""
    meta = lm.with_ledger_appended(lm.new_log("l", 0), 5, 10)
    assert meta.ledgers[0].first_position == 0
    meta = lm.with_ledger_appended(meta, 9, 11)
    assert meta.ledgers[1].first_position is None
    meta = lm.with_ledger_sealed(meta, 5, 41, 420, 12)
    assert [led.first_position for led in meta.ledgers] == [0, 42]
    assert meta.ledgers[0].entries == 42 and meta.ledgers[0].size == 420 and meta.ledgers[0].sealed
    assert not meta.ledgers[1].sealed and meta.entries is None
    meta = lm.with_ledger_sealed(meta, 9, -1, 0, 13)             # an empty closed ledger
    assert meta.entries == 42 and meta.size == 420
    assert lm.with_ledger_sealed(meta, 9, 5, 1, 14) == meta      # sealed once; CLOSED is terminal


def test_ledger_ids_must_strictly_increase():
    """A log's ledger list is strictly increasing; an update that breaks this is refused."""
    meta = log_with((4, 1, 10))
    for bad in (4, 3):
        with pytest.raises(InvalidLogUpdateError):
            lm.with_ledger_appended(meta, bad, 0)
    with pytest.raises(InvalidLogUpdateError):
        lm.with_sealed_ledgers_appended(meta, [(8, 0, 1, 0), (7, 0, 1, 0)], 0)


def test_sealed_ledgers_appended_with_marker():
    """Spark sink commit: closed ledgers and the batch marker in one new value; a replay is detected."""
    meta = log_with((1, 9, 100))
    new = lm.with_batch_marker(lm.with_sealed_ledgers_appended(meta, [(5, 4, 50, 0), (6, 0, 7, 0)], 99), "q", 3)
    assert new.ledger_ids == [1, 5, 6]
    assert [led.first_position for led in new.ledgers] == [0, 10, 15]
    assert new.entries == 16 and new.size == 157
    assert lm.batch_committed(new, "q", 3) and lm.batch_committed(new, "q", 2)
    assert not lm.batch_committed(new, "q", 4) and not lm.batch_committed(new, "other", 0)


def test_encode_decode_roundtrip_keeps_unknown_keys():
    """JSON round trip; unknown top-level keys survive (a newer writer's fields are not lost)."""
    meta = lm.with_retention(lm.with_batch_marker(log_with((1, 9, 100), (2, None, None)), "q", 7), 3600.0, 10)
    back = lm.decode("orders", lm.encode(meta))
    assert back == meta
    import json

    raw = json.loads(lm.encode(meta))
    raw["future_field"] = {"x": 1}
    again = lm.decode("orders", json.dumps(raw).encode())
    assert again.extra == {"future_field": {"x": 1}}
    assert json.loads(lm.encode(again))["future_field"] == {"x": 1}


@pytest.mark.parametrize("data", [b"{not json", b"[1,2]", b'{"format": 99}',
                                  b'{"ledgers": [{"ledger_id": 3}, {"ledger_id": 2}]}'])
def test_decode_rejects_bad_data(data: bytes):
    with pytest.raises(ValueError):
        lm.decode("x", data)


def test_truncate_drops_whole_ledgers_before_position_never_the_last():
    """R30: only ledgers entirely before the position go; the last ledger always stays."""
    meta = log_with((1, 9, 10), (2, 9, 10), (3, 9, 10), (4, None, None))
    new, dropped = lm.truncated_before(meta, Position(3, 5))
    assert dropped == [1, 2] and new.ledger_ids == [3, 4]
    assert new.ledgers[0].first_position == 20                   # offsets stay stable after truncation
    same, none = lm.truncated_before(meta, Position(1, 9))
    assert none == [] and same == meta
    _, all_but_last = lm.truncated_before(meta, Position(4, 0))
    assert all_but_last == [1, 2, 3]
    with pytest.raises(InvalidPositionError):
        lm.truncated_before(meta, Position(5, 0))


def test_retention_by_size_and_age():
    """Retention drops sealed ledgers from the front only, never an open one, never the last."""
    meta = log_with((1, 9, 100), (2, 9, 100), (3, 9, 100), (4, None, None))
    by_size = lm.with_retention(meta, None, 150)
    new, dropped = lm.retention_cut(by_size, now_ms=10**9)
    assert dropped == [1] and new.size == 200                    # what is left still holds >= 150 bytes
    by_age = lm.with_retention(meta, 1.0, None)                  # closed at 2001..2003 ms
    assert lm.retention_cut(by_age, now_ms=2500)[1] == []
    assert lm.retention_cut(by_age, now_ms=3002)[1] == [1]
    assert lm.retention_cut(by_age, now_ms=10**6)[1] == [1, 2, 3]
    open_middle = log_with((1, 9, 100), (2, None, None), (3, None, None))
    assert lm.retention_cut(lm.with_retention(open_middle, 0.0, 0), 10**9)[1] == [1]
    assert lm.retention_cut(meta, 10**9)[1] == []                # no policy, no cut
    with pytest.raises(InvalidLogUpdateError):
        lm.with_retention(meta, -1.0, None)


def test_same_tail_is_the_writer_ownership_rule():
    """R28: a writer's CAS may be retried after truncation, never after someone appended a ledger."""
    before = log_with((1, 9, 10), (2, None, None))
    truncated, _ = lm.truncated_before(before, Position(2, 0))
    assert lm.same_tail(before, truncated)
    assert lm.same_tail(before, lm.with_ledger_sealed(before, 2, 3, 4, 5))
    assert not lm.same_tail(before, lm.with_ledger_appended(before, 3, 0))
    assert not lm.same_tail(lm.new_log("x", 0), lm.with_ledger_appended(lm.new_log("x", 0), 0, 0))


def test_check_start_and_next_ledger():
    meta = log_with((3, 9, 10), (5, 9, 10), (8, None, None))
    assert lm.check_start(meta, Position(5, 2)) == "ok"
    assert lm.check_start(meta, Position(1, 0)) == "truncated"
    for bad in (Position(4, 0), Position(9, 0), Position(5, -1)):
        with pytest.raises(InvalidPositionError):
            lm.check_start(meta, bad)
    assert [lm.next_ledger(meta, x) for x in (0, 3, 4, 5, 8)] == [3, 5, 5, 8, None]
    assert lm.earliest(meta) == Position(3, 0) and lm.earliest(lm.new_log("e", 0)) is None


def test_lost_after_detects_skipped_ledgers():
    """A reader that finished ledger 1 loses data if ledger 2 (that it knew of) or offsets vanished."""
    old = log_with((1, 9, 10), (2, 9, 10), (3, None, None))
    assert not lm.lost_after(old, old, 1, 10)
    cut_2, _ = lm.truncated_before(old, Position(2, 0))          # only ledger 1 (read already) dropped
    assert not lm.lost_after(old, cut_2, 1, 10)
    cut_3, _ = lm.truncated_before(old, Position(3, 0))          # ledger 2 dropped too
    assert lm.lost_after(old, cut_3, 1, 10)
    only_1 = log_with((1, 9, 10))                                # the reader never saw ledger 2 listed
    assert lm.lost_after(only_1, cut_3, 1, 10)                   # ledger 3 starts at offset 20 > 10
    assert not lm.lost_after(only_1, cut_3, 1, None)             # unknown offsets: cannot tell
