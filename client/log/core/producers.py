"""Idempotent producer commits: the pure rules (issue 44 item 2), as Kafka's idempotent producer.

Many producers write one log at once (`client.log.producer`): each writes CLOSED ledgers of its own and
commits them into the log in ONE compare-and-swap, as a Spark sink's commit. Each commit carries the
producer's id and a sequence number that grows by commit; the log records, with the ledgers and in the
same CAS, the last sequence each producer committed. A commit retried after an ambiguous ZooKeeper
answer (connection loss after the write, and another commit landed meanwhile) then finds its sequence
recorded and appends nothing: every batch lands exactly once.

Stored form: top-level key `"producers"` of the log (kept by older clients as an unknown key):
`{producer_id: [last_sequence, last_commit_ms, ledger_id, instance]}`, `ledger_id` the ledger that commit
listed, `instance` a random token of the producer object that committed it. Two live producers that share
an id (a misconfiguration; Kafka fences the older by epoch) are told apart by it: the one that finds its
sequence taken by the other's instance gets ProducerConflictError instead of a silent "duplicate".

Bounded state (Kafka: `producer.id.expiration.ms`, `transactional.id.expiration.ms`): a producer's entry
goes when it has not committed for `expire_ms` (default one day), and at most `max_producers` entries
(default 1,000, the most recently committing kept) stay. A producer silent for longer than that is
unknown again: its next commit is accepted whatever its sequence, so a retry arriving after its entry
expired could land twice (as in Kafka, where an expired producer id loses its deduplication).

No I/O here: the time comes in as an argument.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from bkledger.client.errors import BKError
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core.meta import LogMetadata

PRODUCERS_KEY = "producers"
DEFAULT_EXPIRE_MS = 24 * 3600 * 1000
DEFAULT_MAX_PRODUCERS = 1_000
MAX_PRODUCER_ID = 128          # characters


class ProducerConflictError(BKError):
    """Another producer with the same id committed this sequence (or a later one): two producers share an id."""


@dataclasses.dataclass(frozen=True)
class ProducerState:
    """What the log remembers of one producer: its last committed sequence, when, and that commit's ledger."""

    sequence: int
    commit_ms: int
    ledger_id: int
    instance: str = ""


@dataclasses.dataclass(frozen=True)
class Bounds:
    """How long and how many producer entries a log keeps."""

    expire_ms: int = DEFAULT_EXPIRE_MS
    max_producers: int = DEFAULT_MAX_PRODUCERS


def check_producer_id(producer_id: str) -> str | None:
    """Why `producer_id` cannot name a producer (None if it can): non-empty printable text, at most 128."""
    if not isinstance(producer_id, str) or not producer_id:
        return "a producer id is a non-empty string"
    if len(producer_id) > MAX_PRODUCER_ID:
        return f"a producer id has at most {MAX_PRODUCER_ID} characters, got {len(producer_id)}"
    if not producer_id.isprintable():
        return "a producer id has printable characters only"
    return None


def producers(meta: LogMetadata) -> dict[str, ProducerState]:
    """The producers the log remembers; entries that are not readable are left out (unknown producers)."""
    raw = meta.extra.get(PRODUCERS_KEY)
    if not isinstance(raw, Mapping):
        return {}
    return {str(pid): state for pid, item in raw.items() if (state := _state(item)) is not None}


def _state(item: Any) -> ProducerState | None:
    if not isinstance(item, (list, tuple)) or len(item) not in (3, 4):
        return None
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in item[:3]):
        return None
    instance = item[3] if len(item) == 4 else ""
    return ProducerState(item[0], item[1], item[2], instance) if isinstance(instance, str) else None


def committed(meta: LogMetadata, producer_id: str, sequence: int, instance: str = "") -> ProducerState | None:
    """The producer's recorded state if this commit (`sequence` of this `instance`) is already in the log:
    a duplicate, to append nothing. None: not committed (or the producer is unknown). ProducerConflictError
    if the log holds this sequence or a later one from another instance (or a later one from this one):
    another producer uses the same id."""
    state = producers(meta).get(producer_id)
    if state is None or state.sequence < sequence:
        return None
    if state.sequence == sequence and state.instance == instance:
        return state
    raise ProducerConflictError(
        f"log {meta.name!r}: producer id {producer_id!r} committed its sequence {state.sequence} from another "
        f"producer than this one (at sequence {sequence}): two producers use this id; give each its own")


def next_sequence(meta: LogMetadata, producer_id: str) -> int:
    """The sequence a (re)starting producer with this id commits next: one past the last recorded."""
    state = producers(meta).get(producer_id)
    return 0 if state is None else state.sequence + 1


def with_producer_commit(meta: LogMetadata, producer_id: str, sequence: int, ledgers: Sequence[lm.ClosedLedger],
                         now_ms: int, bounds: Bounds = Bounds(), instance: str = "",
                         time_spans: Mapping[int, tuple[int, int]] | None = None,
                         envelopes: Mapping[int, int | None] | None = None) -> LogMetadata | None:
    """The log with the producer's commit `sequence` applied: its ledgers appended, its sequence recorded
    (against the last ledger appended), expired entries dropped. None if it is a duplicate (`committed`).
    InvalidLogUpdateError if a ledger is not above the log's last one (R27; `meta.late_ledgers`)."""
    if committed(meta, producer_id, sequence, instance) is not None:
        return None
    new = lm.with_sealed_ledgers_appended(meta, ledgers, now_ms, time_spans, envelopes) if ledgers else meta
    last = ledgers[-1][0] if ledgers else -1
    table = {**producers(meta), producer_id: ProducerState(sequence, now_ms, last, instance)}
    return dataclasses.replace(new, extra={**new.extra, PRODUCERS_KEY: _stored(bounded(table, now_ms, bounds))})


def bounded(table: Mapping[str, ProducerState], now_ms: int, bounds: Bounds) -> dict[str, ProducerState]:
    """The entries not expired, at most `max_producers` of them (the latest commits kept)."""
    alive = [(pid, s) for pid, s in table.items() if now_ms - s.commit_ms <= bounds.expire_ms]
    alive.sort(key=lambda item: (item[1].commit_ms, item[0]), reverse=True)
    return dict(alive[:max(0, bounds.max_producers)])


def _stored(table: Mapping[str, ProducerState]) -> dict[str, list[int | str]]:
    return {pid: [s.sequence, s.commit_ms, s.ledger_id, s.instance] for pid, s in sorted(table.items())}
