"""A log's offload policy, the pure part: what the policy is (stored with the log's head, as retention
is), which of the log's sealed ledgers to offload now, which bookie copies of offloaded history to delete
now, and how far offload lags.

Thresholds as Pulsar's (`managedLedgerOffloadThresholdInBytes` / `...InSeconds`): walking the log's ledgers
on bookies from the newest, a sealed ledger is offloaded once the bytes of it and of every ledger after it
exceed `after_bytes`, or once it was closed more than `after_seconds` ago; every older ledger goes with it
(offloaded history is a prefix of the log). None disables a threshold; 0 offloads every sealed ledger the
offload may take (`core.offload.candidates`).

Deletion lag as Pulsar's `managedLedgerOffloadDeletionLagMs` (default 4 h): the bookie copies of a run's
ledgers are deleted `deletion_lag_s` seconds after the run's swap (the CAS that pointed the log at the
table); 0: at once; None ("keep"): never. Each swap creates the child znode `offloaded-<run>` of the log
(`core.offload.unlisted_znode`) naming every bookie ledger the run's records hold and the swap's time
(`encode_copies`); deleting them and then that znode is the whole deletion, so a rerun after a crash
deletes the same ledgers again (a ledger gone already is skipped) and nothing readable is lost: the log
reads those ledgers' entries from the table's files.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Sequence
from typing import Any

from bkledger.client.errors import InvalidOptionError
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import offload as ol
from bkledger.client.log.core.meta import LogMetadata

POLICY_KEY = "offload_policy"
DEFAULT_DELETION_LAG_S = 4 * 3600.0          # Pulsar's managedLedgerOffloadDeletionLagMs default
KEEP = "keep"


@dataclasses.dataclass(frozen=True)
class OffloadPolicy:
    """When the offloader offloads a log and when it deletes the bookie copies (module docstring)."""

    after_bytes: int | None = None
    after_seconds: float | None = None
    store_uri: str | None = None
    deletion_lag_s: float | None = DEFAULT_DELETION_LAG_S     # None: keep the bookie copies

    @property
    def enabled(self) -> bool:
        return self.after_bytes is not None or self.after_seconds is not None

    def as_dict(self) -> dict[str, Any]:
        return {"after_bytes": self.after_bytes, "after_seconds": self.after_seconds, "store_uri": self.store_uri,
                "deletion_lag_seconds": KEEP if self.deletion_lag_s is None else self.deletion_lag_s}


def parse_lag(value: float | int | str | None) -> float | None:
    """A deletion lag as given by a user: seconds >= 0, or "keep" (None). InvalidOptionError else."""
    if value is None or value == KEEP:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidOptionError(f"deletion_lag_seconds must be seconds >= 0 or {KEEP!r}, got {value!r}")
    return float(value)


def make_policy(after_bytes: int | None, after_seconds: float | None, store_uri: str | None,
                deletion_lag: float | int | str | None) -> OffloadPolicy:
    """A checked policy; InvalidOptionError names what is wrong."""
    if after_bytes is not None and (isinstance(after_bytes, bool) or not isinstance(after_bytes, int)
                                    or after_bytes < 0):
        raise InvalidOptionError(f"after_bytes must be an int >= 0 or None, got {after_bytes!r}")
    if after_seconds is not None and (isinstance(after_seconds, bool) or not isinstance(after_seconds, (int, float))
                                      or not after_seconds >= 0):
        raise InvalidOptionError(f"after_seconds must be >= 0 or None, got {after_seconds!r}")
    if after_bytes is None and after_seconds is None:
        raise InvalidOptionError("an offload policy needs after_bytes or after_seconds (or both); "
                                 "clear_log_offload removes a policy")
    if store_uri is not None and (not isinstance(store_uri, str) or not store_uri):
        raise InvalidOptionError(f"store_uri must be a non-empty string or None, got {store_uri!r}")
    return OffloadPolicy(after_bytes, None if after_seconds is None else float(after_seconds), store_uri,
                         parse_lag(deletion_lag))


def policy(meta: LogMetadata) -> OffloadPolicy | None:
    """The log's stored policy (None: none; a malformed record reads as none)."""
    raw: Any = meta.extra.get(POLICY_KEY)
    if not isinstance(raw, dict):
        return None
    try:
        return make_policy(raw.get("after_bytes"), raw.get("after_seconds"), raw.get("store_uri"),
                           raw.get("deletion_lag_seconds", DEFAULT_DELETION_LAG_S))
    except InvalidOptionError:
        return None


def with_policy(meta: LogMetadata, new: OffloadPolicy | None) -> LogMetadata:
    """The log with `new` stored as its policy (None: without one)."""
    extra = {k: v for k, v in meta.extra.items() if k != POLICY_KEY}
    if new is not None:
        extra[POLICY_KEY] = new.as_dict()
    return dataclasses.replace(meta, extra=extra)


def deletion_lag(meta: LogMetadata) -> float | None:
    """Seconds the bookie copies of the log's offloaded history stay: its policy's, else the default."""
    got = policy(meta)
    return DEFAULT_DELETION_LAG_S if got is None else got.deletion_lag_s


# ---- what to offload now ------------------------------------------------------------------------------
def due_count(meta: LogMetadata, pol: OffloadPolicy, now_ms: int, keep_tail: int = ol.KEEP_TAIL) -> int:
    """How many of the offload candidates (`core.offload.candidates`, in log order) the policy offloads
    now: up to and including the newest one past a threshold (module docstring)."""
    if not pol.enabled:
        return 0
    cands = ol.candidates(meta, keep_tail)
    if not cands:
        return 0
    first = meta.ledgers.index(cands[0])
    on_bookies = [led.size or 0 for led in meta.ledgers[first:]]
    suffix = sum(on_bookies)
    due = 0
    for i, led in enumerate(cands):
        by_bytes = pol.after_bytes is not None and suffix > pol.after_bytes
        by_age = (pol.after_seconds is not None and led.closed_ms is not None
                  and now_ms - led.closed_ms > pol.after_seconds * 1000)
        if by_bytes or by_age:
            due = i + 1
        suffix -= on_bookies[i]
    return due


@dataclasses.dataclass(frozen=True)
class OffloadLag:
    """Sealed history on bookies the offloader may take and has not (bytes, oldest close time), and the
    bytes already offloaded (as the log counts them: the ledgers' bytes, not the files')."""

    bytes: int
    oldest_closed_ms: int | None
    offloaded_bytes: int

    def seconds(self, now_ms: int) -> float:
        return 0.0 if self.oldest_closed_ms is None else max(0.0, (now_ms - self.oldest_closed_ms) / 1000.0)


def lag(meta: LogMetadata) -> OffloadLag:
    cands = ol.candidates(meta)
    closed = [led.closed_ms for led in cands if led.closed_ms is not None]
    return OffloadLag(sum(led.size or 0 for led in cands), min(closed) if closed else None,
                      sum(led.size or 0 for led in meta.ledgers if led.offloaded is not None))


# ---- bookie copies of offloaded history -------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Copies:
    """A run's `offloaded-<run>` znode: the bookie ledgers its swap left to delete, and when it swapped
    (None: written before swaps recorded their time)."""

    znode: str
    ledgers: tuple[int, ...]
    swapped_ms: int | None


def copies_of_run(records: Sequence[lm.LogLedger], unlisted: Sequence[int]) -> list[int]:
    """Every bookie ledger a run's swapped-in records hold: the logical ledgers they list and the
    compacted ledgers the swap left unlisted."""
    return sorted({*unlisted, *(r[0] for rec in records for r in rec.replaced)})


def encode_copies(ledgers: Sequence[int], swapped_ms: int) -> bytes:
    """The znode's data; readable by `compaction.decode_pending` too (delete_log deletes them)."""
    return json.dumps({"ledgers": list(ledgers), "swapped_ms": swapped_ms}, separators=(",", ":")).encode()


def decode_copies(znode: str, data: bytes) -> Copies:
    """ValueError if the data is not what `encode_copies` writes."""
    try:
        raw = json.loads(data)
        stamp = raw.get("swapped_ms")
        return Copies(znode, tuple(int(i) for i in raw["ledgers"]), None if stamp is None else int(stamp))
    except (UnicodeDecodeError, TypeError, KeyError, ValueError, AttributeError) as exc:
        raise ValueError(f"znode {znode}: not a list of offloaded bookie copies: {exc}") from exc


def due_copies(found: Sequence[Copies], lag_s: float | None, now_ms: int) -> list[Copies]:
    """The runs whose bookie copies are to be deleted now, oldest run first: none if the lag is None
    (keep); those swapped at least `lag_s` ago; those with no recorded time (an older release's runs)
    are due at once."""
    if lag_s is None:
        return []
    return sorted((c for c in found if c.swapped_ms is None or now_ms - c.swapped_ms >= lag_s * 1000),
                  key=lambda c: c.znode)


def describe_policy(meta: LogMetadata) -> list[str]:
    """The policy and offload lag lines of `bkledger log describe` (none if the log has no policy)."""
    got = policy(meta)
    if got is None:
        return []

    def show(value: object) -> str:
        return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

    lag_text = KEEP if got.deletion_lag_s is None else f"{got.deletion_lag_s:g}s"
    behind = lag(meta)
    return [f"offload policy      after_bytes={show(got.after_bytes)} after_seconds={show(got.after_seconds)} "
            f"deletion_lag={lag_text} store={got.store_uri or '-'}",
            f"offload lag         {behind.bytes} bytes of sealed ledgers on bookies not offloaded yet"
            + ("" if behind.oldest_closed_ms is None else f" (the oldest closed {utc(behind.oldest_closed_ms)})")]


def utc(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def next_round(names: Sequence[str], start_at: str, max_logs: int) -> tuple[list[str], str]:
    """The logs an offloader round takes (at most `max_logs`, from the first name >= `start_at`, wrapping
    around) and where the next round starts: every log gets its turn however many there are."""
    ordered = sorted(names)
    if not ordered:
        return [], ""
    first = next((i for i, name in enumerate(ordered) if name >= start_at), 0)
    chosen = (ordered[first:] + ordered[:first])[:max_logs]
    return chosen, ordered[(first + len(chosen)) % len(ordered)]
