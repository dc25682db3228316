"""R11/R13: read bounds and the order in which a reader asks bookies."""

from __future__ import annotations

import pytest

from bkledger.client.errors import NoSuchEntryError, ReadBeyondLastEntryError
from bkledger.client.protocol.reads import EntryReadAttempt, check_read_range, fragment_ranges, read_bound, read_order
from bkledger.client.protocol.status import StatusCode
from bkledger.client.protocol.transforms import closed, new_ledger_metadata, with_ensemble_change


def _md():
    md = new_ledger_metadata(3, ["a", "b", "c"], 3, 2, 2, "crc32c", b"", 0)
    return with_ensemble_change(md, 10, {0: "d"})


def test_open_ledger_is_bounded_by_lac():
    """R11: an open ledger is readable up to the LAC only, whatever bookies hold beyond."""
    md = _md()
    assert read_bound(md, 12) == 12
    check_read_range(md, 12, 0, 12)
    with pytest.raises(ReadBeyondLastEntryError, match="LAC"):
        check_read_range(md, 12, 5, 13)


def test_closed_ledger_is_bounded_by_last_entry():
    """R11: a closed ledger is readable up to its last entry id, not beyond."""
    md = closed(_md(), 20, 200)
    assert read_bound(md, 5) == 20
    check_read_range(md, 5, 0, 20)
    with pytest.raises(ReadBeyondLastEntryError):
        check_read_range(md, 5, 0, 21)
    with pytest.raises(ValueError):
        check_read_range(md, 5, 3, 2)


def test_read_order_follows_write_set_and_fragment():
    """R13: bookies of the entry's write set in order, from the entry's fragment; slow ones last."""
    md = _md()
    assert read_order(md, 2) == ("c", "a")
    assert read_order(md, 9) == ("a", "b")
    assert read_order(md, 10) == ("b", "c")
    assert read_order(md, 11) == ("c", "d")
    assert read_order(md, 11, slow={"c"}) == ("d", "c")


def test_fragment_ranges_split_a_range():
    """Ranges are split at fragment boundaries."""
    md = _md()
    assert [(a, b, f.first_entry_id) for a, b, f in fragment_ranges(md, 5, 15)] == [(5, 9, 0), (10, 15, 10)]
    assert [(a, b) for a, b, _ in fragment_ranges(md, 11, 12)] == [(11, 12)]


def test_entry_read_tries_each_bookie_then_fails():
    """R13: a read fails only after every bookie of the write set failed."""
    attempt = EntryReadAttempt(3, 12, ("c", "d"))
    assert attempt.next_bookie() == "c"
    assert attempt.on_failure("c", StatusCode.ENOENTRY) == "d"
    assert attempt.on_failure("d", StatusCode.ENOENTRY) is None
    assert isinstance(attempt.error(), NoSuchEntryError)
    other = EntryReadAttempt(3, 12, ("c", "d"))
    other.next_bookie()
    other.on_failure("c", StatusCode.ENOENTRY)
    other.on_failure("d", StatusCode.EIO)
    assert other.error().code == StatusCode.EIO
