"""Partition planning and option parsing of the Spark connector (pure: no Spark, no bookies)."""

from __future__ import annotations

import pytest

from bkledger.client import DataLossError
from bkledger.spark_connector.options import BkLedgerOptionError, parse_write_options
from bkledger.spark_connector.planning import LedgerView, fragment_ranges, plan_partitions, resolve_bounds, split_range
from bkledger.spark_connector.read_options import parse_read_options

URI = "zk://127.0.0.1:2181/ledgers"


def views() -> list[LedgerView]:
    return [LedgerView(10, (0,), 99), LedgerView(12, (0, 40, 70), 119, envelope=1),
            LedgerView(15, (0,), 9, closed=False)]


def spans(parts):
    return [(p.ledger_id, p.first_entry_id, p.last_entry_id) for p in parts]


def test_one_partition_per_fragment_in_log_order() -> None:
    v = views()
    parts = plan_partitions("orders", v, resolve_bounds("orders", v, "earliest", "latest"), 1000)
    assert spans(parts) == [(10, 0, 99), (12, 0, 39), (12, 40, 69), (12, 70, 119), (15, 0, 9)]
    assert [p.envelope for p in parts] == [0, 1, 1, 1, 0] and {p.log for p in parts} == {"orders"}


def test_large_fragments_split_by_max_entries() -> None:
    v = views()
    parts = plan_partitions("orders", v, resolve_bounds("orders", v, "earliest", "latest"), 30)
    assert spans(parts) == [(10, 0, 24), (10, 25, 49), (10, 50, 74), (10, 75, 99), (12, 0, 19), (12, 20, 39),
                            (12, 40, 69), (12, 70, 94), (12, 95, 119), (15, 0, 9)]
    assert sum(p.entries for p in parts) == 100 + 120 + 10


@pytest.mark.parametrize("count,limit", [(1, 1), (7, 3), (100, 100), (101, 100), (1000, 7)])
def test_split_range_covers_exactly_in_even_pieces(count: int, limit: int) -> None:
    pieces = split_range(5, 5 + count - 1, limit)
    assert pieces[0][0] == 5 and pieces[-1][1] == 5 + count - 1
    assert all(b[0] == a[1] + 1 for a, b in zip(pieces, pieces[1:], strict=False))
    sizes = [hi - lo + 1 for lo, hi in pieces]
    assert max(sizes) <= limit and max(sizes) - min(sizes) <= 1 and len(pieces) == -(-count // limit)


def test_fragment_ranges_clip_to_bounds() -> None:
    v = LedgerView(12, (0, 40, 70), 119)
    assert fragment_ranges(v, 50, 80) == [(50, 69), (70, 79)]
    assert fragment_ranges(v, 120, 120) == []


def test_empty_and_open_ledgers() -> None:
    v = [LedgerView(3, (0,), -1), LedgerView(4, (0,), 4, closed=False)]
    assert spans(plan_partitions(None, v, resolve_bounds(None, v, "earliest", "latest"), 10)) == [(4, 0, 4)]


def test_positions_narrow_the_read() -> None:
    v = views()
    bounds = resolve_bounds("orders", v, {12: 50}, {12: 100})
    assert bounds == {12: (50, 100)}
    assert resolve_bounds("orders", v, {12: -2}, "latest") == {12: (0, 120), 15: (0, 10)}
    assert resolve_bounds("orders", v, "earliest", {12: -1}) == {10: (0, 100), 12: (0, 120)}
    assert resolve_bounds("orders", v, "earliest", {15: 500}) == {10: (0, 100), 12: (0, 120), 15: (0, 10)}


def test_start_before_the_first_ledger_is_data_loss() -> None:
    v = views()
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        resolve_bounds("orders", v, {7: 3}, "latest")
    assert resolve_bounds("orders", v, {7: 3}, "latest", fail_on_data_loss=False) == {
        10: (0, 100), 12: (0, 120), 15: (0, 10)}


def test_positions_naming_foreign_ledgers_are_option_errors() -> None:
    with pytest.raises(BkLedgerOptionError, match="startingPositions"):
        resolve_bounds("orders", views(), {11: 0}, "latest")
    with pytest.raises(BkLedgerOptionError, match="endingPositions"):
        resolve_bounds("orders", views(), "earliest", {99: 0})


def test_read_options_parse_and_name_the_bad_one() -> None:
    opts = parse_read_options({"metadataserviceuri": URI, "log": "orders", "password": "pw",
                               "startingpositions": '{"orders": {"12": 5}}', "endingpositions": '{"13": -1}',
                               "failondataloss": "False", "maxentriesperpartition": "500"})
    assert opts.source.log == "orders" and opts.source.password == b"pw" and opts.source.digest_type is None
    assert opts.starting == {12: 5} and opts.ending == {13: -1}
    assert not opts.fail_on_data_loss and opts.max_entries_per_partition == 500
    assert parse_read_options({"metadataServiceUri": URI, "ledgers": "13, 12"}).source.ledgers == (13, 12)
    bad = [
        ({"log": "x"}, "metadataServiceUri"),
        ({"metadataserviceuri": URI}, "log"),
        ({"metadataserviceuri": URI, "log": "x", "ledgers": "1"}, "log"),
        ({"metadataserviceuri": URI, "log": "x", "startingpositions": '{"other": {"1": 0}}'}, "startingPositions"),
        ({"metadataserviceuri": URI, "log": "x", "startingpositions": '{"1": -1}'}, "startingPositions"),
        ({"metadataserviceuri": URI, "log": "x", "endingpositions": '{"1": -2}'}, "endingPositions"),
        ({"metadataserviceuri": URI, "log": "x", "endingpositions": "earliest"}, "endingPositions"),
        ({"metadataserviceuri": URI, "log": "x", "bogus": "1"}, "bogus"),
    ]
    for options, named in bad:
        with pytest.raises(BkLedgerOptionError) as info:
            parse_read_options(options)
        assert info.value.option == named, (options, info.value)


def test_write_options() -> None:
    opts = parse_write_options({"metadataserviceuri": URI, "log": "o", "ensemblesize": "5", "writequorum": "3",
                                "compression": "LZ4", "digesttype": "crc32"})
    assert (opts.ensemble_size, opts.write_quorum, opts.ack_quorum) == (5, 3, 2)
    assert opts.compression == "lz4" and opts.source.digest_type == "crc32"
    assert parse_write_options({"metadataserviceuri": URI, "log": "o", "ensemblesize": "1"}).write_quorum == 1
    for options, named in [({"ackquorum": "3"}, "ackQuorum"), ({"ensemblesize": "x"}, "ensembleSize"),
                           ({"envelope": "maybe"}, "envelope"), ({"compression": "none", "ledgers": "1"}, "log")]:
        with pytest.raises(BkLedgerOptionError) as info:
            parse_write_options({"metadataserviceuri": URI, "log": "o", **options})
        assert info.value.option == named


def test_planning_holds_off_the_garbage_collector_and_restores_it():
    """plan() runs with automatic cyclic collection off (issue 14: planning a 100k-ledger log) and leaves
    the switch as it found it, also when planning fails."""
    import gc

    from bkledger.spark_connector.batch_reader import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()            # it was off: left off
    finally:
        gc.enable()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("planning failed")
    assert gc.isenabled()


def test_a_task_reads_with_the_garbage_collector_held_off_and_restores_it(monkeypatch):
    """read_any (a task's read) runs with automatic cyclic collection off while it yields batches, and
    switches it back on when it ends or when Spark stops taking its batches early (the generator closed)."""
    import gc

    from bkledger.spark_connector import batch_reader

    def fake(opts, partition, schema):
        yield gc.isenabled()
        yield gc.isenabled()

    monkeypatch.setattr(batch_reader, "_read_any", fake)
    assert gc.isenabled()
    assert list(batch_reader.read_any(None, None, None)) == [False, False]
    assert gc.isenabled()
    stopped = batch_reader.read_any(None, None, None)
    assert next(stopped) is False and not gc.isenabled()
    stopped.close()
    assert gc.isenabled()
