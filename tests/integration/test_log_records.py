"""LogWriter records like Kafka's (issue 44 item 1) on a real cluster: keys, timestamps and headers given to
append / append_async / append_many are read back by open_log_reader (decoded with each ledger's envelope
version, which the log records as it does the Spark writer's, with each sealed ledger's time span), across
rolls; the default timestamp is the writer's clock at the append; a writer refuses what its envelope cannot
carry and stays usable. The reader's records decode the envelope of their ledger (`key`, `timestamp_us`,
`headers`, `value`)."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper
from bkledger.client.log import records
from bkledger.client.log.core import envelope as env
from tests.integration.conftest import start_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[LocalCluster]:
    made = start_cluster(tmp_path_factory.mktemp("records"), zookeeper, 3)
    try:
        yield made
    finally:
        made.down()


@pytest.fixture
def bk(cluster: LocalCluster, bk_factory) -> BookKeeper:
    return bk_factory(cluster.metadata_service_uri)


def read_back(bk: BookKeeper, name: str, count: int) -> list[tuple[int, env.Record]]:
    """(ledger id, decoded record) of the log's first `count` records as the reader decodes them, which is
    as the envelope version the log records for each ledger says."""
    versions = {led.ledger_id: led.envelope for led in bk.log_metadata(name).ledgers}
    with bk.open_log_reader(name) as reader:
        got = list(reader.read(max_records=count, timeout=10))
    assert len(got) == count
    for r in got:
        assert r.envelope == (versions[r.ledger_id] or 0)
        assert r.record == env.decode_record(r.payload, r.envelope)
        assert (r.key, r.timestamp_us, r.headers, r.value) == (r.record.key, r.record.timestamp_us,
                                                               r.record.headers, r.record.value)
    return [(r.ledger_id, r.record) for r in got]


def test_keys_timestamps_headers_round_trip_through_the_log(bk: BookKeeper):
    name = f"rec-{uuid.uuid4().hex[:8]}"
    given_ms = 1_700_000_000_123
    moment = datetime.datetime(2026, 1, 31, 12, 0, 0, 250, tzinfo=datetime.UTC)
    before_us = time.time_ns() // 1000
    with bk.open_log_writer(name, envelope=env.V2, roll_entries=4) as writer:
        writer.append(b"v0", key=b"k0", timestamp=given_ms, headers=[("trace", b"t0"), ("trace", None)])
        writer.append(b"v1")                                                 # default: the clock now
        writer.append_async(b"v2", key=b"k2", timestamp=moment, headers={"h": b""}).result(30)
        writer.append(b"v3", timestamp=records.NO_TIMESTAMP)
        data = np.frombuffer(b"..abcdef", np.uint8)
        writer.append_many(data, [2, 4, 8], keys=[None, b"k5"], headers=[[("n", b"1")], None],
                           timestamps=[given_ms + 1, None]).result(30)          # rolls first: 4 appended
        writer.append_many(b"xy", [0, 1, 2]).result(30)
    after_us = time.time_ns() // 1000

    got = read_back(bk, name, 8)
    recs = [rec for _, rec in got]
    assert [r.value for r in recs] == [b"v0", b"v1", b"v2", b"v3", b"ab", b"cdef", b"x", b"y"]
    assert [r.key for r in recs] == [b"k0", None, b"k2", None, None, b"k5", None, None]
    assert recs[0].headers == (("trace", b"t0"), ("trace", None))
    assert [r.headers for r in recs[1:]] == [None, (("h", b""),), None, (("n", b"1"),), None, None, None]
    assert recs[0].timestamp_us == given_ms * 1000 and recs[4].timestamp_us == (given_ms + 1) * 1000
    assert recs[2].timestamp_us == int(moment.timestamp()) * 1_000_000 + 250
    assert recs[3].timestamp_us is None
    for r in (recs[1], recs[5], recs[6], recs[7]):                          # the writer's clock at the call
        assert r.timestamp_us is not None and before_us <= r.timestamp_us <= after_us
    assert len({ledger for ledger, _ in got}) >= 2                          # rolled: every ledger enveloped
    meta = bk.log_metadata(name)
    assert {led.envelope for led in meta.ledgers} == {env.V2}                # the log records each one's
    spans: dict[int, tuple[int, int]] = {}                                   # ... and its records' time span
    for ledger, rec in got:
        if rec.timestamp_us is not None:
            low, high = spans.get(ledger, (rec.timestamp_us, rec.timestamp_us))
            spans[ledger] = (min(low, rec.timestamp_us), max(high, rec.timestamp_us))
    assert {led.ledger_id: led.time_span for led in meta.ledgers} == spans
    for led in meta.ledgers:
        assert env.version_of(bk.ledger_metadata(led.ledger_id).custom_metadata) == env.V2


def test_writers_refuse_what_their_envelope_cannot_carry_and_stay_usable(bk: BookKeeper):
    name = f"rec-{uuid.uuid4().hex[:8]}"
    with bk.open_log_writer(name) as bare:                                  # envelope 0: bare values
        with pytest.raises(env.EnvelopeError, match="envelope=1"):
            bare.append(b"nope", key=b"k")
        with pytest.raises(env.EnvelopeError, match="envelope=1"):
            bare.append_many(b"ab", [0, 1, 2], timestamps=[1, 2])
        bare.append(b"bare")
    with bk.open_log_writer(name, envelope=env.V1) as v1:
        with pytest.raises(env.EnvelopeError, match="envelope=2"):
            v1.append(b"nope", headers=[("h", b"")])
        v1.append(b"keyed", key=b"k", timestamp=5)
    with pytest.raises(env.EnvelopeVersionError, match="upgrade bkledger"):
        bk.open_log_writer(name, envelope=3)
    got = read_back(bk, name, 2)
    assert [rec for _, rec in got] == [env.Record(None, None, b"bare"), env.Record(b"k", 5000, b"keyed")]
    assert [led.envelope for led in bk.log_metadata(name).ledgers][:2] == [env.NONE, env.V1]
