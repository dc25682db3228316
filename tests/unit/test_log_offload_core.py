"""Offload of a log, the pure part: which ledgers go in which files, the record that replaces them, the
swap (valid only on top of the previous run, placing only records whose ledgers are still as planned),
positions through offloaded records, the stored forms, and how compaction and Spark planning treat them;
and the payload columns (byte for byte back, or refused)."""

from __future__ import annotations

import dataclasses

import pytest

from bkledger.client.errors import OffloadError
from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import offload as ol
from bkledger.client.log.core import stored as st
from bkledger.client.log.core.meta import LogMetadata
from bkledger.client.log.offload import join_payloads, rows_of, split_payloads
from bkledger.spark_connector import envelope as env
from tests.unit.test_log_compaction_core import compact, log_of

URI = "/store"
ZERO = {i: 0 for i in range(100)}          # the ledgers' envelope versions: bare values


def offload(meta: LogMetadata, groups: list[ol.Group], run: int = 1, version: int = 0) -> LogMetadata:
    records = [ol.offloaded_record(g, ol.file_name(run, g, "t0"), version, 7) for g in groups]
    got = ol.with_offloaded(meta, records, run, URI, version)
    assert got is not None and got[1] == []
    return got[0]


def test_plan_takes_sealed_ledgers_after_the_offloaded_ones_and_leaves_the_tail():
    meta = log_of((1, 2, 10), (2, 3, 10), (3, 1, 10), (4, 5, 500), (5, 1, 10), (6, 1, 10))
    groups = ol.plan(meta, ZERO, max_file_bytes=25)
    assert [[led.ledger_id for led in g.ledgers] for g in groups] == [[1, 2], [3], [4]]    # 5, 6: the tail
    assert [g.entries for g in groups] == [5, 1, 5]
    done = offload(meta, groups[:1])
    assert [[led.ledger_id for led in g.ledgers] for g in ol.plan(done, ZERO, 1000)] == [[3, 4]]
    open_tail = lm.with_ledger_appended(log_of((1, 1, 1), (2, 1, 1), (3, 1, 1)), 4, 9)
    assert [led.ledger_id for led in ol.candidates(open_tail, keep_tail=1)] == [1, 2, 3]
    unsealed = lm.with_ledger_appended(log_of((1, 1, 1)), 2, 9)
    unsealed = lm.with_sealed_ledgers_appended(unsealed, [(3, 0, 1, 1), (4, 0, 1, 1), (5, 0, 1, 1)], 9)
    assert [led.ledger_id for led in ol.candidates(unsealed)] == [1]                   # stops at the open 2


def test_plan_cuts_where_the_envelope_changes_and_stops_where_it_cannot_be_stored():
    meta = log_of((1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 1, 1), (5, 1, 1), (6, 1, 1), (7, 1, 1))
    groups = ol.plan(meta, {1: 1, 2: 1, 3: 0, 4: None, 5: 0}, max_file_bytes=100)
    assert [([led.ledger_id for led in g.ledgers], g.envelope) for g in groups] == [([1, 2], 1), ([3], 0)]
    assert ol.plan(meta, {1: 2}, 100) == []                                             # envelope v2: unknown here


def test_positions_resolve_through_an_offloaded_record_and_the_swap_records_the_run():
    meta = log_of((1, 2, 20), (2, 0, 0), (3, 3, 30), (4, 1, 10), (5, 1, 10))
    done = offload(meta, ol.plan(meta, ZERO, 1000))
    rec = done.ledgers[0]
    assert rec.ledger_id == 1 and rec.offloaded == ("run-00000001-1-3-t0.parquet", 0) and rec.entries == 5
    assert done.logical_ids == [1, 2, 3, 4, 5] and done.ledger_ids == [1, 4, 5]
    where = lm.locate(done, 3)
    assert where is not None and (where.base, where.entries, where.first_position) == (2, 3, 2)
    assert where.offloaded == rec.offloaded and where.physical == 1
    assert lm.check_start(done, lm.Position(3, 1)) == "ok"
    assert ol.state(done) == ol.OffloadState(URI, 1, 0)
    assert lm.truncated_before(done, lm.Position(4, 0))[1] == [1, 2, 3]          # the bookie copies it lists
    assert ol.unlisted(meta, done) == []
    assert ol.with_offloaded(done, [rec], 1, URI, 0) is None                              # run 1 again: stale
    assert ol.with_offloaded(done, [], 2, "/elsewhere", 1) is None                        # another table


def test_the_swap_skips_records_whose_ledgers_changed_and_matches_compacted_ones_by_content():
    meta = log_of((1, 2, 20), (2, 1, 10), (3, 3, 30), (4, 1, 10), (5, 1, 10), (6, 1, 1))
    groups = ol.plan(meta, ZERO, 30)
    assert [[led.ledger_id for led in g.ledgers] for g in groups] == [[1, 2], [3], [4]]
    records = [ol.offloaded_record(g, ol.file_name(1, g, "t0"), 0, 7) for g in groups]
    truncated, _ = lm.truncated_before(meta, lm.Position(3, 0))
    new, skipped = ol.with_offloaded(truncated, records, 1, URI, 0) or (None, None)
    assert new is not None and skipped == records[:1]
    assert [led.offloaded is not None for led in new.ledgers] == [True, True, False, False]
    compacted = compact(meta, cp.Run((1, 2)), 50)                      # same logical ledgers, one bookie ledger
    new, skipped = ol.with_offloaded(compacted, records, 1, URI, 0) or (None, None)
    assert new is not None and skipped == [] and new.ledger_ids == [1, 3, 4, 5, 6]
    assert ol.unlisted(compacted, new) == [50]                          # the compacted copy: unlisted now
    across = compact(meta, cp.Run((2, 3)), 51)                         # rewritten across a file's edge
    new, skipped = ol.with_offloaded(across, records, 1, URI, 0) or (None, None)
    assert new is not None and skipped == records[:2]


def test_stored_forms_keep_the_offloaded_reference():
    meta = log_of((1, 2, 20), (2, 1, 10), (3, 3, 30), (4, 1, 10))
    done = offload(meta, ol.plan(meta, ZERO, 1000))
    assert lm.decode("orders", lm.encode(done)).ledgers == done.ledgers                  # format 1
    segment = st.encode_segment(done.ledgers)
    assert st.decode_segment("orders", 0, segment) == done.ledgers                        # format 2
    with pytest.raises(ValueError, match="offloaded"):
        st.decode_segment("orders", 0, segment.replace(b'"run-00000001-1-2-t0.parquet",0', b'"",0'))
    with pytest.raises(ValueError, match="offloaded"):
        lm.parse_offloaded(["f.parquet", -1])
    assert ol.record_from_json(ol.record_json(done.ledgers[0]), "f.parquet", 3) == \
        dataclasses.replace(done.ledgers[0], offloaded=("f.parquet", 3))


def test_compaction_leaves_offloaded_records_alone():
    meta = log_of((1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 1, 1), (5, 1, 1), (6, 1, 1))
    done = offload(meta, ol.plan(meta, ZERO, 1000)[:1])
    groups = ol.plan(meta, ZERO, 2)
    single = offload(meta, groups[:1])                                  # record 1 holds ledgers 1, 2
    assert cp.plan_runs(done, 100, 2) == []
    assert cp.plan_runs(single, 100, 2) == [cp.Run((3, 4))]
    elements = list(meta.ledgers[:2])
    assert cp.with_compacted(single, cp.Run((1, 3)), cp.compacted_ledger(elements, 60, 1)) is None


def test_table_folder_names_are_safe_and_distinct():
    assert ol.table_dir("orders-2026.v1") == "orders-2026.v1"
    assert ol.table_dir("a/b") != ol.table_dir("a_b") and "/" not in ol.table_dir("a/b")
    assert ol.table_dir("..") != ".." and ol.run_of_file("run-00000012-5-9-ab12.parquet") == 12
    assert ol.run_of_file("part-0.parquet") is None


def test_payload_columns_come_back_byte_for_byte_or_are_refused():
    payloads = [env.encode(None, None, b"a"), env.encode(b"k", 5, b""), env.encode(b"", 0, b"v" * 10)]
    meta = log_of((1, 2, 20), (2, 1, 10), (3, 1, 1), (4, 1, 1))
    group = dataclasses.replace(ol.plan(meta, ZERO, 1000)[0], envelope=1)
    rows = rows_of(group, payloads)
    assert rows.column("ledger_id").to_pylist() == [1, 1, 2] and rows.column("offset").to_pylist() == [0, 1, 2]
    assert rows.column("key").to_pylist() == [None, b"k", b""] and join_payloads(rows, 1) == payloads
    assert join_payloads(rows_of(dataclasses.replace(group, envelope=0), payloads), 0) == payloads
    odd = payloads[1][:1] + b"\x00" * 8 + payloads[1][9:]              # key flag set, timestamp flag set, ts 0
    assert join_payloads(rows_of(group, [payloads[0], odd, payloads[2]]), 1)[1] == odd
    unknown_bits = bytes([payloads[0][0] | 4]) + payloads[0][1:]
    with pytest.raises(OffloadError, match="entry 1:0"):
        split_payloads([unknown_bits], 1, [1], [0])
    with pytest.raises(OffloadError, match="entry 1:0"):
        split_payloads([b"short"], 1, [1], [0])


def test_describe_shows_each_tier_with_its_positions_and_the_table():
    meta = log_of((1, 2, 20), (2, 3, 30), (3, 1, 10), (4, 1, 10))
    assert ol.describe_tiers(meta) == []                                                # never offloaded
    done = offload(meta, ol.plan(meta, ZERO, 1000), version=4)
    assert ol.describe_tiers(lm.with_ledger_appended(done, 5, 9)) == [
        "on bookies          3 ledgers, 20 bytes, positions 3:0 .. 5:(open)",
        "offloaded           1 files, 5 entries, 50 bytes, positions 1:0 .. 2:2",
        "table               /store/orders (version 4, run 1)"]
