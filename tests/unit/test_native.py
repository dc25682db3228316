"""R7: the native module's packaging and checksums (wire/_native.c) give byte for byte what the
one-entry-at-a-time path gives, with either of its CRC32C implementations; its calls refuse bad input.
(Its gather is held to Arrow's in tests/unit/test_bulk.py, its pack_ranges to numpy's in test_gather.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import google_crc32c
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bkledger.client.errors import DigestMismatchError
from bkledger.client.protocol import bulk, digest
from bkledger.client.protocol.bulk import package_bulk
from bkledger.client.protocol.digest import HEADER_LENGTH, DigestManager, package_batch, package_entry
from bkledger.client.protocol.metadata import DigestType
from bkledger.client.reader import crc32c_verified, verify_entries
from bkledger.wire.native import NATIVE

CRC = DigestManager(DigestType.CRC32C, b"pw")


@pytest.fixture(params=["sse4.2", "table"])
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    assert NATIVE is not None, "wire._native was not built: `pip install -e .` needs a C compiler"
    before = NATIVE.implementation()
    try:
        NATIVE.use_implementation(request.param)
    except ValueError:
        pytest.skip(f"this CPU has no {request.param}")
    yield request.param
    NATIVE.use_implementation(before)


def entries_of(sizes: list[int], seed: int) -> tuple[bytes, np.ndarray]:
    rng = np.random.default_rng(seed)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return rng.bytes(int(offsets[-1])), offsets


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=40), seed=st.integers(0, 2**32 - 1),
       skip=st.integers(0, 2), lac=st.integers(-1, 10**12))
def test_r7_native_packaging_is_byte_for_byte_the_per_entry_packaging(
        implementation: str, sizes: list[int], seed: int, skip: int, lac: int) -> None:
    data, offsets = entries_of(sizes, seed)
    offsets = offsets[skip:] if skip < len(offsets) - 1 else offsets     # a bulk need not start at 0
    native, packaged = package_bulk(CRC, 7, 100, lac, 5000, data, offsets)
    payloads = [data[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]
    per_entry, length = [], 5000
    for i, payload in enumerate(payloads):
        length += len(payload)
        per_entry.append(package_entry(CRC, 7, 100 + i, lac, length, payload))
    assert native == b"".join(per_entry)
    batch, batch_sizes = package_batch(CRC, 7, 100, lac, 5000, payloads)    # the single adds' path
    assert batch == native and batch_sizes == [len(e) for e in per_entry]
    assert int(packaged[-1]) == len(native)
    starts, ends = packaged[:-1].copy(), packaged[1:].copy()
    verify_entries(CRC, 7, np.arange(100, 100 + len(payloads), dtype=np.int64), starts, ends, native)
    assert NATIVE is not None
    checksums = np.frombuffer(NATIVE.crc32c_entries(native, starts, ends, HEADER_LENGTH, 4), dtype=np.uint32)
    want = [google_crc32c.value(native[a:a + HEADER_LENGTH] + native[a + HEADER_LENGTH + 4:b])
            for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    assert checksums.tolist() == want


def test_r7_the_fallback_packages_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    data, offsets = entries_of([10, 0, 999, 33], 1)
    native = package_bulk(CRC, 3, 0, -1, 0, data, offsets)[0]
    payloads = [bytes(data[a:b]) for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]
    mixed: list[bytes | bytearray | memoryview] = [payloads[0], bytearray(payloads[1]), memoryview(payloads[2]),
                                                   payloads[3]]
    assert package_batch(CRC, 3, 0, -1, 0, mixed)[0] == native
    monkeypatch.setattr(bulk, "NATIVE", None)
    monkeypatch.setattr(digest, "NATIVE", None)
    assert package_bulk(CRC, 3, 0, -1, 0, data, offsets)[0] == native
    assert package_batch(CRC, 3, 0, -1, 0, mixed)[0] == native


@pytest.mark.parametrize("where", [0, 9, HEADER_LENGTH, HEADER_LENGTH + 2, HEADER_LENGTH + 4, -1])
def test_r7_native_verification_finds_one_flipped_byte(implementation: str, where: int) -> None:
    data, offsets = entries_of([50, 60, 70], 2)
    packed, packaged = package_bulk(CRC, 3, 0, -1, 0, data, offsets)
    starts, ends = packaged[:-1].copy(), packaged[1:].copy()
    at = int(starts[1]) + where if where >= 0 else int(ends[1]) - 1     # in entry 1: ids, digest, payload
    broken = bytearray(packed)
    broken[at] ^= 0x40
    with pytest.raises(DigestMismatchError):
        verify_entries(CRC, 3, np.arange(3, dtype=np.int64), starts, ends, bytes(broken))


def test_r7_without_the_module_verification_checks_each_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    import bkledger.client.reader
    data, offsets = entries_of([50, 60, 70], 4)
    packed, packaged = package_bulk(CRC, 3, 0, -1, 0, data, offsets)
    starts, ends = packaged[:-1].copy(), packaged[1:].copy()
    monkeypatch.setattr(bkledger.client.reader, "NATIVE", None)
    verify_entries(CRC, 3, np.arange(3, dtype=np.int64), starts, ends, packed)
    broken = bytearray(packed)
    broken[int(ends[2]) - 1] ^= 1
    with pytest.raises(DigestMismatchError):
        verify_entries(CRC, 3, np.arange(3, dtype=np.int64), starts, ends, bytes(broken))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(0, 200), min_size=1, max_size=30), seed=st.integers(0, 2**32 - 1),
       flips=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 235)), max_size=4),
       per_entry=st.booleans())
def test_r7_native_header_and_digest_check_agrees_with_numpy_on_every_entry(
        implementation: str, monkeypatch: pytest.MonkeyPatch, sizes: list[int], seed: int,
        flips: list[tuple[int, int]], per_entry: bool) -> None:
    """verify_crc32c (ids and digest in one native pass) flags exactly the entries the numpy check flags,
    with one ledger for all or one per entry (a ReadRanges batch), whatever bytes were flipped."""
    import bkledger.client.reader
    data, offsets = entries_of(sizes, seed)
    packed, packaged = package_bulk(CRC, 9, 40, -1, 0, data, offsets)
    starts, ends = packaged[:-1].copy(), packaged[1:].copy()
    broken = bytearray(packed)
    for entry, at in flips:
        if entry < len(sizes):
            broken[int(starts[entry]) + at % int(ends[entry] - starts[entry])] ^= 0x10
    entry_ids = np.arange(40, 40 + len(sizes), dtype=np.int64)
    ledgers = np.full(len(sizes), 9, dtype=np.int64) if per_entry else 9
    native = crc32c_verified(ledgers, entry_ids, starts, ends, bytes(broken))
    monkeypatch.setattr(bkledger.client.reader, "NATIVE", None)
    by_numpy = crc32c_verified(ledgers, entry_ids, starts, ends, bytes(broken))
    assert native is not None and by_numpy is not None
    assert native.tolist() == by_numpy.tolist()
    assert native.all() == (bytes(broken) == packed)


def test_r7_native_check_refuses_an_entry_of_another_ledger_or_position() -> None:
    data, offsets = entries_of([20, 20], 5)
    packed, packaged = package_bulk(CRC, 9, 40, -1, 0, data, offsets)
    starts, ends = packaged[:-1].copy(), packaged[1:].copy()
    assert NATIVE is not None
    check = NATIVE.verify_crc32c
    assert list(check(packed, starts, ends, np.array([9]), np.array([40, 41]))) == [1, 1]
    assert list(check(packed, starts, ends, np.array([9, 8]), np.array([40, 41]))) == [1, 0]
    assert list(check(packed, starts, ends, np.array([9]), np.array([41, 41]))) == [0, 1]


def test_native_calls_refuse_bad_input() -> None:
    assert NATIVE is not None
    data, offsets = entries_of([5, 5], 3)
    with pytest.raises(ValueError, match="inside data"):
        NATIVE.package_crc32c(data, np.array([0, 5, 11], dtype=np.int64), 1, 0, -1, 0)
    with pytest.raises(ValueError, match="decrease"):
        NATIVE.package_crc32c(data, np.array([0, 6, 5], dtype=np.int64), 1, 0, -1, 0)
    with pytest.raises(TypeError, match="int64"):
        NATIVE.package_crc32c(data, np.array([0, 5, 10], dtype=np.int32), 1, 0, -1, 0)
    with pytest.raises(ValueError, match="header and digest"):
        NATIVE.crc32c_entries(data, np.array([0], dtype=np.int64), np.array([10], dtype=np.int64), HEADER_LENGTH, 4)
    with pytest.raises(ValueError, match="one length"):
        NATIVE.crc32c_entries(data, np.array([0], dtype=np.int64), np.array([], dtype=np.int64), 0, 0)
    with pytest.raises(ValueError, match="2 flags for 3 entries"):
        NATIVE.gather(data, np.array([0, 2, 4, 6], dtype=np.int64), np.array([True, False]))
    with pytest.raises(ValueError, match="inside data"):
        NATIVE.gather(data, np.array([0, 2, 40], dtype=np.int64), np.array([True, False]))
    one, two = np.array([0], dtype=np.int64), np.array([0, 1], dtype=np.int64)
    with pytest.raises(ValueError, match="header and digest"):
        NATIVE.verify_crc32c(data, one, np.array([10], dtype=np.int64), one, one)
    with pytest.raises(ValueError, match="one length"):
        NATIVE.verify_crc32c(data, one, one, two, one)
    with pytest.raises(ValueError, match="inside its buffer"):
        NATIVE.pack_ranges([data, b"ab"], two, two, np.array([1, 3], dtype=np.int64))
    with pytest.raises(ValueError, match="inside its buffer"):
        NATIVE.pack_ranges([data], np.array([1], dtype=np.int64), one, one)
    with pytest.raises(ValueError, match="one length"):
        NATIVE.pack_ranges([data, data], one, two, two)
    with pytest.raises(TypeError, match="sequence"):
        NATIVE.pack_ranges(7, one, one, one)
    with pytest.raises(ValueError, match="no CRC32C implementation"):
        NATIVE.use_implementation("abacus")
