"""The pure rules of cursors held by the cluster (`client.log.core.cursors`, issue 44 item 3): what
retention may delete given the cursors and the quota, lag, and the cursor znode's form."""

from __future__ import annotations

import pytest

from bkledger.client.errors import InvalidLogNameError
from bkledger.client.log.core import cursors as cc
from bkledger.client.log.core.meta import LogLedger, LogMetadata, Position


def meta(*sizes: int | None) -> LogMetadata:
    """Ledgers 10, 20, 30, ... of 10 entries each and the given sizes (None: open, not sealed)."""
    ledgers = tuple(LogLedger(10 * (i + 1), created_ms=1000 * (i + 1), first_position=10 * i,
                              entries=None if s is None else 10, size=s,
                              closed_ms=None if s is None else 1000 * (i + 2))
                    for i, s in enumerate(sizes))
    return LogMetadata("orders", 0, ledgers)


def at(name: str, ledger: int | None, entry: int = 0) -> cc.CursorState:
    return cc.CursorState(name, None if ledger is None else Position(ledger, entry))


def test_no_cursor_retention_keeps_its_cut():
    assert cc.held_cut(meta(100, 100, 100, None), 3, [], None) == cc.Cut(3, {}, ())


def test_cursor_holds_the_ledger_it_is_in_and_after():
    cut = cc.held_cut(meta(100, 100, 100, None), 3, [at("billing", 20, 5)], None)
    assert cut.count == 1 and cut.holders == ("billing",) and not cut.lost


def test_cursor_at_the_end_of_a_ledger_releases_it():
    """Position(20, 10) is past ledger 20's last entry (9): ledger 20 is fully acknowledged."""
    assert cc.held_cut(meta(100, 100, 100, None), 3, [at("billing", 20, 10)], None).count == 2
    assert cc.held_cut(meta(100, 100, 100, None), 3, [at("billing", 20, 9)], None).count == 1


def test_new_cursor_holds_everything_and_slowest_cursor_wins():
    assert cc.held_cut(meta(100, 100, None), 2, [at("new", None)], None).count == 0
    cut = cc.held_cut(meta(100, 100, 100, None), 3, [at("fast", 40), at("slow", 10, 3)], None)
    assert cut.count == 0 and cut.holders == ("slow",)


def test_over_quota_cursor_is_sacrificed_and_reported_lost():
    """Lag of a cursor at 10:0 is 300 sealed bytes > quota 250: it no longer holds; the ledgers deleted
    that it had not acknowledged are named."""
    cut = cc.held_cut(meta(100, 100, 100, None), 3, [at("slow", 10, 0)], 250)
    assert cut.count == 3 and cut.lost == {"slow": (10, 20, 30)}
    assert cc.held_cut(meta(100, 100, 100, None), 3, [at("slow", 10, 0)], 300).count == 0


def test_sacrificed_cursor_loses_only_what_is_actually_cut():
    """Another cursor within quota still holds ledger 20: the slow one loses only ledger 10."""
    cut = cc.held_cut(meta(100, 100, 100, None), 3, [at("slow", 10, 0), at("ok", 20, 0)], 250)
    assert cut.count == 1 and cut.lost == {"slow": (10,)} and cut.holders == ("ok",)


def test_lost_or_stale_cursor_holds_nothing():
    lost = cc.CursorState("gone", Position(10, 0), lost=cc.Lost((5,), 1, "retention"))
    assert cc.held_cut(meta(100, 100, None), 2, [lost], None).count == 2
    stale = cc.held_cut(meta(100, 100, None), 2, [at("stale", 5, 0)], None)
    assert stale.count == 2 and stale.lost == {"stale": ()}


def test_last_ledger_never_cut():
    assert cc.cut_front(meta(100, 100), 5)[1] == [10]
    assert cc.held_cut(meta(100, 100), 2, [], None).count == 1


def test_lag_entries_bytes_seconds():
    m = meta(100, 100, None)                    # ledger 30 open, 4 entries readable
    lag = cc.lag(m, Position(10, 5), 4, now_ms=10_000)
    assert lag.entries == 5 + 10 + 4
    assert lag.bytes == 50 + 100 + 40          # open ledger at the sealed average (10 bytes an entry)
    assert lag.seconds == 9.0                  # since ledger 10 was created (1000 ms)
    at_tail = cc.lag(m, Position(30, 4), 4, now_ms=10_000)
    assert at_tail == cc.Lag(0, 0, 0.0)
    assert cc.lag(m, None, 4, 10_000).entries == 24


def test_cursor_znode_roundtrip_and_garbage():
    state = cc.CursorState("billing", Position(12, 3), 99, cc.Lost((1, 2), 5, "retention"))
    assert cc.decode_cursor("billing", cc.encode_cursor(state)) == state
    assert cc.decode_cursor("b", cc.encode_cursor(cc.CursorState("b"))) == cc.CursorState("b")
    with pytest.raises(ValueError, match="does not hold a cursor"):
        cc.decode_cursor("billing", b"not json")
    assert cc.decode_policy(cc.encode_policy(1 << 30)) == 1 << 30 and cc.decode_policy(b"") is None


def test_cursor_names_checked_like_log_names():
    assert cc.check_cursor_name("billing-v2") == "billing-v2"
    with pytest.raises(InvalidLogNameError, match="cursor name") as info:
        cc.check_cursor_name("a/b")
    assert info.value.reason == "slash"
    for bad in ("", "..", "x\x00"):
        with pytest.raises(InvalidLogNameError):
            cc.check_cursor_name(bad)


def test_quota_values():
    assert cc.check_quota(None) is None and cc.check_quota(0) == 0
    for bad in (-1, True, 1.5, "10"):
        with pytest.raises(ValueError):
            cc.check_quota(bad)
