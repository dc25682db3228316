"""Spark options are checked while the query is planned and say what was meant (pure; no Spark run):
"did you mean" and Kafka's names (spark_connector.options.check_known, kafka_options.KAFKA_NAMES), values
within their range, JSON bounded in size and nesting, log names as the client allows them."""

from __future__ import annotations

import json

import pytest

from bkledger.spark_connector.kafka_names import KAFKA_NAMES
from bkledger.spark_connector.options import MAX_JSON_DEPTH, BkLedgerOptionError, parse_write_options
from bkledger.spark_connector.read_options import parse_read_options
from bkledger.spark_connector.stream_positions import parse_starting
from bkledger.spark_connector.stream_source import parse_stream_options

URI = "zk://127.0.0.1:2181/ledgers"


def read(**options: str):
    return parse_read_options({"metadataServiceUri": URI, "log": "orders", **options})


def write(**options: str):
    return parse_write_options({"metadataServiceUri": URI, "log": "orders", **options})


def refused(fn, **options: str) -> BkLedgerOptionError:
    lowered = {k.lower(): v for k, v in options.items()}          # as Spark hands them over
    with pytest.raises(BkLedgerOptionError) as got:
        fn(**lowered)
    return got.value


# ---- unknown options ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("kafka", "ours"), [
    ("startingOffsets", "startingPositions"), ("endingOffsets", "endingPositions"), ("subscribe", "log"),
    ("topic", "log"), ("kafka.bootstrap.servers", "metadataServiceUri"),
    ("maxOffsetsPerTrigger", "maxEntriesPerTrigger"), ("subscribePattern", "logPattern"),
    ("startingOffsetsByTimestamp", "startingPositionsByTimestamp"),
])
def test_kafka_option_names_get_their_bkledger_name(kafka: str, ours: str) -> None:
    err = refused(read, **{kafka: "x"})
    assert f"{kafka} is Kafka's name: use {ours}" in str(err)
    assert "known options" not in str(err)                        # not the list of every name


def test_kafka_options_without_equivalent_say_so() -> None:
    assert "no bkledger equivalent" in str(refused(read, groupIdPrefix="x"))
    assert "BookKeeper names" in str(refused(read, **{"kafka.security.protocol": "SSL"}))
    assert all(ours is None or ours[0].islower() for ours, _ in KAFKA_NAMES.values())


@pytest.mark.parametrize(("typo", "meant"), [("startingPosition", "startingPositions"),
                                             ("metadataServiceURL", "metadataServiceUri"),
                                             ("maxEntriesPerPartitions", "maxEntriesPerPartition")])
def test_typos_get_did_you_mean(typo: str, meant: str) -> None:
    err = refused(read, **{typo: "1"})
    assert f"did you mean {meant}" in str(err) and "known options" not in str(err)


def test_options_of_another_direction_are_named_as_such() -> None:
    assert "checkpointLocation is an option of streaming writes, not of reads" in \
        str(refused(read, checkpointLocation="/tmp/x"))
    assert "maxEntriesPerTrigger is an option of streaming reads" in str(refused(read, maxEntriesPerTrigger="5"))


def test_nothing_close_lists_the_known_options() -> None:
    assert "known options: " in str(refused(read, zzzzqqqq="1"))


# ---- values out of range -----------------------------------------------------------------------------
def test_sizes_and_quorums_are_bounded() -> None:
    assert "must be <= 1024" in str(refused(write, ensembleSize=str(10**9)))
    assert "ackQuorum" in str(refused(write, ensembleSize="3", writeQuorum="2", ackQuorum="3"))
    assert "writeQuorum" in str(refused(write, ensembleSize="2", writeQuorum="3"))
    assert "must be an integer" in str(refused(write, maxInFlight="9" * 5000))
    assert "must be <= " in str(refused(read, maxEntriesPerPartition=str(2**63)))


def test_ids_beyond_a_java_long_are_refused() -> None:
    raw = {"metadataServiceUri": URI}
    with pytest.raises(BkLedgerOptionError, match="beyond 2\\^63-1"):
        parse_read_options({**raw, "ledgers": f"1,{2**63}"})
    assert "beyond 2^63-1" in str(refused(read, startingPositions=json.dumps({str(2**64): 0})))
    assert "beyond 2^63-1" in str(refused(read, startingPositions=json.dumps({"1": 2**63})))
    assert "beyond 2^63-1" in str(refused(read, startingPositionsByTimestamp=json.dumps({"orders": 2**63})))
    assert parse_read_options({**raw, "ledgers": f"{2**63 - 1}"}).source.ledgers == (2**63 - 1,)


@pytest.mark.parametrize("value", [1.5, 1e400, "x", True])
def test_entry_ids_must_be_integers(value: object) -> None:
    raw = '{"1": ' + ("1e400" if value == 1e400 else json.dumps(value)) + "}"
    err = refused(read, startingPositions=raw)
    assert "startingPositions" in str(err)


def test_deep_or_huge_json_is_refused_not_a_recursion_error() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for fn, name in ((read, "startingPositions"), (read, "endingPositions"),
                     (read, "startingPositionsByTimestamp")):
        err = refused(fn, **{name: deep})
        assert "nested 100000 levels" in str(err)
    with pytest.raises(BkLedgerOptionError, match="nested"):
        parse_stream_options({"metadataServiceUri": URI, "log": "orders", "startingPositions": deep})
    with pytest.raises(BkLedgerOptionError, match="nested"):
        parse_starting(deep, "orders")
    assert "characters of JSON" in str(refused(read, startingPositions='{"1": 0' + " " * (1 << 20) + "}"))
    nested_ok = '{"orders": {"12": 0}}'
    assert read(startingPositions=nested_ok).starting == {12: 0}
    brackets_in_strings = '{"' + "[" * (MAX_JSON_DEPTH + 5) + '": {"12": 0}}'
    assert "nested" not in str(refused(read, startingPositions=brackets_in_strings))


# ---- log names ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["a/b", "..", "x\x00y", "x\U0001f600"])
def test_log_names_are_checked_at_planning(name: str) -> None:
    for fn in (read, write):
        err = refused(fn, log=name)
        assert "bkledger option log: log name" in str(err)
    assert "index 1" in str(refused(read, log="ok,x\x00y"))


def test_password_option_is_text_encoded_as_utf8() -> None:
    assert read(password="pw").source.password == b"pw"
    assert read(password="é").source.password == "é".encode()


# ---- sizing errors in Spark's words ---------------------------------------------------------------------
def test_client_sizing_errors_name_the_spark_options() -> None:
    from bkledger.client.errors import InvalidQuorumError, NoClusterError, NotEnoughBookiesError
    from bkledger.client.placement import RandomPlacementPolicy
    from bkledger.spark_connector.write_checks import in_spark_terms

    with pytest.raises(NotEnoughBookiesError) as got:
        RandomPlacementPolicy().new_ensemble(3, ["b1:1"])
    said = str(in_spark_terms(got.value))
    assert "bkledger option ensembleSize" in said and "lower ensembleSize" in said and "ensemble_size" not in said
    quorum = str(in_spark_terms(InvalidQuorumError("ensemble_size=2 < write_quorum=3: raise ensemble_size")))
    assert "ensembleSize=2 < writeQuorum=3" in quorum
    assert "option metadataServiceUri" in str(in_spark_terms(NoClusterError()))
    other = NotEnoughBookiesError("no writable bookie outside the ensemble to replace a failed one")
    assert in_spark_terms(other) is other


def test_a_log_column_name_is_checked_before_a_ledger_is_written() -> None:
    import pyarrow as pa

    from bkledger.client.errors import InvalidLogNameError
    from bkledger.spark_connector.batch_writer import split_by_log

    batch = pa.record_batch({"log": ["ok", "a/b", "ok"], "value": ["1", "2", "3"]})
    with pytest.raises(InvalidLogNameError) as got:
        split_by_log(batch, 4, 0)
    assert "column log in partition 4: log name 'a/b': '/' at index 1" in str(got.value)
    fine = split_by_log(pa.record_batch({"log": ["ok", "x" * 300], "value": ["1", "2"]}), 0, 0)
    assert sorted(name for name, _ in fine) == ["ok", "x" * 300]      # length: at commit (may exist)


def test_includeheaders_on_a_write_says_it_is_a_read_option_not_that_records_have_no_headers():
    """Kafka's includeHeaders is bkledger's read option too (records carry headers since envelope v2): on a
    write it is named as an option of reads, and a write's headers come from a headers column."""
    from bkledger.spark_connector.options import unknown_option_hint

    hint = unknown_option_hint("includeheaders", {"log": "log", "value": "value"}, "writes")
    assert "option of reads" in hint and "headers column" in hint and "no headers" not in hint
