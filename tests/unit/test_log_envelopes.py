"""Each ledger's record envelope version, recorded in the log when the ledger joins it: what is recorded
from a ledger's custom metadata, both stored forms, old data without it (not recorded), compaction, and
planning that then needs no ledger's metadata to know a log's record layout. Pure."""

from __future__ import annotations

import dataclasses
import json

from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import stored as st
from bkledger.client.log.core.meta import LogLedger, LogMetadata
from bkledger.spark_connector import envelope as env
from bkledger.spark_connector.batch_reader import ENVELOPE_AT_READ, recorded_view
from bkledger.spark_connector.read_options import parse_read_options


def log_of(envelopes: dict[int, int | None]) -> LogMetadata:
    closed = {"t": [(lid, 4, 50, 1) for lid in sorted(envelopes)]}
    return lm.with_job_appended({"t": lm.new_log("t", 1)}, closed, 5, envelopes=envelopes)["t"]


def test_what_the_log_records_of_a_ledgers_custom_metadata():
    assert lm.recorded_envelope({}) == 0
    assert lm.recorded_envelope({"log": b"t"}) == 0
    assert lm.recorded_envelope(env.custom_metadata(env.V1)) == env.V1
    assert lm.recorded_envelope({env.ENVELOPE_KEY: b"not a number"}) is None
    assert lm.recorded_envelope({env.ENVELOPE_KEY: b"-1"}) is None
    assert lm.recorded_envelope({env.ENVELOPE_KEY: b"7"}) == 7          # recorded; a reader refuses it later


def test_segment_round_trips_envelopes_in_a_key_old_readers_skip():
    ledgers = log_of({10: 0, 11: 1, 12: None}).ledgers
    data = st.encode_segment(ledgers)
    raw = json.loads(data)
    assert raw["envelopes"] == [0, 1, None]
    assert all(len(row) == 6 for row in raw["ledgers"])          # rows as a reader without the key expects
    assert st.decode_segment("t", 0, data) == ledgers
    assert "envelopes" not in json.loads(st.encode_segment(log_of({10: None}).ledgers))


def test_segments_and_logs_written_before_envelopes_decode_as_not_recorded():
    old_segment = json.dumps({"ledgers": [[10, 1, 0, 5, 50, 3], [11, 1, 5, 5, 50, 4]]}).encode()
    assert [led.envelope for led in st.decode_segment("t", 0, old_segment)] == [None, None]
    odd = json.dumps({"ledgers": [[10, 1, 0, 5, 50, 3], [11, 1, 5, 5, 50, 4]], "envelopes": [1]}).encode()
    assert [led.envelope for led in st.decode_segment("t", 0, odd)] == [None, None]     # not one per ledger
    bad = json.dumps({"ledgers": [[10, 1, 0, 5, 50, 3]], "envelopes": ["1"]}).encode()
    assert st.decode_segment("t", 0, bad)[0].envelope is None
    old_log = (b'{"format":1,"name":"t","created_ms":1,"ledgers":[{"ledger_id":10,"created_ms":1,'
               b'"first_position":0,"entries":5,"size":50,"closed_ms":3}]}')
    assert lm.decode("t", old_log).ledgers[0].envelope is None


def test_format_1_conversion_sealing_and_appending_keep_envelopes():
    meta = log_of({10: 0, 11: 1})
    assert lm.decode("t", lm.encode(meta)) == meta
    meta = lm.with_ledger_appended(meta, 12, 9, envelope=0)
    meta = lm.with_ledger_sealed(lm.with_ledger_appended(meta, 13, 9), 12, 3, 40, 10)
    assert [led.envelope for led in meta.ledgers] == [0, 1, 0, None]
    change = st.change(st.Window(meta), lm.with_ledger_appended(meta, 99, 11, envelope=1), "s0")
    base, head = st.decode_head("t", change.head)
    assert head is not None
    loaded = st.assemble(base, head, [(n, st.decode_segment("t", n, change.creates[n])) for n in head.numbers])
    assert [led.envelope for led in loaded.meta.ledgers] == [0, 1, 0, None, 1]


def test_compaction_records_the_runs_common_envelope_or_what_its_copy_was_given():
    meta = log_of({10: 1, 11: 1, 12: 1, 13: 0, 14: 0, 15: 0})
    new = cp.compacted_ledger(meta.ledgers[:3], 50, 9)
    assert new.envelope == 1
    compacted = cp.with_compacted(meta, cp.Run((10, 11, 12)), new)
    assert compacted is not None and [led.envelope for led in compacted.ledgers] == [1, 0, 0, 0]
    located = lm.logical_ledgers(compacted)
    assert [(x.ledger_id, x.physical, x.envelope) for x in located[:3]] == [(10, 50, 1), (11, 50, 1), (12, 50, 1)]
    mixed = dataclasses.replace(meta, ledgers=(dataclasses.replace(meta.ledgers[0], envelope=None),
                                               *meta.ledgers[1:]))
    assert cp.compacted_ledger(mixed.ledgers[:3], 50, 9).envelope is None
    assert cp.compacted_ledger(meta.ledgers[2:4], 50, 9).envelope is None        # two kinds: not one
    given = dataclasses.replace(cp.compacted_ledger(mixed.ledgers[:3], 50, 9), envelope=1)
    swapped = cp.with_compacted(mixed, cp.Run((10, 11, 12)), given)       # the driver read the run's metadata
    assert swapped is not None and swapped.ledgers[0].envelope == 1


def test_planning_takes_a_recorded_envelope_and_reads_the_others():
    opts = parse_read_options({"metadataServiceUri": "zk://127.0.0.1:1/x", "log": "t"})
    located = lm.logical_ledgers(log_of({10: 0, 11: 1, 12: None, 13: 7}))
    views = [recorded_view(led, opts) for led in located]
    assert [v.envelope if v is not None else None for v in views] == [0, 1, ENVELOPE_AT_READ, ENVELOPE_AT_READ]
    assert LogLedger(1, 1).envelope is None
