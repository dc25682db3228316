"""The reader's bulk verification of range-read batches (R7) and the striped read's choice of bookie."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkledger.client.errors import DigestMismatchError
from bkledger.client.protocol.digest import DigestManager, package_batch
from bkledger.client.protocol.metadata import DigestType
from bkledger.client.protocol.write_set import write_set
from bkledger.client.reader import covering_indices, entry_bounds, first_holders, verified_payloads


def _batch(kind: DigestType, payloads: list[bytes], first: int = 10) -> tuple[DigestManager, bytes, np.ndarray]:
    digest = DigestManager(kind, b"pw")
    data, sizes = package_batch(digest, 5, first, 8, 0, payloads)
    return digest, data, np.array(sizes, dtype=np.int64)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list(DigestType)), st.lists(st.binary(max_size=300), max_size=20))
def test_bulk_verification_returns_the_payloads(kind, payloads) -> None:
    digest, data, sizes = _batch(kind, payloads)
    starts, ends = entry_bounds(sizes)
    ids = np.arange(10, 10 + len(payloads), dtype=np.int64)
    views = verified_payloads(digest, 5, ids, starts, ends, data)
    assert [bytes(v) for v in views] == payloads
    assert all(v.obj is data for v in views)          # slices of the received buffer, not copies


@pytest.mark.parametrize("kind", [DigestType.CRC32C, DigestType.CRC32, DigestType.HMAC])
def test_bulk_verification_refuses_a_bad_entry(kind) -> None:
    """A flipped payload byte, a wrong entry id or a wrong ledger id fails the batch."""
    digest, data, sizes = _batch(kind, [b"x" * 10, b"y" * 10, b"z" * 3])
    starts, ends = entry_bounds(sizes)
    ids = np.arange(10, 13, dtype=np.int64)
    corrupt = bytearray(data)
    corrupt[int(ends[1]) - 1] ^= 0xFF
    with pytest.raises(DigestMismatchError):
        verified_payloads(digest, 5, ids, starts, ends, bytes(corrupt))
    with pytest.raises(DigestMismatchError):
        verified_payloads(digest, 5, np.array([10, 12, 13], dtype=np.int64), starts, ends, data)
    with pytest.raises(DigestMismatchError):
        verified_payloads(digest, 6, ids, starts, ends, data)


def test_bulk_verification_of_a_subset() -> None:
    """Entries picked out of a batch (the striped read's share of one bookie) verify on their own."""
    digest, data, sizes = _batch(DigestType.CRC32C, [bytes([i]) * (i + 1) for i in range(6)])
    starts, ends = entry_bounds(sizes)
    pick = np.array([1, 4, 5])
    views = verified_payloads(digest, 5, np.arange(10, 16, dtype=np.int64)[pick], starts[pick], ends[pick], data)
    assert [bytes(v) for v in views] == [bytes([i]) * (i + 1) for i in (1, 4, 5)]


@pytest.mark.parametrize(("e", "qw"), [(e, qw) for e in range(1, 7) for qw in range(1, e + 1)])
def test_each_entry_has_one_first_covering_holder(e, qw) -> None:
    covering = covering_indices(e, qw)
    owners = first_holders(e, qw, covering)
    for start in range(e):
        holders = write_set(start, e, qw)
        assert covering[owners[start]] in holders
        assert not any(covering[p] in holders for p in range(owners[start]))


@pytest.mark.parametrize(("e", "qw"), [(e, qw) for e in range(1, 7) for qw in range(1, e + 1)])
def test_covering_set_leaves_out_slow_bookies_when_it_can(e, qw) -> None:
    """R13 with reorderReadSequenceEnabled: a striped read covers every entry without the bookies that
    were slow recently whenever each write set keeps another member (fewer than Qw avoided)."""
    for avoided in range(e):
        for first in range(e):
            avoid = {(first + k) % e: float(k) for k in range(avoided)}
            covering = covering_indices(e, qw, avoid)
            owners = first_holders(e, qw, covering)
            for start in range(e):
                assert covering[owners[start]] in write_set(start, e, qw)
            if avoided < qw:
                assert not set(avoid) & set(covering), (e, qw, sorted(avoid), covering)


def test_covering_set_takes_the_longest_failed_member_when_a_whole_write_set_is_slow() -> None:
    """E=3 Qw=2 with two bookies slow: the write set of both is read from the one that failed first,
    not always from the same member (a paused bookie that keeps failing is not read again and again)."""
    for older, newer in ((0, 1), (1, 0)):
        covering = covering_indices(3, 2, {older: 1.0, newer: 2.0})
        assert newer not in covering and older in covering and 2 in covering


def test_importing_the_client_starts_no_numpy_threads() -> None:
    """The bookie imports the client before it blocks its stop signals; numpy's import starts threads."""
    import subprocess
    import sys

    code = "import sys, client, bookie.cli; sys.exit('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize(("e", "qw"), [(e, qw) for e in range(2, 7) for qw in range(1, e)])
def test_r13_covering_bookies_are_asked_for_the_entries_they_first_hold_and_together_for_all(e, qw) -> None:
    """E > Qw: each covering bookie is asked only for the residues it is the first covering holder of
    (ReadRangeRequest.residue_*), and the masks split 0..E-1 among them exactly once."""
    from bkledger.client.reader import owned_residues
    covering = covering_indices(e, qw)
    owner = np.array(first_holders(e, qw, covering), dtype=np.int64)
    masks = [owned_residues(owner, p) for p in range(len(covering))]
    assert all(modulus == e for modulus, _ in masks)
    assert sum(mask for _, mask in masks) == (1 << e) - 1
    for p, (_, mask) in enumerate(masks):
        for residue in range(e):
            if mask >> residue & 1:
                assert covering[p] in write_set(residue, e, qw)


def test_a_bookie_sends_only_the_asked_residues_cut_from_one_read(tmp_path: Path) -> None:
    """LedgerStorage.read_range with residues: the kept entries' bytes, in order, whatever runs they form,
    in batches whose limits count what is sent (the entries left out do not use up a batch)."""
    import struct

    from bkledger.bookie.storage import LedgerStorage
    ids = list(range(10, 60))

    def entry(e: int) -> bytes:
        return struct.pack(">qq", 7, e) + bytes([e]) * (e % 4 + 1)

    storage = LedgerStorage([tmp_path / "l0"])
    storage.add_batch(7, ids, [len(entry(e)) for e in ids], b"".join(entry(e) for e in ids))
    for mask in range(1 << 3):
        want = [e for e in ids if mask >> (e % 3) & 1]
        batches = list(storage.read_range(7, 10, 59, 1 << 20, 4, (3, mask)))
        assert [e for got, _, _ in batches for e in got] == want
        full, rest = divmod(len(want), 4)
        assert [len(got) for got, _, _ in batches] == [4] * full + ([rest] if rest else [])
        for got, sizes, data in batches:
            assert sizes.tolist() == [len(entry(e)) for e in got] and data == b"".join(entry(e) for e in got)
        sent = [len(data) for _, _, data in storage.read_range(7, 10, 59, 60, 100, (3, mask))]
        assert all(size <= 60 for size in sent) and sum(sent) == sum(len(entry(e)) for e in want)
    storage.close()


def test_a_batch_ends_at_whichever_limit_comes_first() -> None:
    from bkledger.bookie.storage import batch_end
    sent_bytes = np.cumsum([10, 0, 10, 0, 50, 10])        # entries 1 and 3 are left out
    sent_count = np.cumsum([1, 0, 1, 0, 1, 1])
    assert batch_end(sent_bytes, sent_count, 0, 20, 100) == 4     # two sent entries, and what lies between
    assert batch_end(sent_bytes, sent_count, 0, 100, 1) == 2
    assert batch_end(sent_bytes, sent_count, 4, 20, 100) == 5     # one entry over the limit still goes
    assert batch_end(sent_bytes, sent_count, 5, 20, 100) == 6


def test_a_striped_piece_holds_about_read_batch_bytes_once_the_entry_size_is_known() -> None:
    """Striped reads go piece by piece (two range RPCs per covering bookie each): STRIPE_CHUNK entries
    until a piece was read, then about max_bytes of entries at the size seen, never fewer than 16."""
    from types import SimpleNamespace
    from typing import Any

    from bkledger.client.reader import STRIPE_CHUNK, LedgerReader, ReadChunk
    no_context: Any = SimpleNamespace()                  # sizing a piece needs neither connections nor metadata
    metadata: Any = SimpleNamespace(ledger_id=1)
    reader = LedgerReader(no_context, metadata, DigestManager(DigestType.CRC32C, b"p"))
    assert reader._stripe_entries(4 << 20) == STRIPE_CHUNK
    reader._learn_entry_bytes(ReadChunk([0, 1, 2, 3], [b"x" * 100] * 4))
    assert reader._stripe_entries(4 << 20) == (4 << 20) // 100
    reader._learn_entry_bytes(ReadChunk([], []))                 # nothing read: nothing learnt
    assert reader._stripe_entries(4 << 20) == (4 << 20) // 100
    reader._learn_entry_bytes(ReadChunk([7], [b"x" * (8 << 20)]))
    assert reader._stripe_entries(4 << 20) == 16
