"""The reader's rule switches (`reads.ReaderRules`, R7, R11, R12) in the functions production reads with:
the defaults keep each rule, each switch off breaks exactly it (what the simulation's mutants inject)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from bkledger.client.errors import DigestMismatchError, ReadBeyondLastEntryError
from bkledger.client.protocol.digest import DigestManager, master_key, package_batch, package_entry
from bkledger.client.protocol.metadata import DigestType
from bkledger.client.protocol.reads import (
    DEFAULT_READER_RULES,
    UNBOUNDED,
    ReaderRules,
    check_read_range,
    lac_read_fences,
    read_bound,
    received_entry,
)
from bkledger.client.protocol.transforms import closed, new_ledger_metadata
from bkledger.client.reader import LedgerReader, entry_bounds, verify_entries

NO_LAC_BOUND = ReaderRules(lac_bound=False)
FENCING_OPEN = ReaderRules(open_never_fences=False)
NO_DIGEST_CHECK = ReaderRules(verify_digest=False)


def _md():
    return new_ledger_metadata(3, ["a", "b", "c"], 3, 2, 2, "crc32c", b"", 0)


def _reader(rules: ReaderRules = DEFAULT_READER_RULES) -> LedgerReader:
    no_context: Any = SimpleNamespace()          # building a request needs no connection
    return LedgerReader(no_context, _md(), DigestManager(DigestType.CRC32C, b"pw"), b"pw", rules)


def test_lac_bound_switch_lets_an_open_ledger_be_read_past_its_lac():
    """R11: by default an open ledger is read up to its LAC; with the rule off (read-past-lac) the bound is
    whatever bookies hold, so a range above the LAC passes the check. A closed ledger keeps its bound."""
    md = _md()
    assert read_bound(md, 4) == 4
    with pytest.raises(ReadBeyondLastEntryError):
        check_read_range(md, 4, 0, 5)
    assert read_bound(md, 4, NO_LAC_BOUND) == UNBOUNDED
    check_read_range(md, 4, 0, 5, NO_LAC_BOUND)
    done = closed(md, 9, 90)
    assert read_bound(done, 4, NO_LAC_BOUND) == 9
    with pytest.raises(ReadBeyondLastEntryError):
        check_read_range(done, 4, 0, 10, NO_LAC_BOUND)


def test_open_fence_switch_makes_the_readers_lac_reads_fence():
    """R12: the LAC reads of a reader (its open, a refresh, a long poll) carry no fence flag and no master
    key; with the rule off (reader-fences) they fence, with the ledger's master key."""
    assert not lac_read_fences()
    assert lac_read_fences(FENCING_OPEN)
    for request in (_reader().lac_request(), _reader().lac_request(7, 500)):
        assert request.entry_id == -1 and not request.fence and request.master_key == b""
    long_poll = _reader().lac_request(7, 500)
    assert (long_poll.has_previous_lac, long_poll.previous_lac, long_poll.timeout_ms) == (True, 7, 500)
    for request in (_reader(FENCING_OPEN).lac_request(), _reader(FENCING_OPEN).lac_request(7, 500)):
        assert request.entry_id == -1 and request.fence and request.master_key == master_key(b"pw")


@pytest.mark.parametrize("kind", [DigestType.CRC32C, DigestType.CRC32, DigestType.HMAC])
def test_digest_switch_makes_a_corrupt_copy_pass(kind):
    """R7: a single copy with a flipped payload byte is refused by default; with the rule off
    (no-digest-check) the reader takes its bytes."""
    digest = DigestManager(kind, b"pw")
    body = bytearray(package_entry(digest, 9, 4, 3, 20, b"some payload"))
    body[-1] ^= 0x01
    with pytest.raises(DigestMismatchError):
        received_entry(digest, 9, 4, bytes(body))
    entry = received_entry(digest, 9, 4, bytes(body), NO_DIGEST_CHECK)
    assert (entry.entry_id, entry.lac, entry.length) == (4, 3, 20)
    assert bytes(entry.payload) == b"some payloae"


@pytest.mark.parametrize("kind", [DigestType.CRC32C, DigestType.CRC32])
def test_digest_switch_makes_a_corrupt_range_batch_pass(kind):
    """R7 on range batches (the native CRC32C path included): a corrupt entry fails the batch by default;
    with the rule off the batch is taken unchecked."""
    digest = DigestManager(kind, b"pw")
    data, sizes = package_batch(digest, 5, 10, 8, 0, [b"x" * 10, b"y" * 10, b"z" * 3])
    starts, ends = entry_bounds(np.array(sizes, dtype=np.int64))
    ids = np.arange(10, 13, dtype=np.int64)
    corrupt = bytearray(data)
    corrupt[int(ends[1]) - 1] ^= 0xFF
    with pytest.raises(DigestMismatchError):
        verify_entries(digest, 5, ids, starts, ends, bytes(corrupt))
    verify_entries(digest, 5, ids, starts, ends, bytes(corrupt), NO_DIGEST_CHECK)
