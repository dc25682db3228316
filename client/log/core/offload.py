"""Offload of a log's sealed ledgers to a Delta table, the pure part: which ledgers go, in which files,
the record that replaces them in the log, and the swap that makes the log point at the table.

Like compaction (`client.log.core.compaction`), an offload replaces a run of consecutive CLOSED ledgers
of the log by ONE record whose `replaced` map keeps, for every (logical) ledger it holds, (old ledger id,
row where its entries begin in the file, bytes), so every Position (old ledger id, entry id) still
resolves (`meta.locate`) and readers see the same records at the same positions. The record's
`ledger_id` is the first logical ledger id it holds (its `key`); `offloaded` names the Parquet file
(relative to the log's table root) and the Delta table version that holds it. The records of a log's
offloaded history come first in its ledger list: each run offloads the sealed ledgers right after them,
never the log's last `KEEP_TAIL` ledgers (a writer may still be closing them) and never past a ledger not
yet sealed, or whose record envelope cannot be stored as columns.

Runs are numbered; the log's head records the last one swapped in (`STATE_KEY`: table store URI, run,
table version). A run's Delta commit carries the application transaction (`app_id(name)`, run), so a rerun
after a crash between the commit and the swap finds the files committed and swaps them in instead of
writing them again (`with_offloaded` is valid only on top of the run before it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core.meta import LogLedger, LogMetadata

STATE_KEY = "offload"
UNLISTED_PREFIX = "offloaded-"       # child znode of a log: bookie ledgers a run's swap left unlisted
APP_PREFIX = "bkledger-offload:"
KEEP_TAIL = cp.KEEP_TAIL
STORABLE_ENVELOPES = (0, 1)          # bare values; v1 (key, timestamp, value), see spark_connector.envelope
FILE_PREFIX = "run-"


@dataclasses.dataclass(frozen=True)
class OffloadState:
    """What the log's head records of its offloads: the table store URI (None: never offloaded), the last
    run swapped in (0: none) and the table version that run named."""

    uri: str | None = None
    run: int = 0
    version: int | None = None


@dataclasses.dataclass(frozen=True)
class Group:
    """Consecutive ledgers of the log (as listed: a compacted ledger is one) that go to one file."""

    ledgers: tuple[LogLedger, ...]
    envelope: int

    @property
    def logical(self) -> list[lm.Located]:
        """The ledgers positions name, in order, with their entry counts (what the file's rows are)."""
        return lm.logical_ledgers(LogMetadata(name="", created_ms=0, ledgers=self.ledgers))

    @property
    def entries(self) -> int:
        return sum(led.entries or 0 for led in self.ledgers)

    @property
    def size(self) -> int:
        return sum(led.size or 0 for led in self.ledgers)


def state(meta: LogMetadata) -> OffloadState:
    raw: Any = meta.extra.get(STATE_KEY)
    if not isinstance(raw, dict):
        return OffloadState()
    version = raw.get("version")
    return OffloadState(str(raw["uri"]) if raw.get("uri") else None, int(raw.get("run") or 0),
                        None if version is None else int(version))


def app_id(name: str) -> str:
    """The Delta application transaction id of the log's offload runs."""
    return APP_PREFIX + name


def table_dir(name: str) -> str:
    """The folder of the log's table below the store URI: the name where it is a safe path segment,
    else its safe characters and a hash (two names never share a table)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    if safe == name and name not in (".", ".."):
        return name
    return f"{safe[:80]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def file_name(run: int, group: Group, token: str) -> str:
    """The file of a group: its run, first and last logical ledger, and the writing attempt's `token` (two
    attempts at one run never write the same file: the one whose commit lands names only its own)."""
    ids = [loc.ledger_id for loc in group.logical]
    return f"{FILE_PREFIX}{run:08d}-{ids[0]}-{ids[-1]}-{token}.parquet"


def run_of_file(path: str) -> int | None:
    got = re.fullmatch(rf"{FILE_PREFIX}(\d+)-\d+-\d+-[0-9a-z]+\.parquet", path.rsplit("/", 1)[-1])
    return int(got.group(1)) if got else None


def candidates(meta: LogMetadata, keep_tail: int = KEEP_TAIL) -> list[LogLedger]:
    """The ledgers an offload may take now: the sealed ones right after the offloaded records, up to the
    first not sealed, leaving the last `keep_tail` ledgers."""
    out: list[LogLedger] = []
    for led in meta.ledgers[:max(0, len(meta.ledgers) - max(1, keep_tail))]:
        if led.offloaded is not None:
            if out:                      # offloaded history is a prefix; a record after others: stop
                break
            continue
        if not led.sealed:
            break
        out.append(led)
    return out


def plan(meta: LogMetadata, envelopes: Mapping[int, int | None], max_file_bytes: int,
         keep_tail: int = KEEP_TAIL, max_ledgers: int | None = None) -> list[Group]:
    """The files of one run, in log order: the candidates cut where the envelope changes, where one
    cannot be stored (its envelope unknown or not storable: the run stops there) and every
    `max_file_bytes` (a bigger ledger gets a file of its own) or `cp.MAX_REPLACED` logical ledgers.
    `envelopes`: the envelope version of each candidate (by ledger id; the log's record if absent);
    `max_ledgers`: only the first that many candidates (None: all)."""
    groups: list[Group] = []
    current: list[LogLedger] = []
    kind = -1

    def flush() -> None:
        if current:
            groups.append(Group(tuple(current), kind))
        current.clear()

    for led in candidates(meta, keep_tail)[:max_ledgers]:
        version = envelopes.get(led.ledger_id, led.envelope)
        if version not in STORABLE_ENVELOPES:
            break
        size = sum(x.size or 0 for x in current)
        count = sum(len(x.replaced) or 1 for x in current)
        if current and (version != kind or size + (led.size or 0) > max_file_bytes
                        or count + (len(led.replaced) or 1) > cp.MAX_REPLACED):
            flush()
        kind = version if version is not None else 0
        current.append(led)
    flush()
    return groups


def offloaded_record(group: Group, path: str, version: int, now_ms: int) -> LogLedger:
    """The log's record of a group written to `path` and committed at table `version`."""
    merged = cp.compacted_ledger(group.ledgers, group.logical[0].ledger_id, now_ms)
    return dataclasses.replace(merged, envelope=group.envelope, offloaded=(path, version))


def _slice_for(ledgers: Sequence[LogLedger], record: LogLedger) -> tuple[int, int] | None:
    """(start, end) of the ledgers holding exactly the logical ledgers of `record`, in the same places,
    all sealed and none offloaded; None if the log no longer holds them so."""
    at = next((i for i, led in enumerate(ledgers) if led.key == record.key), None)
    if at is None:
        return None
    end, count = at, 0
    while end < len(ledgers) and count < len(record.replaced):
        count += len(ledgers[end].replaced) or 1
        end += 1
    elements = ledgers[at:end]
    if count != len(record.replaced) or end >= len(ledgers):           # never the log's last ledger
        return None
    if not all(led.sealed and led.offloaded is None for led in elements):
        return None
    if cp.compacted_ledger(elements, record.ledger_id, 0).replaced != record.replaced:
        return None
    return at, end


def with_offloaded(meta: LogMetadata, records: Sequence[LogLedger], run: int, uri: str, version: int
                   ) -> tuple[LogMetadata, list[LogLedger]] | None:
    """The log with the run's records in place of the ledgers they hold, and the run recorded; plus the
    records it could not place (their ledgers were truncated or rewritten meanwhile: their files must
    leave the table). None if the run does not follow the log's last recorded run (another offloader's
    run landed: this one is stale) or the log's table is elsewhere."""
    before = state(meta)
    if before.run != run - 1 or (before.uri is not None and before.uri != uri):
        return None
    ledgers = list(meta.ledgers)
    skipped: list[LogLedger] = []
    for record in records:
        where = _slice_for(ledgers, record)
        if where is None:
            skipped.append(record)
            continue
        merged = cp.merged_span(ledgers[where[0]:where[1]])
        ledgers[where[0]:where[1]] = [dataclasses.replace(record, time_span=merged)]
    extra = {**meta.extra, STATE_KEY: {"uri": uri, "run": run, "version": version}}
    new = dataclasses.replace(meta, ledgers=tuple(ledgers), extra=extra)
    lm.validate(new)
    return new, skipped


def unlisted_znode(run: int) -> str:
    return f"{UNLISTED_PREFIX}{run:08d}"


def unlisted(before: LogMetadata, after: LogMetadata) -> list[int]:
    """Bookie ledgers the log listed before a swap and not after it: the compacted ledgers whose records
    an offload replaced (their logical ledgers stay listed in the offloaded record). Their data is the
    table's now; they stay on the bookies until deleted (`UNLISTED_PREFIX` znodes name them)."""
    return sorted(before.listed_ids - after.listed_ids)


def offloaded_files(meta: LogMetadata) -> list[tuple[str, int, int, int]]:
    """(file, table version, entries, bytes) of the log's offloaded records, in log order."""
    return [(led.offloaded[0], led.offloaded[1], led.entries or 0, led.size or 0)
            for led in meta.ledgers if led.offloaded is not None]


def record_json(record: LogLedger) -> dict[str, Any]:
    """What a file's footer says of the record that will point at it (recovery reads it back)."""
    return {"ledger_id": record.ledger_id, "created_ms": record.created_ms,
            "first_position": record.first_position, "entries": record.entries, "size": record.size,
            "closed_ms": record.closed_ms, "replaced": [list(r) for r in record.replaced],
            "time_span": None if record.time_span is None else list(record.time_span),
            "envelope": record.envelope}


def record_from_json(raw: Mapping[str, Any], path: str, version: int) -> LogLedger:
    """The record a file's footer describes, pointing at `path` at table `version`. ValueError if the
    footer is not one offload wrote."""
    try:
        def opt(key: str) -> int | None:
            value = raw.get(key)
            return None if value is None else int(value)

        return LogLedger(int(raw["ledger_id"]), int(raw["created_ms"]), opt("first_position"), opt("entries"),
                         opt("size"), opt("closed_ms"), tuple((int(a), int(b), int(c)) for a, b, c in raw["replaced"]),
                         lm.parse_time_span(raw.get("time_span")), lm.parse_envelope(raw.get("envelope")),
                         (path, version))
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"offloaded file {path}: its footer does not describe an offload record: {exc}") from exc


def describe_tiers(meta: LogMetadata) -> list[str]:
    """The tiers of a log (`bkledger log describe`): ledgers on bookies and files offloaded to its table,
    each with its bytes and oldest and newest position, and the table's URI and version."""
    now = state(meta)
    if now.uri is None:
        return []
    tiers = {True: [led for led in meta.ledgers if led.offloaded is not None],
             False: [led for led in meta.ledgers if led.offloaded is None]}

    def span(ledgers: list[LogLedger]) -> str:
        if not ledgers:
            return "-"
        last = ledgers[-1]
        end = f"{last.replaced[-1][0] if last.replaced else last.ledger_id}:"
        if last.entries is None:
            end += "(open)"
        else:
            tail = lm.logical_ledgers(dataclasses.replace(meta, ledgers=(last,)))[-1]
            end += str((tail.entries or 0) - 1)
        return f"{ledgers[0].key}:0 .. {end}"

    def bytes_of(ledgers: list[LogLedger]) -> int:
        return sum(led.size or 0 for led in ledgers)

    return [
        f"on bookies          {len(tiers[False])} ledgers, {bytes_of(tiers[False])} bytes, "
        f"positions {span(tiers[False])}",
        f"offloaded           {len(tiers[True])} files, {sum(led.entries or 0 for led in tiers[True])} entries, "
        f"{bytes_of(tiers[True])} bytes, positions {span(tiers[True])}",
        f"table               {now.uri.rstrip('/')}/{table_dir(meta.name)} (version {now.version}, run {now.run})",
    ]
