"""How a LogProducer envelopes a record (`client.log.producer._enveloped`, `_Record.payload_as`): v1 without
headers, v2 with them, a v1 record re-enveloped in a v2 batch; bad input refused with a clear error."""

from __future__ import annotations

import concurrent.futures

import pytest

from bkledger.client.errors import InvalidOptionError
from bkledger.client.log.core import envelope as env
from bkledger.client.log.producer import _enveloped, _Record


def test_headers_make_envelope_2_and_plain_records_stay_1() -> None:
    """Headers (a list with a repeated key and a None value, or a mapping) give v2; none give v1."""
    payload, ts, version = _enveloped(b"v", b"k", 5, [("h", b"1"), ("h", None)])
    assert (version, ts) == (env.V2, 5000)
    assert env.decode_record(payload, env.V2) == env.Record(b"k", 5000, b"v", (("h", b"1"), ("h", None)))
    payload, _, version = _enveloped(b"v", None, 5, {"a": b"x"})
    assert version == env.V2 and env.decode_record(payload, env.V2).headers == (("a", b"x"),)
    payload, _, version = _enveloped(b"v", b"k", 5, None)
    assert version == env.V1 and env.decode(payload, env.V1) == (b"k", 5000, b"v")


def test_a_v1_record_in_a_v2_batch_is_re_enveloped() -> None:
    """A ledger has one envelope version: a record sent without headers, batched with one that has them,
    is written in v2 with no headers."""
    payload, ts, version = _enveloped(b"v", b"k", 7, None)
    record = _Record(payload, ts, concurrent.futures.Future(), version, b"k", b"v")
    assert record.payload_as(env.V1) == payload
    assert env.decode_record(record.payload_as(env.V2), env.V2) == env.Record(b"k", 7000, b"v", None)


@pytest.mark.parametrize("headers", [[("k", "text")], [(1, b"x")], ["nopair"]])
def test_bad_headers_are_refused_clearly(headers: object) -> None:
    with pytest.raises(InvalidOptionError, match="send: "):
        _enveloped(b"v", None, None, headers)  # type: ignore[arg-type]


def test_a_naive_datetime_is_utc_for_a_producer_as_for_a_writer():
    """A producer reads a naive datetime as UTC, as LogWriter.append does (records.timestamp_us), not as the
    machine's local time."""
    import datetime

    from bkledger.client.log import producer, records

    naive = datetime.datetime(2026, 1, 31, 12, 0, 0)
    _stored, ts_us, _version = producer._enveloped(b"v", None, naive, None)
    assert ts_us == records.timestamp_us(naive, 0) == records.timestamp_us(naive.replace(tzinfo=datetime.UTC), 0)
