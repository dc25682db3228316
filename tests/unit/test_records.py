"""Record codec: round trips, torn tails, junk and CRC damage (R23)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkledger.bookie.core import records as rec


def _all(buf: bytes, start: int = 0) -> tuple[list[tuple[int, rec.Record]], int]:
    it = rec.iter_records(buf, start)
    out = list(it)
    return out, it.end


def _sample() -> list[bytes]:
    return [
        rec.encode_ledger_key(7, b"k" * 20),
        rec.encode_add_batch(7, [0, 1, 2], [3, 0, 5], b"abcdefgh"),
        rec.encode_fence(7),
        rec.encode_explicit_lac(7, b"lac-body"),
        rec.encode_add_batch(8, [10], [4], memoryview(b"wxyz")),
    ]


def test_round_trip_every_type() -> None:
    frames = _sample()
    buf = b"".join(frames)
    out, end = _all(buf)
    assert end == len(buf)
    assert [off for off, _ in out] == list(np.cumsum([0] + [len(f) for f in frames[:-1]]))
    key, batch, fence, lac, single = (r for _, r in out)
    assert key == rec.LedgerKeyRecord(7, b"k" * 20)
    assert fence == rec.FenceRecord(7)
    assert lac == rec.ExplicitLacRecord(7, b"lac-body")
    assert isinstance(batch, rec.AddBatchRecord)
    assert batch.ledger_id == 7 and batch.entry_ids.tolist() == [0, 1, 2]
    assert batch.sizes.tolist() == [3, 0, 5]
    assert bytes(batch.data) == b"abcdefgh"
    off = out[1][0]
    assert buf[off + batch.data_offset : off + batch.data_offset + 8] == b"abcdefgh"
    assert batch.data_offset == rec.add_batch_data_offset(3)
    assert isinstance(single, rec.AddBatchRecord) and bytes(single.data) == b"wxyz"


def test_empty_add_batch_and_empty_key() -> None:
    buf = rec.encode_add_batch(1, [], [], b"") + rec.encode_ledger_key(2, b"")
    (_, batch), (_, key) = _all(buf)[0]
    assert isinstance(batch, rec.AddBatchRecord) and len(batch.entry_ids) == 0
    assert key == rec.LedgerKeyRecord(2, b"")


@settings(max_examples=60, deadline=None)
@given(
    ledger_id=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    sizes=st.lists(st.integers(min_value=0, max_value=300), max_size=40),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_add_batch_round_trip_random(ledger_id: int, sizes: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 2**62, size=len(sizes)).tolist()
    data = rng.integers(0, 256, size=sum(sizes), dtype=np.uint8).tobytes()
    frame = rec.encode_add_batch(ledger_id, ids, sizes, data)
    (off, r), = _all(b"xx" + frame, 2)[0]
    assert off == 2 and isinstance(r, rec.AddBatchRecord)
    assert r.ledger_id == ledger_id and r.entry_ids.tolist() == ids and r.sizes.tolist() == sizes
    assert bytes(r.data) == data
    assert frame[r.data_offset :] == data


def test_torn_tail_at_every_byte_keeps_the_prefix() -> None:
    frames = _sample()
    prefix = b"".join(frames[:-1])
    last = frames[-1]
    for cut in range(len(last)):
        out, end = _all(prefix + last[:cut])
        assert len(out) == len(frames) - 1
        assert end == len(prefix)


def test_junk_and_zero_padding_after_records() -> None:
    prefix = b"".join(_sample())
    for junk in (b"\0" * 4096, b"\xff" * 64, bytes(range(256)), b"\x05\0\0\0\0\0\0\0\x01"):
        out, end = _all(prefix + junk)
        assert len(out) == 5 and end == len(prefix)


def test_crc_flip_stops_there() -> None:
    frames = _sample()
    buf = bytearray(b"".join(frames))
    third = len(frames[0]) + len(frames[1])
    buf[third + rec.FRAME_SIZE] ^= 0x40  # payload byte of the FENCE record
    out, end = _all(bytes(buf))
    assert len(out) == 2 and end == third
    it = rec.iter_records(bytes(buf))
    list(it)
    assert not it.incomplete


def test_incomplete_flag_for_partial_frame() -> None:
    frame = rec.encode_fence(3)
    it = rec.iter_records(frame[:-1])
    assert list(it) == [] and it.incomplete and it.end == 0
    assert rec.valid_prefix_end(frame + frame[:5]) == len(frame)


def test_log_mark_codec() -> None:
    mark = rec.LogMark(0x18F00000000, 123456)
    raw = rec.encode_log_mark(mark)
    assert len(raw) == rec.MARK_SIZE == 16
    assert rec.decode_log_mark(raw) == mark
    assert rec.decode_log_mark(raw[:-1]) is None
    assert rec.LogMark(1, 5) < rec.LogMark(1, 6) < rec.LogMark(2, 0)


@settings(max_examples=200, deadline=None)
@given(blob=st.binary(min_size=0, max_size=200), data=st.data())
def test_be64_at_reads_what_struct_reads(blob: bytes, data: st.DataObject) -> None:
    """be64_at (one strided gather) gives struct's big-endian int64 at every position that fits, and
    refuses a position whose 8 bytes run past the end."""
    fits = list(range(len(blob) - 7))
    positions = data.draw(st.lists(st.sampled_from(fits), max_size=20)) if fits else []
    got = rec.be64_at(memoryview(blob), np.asarray(positions, dtype=np.int64))
    assert got.dtype == np.int64
    assert got.tolist() == [struct.unpack_from(">q", blob, p)[0] for p in positions]
    with pytest.raises(IndexError):
        rec.be64_at(blob, np.asarray([max(len(blob) - 7, 0)], dtype=np.int64))
