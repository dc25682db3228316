"""The segmented stored form of a log (client.log.core.stored): a million ledgers, bounded commits, conversion."""

from __future__ import annotations

import dataclasses

import pytest

from bkledger.client.errors import InvalidLogUpdateError
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import stored as st
from bkledger.client.log.core.meta import LogLedger, LogMetadata, Position


def sealed(ledger_id: int, first: int, entries: int = 1) -> LogLedger:
    return LogLedger(ledger_id, 1000, first, entries, 100 * entries, 2000)


def big_log(count: int, name: str = "big") -> LogMetadata:
    return dataclasses.replace(lm.new_log(name, 1), ledgers=tuple(sealed(i + 1, i) for i in range(count)))


def store_all(change: st.StoredChange) -> dict[int, bytes]:
    """The segment znodes a fresh store holds after a conversion."""
    return {**change.creates, **change.writes}


def tail_window(head_bytes: bytes, segments: dict[int, bytes], whole: bool = False) -> st.Window:
    """What a driver loads: the head, then segments from window_start on."""
    base, head = st.decode_head(base_name(head_bytes), head_bytes)
    assert head is not None
    numbers = range(st.window_start(head, whole), head.last + 1)
    return st.assemble(base, head, [(n, st.decode_segment("big", n, segments[n])) for n in numbers])


def base_name(head_bytes: bytes) -> str:
    return "big"


def apply(segments: dict[int, bytes], change: st.StoredChange) -> dict[int, bytes]:
    out = type(segments)(segments)
    out.update(change.writes)
    for n, data in change.creates.items():
        assert n not in segments, f"segment {n} created twice"
        out[n] = data
    for n in change.deletes:
        del out[n]
    return out


def commit_bytes(change: st.StoredChange) -> int:
    return len(change.head) + sum(map(len, change.writes.values())) + sum(map(len, change.creates.values()))


class MillionSegments(dict):
    """The segments of a stored log of 1,000,000 sealed one-entry ledgers (ids 1..1,000,000), each made
    when first read: a commit reads only the last one, so the test need not build all of them."""

    def __missing__(self, number: int) -> bytes:
        lo = number * st.SEGMENT_LEDGERS
        hi = min(lo + st.SEGMENT_LEDGERS, 1_000_000)
        data = st.encode_segment([sealed(i + 1, i) for i in range(lo, hi)])
        self[number] = data
        return data


@pytest.fixture
def million() -> tuple[bytes, dict[int, bytes]]:
    last = -(-1_000_000 // st.SEGMENT_LEDGERS) - 1
    head = st.Head("s0", 0, last, 1_000_000)
    base = dataclasses.replace(lm.new_log("big", 1), ledgers=(sealed(1_000_000, 999_999),))
    return st.encode_head(base, head), MillionSegments()


def test_million_ledger_log_loads_its_tail_only(million):
    """A commit at 1,000,000 ledgers loads the head and the last segment: 1,000,000 - 64 come before."""
    head_bytes, segments = million
    window = tail_window(head_bytes, segments)
    assert [n for n, _ in window.segments] == [3906] and len(segments) == 1
    assert window.meta.first_index == 1_000_000 - 64 and window.meta.ledgers[-1] == sealed(1_000_000, 999_999)
    assert len(head_bytes) < 1024


def test_commit_bytes_do_not_grow_with_the_log(million):
    """Appending at 1,000,000 ledgers writes what appending at 1,000 does: the head and the last segment."""
    def commit_cost(head_bytes: bytes, segments: dict[int, bytes]) -> tuple[int, int]:
        window = tail_window(head_bytes, segments)
        last = window.meta.ledgers[-1]
        new = lm.with_batch_marker(lm.with_sealed_ledgers_appended(
            window.meta, [(last.ledger_id + 1, 0, 10, 5)], 9), "q", 1)
        change = st.change(window, new, "unused")
        return commit_bytes(change), len(change.writes) + len(change.creates)

    small = st.change(st.Window(big_log(1_000)), big_log(1_000), "s0")
    small_cost, small_touched = commit_cost(small.head, store_all(small))
    big_cost, big_touched = commit_cost(*million)
    assert small_touched == big_touched == 1
    assert big_cost <= small_cost * 1.5 + 1024, (small_cost, big_cost)


def test_beyond_a_million_ledgers(million):
    """300 more commits on a 1,000,000-ledger log: the last segment fills, the next starts; counts and
    first positions stay right and each commit touches one segment."""
    head_bytes, segments = million
    for i in range(300):
        window = tail_window(head_bytes, segments)
        new = lm.with_sealed_ledgers_appended(window.meta, [(1_000_001 + i, 1, 20, 5)], 9)
        change = st.change(window, new, "unused")
        assert len(change.writes) + len(change.creates) == 1
        head_bytes, segments = change.head, apply(segments, change)
    _, head = st.decode_head("big", head_bytes)
    assert head is not None and head.count == 1_000_300 and head.last == 3907
    tail = tail_window(head_bytes, segments).meta.ledgers
    assert tail[-1].ledger_id == 1_000_300 and tail[-1].first_position == 1_000_000 + 2 * 299
    assert len(tail) == 300 - (st.SEGMENT_LEDGERS - 64)


def test_whole_log_beyond_the_old_limit_round_trips():
    """20,000 ledgers (the old one-znode form broke near 9,000) convert into segments and read back."""
    change = st.change(st.Window(big_log(20_000)), big_log(20_000), "s9")
    assert max(len(s) for s in change.creates.values()) < 64 * 1024
    window = tail_window(change.head, store_all(change), whole=True)
    assert window.meta.ledgers == big_log(20_000).ledgers


def test_appends_fill_a_segment_then_start_the_next():
    """Ledger after ledger through tail windows: segments hold SEGMENT_LEDGERS each; the whole reads back."""
    head_bytes, segments = st.encode_head(lm.new_log("big", 1), st.new_head("s1")), {}
    total = st.SEGMENT_LEDGERS * 2 + 3
    for i in range(total):
        window = tail_window(head_bytes, segments)
        new = lm.with_ledger_appended(window.meta, i + 1, 5)
        new = lm.with_ledger_sealed(new, i + 1, 0, 7, 6)
        change = st.change(window, new, "unused")
        assert len(change.writes) + len(change.creates) == 1
        head_bytes, segments = change.head, apply(segments, change)
    assert sorted(segments) == [0, 1, 2]
    whole = tail_window(head_bytes, segments, whole=True).meta
    assert whole.ledger_ids == list(range(1, total + 1))
    assert [led.first_position for led in whole.ledgers] == list(range(total))


def test_open_ledger_keeps_its_segment_in_the_commit_window():
    """A ledger not yet recorded as sealed, in an earlier segment, is loaded with the tail and sealed there;
    first positions after it are filled in across the segment boundary."""
    meta = lm.new_log("big", 1)
    for i in range(st.SEGMENT_LEDGERS - 1):
        meta = lm.with_sealed_ledgers_appended(meta, [(i + 1, 0, 1, 1)], 2)
    meta = lm.with_ledger_appended(meta, 1000, 3)                  # open, last of segment 0
    conv = st.change(st.Window(meta), meta, "s2")
    head_bytes, segments = conv.head, store_all(conv)
    window = tail_window(head_bytes, segments)
    change = st.change(window, lm.with_ledger_appended(window.meta, 1001, 4), "x")   # goes to segment 1
    head_bytes, segments = change.head, apply(segments, change)
    window = tail_window(head_bytes, segments)
    assert [n for n, _ in window.segments] == [0, 1]               # segment 0 holds the open ledger 1000
    sealed_meta = lm.with_ledger_sealed(window.meta, 1000, 4, 50, 5)
    change = st.change(window, sealed_meta, "x")
    whole = tail_window(change.head, apply(segments, change), whole=True).meta
    assert whole.ledger(1000).entries == 5 and whole.ledger(1001).first_position == st.SEGMENT_LEDGERS - 1 + 5
    _, head = st.decode_head("big", change.head)
    assert head is not None and head.open == {1001: 1}


def test_truncation_deletes_whole_segments_from_the_front():
    conv = st.change(st.Window(big_log(1000)), big_log(1000), "s3")
    window = tail_window(conv.head, store_all(conv), whole=True)
    cut, dropped = lm.truncated_before(window.meta, Position(600, 0))
    change = st.change(window, cut, "x")
    assert change.deletes == (0, 1) and set(change.writes) == {2}
    whole = tail_window(change.head, apply(store_all(conv), change), whole=True).meta
    assert whole.ledger_ids == list(range(600, 1001)) and dropped == list(range(1, 600))


def test_format_1_reads_as_is_and_converts_on_change():
    """An old one-znode log decodes in full; the next change writes every segment under a new prefix."""
    old = lm.with_batch_marker(big_log(700), "query", 3)
    base, head = st.decode_head("big", lm.encode(old))
    assert head is None and base == old
    change = st.change(st.Window(base), lm.with_ledger_appended(base, 5000, 9), "s4")
    assert change.converting and not change.writes and sorted(change.creates) == [0, 1, 2]
    whole = tail_window(change.head, change.creates, whole=True).meta
    assert whole.ledger_ids == [*range(1, 701), 5000] and whole.committed_batches == {"query": 3}


def test_ledgers_out_of_order_are_refused():
    conv = st.change(st.Window(big_log(10)), big_log(10), "s5")
    window = tail_window(conv.head, store_all(conv))
    bad = dataclasses.replace(window.meta, ledgers=(*window.meta.ledgers, sealed(3, 99)))
    with pytest.raises(InvalidLogUpdateError):
        st.change(window, bad, "x")


def test_the_logs_own_key_survives_the_stored_forms():
    """Issue 41 item 4: a log's own key (given by the driver at creation) is kept in its head, read back
    as bytes, kept by every later change, and is what its ledgers get when no password is given; a log
    without one (made before keys) gives the empty password, and a given password always wins."""
    key = bytes(range(20))
    meta = lm.new_log("keyed", 1, key)
    head = st.encode_head(meta, st.new_head("s1"))
    back, _ = st.decode_head("keyed", head)
    assert lm.log_password(back) == key
    assert lm.ledger_password(back, b"") == key and lm.ledger_password(back, b"given") == b"given"
    changed = lm.with_ledger_appended(back, 5, 2, 0)
    assert lm.log_password(changed) == key
    legacy = lm.new_log("old", 1)
    assert lm.log_password(legacy) is None and lm.ledger_password(legacy, b"") == b""
    assert lm.log_password(lm.decode("f1", lm.encode(meta))) == key     # format 1 keeps it too
    broken = dataclasses.replace(legacy, extra={lm.PASSWORD_KEY: "not hex"})
    assert lm.log_password(broken) is None
    assert lm.shown(meta)[lm.PASSWORD_KEY] == "(hidden)" and key.hex() not in str(lm.shown(meta))
    assert lm.PASSWORD_KEY not in lm.shown(legacy)
