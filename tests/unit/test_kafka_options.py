"""Kafka-like read options, filter pushdown and read narrowing of the Spark connector (pure; no Spark run):
spark_connector.kafka_options, .pushdown, .narrowing and the stream's budget sharing."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from bkledger.spark_connector.coalesce import CoalescedPartition
from bkledger.spark_connector.kafka_options import LogChoice, for_log
from bkledger.spark_connector.narrowing import at_least, first_at_or_after, narrow, narrow_ids
from bkledger.spark_connector.options import BkLedgerOptionError
from bkledger.spark_connector.planning import LedgerPartition
from bkledger.spark_connector.pushdown import absorb, empty
from bkledger.spark_connector.read_options import parse_read_options
from bkledger.spark_connector.stream_positions import Pos, share
from bkledger.spark_connector.stream_source import parse_stream_options

URI = "zk://127.0.0.1:2181/ledgers"


def read(**options: str):
    return parse_read_options({"metadataServiceUri": URI, **options})


# ---- options -----------------------------------------------------------------------------------
def test_log_list_pattern_and_per_log_positions() -> None:
    opts = read(log="b, a,b", startingPositions='{"a": {"12": 5}}', endingPositions='{"b": {"14": -1}}')
    assert opts.logs == LogChoice(names=("b", "a")) and opts.source.log is None
    assert for_log(opts, "a").starting == {12: 5} and for_log(opts, "a").ending == "latest"
    assert for_log(opts, "b").starting == "earliest" and for_log(opts, "b").ending == {14: -1}
    single = read(log="orders", startingPositions='{"12": 3}')
    assert single.source.log == "orders" and single.starting == {12: 3}
    pattern = read(logPattern="orders-.*", startingTimestamp="1000", minPartitions="4")
    assert pattern.logs == LogChoice(pattern="orders-.*") and pattern.min_partitions == 4
    assert pattern.starting_time is not None and pattern.starting_time.for_log("x") == 1000
    assert LogChoice(pattern="orders-.*").resolve(["orders-1", "xorders-2", "orders-3", "orders"]) == \
        ["orders-1", "orders-3"]                       # the whole name must match (Kafka: a substring)
    by_log = read(log="a,b", startingPositionsByTimestamp='{"a": 5}', endingTimestamp="9",
                  endingPositionsByTimestamp='{"b": 7}')
    assert by_log.starting_time is not None and by_log.starting_time.for_log("a") == 5
    assert by_log.starting_time.for_log("b") is None
    assert by_log.ending_time is not None and by_log.ending_time.for_log("b") == 9    # all-logs time wins


@pytest.mark.parametrize(("options", "named"), [
    ({"log": "a", "logPattern": "a.*"}, "logPattern"),
    ({"ledgers": "1", "logPattern": "a.*"}, "logPattern"),
    ({"logPattern": "a(["}, "logPattern"),
    ({"log": "a,,b"}, "log"),
    ({"log": "a,b", "startingPositions": '{"12": 0}'}, "startingPositions"),
    ({"log": "a,b", "endingPositions": '{"c": {"12": 0}}'}, "endingPositions"),
    ({"log": "a", "startingTimestamp": "soon"}, "startingTimestamp"),
    ({"log": "a", "endingTimestamp": "-5"}, "endingTimestamp"),
    ({"log": "a", "startingPositionsByTimestamp": '{"a": "x"}'}, "startingPositionsByTimestamp"),
    ({"log": "a", "startingPositionsByTimestamp": '[1]'}, "startingPositionsByTimestamp"),
    ({"log": "a", "endingPositionsByTimestamp": '{"b": 1}'}, "endingPositionsByTimestamp"),
    ({"log": "a", "minPartitions": "0"}, "minPartitions"),
    ({"ledgers": "1", "startingTimestamp": "5"}, "startingTimestamp"),
])
def test_bad_values_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(BkLedgerOptionError, match=f"option {named}:"):
        read(**options)


def test_stream_options_per_log_and_batch_only_ones() -> None:
    opts = parse_stream_options({"metadataServiceUri": URI, "logPattern": "o.*",
                                 "startingPositions": '{"o1": {"ledger": 3, "entry": 4}, "o2": {"7": 2}}'})
    assert opts.starting == "earliest" and dict(opts.starting_at) == {"o1": Pos(3, 4), "o2": Pos(7, 2)}
    for name in ("endingTimestamp", "endingPositionsByTimestamp", "endingPositions"):
        with pytest.raises(BkLedgerOptionError, match=name):
            parse_stream_options({"metadataServiceUri": URI, "log": "o", name: "1"})
    with pytest.raises(BkLedgerOptionError, match="startingPositions"):
        parse_stream_options({"metadataServiceUri": URI, "log": "a,b", "startingPositions": '{"c": {"1": 0}}'})


# ---- pushdown ----------------------------------------------------------------------------------
def test_filters_on_ids_and_logs_are_used_and_the_rest_returned() -> None:
    ts = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    filters = [EqualTo(("log",), "a"), In(("log",), ("a", "b")), GreaterThanOrEqual(("ledger_id",), 10),
               LessThan(("ledger_id",), 20), In(("ledger_id",), (12, 15, 30)), GreaterThan(("entry_id",), 4),
               LessThanOrEqual(("entry_id",), 9), In(("entry_id",), (6, 8)), GreaterThanOrEqual(("timestamp",), ts),
               IsNotNull(("value",)), StringStartsWith(("log",), "a"), EqualTo(("ledger_id",), "12")]
    pushed, rest = absorb(filters)
    assert pushed.logs == frozenset({"a"}) and pushed.ledgers == frozenset({12, 15, 30})
    assert (pushed.ledger_lo, pushed.ledger_hi, pushed.entry_lo, pushed.entry_hi) == (10, 19, 6, 8)
    assert pushed.time_lo_us == 1_704_067_200_000_000 and pushed.time_hi_us is None
    assert [id(f) for f in rest] == [id(f) for f in filters[7:]]      # the same objects, in order
    assert pushed.keeps_ledger(12) and not pushed.keeps_ledger(30) and not pushed.keeps_ledger(13)
    assert not empty(pushed) and empty(absorb([EqualTo(("entry_id",), 5), GreaterThan(("entry_id",), 5)])[0])
    assert narrow_ids({12: (0, 100), 13: (0, 5), 15: (7, 8)}, pushed) == {12: (6, 9), 15: (7, 8)}
    at = absorb([EqualTo(("timestamp",), ts)])[0]
    assert at.time_hi_us is not None and at.time_lo_us is not None and at.time_hi_us - at.time_lo_us == 1


# ---- time search and narrowing ----------------------------------------------------------------------
def test_binary_search_finds_the_first_record_at_or_after_a_time_in_few_reads() -> None:
    spans = [(10 + i, 0, 1000) for i in range(64)]            # 64 ledgers of 1000 entries, ts = 10 * index
    reads: list[tuple[int, int]] = []

    def probe(ledger_id: int, entry_id: int) -> int | None:
        reads.append((ledger_id, entry_id))
        return ((ledger_id - 10) * 1000 + entry_id) * 10

    for at in (0, 5, 10, 12_345, 639_990, 10 ** 9):
        reads.clear()
        found = first_at_or_after(spans, probe, at)
        index = -(-at // 10)
        assert found == (None if index >= 64_000 else (10 + index // 1000, index % 1000))
        assert len(reads) <= math.ceil(math.log2(64)) + math.ceil(math.log2(1000)) + 2
    assert first_at_or_after(spans, lambda _l, _e: None, 0) is None      # no timestamps: nothing is at/after


def test_narrow_cuts_to_positions() -> None:
    bounds = {10: (0, 100), 12: (5, 50), 15: (0, 10)}
    assert narrow(bounds, (12, 7), None) == {12: (7, 50), 15: (0, 10)}
    assert narrow(bounds, None, (12, 5)) == {10: (0, 100)}
    assert narrow(bounds, (10, 50), (15, 3)) == {10: (50, 100), 12: (5, 50), 15: (0, 3)}


def test_min_partitions_splits_the_largest_in_log_order() -> None:
    parts = [CoalescedPartition((LedgerPartition("a", 1, 0, 99),)),
             CoalescedPartition((LedgerPartition("a", 2, 0, 0), LedgerPartition("a", 3, 0, 0)))]
    split = at_least(parts, 5)
    assert len(split) == 5 and sum(p.entries for p in split) == 102
    flat = [(x.ledger_id, x.first_entry_id, x.last_entry_id) for p in split for x in p.pieces]
    assert flat == sorted(flat) and flat[-2:] == [(2, 0, 0), (3, 0, 0)]
    assert len(at_least([CoalescedPartition((LedgerPartition("a", 1, 0, 0),))], 3)) == 1   # one entry: as is


def test_budget_is_shared_in_proportion() -> None:
    assert share(100, {"a": 300, "b": 100, "c": 0}) == {"a": 75.0, "b": 25.0, "c": 0.0}
    assert share(1, {"a": 1000, "b": 1}) == {"a": 1.0, "b": 1.0}        # nobody starves
    assert share(None, {"a": 5}) == {"a": None}
