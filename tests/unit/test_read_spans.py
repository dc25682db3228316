"""Payloads handed on as spans of received range batches (client.reader.Spans, in_order) and turned into
Arrow columns without one Python object per entry (spark_connector.arrow_io.spans_array)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema

from bkledger.client.protocol.digest import HEADER_LENGTH, DigestManager, package_batch
from bkledger.client.protocol.metadata import DigestType
from bkledger.client.reader import ReadChunk, Segment, Spans, entry_bounds, in_order
from bkledger.spark_connector import batch_reader as br
from bkledger.spark_connector import envelope as env
from bkledger.spark_connector.arrow_io import rows_to_batch, spans_array

DIGEST = DigestManager(DigestType.CRC32C, b"pw")
OVERHEAD = HEADER_LENGTH + DIGEST.mac_length


def _segment(payloads: list[bytes], ids: list[int]) -> Segment:
    """A range batch holding entries `ids` (any order) with these payloads."""
    parts = [package_batch(DIGEST, 5, e, 0, 0, [p]) for e, p in zip(ids, payloads, strict=True)]
    data = b"".join(d for d, _ in parts)
    starts, ends = entry_bounds(np.array([s[0] for _, s in parts], dtype=np.int64))
    return data, np.array(ids, dtype=np.int64), starts, ends


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30), st.integers(1, 3), st.randoms())
def test_striped_shares_come_back_in_entry_order(payloads, bookies, rnd) -> None:
    """Each bookie's share (entries in any spread, values short enough to sit inline in a view or not)
    gives the payloads in entry order, as memoryviews and as one binary column alike."""
    lo = 40
    owner = [rnd.randrange(bookies) for _ in payloads]
    segments = []
    for b in range(bookies):
        mine = [i for i, o in enumerate(owner) if o == b]
        if mine:
            segments.append(_segment([payloads[i] for i in mine], [lo + i for i in mine]))
    spans = in_order(segments, lo, len(payloads), OVERHEAD)
    assert spans is not None
    assert [bytes(v) for v in spans.views()] == payloads
    column = spans_array(spans)
    assert column.type == pa.binary()
    assert column.to_pylist() == payloads
    assert ReadChunk(list(range(len(payloads))), spans=spans).nbytes == sum(map(len, payloads))


def test_a_missing_or_doubled_entry_is_not_in_order() -> None:
    """in_order gives None unless every entry is there exactly once (the caller then fills in)."""
    a = _segment([b"a" * 20, b"c" * 20], [10, 12])
    assert in_order([a], 10, 3, OVERHEAD) is None
    assert in_order([a, _segment([b"a" * 20], [10])], 10, 3, OVERHEAD) is None
    assert in_order([a, _segment([b"x"], [13])], 10, 3, OVERHEAD) is None
    assert in_order([a, _segment([b"b"], [11])], 10, 3, OVERHEAD) is not None


def test_joined_chunks_keep_their_spans_until_payloads_are_asked_for() -> None:
    one = in_order([_segment([b"p" * 30, b"q"], [0, 1])], 0, 2, OVERHEAD)
    two = in_order([_segment([b"r" * 15], [2])], 2, 1, OVERHEAD)
    assert one is not None and two is not None
    chunk = ReadChunk.joined([ReadChunk([0, 1], spans=one), ReadChunk([2], spans=two)])
    assert chunk.packed is not None and len(chunk.packed.buffers) == 2
    assert spans_array(chunk.packed).to_pylist() == [b"p" * 30, b"q", b"r" * 15]
    assert [bytes(p) for p in chunk.payloads] == [b"p" * 30, b"q", b"r" * 15]
    assert chunk.packed is None                   # made once; a mixed join then uses the payloads
    mixed = ReadChunk.joined([chunk, ReadChunk([3], [b"s"])])
    assert mixed.packed is None and [bytes(p) for p in mixed.payloads][-1] == b"s"


def test_spans_and_payloads_make_the_same_batch() -> None:
    """The Spark batch of a chunk is the same from spans as from payloads, with or without envelope."""
    for envelope, schema_env in ((env.NONE, False), (env.V1, True)):
        values = [b"v" * n for n in (0, 5, 13, 200)]
        payloads = [env.encode(b"k%d" % i if i % 2 else None, 1000 * i if i else None, v)
                    for i, v in enumerate(values)] if envelope == env.V1 else values
        spans = in_order([_segment(payloads, [7, 8, 9, 10])], 7, 4, OVERHEAD)
        assert spans is not None
        schema = to_arrow_schema(br.read_schema(schema_env), timezone="UTC")
        ledgers = np.full(4, 3, dtype=np.int64)
        from_spans = rows_to_batch(schema, "log", ledgers, [7, 8, 9, 10], spans, envelope)
        from_list = rows_to_batch(schema, "log", ledgers, [7, 8, 9, 10], payloads, envelope)
        assert from_spans.equals(from_list)
        assert from_spans.column("value").to_pylist() == values


def test_spans_views_are_slices_of_the_received_buffers() -> None:
    data, ids, starts, ends = _segment([b"abc" * 10], [0])
    spans = Spans([data], np.zeros(1, dtype=np.int64), starts + OVERHEAD, ends)
    (view,) = spans.views()
    assert view.obj is data and bytes(view) == b"abc" * 10
