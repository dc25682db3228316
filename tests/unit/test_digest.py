"""R7: entry packaging (32-byte header, digest over header + payload) and verification."""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib

import google_crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkledger.client.errors import DigestMismatchError
from bkledger.client.protocol.digest import (
    HEADER_LENGTH,
    DigestManager,
    mac_key,
    master_key,
    package_batch,
    package_entry,
    package_lac,
    unpack_batch,
    unpack_entry,
    unpack_lac,
)
from bkledger.client.protocol.metadata import DigestType

ALL_TYPES = list(DigestType)


def test_master_key_is_sha1_of_ledger_and_password():
    """R7/R15: the master key bookies check is SHA-1(b"ledger" + password), 20 bytes."""
    assert master_key(b"pw") == hashlib.sha1(b"ledgerpw").digest()
    assert master_key(b"") == hashlib.sha1(b"ledger").digest()
    assert len(master_key(b"x")) == 20


def test_crc32c_layout_matches_bookkeeper():
    """R7: header ledgerId|entryId|lac|length big-endian, then CRC32C (4 bytes) of header + payload."""
    body = package_entry(DigestManager("crc32c"), 7, 3, 2, 100, b"hello")
    header = struct.pack(">qqqq", 7, 3, 2, 100)
    assert body[:32] == header
    assert body[32:36] == struct.pack(">I", google_crc32c.value(header + b"hello"))
    assert body[36:] == b"hello"


def test_crc32_is_written_as_a_long():
    """R7: CRC32 digests are 8 bytes, the top 4 zero."""
    body = package_entry(DigestManager(DigestType.CRC32), 1, 0, -1, 3, b"abc")
    header = body[:32]
    assert body[32:40] == struct.pack(">Q", zlib.crc32(header + b"abc"))
    assert body[32:36] == b"\0\0\0\0"


def test_hmac_is_sha256_keyed_by_derived_password_key():
    """R7: HMAC-SHA256, key SHA-256(b"mac" + password), 32 bytes over header + payload."""
    body = package_entry(DigestManager("hmac", b"secret"), 1, 5, 4, 9, b"payload")
    expected = hmac.new(hashlib.sha256(b"macsecret").digest(), body[:32] + b"payload", hashlib.sha256).digest()
    assert mac_key(b"secret") == hashlib.sha256(b"macsecret").digest()
    assert body[32:64] == expected
    with pytest.raises(DigestMismatchError):
        unpack_entry(DigestManager("hmac", b"other"), 1, 5, body)


def test_dummy_has_no_digest():
    """R7: DUMMY adds no digest bytes."""
    body = package_entry(DigestManager("dummy"), 1, 0, -1, 1, b"x")
    assert len(body) == HEADER_LENGTH + 1


@pytest.mark.parametrize("kind", ALL_TYPES)
@given(payload=st.binary(max_size=300), entry_id=st.integers(0, 2**62), lac=st.integers(-1, 2**62))
def test_round_trip(kind, payload, entry_id, lac):
    """R7: a packaged entry unpacks to the same ids, LAC, length and payload."""
    digest = DigestManager(kind, b"pw")
    body = package_entry(digest, 42, entry_id, lac, 1000 + len(payload), payload)
    entry = unpack_entry(digest, 42, entry_id, body)
    assert (entry.entry_id, entry.lac, entry.length) == (entry_id, lac, 1000 + len(payload))
    assert bytes(entry.payload) == payload
    assert isinstance(entry.payload, memoryview)


@pytest.mark.parametrize("kind", [DigestType.CRC32C, DigestType.CRC32, DigestType.HMAC])
def test_any_flipped_bit_is_detected(kind):
    """R7: flipping any byte of header, digest or payload makes verification fail."""
    digest = DigestManager(kind, b"pw")
    body = package_entry(digest, 9, 4, 3, 20, b"some payload")
    for pos in range(len(body)):
        corrupt = bytearray(body)
        corrupt[pos] ^= 0x01
        with pytest.raises(DigestMismatchError):
            unpack_entry(digest, 9, 4, bytes(corrupt))


def test_wrong_ids_and_truncation_are_rejected():
    """R7: readers check the ledger id and entry id, and refuse truncated bodies."""
    digest = DigestManager("crc32c")
    body = package_entry(digest, 9, 4, 3, 20, b"abc")
    with pytest.raises(DigestMismatchError, match="ledger 9"):
        unpack_entry(digest, 10, 4, body)
    with pytest.raises(DigestMismatchError, match="entry id 4"):
        unpack_entry(digest, 9, 5, body)
    assert unpack_entry(digest, 9, None, body).entry_id == 4
    with pytest.raises(DigestMismatchError, match="shorter"):
        unpack_entry(digest, 9, 4, body[:20])


@pytest.mark.parametrize("kind", ALL_TYPES)
def test_batch_equals_single_entries_and_unpacks_zero_copy(kind):
    """R7: a batch is the single packaged entries back to back, with cumulative lengths."""
    digest = DigestManager(kind, b"pw")
    payloads = [b"a", b"", b"ccc", bytes(range(256))]
    data, sizes = package_batch(digest, 5, 10, 8, 100, payloads)
    singles, length = [], 100
    for i, p in enumerate(payloads):
        length += len(p)
        singles.append(package_entry(digest, 5, 10 + i, 8, length, p))
    assert data == b"".join(singles)
    assert sizes == [len(s) for s in singles]
    views = unpack_batch(digest, 5, [10, 11, 12, 13], sizes, data)
    assert [bytes(v) for v in views] == payloads
    assert all(v.obj is data for v in views)  # slices of the received buffer, not copies


def test_batch_with_a_corrupt_entry_fails():
    """R7: one bad entry in a batch fails verification; size mismatches are refused."""
    digest = DigestManager("crc32c")
    data, sizes = package_batch(digest, 5, 0, -1, 0, [b"x" * 10, b"y" * 10])
    corrupt = bytearray(data)
    corrupt[-1] ^= 0xFF
    with pytest.raises(DigestMismatchError):
        unpack_batch(digest, 5, [0, 1], sizes, bytes(corrupt))
    with pytest.raises(DigestMismatchError):
        unpack_batch(digest, 5, [0, 1], [sizes[0], sizes[1] - 1], data)
    with pytest.raises(DigestMismatchError):
        unpack_batch(digest, 5, [0, 2], sizes, data)


@pytest.mark.parametrize("kind", ALL_TYPES)
def test_explicit_lac_round_trip(kind):
    """R7: explicit LAC bodies are ledgerId | lac | digest over those 16 bytes."""
    digest = DigestManager(kind, b"pw")
    body = package_lac(digest, 3, 77)
    assert body[:16] == struct.pack(">qq", 3, 77)
    assert len(body) == 16 + digest.mac_length
    assert unpack_lac(digest, 3, body) == 77
    with pytest.raises(DigestMismatchError):
        unpack_lac(digest, 4, body)
    if digest.mac_length:
        with pytest.raises(DigestMismatchError):
            unpack_lac(digest, 3, body[:-1] + bytes([body[-1] ^ 1]))


def test_memoryview_payloads_are_accepted():
    """Payloads may be passed as memoryviews/bytearrays without changing the bytes produced."""
    for kind in ALL_TYPES:
        digest = DigestManager(kind, b"k")
        assert package_entry(digest, 1, 1, 0, 3, memoryview(b"abc")) == package_entry(digest, 1, 1, 0, 3, b"abc")
        data, _ = package_batch(digest, 1, 0, -1, 0, [bytearray(b"ab")])
        assert data == package_entry(digest, 1, 0, -1, 2, b"ab")
