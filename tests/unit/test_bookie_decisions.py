"""The bookie's pure request decisions (R15, R22, R24-R26) and cookie decisions, without sockets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkledger.bookie.core import decisions as d
from bkledger.bookie.core.cookie import Cookie, CookieError, decide
from bkledger.client.protocol.digest import make_digest, package_batch
from bkledger.proto import bookie_pb2 as pb

KEY = bytes(range(20))
OTHER = bytes(20)


def test_first_add_records_the_master_key():
    """R26: an unknown ledger accepts the first add and learns its master key."""
    check = d.decide_add(None, KEY, recovery_add=False, high_priority=False, read_only=False)
    assert check.status == pb.EOK and check.record_key


def test_wrong_master_key_is_eua():
    """R26: a different master key is EUA, never stored."""
    check = d.decide_add(d.LedgerView(KEY, False), OTHER, recovery_add=False, high_priority=False, read_only=False)
    assert check.status == pb.EUA


def test_fenced_ledger_refuses_all_but_recovery_adds():
    """R15: EFENCED for every non-recovery add; recovery adds pass."""
    view = d.LedgerView(KEY, True)
    assert d.decide_add(view, KEY, recovery_add=False, high_priority=False, read_only=False).status == pb.EFENCED
    assert d.decide_add(view, KEY, recovery_add=True, high_priority=True, read_only=False).status == pb.EOK


def test_read_only_refuses_normal_adds_but_not_recovery():
    """R25: EREADONLY unless high priority or recovery (re-replication)."""
    assert d.decide_add(None, KEY, recovery_add=False, high_priority=False, read_only=True).status == pb.EREADONLY
    assert d.decide_add(None, KEY, recovery_add=True, high_priority=True, read_only=True).status == pb.EOK


def test_fence_needs_the_key_and_creates_unknown_ledgers_fenced():
    """R15: fencing an unknown ledger creates it fenced; fencing needs the master key."""
    assert d.decide_fence(None, KEY) == d.FenceCheck(pb.EOK, record_key=True, newly_fenced=True)
    assert d.decide_fence(d.LedgerView(KEY, False), OTHER).status == pb.EUA
    assert d.decide_fence(d.LedgerView(KEY, True), KEY) == d.FenceCheck(pb.EOK, newly_fenced=False)
    assert d.decide_fence(d.LedgerView(KEY, False), b"short").status == pb.EBADREQ


def test_read_miss_is_negative_only_when_really_not_held():
    """R22: a held entry is EOK; a miss is ENOENTRY for a known ledger, ENOLEDGER for an unknown one."""
    assert d.decide_read(True, True) == pb.EOK
    assert d.decide_read(False, True) == pb.ENOENTRY
    assert d.decide_read(False, False) == pb.ENOLEDGER


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=20))
def test_well_formed_batches_pass_and_carry_their_max_lac(payloads):
    """R26: a batch whose headers name its ledger and entries is accepted; the highest piggy-backed LAC is found."""
    data, sizes = package_batch(make_digest("crc32c"), 7, 10, 9, 0, payloads)
    ids = list(range(10, 10 + len(payloads)))
    assert d.check_batch_shape(7, ids, sizes, len(data), 1 << 20) == ""
    assert d.check_headers(7, ids, sizes, data) == ("", 9)


def test_malformed_batches_say_why():
    """R26: every malformed shape is EBADREQ with a reason, never an exception."""
    data, sizes = package_batch(make_digest("crc32c"), 7, 0, -1, 0, [b"a", b"b"])
    assert "sizes add up" in d.check_batch_shape(7, [0, 1], [sizes[0], sizes[1] + 1], len(data), 1 << 20)
    assert "entry ids but" in d.check_batch_shape(7, [0], sizes, len(data), 1 << 20)
    assert "exceeds the limit" in d.check_batch_shape(7, [0, 1], sizes, len(data), 10)
    assert "negative" in d.check_batch_shape(-1, [0, 1], sizes, len(data), 1 << 20)
    assert "header says" in d.check_headers(8, [0, 1], sizes, data)[0]
    assert "header says" in d.check_headers(7, [5, 6], sizes, data)[0]


@pytest.mark.parametrize(
    ("usages", "now", "want"),
    [([0.5], False, False), ([0.96], False, True), ([0.92], True, True), ([0.85], True, False),
     ([0.2, 0.97], False, True)],
)
def test_disk_state_uses_threshold_and_low_water_mark(usages, now, want):
    """R25: read-only above the threshold, writable again only below the low-water mark."""
    assert d.disk_state(usages, 0.95, 0.90, now) is want


def _cookie(**kw) -> Cookie:
    base = {"bookie_id": "h:1", "journal_dir": "/j", "ledger_dirs": ("/l",), "instance_id": "i"}
    return Cookie(**{**base, **kw})


def test_cookie_round_trip_and_new_bookie():
    """R24: a new bookie with empty dirs writes its cookies everywhere."""
    c = _cookie()
    assert Cookie.decode(c.encode()) == c
    assert decide(c, None, [None, None], dirs_have_data=False).write_zk


@pytest.mark.parametrize(
    ("zk", "local", "data", "match"),
    [
        (_cookie(), [None, None], False, "wiped"),
        (None, [None, None], True, "hold data but no cookie"),
        (_cookie(), [_cookie(), None], True, "have no cookie"),
        (_cookie(instance_id="other"), [_cookie(), _cookie()], True, "instance_id"),
        (None, [_cookie(), _cookie()], True, "ZooKeeper has none"),
        (_cookie(), [_cookie(journal_dir="/x"), _cookie()], True, "journal_dir"),
    ],
)
def test_cookie_mismatches_refuse_to_start(zk, local, data, match):
    """R24: a wiped disk, foreign data, another cluster or moved directories refuse to start."""
    with pytest.raises(CookieError, match=match):
        decide(_cookie(), zk, local, dirs_have_data=data)


def test_matching_cookies_start():
    """R24: every copy agrees: start, writing nothing."""
    decision = decide(_cookie(), _cookie(), [_cookie(), _cookie()], dirs_have_data=True)
    assert not decision.write_local and not decision.write_zk


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=60), st.data())
def test_header_check_finds_the_first_mismatch_in_batches_of_any_size(payloads, data):
    """R26: large batches are checked in one vectorised pass; it answers as the entry-by-entry check."""
    lacs = data.draw(st.lists(st.integers(-1, 50), min_size=len(payloads), max_size=len(payloads)))
    parts, sizes = [], []
    for i, (payload, lac) in enumerate(zip(payloads, lacs, strict=True)):
        blob, size = package_batch(make_digest("crc32c"), 7, 100 + i, lac, 0, [payload])
        parts.append(blob)
        sizes += size
    ids = list(range(100, 100 + len(payloads)))
    wrong = data.draw(st.none() | st.integers(0, len(ids) - 1))
    if wrong is not None:
        ids[wrong] += 1000
        first_wrong = wrong
        assert d.check_headers(7, ids, sizes, b"".join(parts)) == (
            f"entry header says ledger 7 entry {100 + first_wrong}, request says 7/{ids[first_wrong]}", -1)
    else:
        assert d.check_headers(7, ids, sizes, b"".join(parts)) == ("", max(lacs))
    assert "header says ledger 7" in d.check_headers(8, ids, sizes, b"".join(parts))[0]


def _entries(ids: list[int], tag: bytes = b"") -> tuple[list[int], list[int], bytes]:
    parts = [d.HEADER.pack(5, e, e - 1, 10) + b"body-" + tag + str(e).encode() for e in ids]
    return ids, [len(p) for p in parts], b"".join(parts)


def test_rewrite_with_other_bytes_is_refused():
    """Records cannot be rewritten (issue 41 item 4): an entry stored with other bytes is refused; the same
    bytes again (a recovery write-back, a resend after an ensemble change) and new entries pass."""
    ids, sizes, data = _entries([3, 4, 5])
    stored = {3: data[: sizes[0]]}
    assert d.check_rewrites(ids, sizes, data, stored) == ""                 # same bytes
    assert d.check_rewrites(ids, sizes, data, {}) == ""                     # nothing held
    f_ids, f_sizes, forged = _entries([3, 4, 5], tag=b"F")
    why = d.check_rewrites(f_ids, f_sizes, forged, stored)
    assert "entry 3" in why and "other bytes" in why
    assert d.check_rewrites(f_ids, f_sizes, forged, {9: b"x"}) == ""        # the stored ids are not in the batch
    assert "entry 3" in d.check_rewrites(np.array(f_ids), np.array(f_sizes), memoryview(forged), stored)
