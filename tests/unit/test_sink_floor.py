"""spark_connector.sink_floor: the floor a streaming sink's commits sweep above, lagging one commit."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from bkledger.spark_connector.sink_floor import NONE, SinkFloor, parse_floor

TAG = "sink:s1"


def test_each_commit_records_the_watermark_of_the_commit_before_as_the_floor() -> None:
    first = SinkFloor().advanced(10)
    assert first == SinkFloor(NONE, 10)                  # the first two commits read every ledger
    second = first.advanced(25)
    assert second == SinkFloor(10, 25)
    assert second.advanced(40) == SinkFloor(25, 40)


@given(st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=20))
def test_the_floor_never_passes_the_watermark_a_commit_took_before_the_last(watermarks: list[int]) -> None:
    ordered = sorted(watermarks)
    floor = SinkFloor()
    for i, w in enumerate(ordered):
        floor = floor.advanced(w)
        assert floor.next == w
        assert floor.floor == (ordered[i - 1] if i else NONE)


def test_parse_round_trip_and_anything_else_is_no_floor() -> None:
    assert parse_floor(json.dumps({"sink": TAG, "floor": 3, "next": 9}).encode(), TAG) == SinkFloor(3, 9)
    for bad in (b"", b"{", b"[]", b"null", json.dumps({"sink": "sink:other", "floor": 3, "next": 9}).encode(),
                json.dumps({"sink": TAG, "floor": "3", "next": 9}).encode(),
                json.dumps({"sink": TAG, "floor": True, "next": 9}).encode(),
                json.dumps({"sink": TAG, "floor": -5, "next": 9}).encode(),
                json.dumps({"sink": TAG, "floor": 3}).encode()):
        assert parse_floor(bad, TAG) == SinkFloor(), bad
