"""Log metadata: a named, ordered list of ledgers and the pure transforms that change it (R27-R30).

Mirrors the metadata of Pulsar's ManagedLedger (`ManagedLedgerInfo`: ledger id, entries, size, timestamp
per ledger) and DistributedLog's log segments (`startSequenceId`: each segment's first log-wide offset).
Every change of a log is one of these functions applied to the stored value, then written back with a
compare-and-swap on the znode version by the driver (`client/log/logs.py`). The functions never do I/O; the
current time comes in as an argument (milliseconds since the epoch).

Stored form: UTF-8 JSON, `{"format": 1, "name", "created_ms", "ledgers": [...], "retention": {...},
"committed_batches": {query_id: batch_id}, "properties": {...}}`. Each ledger is `{"ledger_id",
"created_ms", "first_position", "entries", "size", "closed_ms"}`: `first_position` is the log-wide offset
of the ledger's first entry (null while an earlier ledger is still open), `entries`/`size`/`closed_ms` are
null until the ledger is known CLOSED. A ledger may also carry `"time_span": [min_us, max_us]`: the least
and greatest record timestamp (microseconds since the epoch, as the record envelope stores them) of its
records that have one, when its writer knew them (a Spark append); absent means unknown. It may carry
`"envelope": n`: the record envelope version its custom metadata names (`bkledger.envelope`; 0 when it names
none), recorded when the ledger joined the log so that readers learn a long log's record layout without
reading every ledger's metadata; absent means not recorded. Unknown top-level keys are kept as they are
(forward compatible).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bkledger.client.errors import InvalidLogUpdateError, InvalidPositionError

FORMAT_VERSION = 1
ENVELOPE_KEY = "bkledger.envelope"     # a ledger's custom metadata key naming its record envelope version
_KNOWN_KEYS = frozenset({"format", "name", "created_ms", "ledgers", "retention", "committed_batches",
                         "properties"})


@dataclasses.dataclass(frozen=True, order=True)
class Position:
    """Where a record sits in a log: (ledger id, entry id), ordered by ledger id then entry id.

    Ledger ids of a log strictly increase along the list, so this order is the log's order."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """`"12:0"` (or `"12,0"`) -> Position(12, 0)."""
        left, sep, right = text.replace(",", ":").partition(":")
        try:
            if not sep:
                raise ValueError(text)
            return cls(int(left), int(right))
        except ValueError:
            raise InvalidPositionError(f"position {text!r} is not LEDGER_ID:ENTRY_ID (e.g. 12:0)") from None


@dataclasses.dataclass(frozen=True)
class LogLedger:
    """One ledger (segment) of a log; the counts are None until the ledger is known CLOSED."""

    ledger_id: int
    created_ms: int
    first_position: int | None = None
    entries: int | None = None
    size: int | None = None
    closed_ms: int | None = None
    # set on a ledger that compaction wrote: (old ledger id, entry of this ledger where its entries begin,
    # its bytes) for each ledger it replaced, in log order; positions of those ledgers resolve through it
    replaced: tuple[tuple[int, int, int], ...] = ()
    # (least, greatest) timestamp in microseconds of the ledger's records that carry one, when its writer
    # recorded it; None: unknown (reads by time then probe the ledger's records). A compacted ledger's span
    # covers all the ledgers it replaced.
    time_span: tuple[int, int] | None = None
    # the record envelope version the ledger's custom metadata names (0: none), recorded when it joined the
    # log (`recorded_envelope`); None: not recorded (a reader reads the ledger's metadata)
    envelope: int | None = None

    @property
    def sealed(self) -> bool:
        """The ledger is known CLOSED and its entry count and size are recorded."""
        return self.entries is not None

    @property
    def key(self) -> int:
        """Where the ledger sits in the log's order: its id, or the first id it replaced (compaction)."""
        return self.replaced[0][0] if self.replaced else self.ledger_id


@dataclasses.dataclass(frozen=True)
class RetentionPolicy:
    """Keep data at most `max_age_s` seconds old (by close time) and drop the oldest ledgers while the
    rest still holds at least `max_bytes`; None disables a limit. The last ledger is never dropped."""

    max_age_s: float | None = None
    max_bytes: int | None = None

    @property
    def enabled(self) -> bool:
        return self.max_age_s is not None or self.max_bytes is not None


@dataclasses.dataclass(frozen=True)
class LogMetadata:
    name: str
    created_ms: int
    ledgers: tuple[LogLedger, ...] = ()
    retention: RetentionPolicy = RetentionPolicy()
    committed_batches: Mapping[str, int] = dataclasses.field(default_factory=dict)
    properties: Mapping[str, str] = dataclasses.field(default_factory=dict)
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # how many ledgers of the log come before ledgers[0]: > 0 when only the log's tail was loaded (a commit
    # needs only that; see client.log.core.stored)
    first_index: int = 0

    @property
    def ledger_ids(self) -> list[int]:
        return [led.ledger_id for led in self.ledgers]

    @property
    def logical_ids(self) -> list[int]:
        """The ids positions use, in log order: each ledger's, or the ids a compacted ledger replaced."""
        return [old for led in self.ledgers for old in ([r[0] for r in led.replaced] or [led.ledger_id])]

    @property
    def listed_ids(self) -> set[int]:
        """Every ledger id the log refers to: its ledgers and those compacted ledgers replaced."""
        return {led.ledger_id for led in self.ledgers} | {r[0] for led in self.ledgers for r in led.replaced}

    @property
    def last_ledger_id(self) -> int | None:
        return self.ledgers[-1].ledger_id if self.ledgers else None

    def ledger(self, ledger_id: int) -> LogLedger | None:
        for led in self.ledgers:
            if led.ledger_id == ledger_id:
                return led
        return None

    @property
    def size(self) -> int:
        """Bytes in the sealed ledgers (the open tail is not counted)."""
        return sum(led.size or 0 for led in self.ledgers)

    @property
    def entries(self) -> int | None:
        """Entries in the log if every ledger is sealed, else None."""
        if not all(led.sealed for led in self.ledgers):
            return None
        return sum(led.entries or 0 for led in self.ledgers)

    def to_dict(self) -> dict[str, Any]:
        return {
            **dict(self.extra),
            "format": FORMAT_VERSION,
            "name": self.name,
            "created_ms": self.created_ms,
            "ledgers": [_ledger_dict(led) for led in self.ledgers],
            "retention": dataclasses.asdict(self.retention),
            "committed_batches": dict(self.committed_batches),
            "properties": dict(self.properties),
        }


# ---- the log's own key ------------------------------------------------------------------------
PASSWORD_KEY = "ledger_password"   # top-level key of the stored log: its ledgers' password, hex (issue 41)


def log_password(meta: LogMetadata) -> bytes | None:
    """The password the log's ledgers are created with when the caller gives none: a secret made when the
    log was created and kept in its znode (under the cluster's ZooKeeper ACLs when they are on). None for a
    log created before logs had one: its ledgers use the password given, or the empty one, as before."""
    raw = meta.extra.get(PASSWORD_KEY)
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return bytes.fromhex(raw)
    except ValueError:
        return None


def ledger_password(meta: LogMetadata, given: bytes) -> bytes:
    """The password to create, open and recover the log's ledgers with: the one given (not empty), else
    the log's own key, else the empty password (a log made before logs had keys)."""
    return given or log_password(meta) or b""


def shown(meta: LogMetadata) -> dict[str, Any]:
    """The log as `to_dict` gives it, for printing: its own key is replaced by "(hidden)"."""
    out = meta.to_dict()
    if PASSWORD_KEY in out:
        out[PASSWORD_KEY] = "(hidden)"
    return out


def with_password(meta: LogMetadata, password: bytes) -> LogMetadata:
    """The log with `password` as its own key (set once, when the log is created)."""
    return dataclasses.replace(meta, extra={**meta.extra, PASSWORD_KEY: password.hex()})


# ---- serialization ----------------------------------------------------------------------------
def new_log(name: str, now_ms: int, password: bytes = b"") -> LogMetadata:
    """A new empty log; `password` (a fresh secret from the driver) becomes its own key."""
    meta = LogMetadata(name=name, created_ms=now_ms)
    return with_password(meta, password) if password else meta


def encode(meta: LogMetadata) -> bytes:
    validate(meta)
    return json.dumps(meta.to_dict(), sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode(name: str, data: bytes) -> LogMetadata:
    """Parse stored log metadata; ValueError (with the log's name) if it is not a log of this format."""
    try:
        raw = json.loads(data.decode("utf-8")) if data else {"format": FORMAT_VERSION}
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        fmt = raw.get("format", FORMAT_VERSION)
        if fmt != FORMAT_VERSION:
            raise ValueError(f"format {fmt} is not supported (this client reads format {FORMAT_VERSION})")
        ledgers = tuple(_ledger(item) for item in raw.get("ledgers", []))
        retention = RetentionPolicy(**_fields(RetentionPolicy, raw.get("retention") or {}))
        meta = LogMetadata(
            name=str(raw.get("name", name)), created_ms=int(raw.get("created_ms", 0)), ledgers=ledgers,
            retention=retention,
            committed_batches={str(k): int(v) for k, v in (raw.get("committed_batches") or {}).items()},
            properties={str(k): str(v) for k, v in (raw.get("properties") or {}).items()},
            extra={k: v for k, v in raw.items() if k not in _KNOWN_KEYS},
        )
    except (UnicodeDecodeError, TypeError, KeyError, AttributeError, ValueError) as exc:
        raise ValueError(f"log {name!r}: stored metadata is not readable: {exc}") from exc
    validate(meta)
    return meta


def _ledger_dict(led: LogLedger) -> dict[str, Any]:
    out = dataclasses.asdict(led)
    if not led.replaced:
        del out["replaced"]
    else:
        out["replaced"] = [list(r) for r in led.replaced]
    if led.time_span is None:
        del out["time_span"]
    else:
        out["time_span"] = list(led.time_span)
    if led.envelope is None:
        del out["envelope"]
    return out


def _fields(cls: type, raw: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in raw.items() if k in names}


def _ledger(raw: Mapping[str, Any]) -> LogLedger:
    def opt(key: str) -> int | None:
        value = raw.get(key)
        return None if value is None else int(value)

    return LogLedger(ledger_id=int(raw["ledger_id"]), created_ms=int(raw.get("created_ms", 0)),
                     first_position=opt("first_position"), entries=opt("entries"), size=opt("size"),
                     closed_ms=opt("closed_ms"),
                     replaced=tuple((int(a), int(b), int(c)) for a, b, c in raw.get("replaced") or ()),
                     time_span=parse_time_span(raw.get("time_span")), envelope=parse_envelope(raw.get("envelope")))


def recorded_envelope(custom: Mapping[str, bytes]) -> int | None:
    """What the log records of a ledger with this custom metadata: the envelope version its
    `bkledger.envelope` names, 0 without one, None if the value is not a number (readers then read the
    ledger's metadata and say what is wrong with it)."""
    raw = custom.get(ENVELOPE_KEY)
    if raw is None:
        return 0
    try:
        return parse_envelope(int(bytes(raw).decode()))
    except (UnicodeDecodeError, ValueError):
        return None


def parse_envelope(raw: Any) -> int | None:
    """A stored envelope version (None, or anything but a non-negative integer: not recorded)."""
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else None


def parse_time_span(raw: Any) -> tuple[int, int] | None:
    """A stored `[min_us, max_us]` (None, or anything else unreadable or inverted: unknown)."""
    if not isinstance(raw, (list, tuple)) or len(raw) != 2:
        return None
    try:
        low, high = int(raw[0]), int(raw[1])
    except (TypeError, ValueError):
        return None
    return (low, high) if low <= high else None


def validate(meta: LogMetadata) -> None:
    """InvalidLogUpdateError unless ledger ids (by their place in the log: `key`) strictly increase and
    counts are sane."""
    previous = -1
    for led in meta.ledgers:
        if led.key <= previous:
            raise InvalidLogUpdateError(
                f"log {meta.name!r}: ledger {led.ledger_id} after ledger {previous}: ledger ids of a log must "
                "strictly increase; append only ledgers created after the log's last ledger")
        previous = led.replaced[-1][0] if led.replaced else led.ledger_id
        for what in ("entries", "size", "first_position"):
            value = getattr(led, what)
            if value is not None and value < 0:
                raise InvalidLogUpdateError(f"log {meta.name!r}: ledger {led.ledger_id} has {what}={value}")
    ret = meta.retention
    if (ret.max_age_s is not None and ret.max_age_s < 0) or (ret.max_bytes is not None and ret.max_bytes < 0):
        raise InvalidLogUpdateError(f"log {meta.name!r}: retention limits must be >= 0, got {ret}")


# ---- transforms -------------------------------------------------------------------------------
def with_first_positions(meta: LogMetadata) -> LogMetadata:
    """Fill in each ledger's first log-wide offset wherever its predecessor's offset and count are known.

    The first ledger of a log starts at offset 0; a ledger left first by truncation keeps its offset."""
    out: list[LogLedger] = []
    for i, led in enumerate(meta.ledgers):
        first = led.first_position
        if first is None:
            if i == 0:
                first = 0 if meta.first_index == 0 else None
            else:
                prev = out[-1]
                if prev.first_position is not None and prev.entries is not None:
                    first = prev.first_position + prev.entries
        out.append(led if first == led.first_position else dataclasses.replace(led, first_position=first))
    return dataclasses.replace(meta, ledgers=tuple(out))


def with_ledger_appended(meta: LogMetadata, ledger_id: int, now_ms: int, envelope: int | None = None
                         ) -> LogMetadata:
    """The log with a new (open) ledger at its end (R28 step 4, R29 step 2); `envelope` as
    `recorded_envelope` says of its custom metadata."""
    envelopes = {} if envelope is None else {ledger_id: envelope}
    return with_sealed_ledgers_appended(meta, [(ledger_id, None, None, now_ms)], now_ms, envelopes=envelopes)


def with_sealed_ledgers_appended(meta: LogMetadata,
                                 ledgers: Iterable[tuple[int, int | None, int | None, int]],
                                 now_ms: int, time_spans: Mapping[int, tuple[int, int]] | None = None,
                                 envelopes: Mapping[int, int | None] | None = None) -> LogMetadata:
    """Append ledgers given as (ledger_id, last_entry_id or None if open, length or None, created_ms);
    `time_spans`: (min, max) record timestamp in microseconds of those ledgers whose writer knew it;
    `envelopes`: the envelope version of those whose custom metadata was read (`recorded_envelope`)."""
    spans, kinds = time_spans or {}, envelopes or {}
    added = [
        LogLedger(ledger_id=lid, created_ms=created,
                  entries=None if last is None else last + 1,
                  size=None if last is None else (length or 0),
                  closed_ms=None if last is None else now_ms,
                  time_span=parse_time_span(spans.get(lid)), envelope=parse_envelope(kinds.get(lid)))
        for lid, last, length, created in ledgers
    ]
    new = dataclasses.replace(meta, ledgers=(*meta.ledgers, *added))
    validate(new)
    return with_first_positions(new)


def with_ledger_sealed(meta: LogMetadata, ledger_id: int, last_entry_id: int, length: int,
                       now_ms: int, time_span: tuple[int, int] | None = None) -> LogMetadata:
    """Record that a ledger of the log is CLOSED at `last_entry_id` (entries, size, close time; `time_span`:
    its records' least and greatest timestamp, when its writer knew them) and fill in the first offsets
    this makes known. Unchanged if the ledger is not in the log or already sealed."""
    led = meta.ledger(ledger_id)
    if led is None or led.sealed:
        return meta
    sealed = dataclasses.replace(led, entries=last_entry_id + 1, size=length, closed_ms=now_ms,
                                 time_span=parse_time_span(time_span) or led.time_span)
    ledgers = tuple(sealed if x.ledger_id == ledger_id else x for x in meta.ledgers)
    return with_first_positions(dataclasses.replace(meta, ledgers=ledgers))


def same_tail(before: LogMetadata, after: LogMetadata) -> bool:
    """Whether a writer that read `before` still owns the log in `after`: nobody appended a ledger
    (only truncation from the front, annotations, retention settings or markers changed)."""
    return before.last_ledger_id == after.last_ledger_id


def truncated_before(meta: LogMetadata, before: Position) -> tuple[LogMetadata, list[int]]:
    """Drop the ledgers entirely before `before` (R30): those with a lower ledger id. The last ledger of
    the log is never dropped. Returns (new metadata, dropped ledger ids, oldest first)."""
    last = len(meta.ledgers) - 1
    if meta.ledgers and before.ledger_id > meta.ledgers[-1].ledger_id:
        raise InvalidPositionError(f"cannot truncate log {meta.name!r} before {before}: its last ledger is "
                                   f"{meta.ledgers[-1].ledger_id}; give a position of this log")
    keep_from = 0
    while keep_from < last and _last_id(meta.ledgers[keep_from]) < before.ledger_id:
        keep_from += 1
    return _drop_front(meta, keep_from)


def _last_id(led: LogLedger) -> int:
    return led.replaced[-1][0] if led.replaced else led.ledger_id


def _drop_front(meta: LogMetadata, count: int) -> tuple[LogMetadata, list[int]]:
    dropped = [led.ledger_id for led in meta.ledgers[:count]]
    if not dropped:
        return meta, []
    return dataclasses.replace(meta, ledgers=meta.ledgers[count:]), dropped


def retention_cut(meta: LogMetadata, now_ms: int) -> tuple[LogMetadata, list[int]]:
    """Apply the retention policy: drop sealed ledgers from the front while the oldest is older than
    max_age_s (by close time) or the ledgers after it still hold at least max_bytes. Stops at the first
    ledger that is not sealed, and never drops the last ledger."""
    policy = meta.retention
    if not policy.enabled:
        return meta, []
    remaining = meta.size
    count = 0
    for led in meta.ledgers[:-1]:
        if not led.sealed:
            break
        too_old = (policy.max_age_s is not None and led.closed_ms is not None
                   and now_ms - led.closed_ms > policy.max_age_s * 1000)
        too_big = policy.max_bytes is not None and remaining - (led.size or 0) >= policy.max_bytes
        if not (too_old or too_big):
            break
        remaining -= led.size or 0
        count += 1
    return _drop_front(meta, count)


def with_retention(meta: LogMetadata, max_age_s: float | None, max_bytes: int | None) -> LogMetadata:
    new = dataclasses.replace(meta, retention=RetentionPolicy(max_age_s, max_bytes))
    validate(new)
    return new


def batch_committed(meta: LogMetadata, query_id: str, batch_id: int) -> bool:
    """Whether the streaming batch `batch_id` of `query_id` (or a later one) is already in the log."""
    done = meta.committed_batches.get(query_id)
    return done is not None and done >= batch_id


def with_batch_marker(meta: LogMetadata, query_id: str, batch_id: int) -> LogMetadata:
    return dataclasses.replace(meta, committed_batches={**meta.committed_batches, query_id: batch_id})


ClosedLedger = tuple[int, int | None, int | None, int]    # (ledger_id, last_entry_id, length, created_ms)


def with_job_appended(metas: Mapping[str, LogMetadata], closed: Mapping[str, Sequence[ClosedLedger]],
                      now_ms: int, commit_marker: tuple[str, int] | None = None,
                      time_spans: Mapping[int, tuple[int, int]] | None = None,
                      envelopes: Mapping[int, int | None] | None = None) -> dict[str, LogMetadata]:
    """One job's (a batch append's or a micro-batch's) change of ALL its destination logs, for one
    transaction: each log in `closed` gets its ledgers appended and, with `commit_marker=(sink, batch)`,
    the marker (`time_spans`: the ledgers' record time spans, where known; `envelopes`: their envelope
    versions). Empty (nothing to write) if
    the marker shows that batch committed in ANY of the logs: a
    sink's batches commit in order and each commit marks all its logs in one transaction, so one log
    marked at or past the batch proves the whole batch landed. InvalidLogUpdateError if a ledger is not
    above its log's last ledger (see `late_ledgers`)."""
    if commit_marker is not None and any(batch_committed(metas[n], *commit_marker) for n in closed):
        return {}
    out = {}
    for name, ledgers in closed.items():
        new = (with_sealed_ledgers_appended(metas[name], ledgers, now_ms, time_spans, envelopes) if ledgers
               else metas[name])
        out[name] = with_batch_marker(new, *commit_marker) if commit_marker is not None else new
    return out


def late_ledgers(metas: Mapping[str, LogMetadata], ids: Mapping[str, Iterable[int]]) -> dict[str, list[int]]:
    """Per log, the ledgers that cannot be appended because they are not above its last ledger (another
    job's commit landed first, R27: a log's ledger ids strictly increase); logs with none are left out."""
    out = {}
    for name, wanted in ids.items():
        last = metas[name].last_ledger_id if name in metas else None
        late = sorted(i for i in wanted if last is not None and i <= last)
        if late:
            out[name] = late
    return out


def next_ledger(meta: LogMetadata, ledger_id: int) -> int | None:
    """The first (logical) ledger of the log after `ledger_id` (which need not be in the log), else None."""
    for led in meta.ledgers:
        last = led.replaced[-1][0] if led.replaced else led.ledger_id
        if last > ledger_id:
            return next(old for old in ([r[0] for r in led.replaced] or [led.ledger_id]) if old > ledger_id)
    return None


@dataclasses.dataclass(frozen=True)
class Located:
    """Where the entries of a (logical) ledger of the log are: ledger `physical` from entry `base` on;
    `entries`/`first_position`/`size` as recorded (None if unknown)."""

    ledger_id: int
    physical: int
    base: int = 0
    entries: int | None = None
    first_position: int | None = None
    size: int | None = None
    envelope: int | None = None         # as the log records it (of `physical`); None: not recorded

    @property
    def compacted(self) -> bool:
        return self.physical != self.ledger_id


def logical_ledgers(meta: LogMetadata) -> list[Located]:
    """Every ledger positions name, in log order, with where its entries are now (compaction moves the
    entries of many ledgers into one, keeping their positions)."""
    out: list[Located] = []
    for led in meta.ledgers:
        if not led.replaced:
            out.append(Located(led.ledger_id, led.ledger_id, 0, led.entries, led.first_position, led.size,
                               led.envelope))
            continue
        starts = [r[1] for r in led.replaced[1:]] + [led.entries or 0]
        for (old, base, size), end in zip(led.replaced, starts, strict=True):
            first = None if led.first_position is None else led.first_position + base
            out.append(Located(old, led.ledger_id, base, end - base, first, size, led.envelope))
    return out


def time_spans(meta: LogMetadata) -> dict[int, tuple[int, int, bool]]:
    """Per (logical) ledger whose span is recorded: (min us, max us, own). `own` is False for a ledger
    compaction merged into another: the span is then the whole compacted ledger's (it bounds this
    ledger's timestamps, it does not say which of them it holds)."""
    out: dict[int, tuple[int, int, bool]] = {}
    for led in meta.ledgers:
        if led.time_span is None:
            continue
        low, high = led.time_span
        if not led.replaced:
            out[led.ledger_id] = (low, high, True)
        for old, _, _ in led.replaced:
            out[old] = (low, high, len(led.replaced) == 1)
    return out


def logical_first_id(led: LogLedger) -> int:
    """The first ledger id positions use for this ledger: its own, or the first one it replaced."""
    return led.replaced[0][0] if led.replaced else led.ledger_id


def locate(meta: LogMetadata, ledger_id: int) -> Located | None:
    """Where the (logical) ledger's entries are now, or None if the log does not hold it."""
    for led in meta.ledgers:
        if led.ledger_id == ledger_id and not led.replaced:
            return Located(ledger_id, ledger_id, 0, led.entries, led.first_position, led.size)
        if led.replaced and led.replaced[0][0] <= ledger_id <= led.replaced[-1][0]:
            return next((x for x in logical_ledgers(dataclasses.replace(meta, ledgers=(led,)))
                         if x.ledger_id == ledger_id), None)
    return None


def lost_after(old: LogMetadata, new: LogMetadata, current: int, end_offset: int | None) -> bool:
    """Whether a reader that read ledger `current` to its CLOSED end lost data by moving on: the ledger
    that followed it in the list it knew (`old`) is gone, or the next listed ledger starts past
    `end_offset` (the log-wide offset after `current`'s last entry, when known)."""
    ids = set(new.logical_ids)
    if current in ids:
        return False
    follower = next_ledger(old, current)
    if follower is not None and follower not in ids:
        return True
    following = next_ledger(new, current)
    led = locate(new, following) if following is not None else None
    if led is None or led.first_position is None or end_offset is None:
        return False
    return led.first_position > end_offset


def earliest(meta: LogMetadata) -> Position | None:
    return Position(meta.ledgers[0].key, 0) if meta.ledgers else None


def check_start(meta: LogMetadata, start: Position) -> str:
    """Classify a start position: "ok" (its ledger is in the log), "truncated" (before the first ledger:
    its data is gone) or raise InvalidPositionError (no such ledger in this log)."""
    if start.entry_id < 0:
        raise InvalidPositionError(f"position {start}: entry ids start at 0")
    ids = meta.logical_ids
    if start.ledger_id in ids:
        return "ok"
    if ids and start.ledger_id < ids[0]:
        return "truncated"
    shown = f"{ids}" if len(ids) <= 10 else f"[{ids[0]}, ..., {ids[-1]}] ({len(ids)} ledgers)"
    raise InvalidPositionError(
        f"position {start} is not in log {meta.name!r}: ledger {start.ledger_id} is not one of its ledgers "
        f"{shown}; start from 'earliest', 'latest' or a position a reader or writer of this log returned")
