"""Hand-written protobuf parsers (`bookie.add_request`, `wire.range_batch`) held to protobuf's own."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.protobuf.message import DecodeError


def assert_read_as_protobuf_reads(raw: bytes, theirs: Callable[[bytes], object], ours: Callable[[bytes], object]
                                  ) -> None:
    """`ours(raw)` equals `theirs(raw)` (the generated parser's result) where protobuf accepts `raw`, and
    raises ValueError where protobuf refuses it. Groups (wire types 3 and 4) are refused by ours alone:
    protobuf passes over them, and no bkledger message has any."""
    try:
        expected = theirs(raw)
    except DecodeError:
        with pytest.raises(ValueError):
            ours(raw)
        return
    try:
        got = ours(raw)
    except ValueError:
        assert any(b & 7 in (3, 4) for b in raw)
        return
    assert got == expected
