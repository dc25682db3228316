"""Bulk adds, the pure part: offsets are checked before anything is queued, chunks stay within the byte
bound, and packaging a bulk gives byte for byte what packaging its entries one by one gives (R7)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkledger.client.errors import EntryTooLargeError, InvalidBulkError
from bkledger.client.protocol.bulk import check_bulk, chunk_bounds, package_bulk
from bkledger.client.protocol.digest import HEADER_LENGTH, make_digest, package_batch


def test_offsets_may_be_a_list_or_a_numpy_array_and_need_not_start_at_zero() -> None:
    for offsets in ([2, 4, 4, 7], np.array([2, 4, 4, 7], dtype=np.int32), np.array([2, 4, 4, 7], dtype=np.uint64)):
        bulk = check_bulk(b"xxabcdefgh", offsets, 100)
        assert bulk.count == 3 and bulk.nbytes == 5 and bulk.offsets.dtype == np.int64


def test_a_mutable_buffer_is_copied_at_the_call() -> None:
    buf = bytearray(b"abcd")
    bulk = check_bulk(buf, [0, 2, 4], 100)
    buf[:] = b"zzzz"
    assert bulk.data == b"abcd"
    assert check_bulk(np.frombuffer(b"abcd", dtype=np.uint8), [0, 4], 100).data == b"abcd"


def test_copy_false_reads_the_buffer_in_place() -> None:
    """What the Spark append asks for its Arrow buffers: no copy at the call (a byte view of the buffer)."""
    buf = np.frombuffer(bytearray(b"abcd"), dtype=np.uint8)
    bulk = check_bulk(buf, [0, 2, 4], 100, copy=False)
    assert isinstance(bulk.data, memoryview) and bulk.data == b"abcd"
    buf[:2] = [ord("z")] * 2
    assert bulk.data == b"zzcd"


@pytest.mark.parametrize(("data", "offsets", "match"), [
    ("text", [0, 1], "bytes-like"),
    (b"abc", [0], "at least one entry"),
    (b"abc", [], "at least one entry"),
    (b"abc", [0, 4], "within the buffer"),
    (b"abc", [-1, 2], "within the buffer"),
    (b"abc", [0, 2, 1, 3], r"offsets\[1\]=2 > offsets\[2\]=1"),
    (b"abc", [0.0, 1.5], "integers"),
    (b"abc", np.array([[0, 1], [1, 2]]), "one-dimensional"),
    (b"abc", np.array([0.0, 3.0]), "integers"),
    (b"abc", ["a", "b"], "integers"),
])
def test_bad_bulks_get_invalid_bulk_error(data: object, offsets: object, match: str) -> None:
    with pytest.raises(InvalidBulkError, match=match):
        check_bulk(data, offsets, 100)  # type: ignore[arg-type]


def test_an_oversized_entry_names_its_index_and_refuses_the_whole_bulk() -> None:
    with pytest.raises(EntryTooLargeError, match="entry 2 of the bulk has 11 bytes.*nothing of this bulk"):
        check_bulk(bytes(30), [0, 5, 10, 21, 25], 10)


@given(st.lists(st.integers(0, 300), min_size=1, max_size=60), st.integers(1, 2000), st.integers(0, 7))
def test_chunks_cover_every_entry_once_within_the_bound(sizes: list[int], max_bytes: int, start: int) -> None:
    offsets = np.concatenate(([start], start + np.cumsum(sizes))).astype(np.int64)
    overhead = 36
    bounds = chunk_bounds(offsets, overhead, max_bytes)
    assert bounds[0] == 0 and bounds[-1] == len(sizes)
    for lo, hi in zip(bounds, bounds[1:]):  # noqa: B905
        assert hi > lo
        packaged = sum(sizes[lo:hi]) + overhead * (hi - lo)
        assert packaged <= max_bytes or hi - lo == 1


@given(st.lists(st.binary(max_size=200), min_size=1, max_size=40), st.sampled_from(["crc32c", "crc32", "hmac",
                                                                                    "dummy"]))
def test_package_bulk_is_package_batch_byte_for_byte(payloads: list[bytes], digest_type: str) -> None:
    digest = make_digest(digest_type, b"pw")
    data = b"..." + b"".join(payloads)
    offsets = np.concatenate(([3], 3 + np.cumsum([len(p) for p in payloads]))).astype(np.int64)
    blob, packaged = package_bulk(digest, 9, 100, 95, 1000, data, offsets)
    expected, sizes = package_batch(digest, 9, 100, 95, 1000, payloads)
    assert blob == expected
    assert package_bulk(digest, 9, 100, 95, 1000, memoryview(bytearray(data)), offsets)[0] == expected  # copy=False
    assert packaged.tolist() == [0, *np.cumsum(sizes).tolist()]
    assert int(packaged[1] - packaged[0]) == HEADER_LENGTH + digest.mac_length + len(payloads[0])


@pytest.mark.parametrize(("e", "qw"), [(e, qw) for e in range(1, 7) for qw in range(1, e + 1)])
def test_r5_striped_targets_send_each_entry_to_its_write_set(e, qw) -> None:
    """R5 for a bulk chunk with E > Qw: the per-bookie masks are exactly SendAdds.targets, and each bookie's
    request holds its entries' bytes back to back."""
    from bkledger.client.protocol.bulk import striped_targets
    from bkledger.client.protocol.pending_adds import SendAdds
    from bkledger.wire.gather import gather_entries

    first, count = 7, 20
    sizes = [(i * 5) % 11 for i in range(count)]
    offsets = np.array([0, *np.cumsum(sizes)], dtype=np.int64)
    data = b"".join(bytes([i]) * s for i, s in enumerate(sizes))
    expected: dict[int, list[int]] = {}
    for entry_id, indices in SendAdds(first, count, frozenset()).targets(e, qw):
        for index in indices:
            expected.setdefault(index, []).append(entry_id)
    got = striped_targets(first, offsets, e, qw)
    assert {index: [first + int(i) for i in np.flatnonzero(keep)] for index, keep in got} == expected
    for _, keep in got:
        want = b"".join(bytes([i]) * sizes[i] for i in np.flatnonzero(keep).tolist())
        assert gather_entries(data, offsets, keep) == want


@pytest.mark.parametrize("native", [True, False])
def test_gather_entries_of_a_slice_of_a_larger_buffer(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offsets need not start at 0 nor end at the buffer's end, and the buffer may be a memoryview; the
    native gather and Arrow's (used where the module was not built) give the same bytes."""
    from bkledger.wire import gather as bulk
    from bkledger.wire.gather import gather_entries
    if not native:
        monkeypatch.setattr(bulk, "NATIVE", None)
    elif bulk.NATIVE is None:
        pytest.skip("wire._native was not built")

    data = bytes(range(40))
    offsets = np.array([5, 8, 8, 15, 20], dtype=np.int64)         # entries [5:8], [8:8], [8:15], [15:20]
    for keep, want in [([True, True, False, True], data[5:8] + data[15:20]),
                       ([False, False, True, False], data[8:15]),
                       ([False, True, False, False], b""),
                       ([False] * 4, b""),
                       ([True] * 4, data[5:20])]:
        assert gather_entries(memoryview(data), offsets, np.array(keep)) == want
