"""Packing byte ranges of several buffers back to back (spark_connector.gather): the bytes of each range,
in order, whatever their lengths (empty, inline in a binary view, or not), buffers and total size."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkledger.spark_connector import gather


@st.composite
def ranges(draw: st.DrawFn) -> tuple[list[bytes], list[tuple[int, int, int]]]:
    buffers = draw(st.lists(st.binary(max_size=64), min_size=1, max_size=4))
    picks = []
    for _ in range(draw(st.integers(0, 40))):
        k = draw(st.integers(0, len(buffers) - 1))
        a = draw(st.integers(0, len(buffers[k])))
        b = draw(st.integers(a, len(buffers[k])))
        picks.append((k, a, b))
    return buffers, picks


def _pack(buffers: list[bytes], picks: list[tuple[int, int, int]]) -> pa.Array:
    which, starts, ends = (np.array([p[i] for p in picks], dtype=np.int64) for i in range(3))
    return gather.packed(buffers, which, starts, ends)


@settings(max_examples=300, deadline=None)
@given(ranges())
def test_each_range_comes_out_whole_and_in_order(case) -> None:
    buffers, picks = case
    array = _pack(buffers, picks)
    expected = [buffers[k][a:b] for k, a, b in picks]
    assert array.type == pa.binary()
    assert array.to_pylist() == expected
    data, offsets = gather.array_parts(array)
    assert bytes(data) == b"".join(expected)
    assert offsets.tolist() == np.cumsum([0] + [len(e) for e in expected]).tolist()


@settings(max_examples=200, deadline=None)
@given(ranges())
def test_the_native_pass_and_the_numpy_views_pack_the_same(case) -> None:
    """With and without the native module (`pack_ranges`, else binary views cast by Arrow): the same
    array and the same (data, offsets)."""
    assert gather.NATIVE is not None, "wire._native was not built"
    buffers, picks = case
    which, starts, ends = (np.array([p[i] for p in picks], dtype=np.int64) for i in range(3))
    native = gather.packed(buffers, which, starts, ends)
    native_parts = gather.packed_parts(buffers, which, starts, ends)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gather, "NATIVE", None)
        numpy_made = gather.packed(buffers, which, starts, ends)
        numpy_parts = gather.packed_parts(buffers, which, starts, ends)
    assert native.equals(numpy_made)
    assert bytes(native_parts[0]) == bytes(numpy_parts[0])
    assert native_parts[1].tolist() == numpy_parts[1].tolist()


@pytest.mark.parametrize("native", [True, False])
def test_past_two_gib_the_result_takes_64_bit_offsets(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    if not native:
        monkeypatch.setattr(gather, "NATIVE", None)
    monkeypatch.setattr(gather, "MAX_BINARY", 10)
    buffers = [b"0123456789abcdefghij", b"XY"]
    array = _pack(buffers, [(0, 0, 20), (1, 0, 2), (0, 3, 3)])
    assert array.type == pa.large_binary()
    data, offsets = gather.array_parts(array)
    assert bytes(data) == b"0123456789abcdefghijXY"
    assert offsets.tolist() == [0, 20, 22, 22]
