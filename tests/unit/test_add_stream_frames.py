"""The add port's framing (wire.add_stream): frames cut right however the bytes arrive, and every way a
stream can break the framing refused with a reason, before an oversized body is kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkledger.wire.add_stream import (
    HEADER_SIZE,
    MAGIC,
    REFUSED,
    REQUEST,
    RESPONSE,
    FrameError,
    FrameReader,
    frame,
    header,
    unpack_header,
)

BOOKIE_SIDE = frozenset({REQUEST})


def _bookie_reader(limit: int = 1 << 20) -> FrameReader:
    return FrameReader(BOOKIE_SIDE, limit, MAGIC)


@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(1, 64), min_size=1, max_size=40))
def test_frames_come_out_whole_and_in_order_however_the_bytes_are_cut(bodies: list[bytes], cuts: list[int]) -> None:
    stream = MAGIC + b"".join(frame(REQUEST, body) for body in bodies)
    reader = _bookie_reader()
    got: list[tuple[int, bytes]] = []
    at, i = 0, 0
    while at < len(stream):
        step = cuts[i % len(cuts)]
        got += reader.feed(stream[at:at + step])
        at, i = at + step, i + 1
    assert got == [(REQUEST, body) for body in bodies]
    assert reader.buffered == 0


def test_a_header_round_trips() -> None:
    assert unpack_header(header(RESPONSE, 70_000)) == (70_000, RESPONSE)
    assert len(header(REQUEST, 0)) == HEADER_SIZE


def test_the_preamble_may_arrive_a_byte_at_a_time() -> None:
    reader = _bookie_reader()
    for byte in MAGIC:
        assert reader.feed(bytes([byte])) == []
    assert reader.feed(frame(REQUEST, b"x")) == [(REQUEST, b"x")]


@pytest.mark.parametrize("opening", [b"GET / HTTP/1.1\r\n", b"PRI * HTTP/2.0", b"BKADD\x00\x00\x02", b"\x00"])
def test_a_stream_that_is_not_this_framing_is_refused_at_its_first_wrong_byte(opening: bytes) -> None:
    with pytest.raises(FrameError, match="preamble"):
        _bookie_reader().feed(opening)


def test_a_body_over_the_limit_is_refused_from_its_header_alone() -> None:
    reader = _bookie_reader(limit=1000)
    with pytest.raises(FrameError, match="1001 bytes, over the limit of 1000"):
        reader.feed(MAGIC + header(REQUEST, 1001))
    assert reader.buffered == HEADER_SIZE      # nothing of the body was waited for or kept


def test_a_body_at_the_limit_is_taken() -> None:
    assert _bookie_reader(limit=1000).feed(MAGIC + frame(REQUEST, b"a" * 1000)) == [(REQUEST, b"a" * 1000)]


@pytest.mark.parametrize("kind", [0, RESPONSE, REFUSED, 4, 255])
def test_a_frame_of_a_kind_this_side_does_not_take_is_refused(kind: int) -> None:
    with pytest.raises(FrameError, match=f"kind {kind}"):
        _bookie_reader().feed(MAGIC + header(kind, 3) + b"abc")


def test_frames_after_a_good_one_in_the_same_piece_are_checked_too() -> None:
    reader = _bookie_reader(limit=10)
    with pytest.raises(FrameError, match="over the limit"):
        reader.feed(MAGIC + frame(REQUEST, b"ok") + header(REQUEST, 11))

