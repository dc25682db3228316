"""The read options that mirror Spark's Kafka source: which logs (`log` list, `logPattern`), positions per
log, times (`startingTimestamp`, `startingPositionsByTimestamp`, ...) and `minPartitions`. Parsing only.

Kafka's words and ours (README "Spark: options"): `subscribe` ~ `log` (comma list), `subscribePattern` ~
`logPattern` (a Python regex that must match the WHOLE name, `re.fullmatch`; Kafka matches a substring),
`startingOffsets`/`endingOffsets` ~ `startingPositions`/`endingPositions` (JSON keyed by log),
`startingTimestamp` / `endingTimestamp` (ms since the epoch, every log), `startingOffsetsByTimestamp` /
`endingOffsetsByTimestamp` ~ `startingPositionsByTimestamp` / `endingPositionsByTimestamp` (JSON
`{"orders": 1700000000000}`: one time per log, a log has no partitions). Precedence as Kafka's:
the all-logs time beats the per-log times, which beat positions. Every problem raises
BkLedgerOptionError naming the option, while the query is planned. A Kafka option name given to bkledger
is answered with its bkledger name (`KAFKA_NAMES`, `kafka_hint`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping

from bkledger.spark_connector.kafka_names import LogChoice, TimeBound
from bkledger.spark_connector.options import (
    DEFAULT_MAX_ENTRIES_PER_PARTITION,
    DEFAULT_TARGET_PARTITION_BYTES,
    BkLedgerOptionError,
    PositionSpec,
    ReadOptions,
    SourceOptions,
    _position_map,
    check_id,
    option_json,
    parse_bool,
    parse_int,
)


def parse_log_choice(opts: Mapping[str, str]) -> LogChoice | None:
    """None when neither `log` nor `logPattern` is given (raw ledgers); `opts` has lower-cased keys."""
    raw_log, raw_pattern = opts.get("log", opts.get("path")), opts.get("logpattern")
    if raw_pattern is not None:
        if raw_log is not None or "ledgers" in opts:
            raise BkLedgerOptionError("logPattern", "give exactly one of log, logPattern and ledgers")
        try:
            re.compile(raw_pattern)
        except re.error as exc:
            raise BkLedgerOptionError("logPattern", f"is not a regular expression ({exc}): {raw_pattern!r}"
                                      ) from None
        return LogChoice(pattern=raw_pattern)
    if raw_log is None or not raw_log.strip():
        return None
    names = tuple(dict.fromkeys(n.strip() for n in raw_log.split(",")))
    if any(not n for n in names):
        raise BkLedgerOptionError("log", f"an empty log name in {raw_log!r}; give names separated by commas")
    return LogChoice(names=names)


def parse_time_bound(opts: Mapping[str, str], everywhere: str, by_log: str) -> TimeBound:
    raw = opts.get(by_log.lower())
    per_log: dict[str, int] = {}
    if raw is not None:
        try:
            parsed = option_json(by_log, raw)
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict) or not parsed:
            raise BkLedgerOptionError(by_log, f"must be JSON like {{\"orders\": 1700000000000}} (ms since the "
                                              f"epoch per log); got {raw!r}")
        for name, value in parsed.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise BkLedgerOptionError(by_log, f"log {name!r}: {value!r} is not a time in ms since the "
                                                  "epoch (an integer >= 0)")
            per_log[str(name)] = check_id(by_log, "time", value)
    at = parse_int(opts, everywhere, -1, minimum=0) if everywhere.lower() in opts else None
    return TimeBound(at, per_log)


def parse_positions_by_log(opts: Mapping[str, str], name: str, default: str) -> dict[str, PositionSpec]:
    """`startingPositions`/`endingPositions` of a read of one or more logs: the default word, or JSON
    keyed by log (`{"orders": {"12": 0}}`; a log not named takes the default), or, for a single log, the
    flat per-ledger form `{"12": 0}` (returned under the key "")."""
    raw = opts.get(name.lower())
    if raw is None or raw.strip().lower() == default:
        return {}
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        raise BkLedgerOptionError(name, f"{text.lower()!r} is not allowed here for a batch query "
                                        f"(use {default!r} or a JSON object of positions)")
    try:
        parsed = option_json(name, text)
    except json.JSONDecodeError:
        raise BkLedgerOptionError(name, f"must be {default!r} or JSON like {{\"orders\": {{\"12\": 0}}}}; "
                                        f"got {raw!r}") from None
    if not isinstance(parsed, dict) or not parsed:
        raise BkLedgerOptionError(name, "must be a non-empty JSON object of log -> {ledger id: entry id}")
    if not all(isinstance(v, dict) for v in parsed.values()):
        return {"": _position_map(parsed, name, None, default)}
    return {str(log): _position_map({str(log): per}, name, str(log), default) for log, per in parsed.items()}


def check_named_logs(name: str, named: Iterable[str], logs: Iterable[str]) -> None:
    """A per-log option may only name logs this read covers (checked once the logs are known)."""
    covered = set(logs)
    stray = sorted(n for n in named if n and n not in covered)
    if stray:
        raise BkLedgerOptionError(name, f"names logs {stray} that this query does not read (it reads "
                                        f"{sorted(covered)})")


def check_raw_ledger_reads(opts: Mapping[str, str]) -> None:
    """Options of log reads that a read of raw ledgers (option `ledgers`) cannot take."""
    for name in ("logPattern", "startingTimestamp", "endingTimestamp", "startingPositionsByTimestamp",
                 "endingPositionsByTimestamp"):
        if name.lower() in opts:
            raise BkLedgerOptionError(name, "applies to reads of logs (option log or logPattern), not to "
                                            "option ledgers")


def parse_log_reads(opts: Mapping[str, str], source: SourceOptions) -> ReadOptions:
    """Read options of one or more logs (`opts` lower-cased); BkLedgerOptionError on any problem."""
    choice = parse_log_choice(opts)
    assert choice is not None, "parse_source lets through only log, logPattern or ledgers"
    starting = parse_positions_by_log(opts, "startingPositions", "earliest")
    ending = parse_positions_by_log(opts, "endingPositions", "latest")
    for name, given in (("startingPositions", starting), ("endingPositions", ending)):
        if "" in given and len(choice.names) != 1:
            raise BkLedgerOptionError(name, "a read of several logs takes positions keyed by log, e.g. "
                                            "{\"orders\": {\"12\": 0}}")
        if choice.pattern is None:
            check_named_logs(name, given, choice.names)
    starting_time = parse_time_bound(opts, "startingTimestamp", "startingPositionsByTimestamp")
    ending_time = parse_time_bound(opts, "endingTimestamp", "endingPositionsByTimestamp")
    if choice.pattern is None:
        check_named_logs("startingPositionsByTimestamp", starting_time.by_log, choice.names)
        check_named_logs("endingPositionsByTimestamp", ending_time.by_log, choice.names)
    first = choice.names[0] if len(choice.names) == 1 else None
    return for_log(ReadOptions(
        source=dataclasses.replace(source, log=first),
        fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
        max_entries_per_partition=parse_int(opts, "maxEntriesPerPartition", DEFAULT_MAX_ENTRIES_PER_PARTITION),
        target_partition_bytes=parse_int(opts, "targetPartitionBytes", DEFAULT_TARGET_PARTITION_BYTES),
        logs=choice, starting_by_log=starting, ending_by_log=ending,
        starting_time=starting_time, ending_time=ending_time,
        min_partitions=parse_int(opts, "minPartitions", 0) or None,
    ), first)


def for_log(opts: ReadOptions, name: str | None) -> ReadOptions:
    """The options of one log of a read: `source.log` set to it, its positions as `starting`/`ending`
    (of a read of several logs: the name None and the default positions)."""
    key = "" if name is None else name
    return dataclasses.replace(
        opts, source=dataclasses.replace(opts.source, log=name),
        starting=opts.starting_by_log.get(key, opts.starting_by_log.get("", "earliest")),
        ending=opts.ending_by_log.get(key, opts.ending_by_log.get("", "latest")))
