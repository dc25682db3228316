"""Record envelope v2 (Kafka-style headers) and the LogWriter's record forms (issue 44 item 1): single and
bulk encodings agree and round-trip, malformed headers are refused typed, a reader that does not know a
version refuses it naming the version and "upgrade bkledger", the writer's timestamps and refusals. Pure."""

from __future__ import annotations

import contextlib
import datetime

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkledger.client.errors import InvalidBulkError
from bkledger.client.log import records
from bkledger.client.log.core import envelope as env
from bkledger.spark_connector import envelope as old_home
from bkledger.spark_connector.arrow_io import HEADERS, chunk_to_batch, header_parts

header_lists = st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=8),
                                                       st.one_of(st.none(), st.binary(max_size=12))), max_size=4))
v2_records = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                                st.one_of(st.none(), st.integers(-(2**62), 2**62)),
                                st.binary(max_size=40), header_lists), max_size=25)


def as_record(key, ts, value, headers) -> env.Record:
    return env.Record(key, ts, value, None if headers is None else tuple(headers))


def bulk_v2(recs):
    values = records._key_parts([v for _, _, v, _ in recs])[:2]
    keys = records._key_parts([k for k, _, _, _ in recs])
    times = (np.array([t or 0 for _, t, _, _ in recs], np.int64),
             np.array([t is not None for _, t, _, _ in recs], np.bool_))
    return env.encode_bulk(values, keys, times, env.header_blocks([h for _, _, _, h in recs]), env.V2)


@settings(max_examples=200, deadline=None)
@given(v2_records)
def test_v2_bulk_equals_single_and_both_decode_back(recs) -> None:
    data, offsets = bulk_v2(recs)
    entries = [bytes(data[offsets[i]:offsets[i + 1]]) for i in range(len(recs))]
    assert entries == [env.encode(k, t, v, h, env.V2) for k, t, v, h in recs]
    assert [env.decode_record(e, env.V2) for e in entries] == [as_record(*r) for r in recs]
    dec = env.decode_bulk(data, offsets, env.V2)
    assert dec.headers() == [None if h is None else tuple(h) for _, _, _, h in recs]
    values = [bytes(dec.value_data[dec.value_offsets[i]:dec.value_offsets[i + 1]]) for i in range(len(recs))]
    assert values == [v for _, _, v, _ in recs]


@settings(max_examples=50, deadline=None)
@given(v2_records)
def test_spark_headers_column_round_trips(recs) -> None:
    """What Spark writes from a headers column reads back as the same column (includeHeaders)."""
    column = pa.array([None if h is None else [{"key": k, "value": v} for k, v in h] for _, _, _, h in recs],
                      HEADERS)
    assert env.header_blocks([h for _, _, _, h in recs])[1].tolist() == header_parts(column)[1].tolist()
    data, offsets = bulk_v2(recs)
    payloads = [memoryview(data[offsets[i]:offsets[i + 1]].tobytes()) for i in range(len(recs))]
    schema = pa.schema([("value", pa.binary()), ("key", pa.binary()), ("headers", HEADERS)])
    batch = chunk_to_batch(schema, "t", 3, list(range(len(recs))), payloads, env.V2)
    assert batch.column("headers").equals(column) or batch.column("headers").to_pylist() == column.to_pylist()
    v1 = chunk_to_batch(schema, "t", 3, [0], [env.encode(b"k", 5, b"v")], env.V1)
    assert v1.column("headers").to_pylist() == [None]


def test_v1_records_stay_v1_and_v1_refuses_headers() -> None:
    """No headers: the v1 bytes (older readers read them); headers with version 1: refused, not dropped."""
    assert env.encode(b"k", 7, b"v") == env.HEADER.pack(3, 7, 1) + b"kv"
    with pytest.raises(env.EnvelopeError, match="version 2"):
        env.encode(b"k", 7, b"v", [("a", b"b")], env.V1)
    with pytest.raises(env.EnvelopeError, match="version 2"):
        env.encode_bulk((np.zeros(0, np.uint8), np.zeros(1, np.int64)), None, None,
                        env.header_blocks([]), env.V1)


def test_a_reader_refuses_a_version_it_does_not_know(monkeypatch: pytest.MonkeyPatch) -> None:
    """A v2 ledger before a reader that knows only v1 (as bkledger before this change), and a future v3
    before this one: EnvelopeVersionError naming the version and "upgrade bkledger", never a misread."""
    v2_ledger = env.custom_metadata(env.V2)
    assert env.version_of(v2_ledger) == env.V2
    with pytest.raises(env.EnvelopeVersionError, match=r"envelope version 3 .*upgrade bkledger") as err:
        env.version_of({env.ENVELOPE_KEY: b"3"})
    assert err.value.version == 3
    with pytest.raises(env.EnvelopeVersionError, match="upgrade bkledger"):
        env.decode_record(env.encode(None, 1, b"v"), 3)
    monkeypatch.setattr(env, "SUPPORTED", (env.NONE, env.V1))          # an older reader
    with pytest.raises(env.EnvelopeVersionError, match=r"envelope version 2 .*upgrade bkledger"):
        env.version_of(v2_ledger)
    with pytest.raises(env.EnvelopeVersionError, match="upgrade bkledger"):
        env.decode_bulk(np.frombuffer(env.encode(None, 1, b"v", [("h", b"")]), np.uint8),
                        np.array([0, 22], np.int64), env.V2)


def test_flags_a_version_does_not_have_are_refused() -> None:
    """A v2 entry (headers flag) handed to a v1 decoder fails typed instead of yielding garbage."""
    v2 = env.encode(b"k", 1, b"value", [("h", b"x")])
    with pytest.raises(env.EnvelopeError, match="flags"):
        env.decode_record(v2, env.V1)
    with pytest.raises(env.EnvelopeError, match="flags"):
        env.decode_bulk(np.frombuffer(v2, np.uint8), np.array([0, len(v2)], np.int64), env.V1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=6))), max_size=4),
       st.data())
def test_malformed_header_blocks_raise_envelope_errors(headers, data) -> None:
    """Every cut or corruption of a headers block decodes to EnvelopeError or to some headers, never to
    another exception or a read past the block."""
    block = env.encode_headers(tuple(headers))
    assert env.decode_headers(block) == tuple(headers)
    cut = data.draw(st.integers(0, len(block) - 1))
    with pytest.raises(env.EnvelopeError):
        env.decode_headers(block[:cut])
    junk = bytearray(block)
    at = data.draw(st.integers(0, len(junk) - 1))
    junk[at] = data.draw(st.integers(0, 255))
    with contextlib.suppress(env.EnvelopeError):
        env.decode_headers(bytes(junk))


def test_old_import_path_is_the_same_module() -> None:
    assert old_home is env and old_home.encode is env.encode


# ---- the LogWriter's record forms (client.log.records) --------------------------------------------
def test_timestamps_as_given_and_by_default() -> None:
    """int: milliseconds since the epoch (Kafka's unit); datetime: that moment (naive: UTC); none given:
    the writer's clock at the call; NO_TIMESTAMP: none."""
    assert records.timestamp_us(1_700_000_000_123, now_us=5) == 1_700_000_000_123_000
    aware = datetime.datetime(2026, 1, 31, 12, 0, 0, 7, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))
    assert records.timestamp_us(aware, 5) == int(aware.timestamp()) * 1_000_000 + 7
    assert records.timestamp_us(aware.replace(tzinfo=None), 5) == records.timestamp_us(
        aware.replace(tzinfo=datetime.UTC), 5)
    assert records.timestamp_us(None, now_us=5) == 5
    assert records.timestamp_us(records.NO_TIMESTAMP, 5) is None
    with pytest.raises(TypeError, match="milliseconds"):
        records.timestamp_us(1.5, 5)  # type: ignore[arg-type]


def test_bare_and_v1_writers_refuse_what_they_cannot_carry() -> None:
    records.check_fields("t", env.NONE, None, None, None)
    for fields in ((b"k", None, None), (None, 5, None), (None, None, [("h", b"")])):
        with pytest.raises(env.EnvelopeError, match="envelope=1"):
            records.check_fields("t", env.NONE, *fields)
    records.check_fields("t", env.V1, b"k", 5, None)
    with pytest.raises(env.EnvelopeError, match="envelope=2"):
        records.check_fields("t", env.V1, None, None, {"h": b""})
    with pytest.raises(TypeError, match="header key"):
        records.enveloped(env.V2, b"v", None, None, [(b"bytes key", b"")], 5)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="record key"):
        records.enveloped(env.V1, b"v", "text", None, None, 5)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(v2_records.filter(bool), st.integers(0, 7))
def test_bulk_records_equal_single_records(recs, lead) -> None:
    """append_many's enveloping equals append's, record for record (offsets need not start at 0; a bulk
    has at least one record, as LedgerHandle.add_entries says), and its time span covers theirs."""
    data = b"\xff" * lead + b"".join(v for _, _, v, _ in recs)
    offsets = np.cumsum([lead] + [len(v) for _, _, v, _ in recs])
    stamps = [records.NO_TIMESTAMP if t is None else t // 1000 for _, t, _, _ in recs]
    got, bounds, span = records.enveloped_many(env.V2, data, offsets, [k for k, _, _, _ in recs], stamps,
                                               [h for _, _, _, h in recs], now_us=9)
    singles = [records.enveloped(env.V2, v, k, s, h, 9) for (k, _, v, h), s in zip(recs, stamps, strict=True)]
    assert [bytes(got[bounds[i]:bounds[i + 1]]) for i in range(len(recs))] == [e for e, _ in singles]
    micros = [(t // 1000) * 1000 for _, t, _, _ in recs if t is not None]
    assert span == ((min(micros), max(micros)) if micros else None)
    whole = None
    for _, one in singles:
        whole = records.widened(whole, one)
    assert whole == span


def test_bulk_records_checks() -> None:
    with pytest.raises(InvalidBulkError, match="keys has 1 items for 2 records"):
        records.enveloped_many(env.V1, b"ab", [0, 1, 2], [b"k"], None, None, 0)
    with pytest.raises(InvalidBulkError, match="within the buffer"):
        records.enveloped_many(env.V1, b"ab", [0, 5], None, None, None, 0)
    data, bounds, span = records.enveloped_many(env.V1, np.frombuffer(b"abc", np.uint8), [1, 3], None, None,
                                                None, 42)
    assert env.decode_record(bytes(data[bounds[0]:bounds[1]]), env.V1) == env.Record(None, 42, b"bc")
    assert span == (42, 42)
    assert records.enveloped(env.NONE, b"v", None, None, None, 42) == (b"v", None)


def test_sealing_records_a_time_span_once_known() -> None:
    """The log keeps the span the writer gives when it seals a ledger; no span given keeps what it had."""
    from bkledger.client.log.core import meta as lm

    meta = lm.with_ledger_appended(lm.new_log("t", 1), 10, 2, envelope=env.V1)
    sealed = lm.with_ledger_sealed(meta, 10, 4, 50, 3, (5, 9))
    assert sealed.ledgers[0].time_span == (5, 9) and sealed.ledgers[0].entries == 5
    assert lm.with_ledger_sealed(meta, 10, 4, 50, 3).ledgers[0].time_span is None
    assert lm.decode("t", lm.encode(sealed)).ledgers[0].time_span == (5, 9)


def test_spark_write_layout_picks_v2_for_a_headers_column_only() -> None:
    """A DataFrame with a headers column of Kafka's type is written with envelope v2; without one, v1 (or
    bare values); a headers column of another type, or with envelope=false, fails naming the option."""
    from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

    from bkledger.spark_connector.batch_writer import plan_layout
    from bkledger.spark_connector.options import BkLedgerOptionError

    kafka = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType(), False)]))
    value = StructField("value", BinaryType())
    with_headers = StructType([value, StructField("headers", kafka)])
    assert plan_layout(with_headers, "auto", "t").envelope == env.V2
    assert plan_layout(with_headers, "auto", "t").headers == "headers"
    assert plan_layout(StructType([value, StructField("key", BinaryType())]), "auto", "t").envelope == env.V1
    assert plan_layout(StructType([value]), "auto", "t").envelope == env.NONE
    with pytest.raises(BkLedgerOptionError, match="headers must be array<struct<key: string, value: binary>>"):
        plan_layout(StructType([value, StructField("headers", ArrayType(StringType()))]), "auto", "t")
    with pytest.raises(BkLedgerOptionError, match="envelope"):
        plan_layout(with_headers, "false", "t")


def test_include_headers_option_and_schema() -> None:
    """includeHeaders (Kafka's name, default false) adds the headers column to the read schema, for log
    and raw-ledger reads alike; a bad value fails naming the option."""
    from bkledger.spark_connector.batch_reader import check_schema, read_schema
    from bkledger.spark_connector.options import BkLedgerOptionError
    from bkledger.spark_connector.read_options import parse_read_options

    base = {"metadataServiceUri": "zk://127.0.0.1:2181/ledgers"}
    assert parse_read_options({**base, "log": "t"}).include_headers is False
    assert parse_read_options({**base, "log": "t", "includeHeaders": "true"}).include_headers is True
    assert parse_read_options({**base, "ledgers": "1", "includeHeaders": "true"}).include_headers is True
    with pytest.raises(BkLedgerOptionError, match="includeHeaders"):
        parse_read_options({**base, "log": "t", "includeHeaders": "maybe"})
    from bkledger.spark_connector.stream_source import discovery_options, parse_stream_options

    stream = {**base, "log": "t", "includeHeaders": "true", "maxEntriesPerTrigger": "5"}
    assert parse_stream_options(stream).read.include_headers and discovery_options(stream).include_headers
    schema = read_schema(True, headers=True)
    assert schema.fieldNames()[-3:] == ["key", "timestamp", "headers"]
    assert schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    check_schema(schema)
    assert "headers" not in read_schema(True).fieldNames()


def test_the_cli_shows_headers_and_names_an_unknown_version() -> None:
    """`log tail` / `shell readledger` fields of a v2 record carry its headers; an entry of a version this
    bkledger does not know shows raw with the error naming it, not misread."""
    from bkledger.bookie.log_records import shown, text_fields

    fields = shown(env.encode(b"k", 1_000_000, b"v", [("trace", b"abc"), ("gone", None)]), env.V2)
    assert fields["headers"] == [["trace", "abc"], ["gone", None]] and fields["value"] == "v"
    assert "headers=trace=abc,gone=" in text_fields(fields)
    future = shown(b"\x00" * 20, 3)
    assert "envelope version 3" in future["error"] and "upgrade bkledger" in future["error"]


def test_an_envelope_version_is_an_int() -> None:
    """envelope=True would name "True" in the ledger's metadata, which no reader could parse: refused."""
    for bad in (True, 1.0, "1"):
        with pytest.raises(TypeError, match="envelope version is an int"):
            env.check_version(bad)  # type: ignore[arg-type]
    assert env.check_version(2) == env.V2
