"""Options of the "bkledger" Spark data source: parsed, validated, typed (planning time, on the driver).

Spark hands options over as strings with lower-cased keys (`option("metadataServiceUri", ...)` arrives
as `metadataserviceuri`). Every problem raises `BkLedgerOptionError` (an `InvalidOptionError`) whose
message names the option as the user spelled it in the docs, so a bad option fails the query while it
is planned, before any task runs. Names follow Kafka's source where they mean the same
(`startingPositions` ~ `startingOffsets`, `endingPositions` ~ `endingOffsets`, `failOnDataLoss`).

Position JSON (Kafka-like; one log, its ledgers, entry ids):
  startingPositions: "earliest" (default) or {"orders": {"12": 0, "13": 5}} (or the flat {"12": 0}):
      per-ledger first entry (inclusive; -2 = earliest); ledgers below the lowest listed one are skipped,
      unlisted ones above it start at entry 0.
  endingPositions: "latest" (default: the LAC / last entry found at planning) or {"orders": {"14": 100}}:
      per-ledger end (exclusive; -1 = latest); ledgers above the highest listed one are skipped.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

from bkledger.client import InvalidOptionError
from bkledger.client.config import SECURITY_KEYS

if TYPE_CHECKING:
    from bkledger.spark_connector.kafka_options import LogChoice, TimeBound

PositionSpec = Literal["earliest", "latest"] | dict[int, int]
EARLIEST = -2
LATEST = -1

DIGEST_TYPES = ("crc32c", "crc32", "hmac", "dummy")
COMPRESSIONS = ("none", "lz4")
ENVELOPE_MODES = ("auto", "true", "false")

COMMON = ("metadataServiceUri", "log", "ledgers", "password", "digestType", "path", *SECURITY_KEYS)
READ = ("startingPositions", "endingPositions", "failOnDataLoss", "maxEntriesPerPartition", "targetPartitionBytes",
        "logPattern", "startingTimestamp", "endingTimestamp", "startingPositionsByTimestamp",
        "endingPositionsByTimestamp", "minPartitions",       # these six: spark_connector.kafka_options
        "includeHeaders")
WRITE = ("ensembleSize", "writeQuorum", "ackQuorum", "compression", "envelope", "maxInFlight")
WRITE_COMMIT = ("fenceLiveWriter",)     # how a commit treats a live LogWriter of the log
DEFAULT_MAX_ENTRIES_PER_PARTITION = 1_000_000
DEFAULT_TARGET_PARTITION_BYTES = 128 * 1024 * 1024     # as Spark's spark.sql.files.maxPartitionBytes
DEFAULT_MAX_IN_FLIGHT = 10_000


class BkLedgerOptionError(InvalidOptionError):
    """A bad option of the bkledger data source; `option` is its documented name."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"bkledger option {option}: {message}")
        self.option = option


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    """What both directions need: where the metadata is, which log (or raw ledgers), credentials."""

    metadata_service_uri: str
    log: str | None
    ledgers: tuple[int, ...] | None
    password: bytes = b""
    digest_type: str | None = None      # None: not given (reads take the ledger's; writes use crc32c)
    client_settings: tuple[tuple[str, str], ...] = ()   # TLS / ZooKeeper security keys (README "Security")


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    source: SourceOptions
    starting: PositionSpec = "earliest"
    ending: PositionSpec = "latest"
    fail_on_data_loss: bool = True
    max_entries_per_partition: int = DEFAULT_MAX_ENTRIES_PER_PARTITION
    target_partition_bytes: int = DEFAULT_TARGET_PARTITION_BYTES
    # reads of logs (spark_connector.kafka_options): which logs, positions and times per log
    logs: LogChoice | None = None
    starting_by_log: Mapping[str, PositionSpec] = dataclasses.field(default_factory=dict)
    ending_by_log: Mapping[str, PositionSpec] = dataclasses.field(default_factory=dict)
    starting_time: TimeBound | None = None
    ending_time: TimeBound | None = None
    min_partitions: int | None = None
    include_headers: bool = False       # a headers column (Kafka's includeHeaders)


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    source: SourceOptions
    ensemble_size: int = 3
    write_quorum: int = 2
    ack_quorum: int = 2
    compression: str = ""
    envelope: str = "auto"
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    fence_live_writer: bool = False


# ---- helpers ------------------------------------------------------------------------------------
def _canonical(names: Iterable[str]) -> dict[str, str]:
    return {n.lower(): n for n in names}


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def check_known(options: Mapping[str, str], known: Iterable[str], where: str) -> None:
    """Reject option keys that this direction does not know (typos fail early, naming the key)."""
    canon = _canonical(known)
    for key in _lowered(options):
        if key not in canon:
            known_list = ", ".join(sorted(canon.values()))
            raise BkLedgerOptionError(key, f"unknown option for {where}; known options: {known_list}")


def parse_int(opts: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise BkLedgerOptionError(name, f"must be an integer, got {raw!r}") from None
    if value < minimum:
        raise BkLedgerOptionError(name, f"must be >= {minimum}, got {value}")
    return value


def parse_bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise BkLedgerOptionError(name, f"must be true or false, got {raw!r}")
    return text == "true"


def parse_choice(opts: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in choices:
        raise BkLedgerOptionError(name, f"must be one of {', '.join(choices)}; got {raw!r}")
    return text


def parse_ledger_list(raw: str) -> tuple[int, ...]:
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts:
        raise BkLedgerOptionError("ledgers", "give at least one ledger id, e.g. \"12,13\"")
    try:
        ids = tuple(int(p) for p in parts)
    except ValueError:
        raise BkLedgerOptionError("ledgers", f"must be comma-separated ledger ids, e.g. 12,13; got {raw!r}") from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise BkLedgerOptionError("ledgers", f"ledger ids must be distinct and >= 0; got {raw!r}")
    return ids


def parse_source(options: Mapping[str, str], *, allow_ledgers: bool = True, need_log: bool = True) -> SourceOptions:
    opts = _lowered(options)
    uri = opts.get("metadataserviceuri", "").strip()
    if not uri:
        raise BkLedgerOptionError("metadataServiceUri", "is required, e.g. zk://127.0.0.1:2181/ledgers")
    log = opts.get("log", opts.get("path", "")).strip() or None
    raw_ledgers = opts.get("ledgers")
    if log is not None and raw_ledgers is not None:
        raise BkLedgerOptionError("log", "give either log or ledgers, not both")
    if raw_ledgers is not None and not allow_ledgers:
        raise BkLedgerOptionError("ledgers", "writes go to a log: give option log instead of ledgers")
    if not allow_ledgers and log is not None and "," in log:
        raise BkLedgerOptionError("log", f"a write goes to one log per row, not a list ({log!r}); to write to "
                                         "several logs, give each row's log in a string column named log")
    if not allow_ledgers and "logpattern" in opts:
        raise BkLedgerOptionError("logPattern", "is for reads; a write names its log with option log or a "
                                                "column named log")
    if log is None and raw_ledgers is None and need_log and (not allow_ledgers or "logpattern" not in opts):
        which = "log or ledgers" if allow_ledgers else "log"
        raise BkLedgerOptionError("log", f"is required: give option {which}")
    ledgers = parse_ledger_list(raw_ledgers) if raw_ledgers is not None else None
    digest = parse_choice(opts, "digestType", "", DIGEST_TYPES) or None
    return SourceOptions(uri, log, ledgers, opts.get("password", "").encode("utf-8"), digest,
                         parse_security(opts))


def parse_security(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The client's TLS and ZooKeeper settings given as options, by their BookKeeper names (checked when
    the client is made: a bad one fails the query on the driver)."""
    return tuple((key, opts[key.lower()]) for key in SECURITY_KEYS if key.lower() in opts)


# ---- positions ---------------------------------------------------------------------------------
def parse_positions(opts: Mapping[str, str], name: str, log: str | None, default: str) -> PositionSpec:
    raw = opts.get(name.lower())
    if raw is None:
        return "earliest" if default == "earliest" else "latest"
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        if text.lower() != default:
            raise BkLedgerOptionError(name, f"{text.lower()!r} is not allowed here for a batch query "
                                            f"(use {default!r} or a JSON object of positions)")
        return "earliest" if default == "earliest" else "latest"
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        raise BkLedgerOptionError(name, f"must be {default!r} or JSON like "
                                        f"{{\"{log or 'log'}\": {{\"12\": 0}}}}; got {raw!r}") from None
    return _position_map(parsed, name, log, default)


def _position_map(parsed: object, name: str, log: str | None, default: str) -> dict[int, int]:
    if not isinstance(parsed, dict) or not parsed:
        raise BkLedgerOptionError(name, "must be a non-empty JSON object of ledger id -> entry id")
    if all(isinstance(v, dict) for v in parsed.values()):
        if len(parsed) != 1 or (log is not None and log not in parsed):
            raise BkLedgerOptionError(name, f"the JSON names logs {sorted(parsed)}, but this query reads "
                                            f"{'log ' + repr(log) if log else 'raw ledgers'}")
        parsed = next(iter(parsed.values()))
    assert isinstance(parsed, dict)
    forbidden = LATEST if default == "earliest" else EARLIEST
    out: dict[int, int] = {}
    for key, value in parsed.items():
        try:
            ledger_id, entry_id = int(key), int(value)
        except (TypeError, ValueError):
            raise BkLedgerOptionError(name, f"{key!r}: {value!r} is not ledger id -> entry id") from None
        if isinstance(value, bool) or entry_id < EARLIEST or entry_id == forbidden or ledger_id < 0:
            raise BkLedgerOptionError(name, f"ledger {key}: entry {value!r} is not allowed (entry ids are "
                                            f">= 0; {EARLIEST} means earliest in startingPositions, "
                                            f"{LATEST} latest in endingPositions)")
        out[ledger_id] = entry_id
    return out


# ---- the two directions ----------------------------------------------------------------------
def parse_read_options(options: Mapping[str, str], extra_known: Iterable[str] = ()) -> ReadOptions:
    """Options of a batch (or, with `extra_known`, streaming) read; BkLedgerOptionError on any problem."""
    check_known(options, (*COMMON, *READ, *WRITE, *extra_known), "reads")
    opts = _lowered(options)
    source = parse_source(options)
    headers = parse_bool(opts, "includeHeaders", False)
    from bkledger.spark_connector.kafka_options import check_raw_ledger_reads, parse_log_reads

    if source.ledgers is None:
        return dataclasses.replace(parse_log_reads(opts, source), include_headers=headers)
    check_raw_ledger_reads(opts)
    return ReadOptions(
        include_headers=headers,
        source=source,
        starting=parse_positions(opts, "startingPositions", source.log, "earliest"),
        ending=parse_positions(opts, "endingPositions", source.log, "latest"),
        fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
        max_entries_per_partition=parse_int(opts, "maxEntriesPerPartition", DEFAULT_MAX_ENTRIES_PER_PARTITION),
        target_partition_bytes=parse_int(opts, "targetPartitionBytes", DEFAULT_TARGET_PARTITION_BYTES),
        min_partitions=parse_int(opts, "minPartitions", 0) or None,
    )


def parse_write_options(options: Mapping[str, str], extra_known: Iterable[str] = ()) -> WriteOptions:
    """Options of an append (batch or streaming); BkLedgerOptionError on any problem."""
    check_known(options, (*COMMON, *READ, *WRITE, *WRITE_COMMIT, *extra_known), "writes")
    opts = _lowered(options)
    source = parse_source(options, allow_ledgers=False, need_log=False)   # no log: column log (at planning)
    ensemble = parse_int(opts, "ensembleSize", 3)
    write_quorum = parse_int(opts, "writeQuorum", min(2, ensemble))
    ack_quorum = parse_int(opts, "ackQuorum", min(2, write_quorum))
    if write_quorum > ensemble:
        raise BkLedgerOptionError("writeQuorum", f"{write_quorum} exceeds ensembleSize {ensemble}")
    if ack_quorum > write_quorum:
        raise BkLedgerOptionError("ackQuorum", f"{ack_quorum} exceeds writeQuorum {write_quorum}")
    compression = parse_choice(opts, "compression", "none", COMPRESSIONS)
    return WriteOptions(
        source=source, ensemble_size=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum,
        compression="" if compression == "none" else compression,
        envelope=parse_choice(opts, "envelope", "auto", ENVELOPE_MODES),
        max_in_flight=parse_int(opts, "maxInFlight", DEFAULT_MAX_IN_FLIGHT),
        fence_live_writer=parse_bool(opts, "fenceLiveWriter", False),
    )
