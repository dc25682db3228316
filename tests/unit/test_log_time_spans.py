"""Record time spans per ledger: how the log stores them (both stored forms, old data without them,
compaction) and how reads by time pick a ledger from them without reading any entry. Pure."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable

from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import stored as st
from bkledger.client.log.core.meta import LogLedger, LogMetadata
from bkledger.spark_connector.narrowing import first_at_or_after


def timed_log(count: int, entries: int = 1000, known: bool = True) -> LogMetadata:
    """Ledgers 10.. of `entries` entries; entry e of ledger 10 + i holds timestamp (i * entries + e) * 10."""
    closed = {"t": [(10 + i, entries - 1, 100, 1) for i in range(count)]}
    spans = {10 + i: (i * entries * 10, ((i + 1) * entries - 1) * 10) for i in range(count)} if known else None
    return lm.with_job_appended({"t": lm.new_log("t", 1)}, closed, 5, time_spans=spans)["t"]


# ---- stored form -------------------------------------------------------------------------------------
def test_segment_round_trips_spans_in_a_key_old_readers_skip():
    ledgers = timed_log(3).ledgers[:2] + (LogLedger(12, 1, 2000, 5, 50, 3),)      # the last one: unknown
    data = st.encode_segment(ledgers)
    raw = json.loads(data)
    assert raw["spans"] == {"10": [0, 9990], "11": [10000, 19990]}
    assert all(len(row) == 6 for row in raw["ledgers"])          # rows as a reader without spans expects
    assert st.decode_segment("t", 0, data) == ledgers


def test_segments_and_logs_written_before_spans_decode_as_unknown():
    old_segment = json.dumps({"ledgers": [[10, 1, 0, 5, 50, 3], [11, 1, 5, 5, 50, 4]]}).encode()
    assert [led.time_span for led in st.decode_segment("t", 0, old_segment)] == [None, None]
    old_log = (b'{"format":1,"name":"t","created_ms":1,"ledgers":[{"ledger_id":10,"created_ms":1,'
               b'"first_position":0,"entries":5,"size":50,"closed_ms":3}]}')
    assert lm.decode("t", old_log).ledgers[0].time_span is None
    bad = json.dumps({"ledgers": [[10, 1, 0, 5, 50, 3]], "spans": {"10": [5, 1]}}).encode()    # inverted
    assert st.decode_segment("t", 0, bad)[0].time_span is None


def test_format_1_and_conversion_keep_spans():
    meta = timed_log(3)
    assert lm.decode("t", lm.encode(meta)) == meta
    assert b"time_span" not in lm.encode(timed_log(2, known=False))
    change = st.change(st.Window(meta), lm.with_ledger_appended(meta, 99, 9), "s0")
    base, head = st.decode_head("t", change.head)
    assert head is not None
    loaded = st.assemble(base, head, [(n, st.decode_segment("t", n, change.creates[n])) for n in head.numbers])
    assert [led.time_span for led in loaded.meta.ledgers] == [(0, 9990), (10000, 19990), (20000, 29990), None]


def test_a_full_segment_with_spans_stays_small():
    """256 ledgers with microsecond spans: well under ZooKeeper's 1 MiB request limit."""
    now_us = 1_800_000_000_000_000
    ledgers = tuple(LogLedger(10 ** 9 + i, 1_800_000_000_000, i * 10 ** 6, 10 ** 6, 10 ** 9, 1_800_000_000_000,
                              time_span=(now_us + i, now_us + i + 10 ** 9)) for i in range(st.SEGMENT_LEDGERS))
    assert len(st.encode_segment(ledgers)) < 64 * 1024


def test_sealing_and_appending_keep_spans_and_unknown_ones_stay_unknown():
    meta = lm.with_job_appended({"t": lm.new_log("t", 1)}, {"t": [(10, 4, 50, 1), (11, 4, 50, 1)]}, 5,
                                time_spans={10: (7, 9)})["t"]
    assert [led.time_span for led in meta.ledgers] == [(7, 9), None]
    assert lm.time_spans(meta) == {10: (7, 9, True)}


# ---- compaction ---------------------------------------------------------------------------------------
def test_compaction_merges_spans_when_all_are_known():
    meta = timed_log(6, entries=2)
    new = cp.compacted_ledger(meta.ledgers[:3], 50, 9)
    assert new.time_span == (0, 50)
    compacted = cp.with_compacted(meta, cp.Run((10, 11, 12)), new)
    assert compacted is not None and compacted.ledgers[0].time_span == (0, 50)
    spans = lm.time_spans(compacted)
    assert spans[10] == spans[12] == (0, 50, False) and spans[13] == (60, 70, True)
    unknown_one = dataclasses.replace(meta, ledgers=(dataclasses.replace(meta.ledgers[0], time_span=None),
                                                     *meta.ledgers[1:]))
    assert cp.compacted_ledger(unknown_one.ledgers[:3], 50, 9).time_span is None
    stored = st.decode_segment("t", 0, st.encode_segment(compacted.ledgers))
    assert stored == compacted.ledgers


# ---- resolving a time from spans ------------------------------------------------------------------------
def probe_counting(entries: int) -> tuple[list[tuple[int, int]], Callable[[int, int], int | None]]:
    reads: list[tuple[int, int]] = []

    def probe(ledger_id: int, entry_id: int) -> int | None:
        reads.append((ledger_id, entry_id))
        return ((ledger_id - 10) * entries + entry_id) * 10

    return reads, probe


def test_recorded_spans_pick_the_ledger_without_reads():
    meta = timed_log(64)
    known = lm.time_spans(meta)
    ranges = [(led.ledger_id, 0, 1000) for led in meta.ledgers]
    reads, probe = probe_counting(1000)
    for at in (0, 5, 10, 12_345, 639_990, 10 ** 9):
        reads.clear()
        found = first_at_or_after(ranges, probe, at, known)
        index = -(-at // 10)
        assert found == (None if index >= 64_000 else (10 + index // 1000, index % 1000))
        assert all(lid == (found or (0,))[0] for lid, _ in reads)          # only the ledger found is read
        assert len(reads) <= math.ceil(math.log2(1000)) + 1
    reads.clear()
    assert first_at_or_after(ranges, probe, 700_000, known) is None and not reads


def test_without_spans_the_search_probes_ledgers_as_before():
    meta = timed_log(64, known=False)
    ranges = [(led.ledger_id, 0, 1000) for led in meta.ledgers]
    reads, probe = probe_counting(1000)
    assert first_at_or_after(ranges, probe, 12_345, lm.time_spans(meta)) == (11, 235)
    assert len({lid for lid, _ in reads}) > 1                    # the ledger step read other ledgers


def test_mixed_known_and_unknown_spans_skip_known_ledgers_below_the_time():
    meta = timed_log(64)
    known = {lid: span for lid, span in lm.time_spans(meta).items() if lid != 40}      # ledger 40: unknown
    ranges = [(led.ledger_id, 0, 1000) for led in meta.ledgers]
    reads, probe = probe_counting(1000)
    assert first_at_or_after(ranges, probe, 30_000 * 10 + 7, known) == (40, 1)
    probed_ledgers = {lid for lid, _ in reads}
    assert probed_ledgers <= {40, 41} | set(range(42, 74))        # below the time: answered by the spans
    assert not probed_ledgers & set(range(10, 40))


def test_out_of_order_spans_take_the_first_ledger_whose_max_reaches_the_time():
    """Ledger 10 holds 500..590, ledger 11 holds 0..90: for 300 the first ledger reaching it is 10."""
    known = {10: (500, 590, True), 11: (0, 90, True)}
    stamps = {10: 500, 11: 0}
    ranges = [(10, 0, 10), (11, 0, 10)]
    assert first_at_or_after(ranges, lambda lid, e: stamps[lid] + e * 10, 300, known) == (10, 0)
    assert first_at_or_after(ranges, lambda lid, e: stamps[lid] + e * 10, 595, known) is None
    # ledger 10's max reaches 50, and its first record does: a starting time there is ledger 10's start
    assert first_at_or_after(ranges, lambda lid, e: stamps[lid] + e * 10, 50, known) == (10, 0)


def test_a_range_cut_before_the_time_moves_to_the_next_ledger():
    """Ledger 10's span reaches the time but its entries in range (0..4) do not: the next ledger's start."""
    known = {10: (0, 90, True), 11: (100, 190, True)}
    stamps = {10: 0, 11: 100}
    ranges = [(10, 0, 5), (11, 0, 10)]
    assert first_at_or_after(ranges, lambda lid, e: stamps[lid] + e * 10, 70, known) == (11, 0)
    assert first_at_or_after(ranges[:1], lambda lid, e: stamps[lid] + e * 10, 70, known) is None


def test_a_compacted_groups_span_only_rules_ledgers_out():
    """Ledgers 10..12 compacted (one span 0..290, not their own): a time above it needs no read of them;
    one inside it probes them."""
    known = {10: (0, 290, False), 11: (0, 290, False), 12: (0, 290, False), 13: (300, 390, True)}
    ranges = [(lid, 0, 10) for lid in (10, 11, 12, 13)]
    reads, probe = probe_counting(10)
    assert first_at_or_after(ranges, probe, 305, known) == (13, 1)
    assert {lid for lid, _ in reads} == {13}
    reads.clear()
    assert first_at_or_after(ranges, probe, 105, known) == (11, 1)
    assert reads


# ---- where spans come from: the tasks' Arrow columns and the commit ---------------------------------------
def test_tasks_take_spans_from_the_timestamp_column_and_the_commit_maps_them_to_copies():
    import pyarrow as pa

    from bkledger.spark_connector.arrow_io import timestamp_range, widened
    from bkledger.spark_connector.batch_writer import LedgerCommitMessage, time_spans_of
    from bkledger.spark_connector.log_commit import _spans_of_copies

    ms = pa.array([5, None, 2, 9], pa.timestamp("ms", tz="UTC"))
    assert timestamp_range(ms) == (2000, 9000)                    # microseconds, nulls skipped
    assert timestamp_range(pa.nulls(3, pa.timestamp("us", tz="UTC"))) is None
    assert widened(None, (4, 6)) == (4, 6) and widened((1, 5), (4, 8)) == (1, 8) and widened((1, 2), None) == (1, 2)
    messages = [LedgerCommitMessage(10, 0, spans=((10, 1, 2),)),
                LedgerCommitMessage(None, 1, routed=(("a", 11), ("b", 12)), spans=((12, 3, 4),)), None]
    spans = time_spans_of(messages)
    assert spans == {10: (1, 2), 12: (3, 4)}
    assert _spans_of_copies(spans, {12: 40, 11: 41}) == {10: (1, 2), 12: (3, 4), 40: (3, 4)}
