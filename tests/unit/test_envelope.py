"""The record envelope of the Spark connector: single and bulk encodings agree and round-trip."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkledger.spark_connector import envelope as env
from bkledger.spark_connector.arrow_io import byte_parts, chunk_to_batch, timestamp_parts

records = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                             st.one_of(st.none(), st.integers(-(2**62), 2**62)),
                             st.binary(max_size=40)), max_size=30)


def bulk_encode(recs):
    values = byte_parts(pa.array([v for _, _, v in recs], pa.binary()))[:2]
    keys = byte_parts(pa.array([k for k, _, _ in recs], pa.binary()))
    times = timestamp_parts(pa.array([t for _, t, _ in recs], pa.timestamp("us", tz="UTC")))
    return env.encode_bulk(values, keys, times)


@settings(max_examples=200, deadline=None)
@given(records)
def test_bulk_encoding_equals_single_and_decodes_back(recs) -> None:
    data, offsets = bulk_encode(recs)
    entries = [bytes(data[offsets[i]:offsets[i + 1]]) for i in range(len(recs))]
    assert entries == [env.encode(k, t, v) for k, t, v in recs]
    assert [env.decode(e) for e in entries] == recs
    dec = env.decode_bulk(data, offsets)
    got_values = [bytes(dec.value_data[dec.value_offsets[i]:dec.value_offsets[i + 1]]) for i in range(len(recs))]
    got_keys = [bytes(dec.key_data[dec.key_offsets[i]:dec.key_offsets[i + 1]]) if dec.key_valid[i] else None
                for i in range(len(recs))]
    got_times = [int(t) if ok else None for t, ok in zip(dec.timestamps, dec.timestamp_valid, strict=True)]
    assert list(zip(got_keys, got_times, got_values, strict=True)) == recs


@settings(max_examples=50, deadline=None)
@given(records)
def test_read_batches_carry_the_record(recs) -> None:
    data, offsets = bulk_encode(recs)
    payloads = [memoryview(data[offsets[i]:offsets[i + 1]].tobytes()) for i in range(len(recs))]
    schema = pa.schema([("log", pa.string()), ("ledger_id", pa.int64()), ("entry_id", pa.int64()),
                        ("value", pa.binary()), ("key", pa.binary()), ("timestamp", pa.timestamp("us", tz="UTC"))])
    batch = chunk_to_batch(schema, "orders", 9, list(range(4, 4 + len(recs))), payloads, env.V1)
    assert batch.schema.equals(schema) and batch.num_rows == len(recs)
    assert batch.column("value").to_pylist() == [v for _, _, v in recs]
    assert batch.column("key").to_pylist() == [k for k, _, _ in recs]
    micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert micros == [t for _, t, _ in recs]
    assert batch.column("entry_id").to_pylist() == list(range(4, 4 + len(recs)))


def test_ledger_marker() -> None:
    assert env.version_of({}) == env.NONE
    assert env.version_of(env.custom_metadata(env.V1)) == env.V1
    assert env.custom_metadata(env.NONE) == {}
    with pytest.raises(env.EnvelopeError, match="not supported"):
        env.version_of({env.ENVELOPE_KEY: b"9"})


def test_truncated_entries_are_rejected() -> None:
    with pytest.raises(env.EnvelopeError):
        env.decode(b"\x01\x00")
    with pytest.raises(env.EnvelopeError):
        env.decode_bulk(np.frombuffer(b"\x01" * 5, np.uint8), np.array([0, 5], np.int64))
    bad = env.encode(b"key", None, b"")[:-1]
    with pytest.raises(env.EnvelopeError, match="runs past"):
        env.decode_bulk(np.frombuffer(bad, np.uint8), np.array([0, len(bad)], np.int64))


@pytest.mark.parametrize("value", ["orders", "", "ünïcode", None])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_repeated_string_column(value, n) -> None:
    from bkledger.spark_connector.arrow_io import repeated_string

    column = repeated_string(value, n)
    column.validate(full=True)
    assert column.type == pa.string() and column.to_pylist() == [value] * n
