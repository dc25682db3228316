"""The reader's bulk verification of range-read batches (R7) and the striped read's choice of bookie."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client.errors import DigestMismatchError
from client.protocol.digest import DigestManager, package_batch
from client.protocol.metadata import DigestType
from client.protocol.write_set import write_set
from client.reader import covering_indices, entry_bounds, first_holders, verified_payloads


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
    from client.reader import owned_residues
    covering = covering_indices(e, qw)
    owner = np.array(first_holders(e, qw, covering), dtype=np.int64)
    masks = [owned_residues(owner, p) for p in range(len(covering))]
    assert all(modulus == e for modulus, _ in masks)
    assert sum(mask for _, mask in masks) == (1 << e) - 1
    for p, (_, mask) in enumerate(masks):
        for residue in range(e):
            if mask >> residue & 1:
                assert covering[p] in write_set(residue, e, qw)


def test_a_bookie_sends_only_the_asked_residues_cut_from_one_read() -> None:
    """bookie.storage.only_residues: the kept entries' bytes, in order, whatever runs they form."""
    from bookie.storage import only_residues
    ids = list(range(10, 20))
    sizes = [i % 4 + 1 for i in ids]
    blob = b"".join(bytes([i]) * s for i, s in zip(ids, sizes, strict=True))
    for mask in range(1 << 3):
        kept_ids, kept_sizes, data = only_residues((ids, sizes, blob), 3, mask)
        want = [i for i in ids if mask >> (i % 3) & 1]
        assert kept_ids == want
        assert kept_sizes == [i % 4 + 1 for i in want]
        assert data == b"".join(bytes([i]) * (i % 4 + 1) for i in want)
