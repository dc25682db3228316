"""The stored form of a log (format 2): a small head znode and the ledger list in fixed-size segments. Pure.

A log of a million ledgers does not fit one znode (ZooKeeper's 1 MiB `jute.maxbuffer`), and rewriting the
whole list on every commit makes each commit cost more than the last. So, like Delta Lake's checkpointed
log, the list is cut into segments of at most `SEGMENT_LEDGERS` ledgers, each its own znode below the head:

    {root}/logs/<name>                      head: {"format": 2, "name", "created_ms", "retention",
                                            "committed_batches", "properties", "segments": {"prefix",
                                            "first", "last"}, "ledgers": count, "open": {ledger id: segment},
                                            "tail": last ledger id}
    {root}/logs/<name>/<prefix>-0000000007  segment 7: {"ledgers": [[id, created_ms, first_position,
                                            entries, size, closed_ms(, replaced)], ...],
                                            "spans": {id: [min_us, max_us], ...},
                                            "envelopes": [version or null, ...]}

`spans` (absent when no ledger of the segment has one) holds the record time span of the ledgers whose
writer knew it (`LogLedger.time_span`). It is a key of its own so that segments written before it decode
as they are (no span: unknown) and readers that do not know it ignore it (a writer that does not know it
and rewrites the segment drops the spans: reads by time then probe those ledgers, as for any unknown span).
`offloaded` (absent when no ledger of the segment was offloaded) maps a record offload wrote to its
[Parquet file, Delta table version] (`LogLedger.offloaded`, `client.log.core.offload`).
`envelopes` (absent when no ledger of the segment has one recorded) is the same kind of key: per ledger, in
the order of `ledgers`, the record envelope version `LogLedger.envelope` records, or null; without it a
reader reads the ledger's metadata for it, as before.

Every change is ONE ZooKeeper transaction that sets the head at the version it was read at (the CAS of
R27) and writes only the segments whose ledgers changed: a commit appends to (or seals in) the last
segment or two, so the bytes it writes do not grow with the log. Appends go to the last segment, a full
one starts the next; truncation deletes whole segments from the front; compaction rewrites segments in
place (they may end up under-full). `open` names the ledgers not yet recorded as sealed and their segment,
so a commit loads only the segments from the oldest of those on (`window_start`).

Format 1 (the whole log in the head znode as `client.log.core.meta` encodes it) is read as it is; the next
change converts it: its segments are written under a fresh `prefix` (nothing refers to them yet), then
the head is set to format 2 at the version it was read at. A converter that loses the race leaves only
unreferenced segments behind.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from bkledger.client.errors import InvalidLogUpdateError
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core.meta import LogLedger, LogMetadata, RetentionPolicy

FORMAT = 2
SEGMENT_LEDGERS = 256
_HEAD_KEYS = frozenset({"format", "name", "created_ms", "retention", "committed_batches", "properties",
                        "segments", "ledgers", "open", "tail"})


@dataclasses.dataclass(frozen=True)
class Head:
    """Where a format-2 log's ledgers are: segments `first`..`last` (none if first > last) named `prefix`."""

    prefix: str
    first: int = 0
    last: int = -1
    count: int = 0
    open: Mapping[int, int] = dataclasses.field(default_factory=dict)   # unsealed ledger id -> segment

    @property
    def numbers(self) -> range:
        return range(self.first, self.last + 1)


@dataclasses.dataclass(frozen=True)
class Window:
    """What a driver loaded of a log: its head (None: a format-1 log, all loaded) and segments from `lo`
    to the last, and the metadata they make (`meta.first_index` ledgers come before the loaded ones)."""

    meta: LogMetadata
    head: Head | None = None
    segments: tuple[tuple[int, tuple[LogLedger, ...]], ...] = ()

    @property
    def whole(self) -> bool:
        return self.meta.first_index == 0


@dataclasses.dataclass(frozen=True)
class StoredChange:
    """The znode writes of one change: the head's new bytes, segments to set / create / delete (by
    number), under `prefix`. `converting`: the log was format 1, every segment is new."""

    head: bytes
    prefix: str
    writes: Mapping[int, bytes]
    creates: Mapping[int, bytes]
    deletes: tuple[int, ...] = ()
    converting: bool = False
    after: Window | None = None          # what the loaded window is once the change is stored


def segment_name(prefix: str, number: int) -> str:
    return f"{prefix}-{number:010d}"


# ---- bytes --------------------------------------------------------------------------------------------
def _dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encode_head(meta: LogMetadata, head: Head) -> bytes:
    return _dumps({
        **dict(meta.extra),
        "format": FORMAT, "name": meta.name, "created_ms": meta.created_ms,
        "retention": dataclasses.asdict(meta.retention), "committed_batches": dict(meta.committed_batches),
        "properties": dict(meta.properties),
        "segments": {"prefix": head.prefix, "first": head.first, "last": head.last},
        "ledgers": head.count, "open": {str(k): v for k, v in sorted(head.open.items())},
        "tail": meta.last_ledger_id,
    })


def decode_head(name: str, data: bytes) -> tuple[LogMetadata, Head | None]:
    """(metadata without ledgers, head) of a format-2 head; (whole metadata, None) of a format-1 log.
    ValueError (naming the log) if it is neither."""
    try:
        raw = json.loads(data.decode("utf-8")) if data else {}
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        if raw.get("format", 1) == 1:
            return lm.decode(name, data), None
        if raw["format"] != FORMAT:
            raise ValueError(f"format {raw['format']} is not supported (this client reads formats 1 and {FORMAT})")
        seg = raw["segments"]
        head = Head(str(seg["prefix"]), int(seg["first"]), int(seg["last"]), int(raw.get("ledgers", 0)),
                    {int(k): int(v) for k, v in (raw.get("open") or {}).items()})
        meta = LogMetadata(
            name=str(raw.get("name", name)), created_ms=int(raw.get("created_ms", 0)),
            retention=RetentionPolicy(**{k: v for k, v in (raw.get("retention") or {}).items()
                                         if k in ("max_age_s", "max_bytes")}),
            committed_batches={str(k): int(v) for k, v in (raw.get("committed_batches") or {}).items()},
            properties={str(k): str(v) for k, v in (raw.get("properties") or {}).items()},
            extra={k: v for k, v in raw.items() if k not in _HEAD_KEYS})
    except (UnicodeDecodeError, TypeError, KeyError, AttributeError, ValueError) as exc:
        raise ValueError(f"log {name!r}: stored head is not readable: {exc}") from exc
    return meta, head


def encode_segment(ledgers: Sequence[LogLedger]) -> bytes:
    rows = [(led.ledger_id, led.created_ms, led.first_position, led.entries, led.size, led.closed_ms)
            if not led.replaced else
            (led.ledger_id, led.created_ms, led.first_position, led.entries, led.size, led.closed_ms, led.replaced)
            for led in ledgers]
    value: dict[str, Any] = {"ledgers": rows}
    spans = {str(led.ledger_id): list(led.time_span) for led in ledgers if led.time_span is not None}
    if spans:
        value["spans"] = spans
    if any(led.envelope is not None for led in ledgers):
        value["envelopes"] = [led.envelope for led in ledgers]
    offloaded = {str(led.ledger_id): list(led.offloaded) for led in ledgers if led.offloaded is not None}
    if offloaded:
        value["offloaded"] = offloaded
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def decode_segment(name: str, number: int, data: bytes) -> tuple[LogLedger, ...]:
    try:
        raw = json.loads(data)
        rows = raw["ledgers"]
        envelopes = raw.get("envelopes")
        if not isinstance(envelopes, list) or len(envelopes) != len(rows):
            envelopes = [None] * len(rows)
        ledgers = tuple(_ledger(r, e) for r, e in zip(rows, envelopes, strict=True))
        spans = raw.get("spans") or {}
        offloaded = raw.get("offloaded") or {}
        if offloaded:
            ledgers = tuple(_with_offloaded(led, offloaded.get(str(led.ledger_id))) for led in ledgers)
    except (UnicodeDecodeError, TypeError, KeyError, IndexError, ValueError, AttributeError) as exc:
        raise ValueError(f"log {name!r}: segment {number} is not readable: {exc}") from exc
    if not isinstance(spans, dict) or not spans:
        return ledgers
    return tuple(_with_span(led, spans.get(str(led.ledger_id))) for led in ledgers)


def _with_offloaded(led: LogLedger, raw: Any) -> LogLedger:
    where = lm.parse_offloaded(raw)
    return led if where is None else dataclasses.replace(led, offloaded=where)


def _with_span(led: LogLedger, raw: Any) -> LogLedger:
    span = lm.parse_time_span(raw)
    return led if span is None else dataclasses.replace(led, time_span=span)


def _ledger(row: list[Any], envelope: Any) -> LogLedger:
    if len(row) != 6:
        return _compacted(row, envelope)
    lid, created, first, entries, size, closed = row
    return LogLedger(lid, created, first, entries, size, closed, envelope=lm.parse_envelope(envelope))


def _compacted(row: list[Any], envelope: Any) -> LogLedger:
    lid, created, first, entries, size, closed, replaced = row
    return LogLedger(lid, created, first, entries, size, closed, tuple((a, b, c) for a, b, c in replaced),
                     envelope=lm.parse_envelope(envelope))


# ---- loading -------------------------------------------------------------------------------------------
def window_start(head: Head, whole: bool) -> int:
    """The first segment to load: all of them, or (for a commit) the last one and any that holds a ledger
    not yet recorded as sealed (a new writer seals those; sealing fills in later first positions)."""
    if whole or head.first > head.last:
        return head.first
    return max(head.first, min([head.last, *head.open.values()]))


def assemble(base: LogMetadata, head: Head, segments: Sequence[tuple[int, tuple[LogLedger, ...]]]) -> Window:
    ledgers = tuple(led for _, leds in segments for led in leds)
    meta = dataclasses.replace(base, ledgers=ledgers, first_index=head.count - len(ledgers))
    if meta.first_index < 0:
        raise ValueError(f"log {base.name!r}: head counts {head.count} ledgers, its segments hold {len(ledgers)}")
    return Window(meta, head, tuple(segments))


def new_head(prefix: str) -> Head:
    return Head(prefix)


# ---- changing --------------------------------------------------------------------------------------------
def change(window: Window, new: LogMetadata, prefix: str) -> StoredChange:
    """The writes that turn the stored `window` into `new` (metadata over the same loaded range, or less
    at the front after truncation of a whole log). `prefix` names the segments of a format-1 log's
    conversion. InvalidLogUpdateError if the ledgers are out of order."""
    lm.validate(new)
    if window.head is None:
        return _convert(new, prefix)
    head = window.head
    old = dict(window.segments)
    placed = _place(window, new.ledgers)
    numbers = sorted(placed)
    first = head.first
    deletes: list[int] = []
    if window.whole:
        while numbers and numbers[0] == first and not placed[first]:
            deletes.append(first)
            numbers.pop(0)
            first += 1
    last = max([head.last, *placed]) if placed else head.last
    writes = {n: encode_segment(placed[n]) for n in numbers if n in old and tuple(placed[n]) != old[n]}
    creates = {n: encode_segment(placed[n]) for n in numbers if n not in old and n > head.last}
    lo = window.segments[0][0] if window.segments else head.first
    opened = {k: v for k, v in head.open.items() if v < lo}
    opened.update({led.ledger_id: n for n in numbers for led in placed[n] if not led.sealed})
    count = head.count - len(window.meta.ledgers) + len(new.ledgers)
    stored = Head(head.prefix, first, last, count, opened)
    after = Window(dataclasses.replace(new, first_index=count - len(new.ledgers)), stored,
                   tuple((n, tuple(placed[n])) for n in numbers))
    return StoredChange(encode_head(new, stored), head.prefix, writes, creates, tuple(deletes), after=after)


def _place(window: Window, ledgers: Sequence[LogLedger]) -> dict[int, list[LogLedger]]:
    """Each ledger's segment: the one its key was in (compaction keeps the first replaced one's place),
    else (appended) the last segment, or a new one when that is full."""
    head = window.head
    assert head is not None
    placed: dict[int, list[LogLedger]] = {n: [] for n, _ in window.segments}
    seg_of = {led.key: n for n, leds in window.segments for led in leds}
    tail = head.last
    previous = -1
    for led in ledgers:
        number = seg_of.get(led.key)
        if number is None:
            if tail < head.first or tail not in placed or len(placed[tail]) >= SEGMENT_LEDGERS:
                tail += 1
                placed[tail] = []
            number = tail
        if number < previous:
            raise InvalidLogUpdateError(f"log {window.meta.name!r}: ledger {led.ledger_id} would go to segment "
                                        f"{number} after segment {previous}: ledgers out of order")
        previous = number
        placed[number].append(led)
    return placed


def _convert(new: LogMetadata, prefix: str) -> StoredChange:
    chunks = [new.ledgers[i:i + SEGMENT_LEDGERS] for i in range(0, len(new.ledgers), SEGMENT_LEDGERS)]
    opened = {led.ledger_id: n for n, chunk in enumerate(chunks) for led in chunk if not led.sealed}
    head = Head(prefix, 0, len(chunks) - 1, len(new.ledgers), opened)
    creates = {n: encode_segment(chunk) for n, chunk in enumerate(chunks)}
    after = Window(dataclasses.replace(new, first_index=0), head, tuple(enumerate(chunks)))
    return StoredChange(encode_head(new, head), prefix, {}, creates, (), converting=True, after=after)
