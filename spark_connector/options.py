"""Options of the "bkledger" Spark data source: parsed, validated, typed (planning time, on the driver).

Spark hands options over as strings with lower-cased keys (`option("metadataServiceUri", ...)` arrives
as `metadataserviceuri`). Every problem raises `BkLedgerOptionError` (an `InvalidOptionError`) whose
message names the option as the user spelled it in the docs, so a bad option fails the query while it
is planned, before any task runs. Names follow Kafka's source where they mean the same
(`startingPositions` ~ `startingOffsets`, `endingPositions` ~ `endingOffsets`, `failOnDataLoss`).

Values are checked while the query is planned too: integers within their range (ids and counts up to
2^63-1, ensembleSize up to MAX_ENSEMBLE_SIZE, writeQuorum <= ensembleSize, ackQuorum <= writeQuorum), JSON
values bounded in size and nesting (`option_json`), log names by `client.log.core.names`. An unknown
option gets "did you mean" (a close name, or the bkledger name of a Kafka option: `startingOffsets` ->
`startingPositions`, `subscribe` -> `log`, ...; `kafka_options.KAFKA_NAMES`). Option `password` is text:
it is encoded as UTF-8 to become the ledgers' password (bytes), so `password="pw"` here is b"pw" in the
client API.

Position JSON (Kafka-like; one log, its ledgers, entry ids):
  startingPositions: "earliest" (default) or {"orders": {"12": 0, "13": 5}} (or the flat {"12": 0}):
      per-ledger first entry (inclusive; -2 = earliest); ledgers below the lowest listed one are skipped,
      unlisted ones above it start at entry 0.
  endingPositions: "latest" (default: the LAC / last entry found at planning) or {"orders": {"14": 100}}:
      per-ledger end (exclusive; -1 = latest); ledgers above the highest listed one are skipped.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

from bkledger.client import InvalidOptionError
from bkledger.client.config import SECURITY_KEYS
from bkledger.client.errors import InvalidLogNameError
from bkledger.client.log.core.names import check_log_name
from bkledger.spark_connector.kafka_names import kafka_hint

if TYPE_CHECKING:
    from bkledger.spark_connector.kafka_names import LogChoice, TimeBound

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
MAX_ID = 2**63 - 1                  # ledger ids, entry ids, times and counts: a Java long, as BookKeeper's
MAX_ENSEMBLE_SIZE = 1024            # bookies of one ledger's ensemble (its metadata lists each of them)
MAX_JSON_CHARS = 1 << 20            # a JSON option value: at most this long ...
MAX_JSON_DEPTH = 4                  # ... and nested this deep ({"log": {"12": 0}} is 2)


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
    """Reject option keys that this direction does not know (typos fail early, naming the key and what
    was probably meant: `unknown_option_hint`)."""
    canon = _canonical(known)
    for key in _lowered(options):
        if key not in canon:
            raise BkLedgerOptionError(key, f"unknown option for {where}; {unknown_option_hint(key, canon, where)}")


def unknown_option_hint(key: str, canon: Mapping[str, str], where: str) -> str:
    """What to say of an unknown (lower-cased) option key: the bkledger name of a Kafka option, the
    direction an option of another direction belongs to, or the closest known names (difflib)."""
    kafka = kafka_hint(key, canon)
    if kafka:
        return kafka
    other = _other_direction(key)
    if other:
        return f"{other} is an option of {_OTHER_DIRECTIONS[other]}, not of {where}"
    close = difflib.get_close_matches(key, list(canon), n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(canon[c] for c in close) + "?"
    return f"known options: {', '.join(sorted(canon.values()))}"


_OTHER_DIRECTIONS = {"maxEntriesPerTrigger": "streaming reads", "maxBytesPerTrigger": "streaming reads",
                     "checkpointLocation": "streaming writes", "queryName": "streaming writes",
                     "sinkId": "streaming writes", "fenceLiveWriter": "writes",
                     "includeHeaders": "reads (a write takes a headers column when the DataFrame has one)",
                     "cursor": "streaming reads"}


def _other_direction(key: str) -> str | None:
    return next((name for name in _OTHER_DIRECTIONS if name.lower() == key), None)


def option_json(name: str, raw: str) -> object:
    """`json.loads(raw)` of option `name`, refused (BkLedgerOptionError) before parsing if it is longer than
    MAX_JSON_CHARS or nests deeper than MAX_JSON_DEPTH: a deeply nested value made json.loads raise
    RecursionError. Malformed JSON raises json.JSONDecodeError for the caller to explain."""
    if len(raw) > MAX_JSON_CHARS:
        raise BkLedgerOptionError(name, f"is {len(raw)} characters of JSON; at most {MAX_JSON_CHARS} are read")
    depth = _json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise BkLedgerOptionError(name, f"JSON nested {depth} levels deep; positions nest at most "
                                        f"{MAX_JSON_DEPTH} (e.g. {{\"orders\": {{\"12\": 0}}}} is 2)")
    return json.loads(raw)


def _json_depth(text: str) -> int:
    """The deepest nesting of objects and arrays in JSON text (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def check_id(name: str, what: str, value: int) -> int:
    """`value` if it fits a Java long (ids, times), else BkLedgerOptionError."""
    if value > MAX_ID:
        raise BkLedgerOptionError(name, f"{what} {value} is beyond 2^63-1, the largest id BookKeeper has")
    return value


def checked_log_names(name: str, names: Iterable[str]) -> None:
    """Each log name of option `name` as `client.log.core.names` allows (for finding a log: the length
    limit of new logs is checked when a write commits)."""
    for log_name in names:
        try:
            check_log_name(log_name, new=False)
        except InvalidLogNameError as exc:
            raise BkLedgerOptionError(name, str(exc)) from None


def parse_int(opts: Mapping[str, str], name: str, default: int, minimum: int = 1, maximum: int = MAX_ID) -> int:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = raw.strip()
    try:
        value = int(text) if len(text) <= 40 else None
    except ValueError:
        value = None
    if value is None:
        raise BkLedgerOptionError(name, f"must be an integer, got {raw[:60]!r}")
    if value < minimum:
        raise BkLedgerOptionError(name, f"must be >= {minimum}, got {value}")
    if value > maximum:
        raise BkLedgerOptionError(name, f"must be <= {maximum}, got {value}")
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
    for ledger_id in ids:
        check_id("ledgers", "ledger id", ledger_id)
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
    if log is not None:
        checked_log_names("log", [n.strip() for n in log.split(",") if n.strip()] if allow_ledgers else [log])
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
        parsed = option_json(name, text)
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
        except (TypeError, ValueError, OverflowError):
            raise BkLedgerOptionError(name, f"{key!r}: {value!r} is not ledger id -> entry id") from None
        if isinstance(value, float) or (isinstance(value, str) and not value.strip().lstrip("-").isdigit()):
            raise BkLedgerOptionError(name, f"ledger {key}: entry {value!r} is not an integer entry id")
        check_id(name, "ledger id", ledger_id)
        check_id(name, "entry id", entry_id)
        if isinstance(value, bool) or entry_id < EARLIEST or entry_id == forbidden or ledger_id < 0:
            raise BkLedgerOptionError(name, f"ledger {key}: entry {value!r} is not allowed (entry ids are "
                                            f">= 0; {EARLIEST} means earliest in startingPositions, "
                                            f"{LATEST} latest in endingPositions)")
        out[ledger_id] = entry_id
    return out


# ---- the two directions ----------------------------------------------------------------------
def parse_write_options(options: Mapping[str, str], extra_known: Iterable[str] = ()) -> WriteOptions:
    """Options of an append (batch or streaming); BkLedgerOptionError on any problem."""
    check_known(options, (*COMMON, *READ, *WRITE, *WRITE_COMMIT, *extra_known), "writes")
    opts = _lowered(options)
    source = parse_source(options, allow_ledgers=False, need_log=False)   # no log: column log (at planning)
    ensemble = parse_int(opts, "ensembleSize", 3, maximum=MAX_ENSEMBLE_SIZE)
    write_quorum = parse_int(opts, "writeQuorum", min(2, ensemble), maximum=MAX_ENSEMBLE_SIZE)
    ack_quorum = parse_int(opts, "ackQuorum", min(2, write_quorum), maximum=MAX_ENSEMBLE_SIZE)
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
