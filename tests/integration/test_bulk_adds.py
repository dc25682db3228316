"""Bulk adds (LedgerHandle.add_entries, LogWriter.append_many) on real bookies: ids in call order among
single adds, byte-for-byte read back, an ensemble change under a bulk, a fenced ledger failing the bulk
and everything after it, and an oversized entry refusing the bulk before anything is written."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from bkledger.client import EntryTooLargeError, InvalidBulkError, LedgerFencedError
from bkledger.client.protocol.metadata import LedgerState

pytestmark = pytest.mark.integration


def records(first: int, count: int) -> list[bytes]:
    return [b"rec-%07d-" % i + bytes([i % 251]) * (i % 200) for i in range(first, first + count)]


def as_bulk(payloads: list[bytes]) -> tuple[bytes, np.ndarray]:
    offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in payloads], out=offsets[1:])
    return b"".join(payloads), offsets


@pytest.mark.parametrize(("quorum", "compression"), [((3, 3, 2), ""), ((5, 3, 2), ""), ((3, 2, 2), "lz4")])
def test_bulks_and_single_adds_interleave_in_call_order(shared_cluster5, bk_factory, quorum, compression):
    """R5/R6: each bulk takes the next ids in call order; its future gives its last id; after close every
    entry reads back as given (E > Qw and lz4 included); the ledger's length counts every payload."""
    bk = bk_factory(shared_cluster5.metadata_service_uri)
    lh = bk.create_ledger(*quorum, password=b"pw", compression=compression)
    expected: list[bytes] = []
    futures = []
    for round_ in range(6):
        single = records(len(expected), 1)
        futures.append(lh.add_entry_async(single[0]))
        expected += single
        bulk = records(len(expected), 700 + 300 * round_)
        data, offsets = as_bulk(bulk)
        futures.append(lh.add_entries(memoryview(data), offsets if round_ % 2 else offsets.tolist()))
        expected += bulk
    lasts = [f.result(60) for f in futures]
    assert lasts == sorted(lasts) and lasts[-1] == len(expected) - 1
    lh.close()
    md = bk.ledger_metadata(lh.ledger_id)
    assert md.state is LedgerState.CLOSED and md.last_entry_id == len(expected) - 1
    if not compression:                        # (lz4: the length counts the compressed bytes, as for add_entry)
        assert md.length == sum(map(len, expected))
    rh = bk.open_ledger(lh.ledger_id, b"pw", recovery=False)
    assert [en.payload for en in rh.read_entries(0, len(expected) - 1)] == expected


def test_a_bulk_over_the_window_and_the_request_size(shared_cluster5, bk_factory):
    """A bulk of more entries than maxOutstandingAdds and more bytes than one AddRequest carries is
    packaged in chunks and still lands whole, in order."""
    bk = bk_factory(shared_cluster5.metadata_service_uri, maxOutstandingAdds=500)
    lh = bk.create_ledger(3, 3, 2)
    payloads = [bytes([i % 256]) * 3000 for i in range(4000)]          # 12 MB, 8x the window
    data, offsets = as_bulk(payloads)
    assert lh.add_entries(data, offsets).result(120) == 3999
    assert lh.add_entry(b"after") == 4000
    lh.close()
    rh = bk.open_ledger(lh.ledger_id, recovery=False)
    assert [en.payload for en in rh.read_entries(0, 4000)] == [*payloads, b"after"]


def test_bookie_killed_mid_bulk_changes_the_ensemble(cluster_factory, bk_factory):
    """R9: a bookie killed while bulks stream is replaced; every bulk is acknowledged; nothing is lost."""
    cluster = cluster_factory(4)
    bk = bk_factory(cluster.metadata_service_uri)
    lh = bk.create_ledger(3, 3, 2)
    victim = lh.metadata.last_fragment.ensemble[1]
    index = next(b.index for b in cluster.bookies if b.bookie_id == victim)
    expected: list[bytes] = []
    futures = []
    for _ in range(3):
        bulk = records(len(expected), 2000)
        futures.append(lh.add_entries(*as_bulk(bulk)))
        expected += bulk
    futures[0].result(60)
    cluster.kill_bookie(index)
    for _ in range(3):
        bulk = records(len(expected), 2000)
        futures.append(lh.add_entries(*as_bulk(bulk)))
        expected += bulk
    assert [f.result(90) for f in futures] == [2000 * k - 1 for k in range(1, 7)]
    lh.close()
    md = bk.ledger_metadata(lh.ledger_id)
    assert len(md.fragments) >= 2 and victim not in md.last_fragment.ensemble
    rh = bk.open_ledger(lh.ledger_id, recovery=False)
    assert [en.payload for en in rh.read_entries(0, len(expected) - 1)] == expected


def test_a_fenced_ledger_fails_the_bulk_and_every_later_add(shared_cluster5, bk_factory):
    """R21: once another client recovered (fenced) the ledger, the bulk fails with LedgerFencedError and
    so does every add after it; the recovered ledger ends at the last acknowledged entry."""
    uri = shared_cluster5.metadata_service_uri
    bk = bk_factory(uri)
    lh = bk.create_ledger(3, 3, 2)
    assert lh.add_entries(*as_bulk(records(0, 100))).result(30) == 99
    recovered = bk_factory(uri).open_ledger(lh.ledger_id, recovery=True)
    assert recovered.last_entry_id == 99
    bulk = lh.add_entries(*as_bulk(records(100, 500)))
    later = lh.add_entry_async(b"later")
    with pytest.raises(LedgerFencedError):
        bulk.result(30)
    with pytest.raises(LedgerFencedError):
        later.result(30)
    assert bk.ledger_metadata(lh.ledger_id).last_entry_id == 99


def test_an_oversized_entry_refuses_the_bulk_and_nothing_of_it_is_acknowledged(shared_cluster5, bk_factory):
    bk = bk_factory(shared_cluster5.metadata_service_uri, maxEntrySize=1000)
    lh = bk.create_ledger(3, 3, 2)
    assert lh.add_entries(b"abcdef", [0, 3, 6]).result(30) == 1
    payloads = [b"a" * 10, b"b" * 1001, b"c" * 10]
    with pytest.raises(EntryTooLargeError, match="entry 1 of the bulk has 1001 bytes"):
        lh.add_entries(*as_bulk(payloads))
    with pytest.raises(InvalidBulkError, match="must not decrease"):
        lh.add_entries(b"abc", [0, 2, 1])
    assert lh.add_entry(b"next") == 2              # nothing of the refused bulks took an id
    lh.close()
    rh = bk.open_ledger(lh.ledger_id, recovery=False)
    assert [en.payload for en in rh.read_entries(0, 2)] == [b"abc", b"def", b"next"]


def test_log_writer_append_many(shared_cluster5, bk_factory):
    """LogWriter.append_many: consecutive positions in one ledger, a due roll before (never inside)
    the bulk, and a reader gets the records in order."""
    bk = bk_factory(shared_cluster5.metadata_service_uri)
    name = f"bulk-{uuid.uuid4().hex[:8]}"
    w = bk.open_log_writer(name, roll_entries=50)
    first = w.append(b"one")
    last = w.append_many(*as_bulk(records(0, 120))).result(30)
    assert last.ledger_id == first.ledger_id and last.entry_id == 120     # no roll inside the bulk
    after = w.append_many(b"xy", [0, 1, 2]).result(30)
    assert after.ledger_id != first.ledger_id and after.entry_id == 1     # rolled before it
    w.close()
    with bk.open_log_reader(name) as reader:
        got = [r.payload for r in reader.read(timeout=0.5)]
    assert got == [b"one", *records(0, 120), b"x", b"y"]
