"""What a log's ledgers carry and how a log writer or producer starts on them: the ledger metadata keys of a
job's ledgers, the password a log's ledgers are created with, sealing a log's tail and the roll policy.
Below `client.log.logs`, which re-exports them, so that the writer and the producer need not import it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from bkledger.client.errors import InvalidOptionError
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core.meta import LogMetadata
from bkledger.client.log.core.takeover import DEFAULT_LOG_RULES, LogRules, TailSeal, tail_seal
from bkledger.client.log.store import create_log, load_log, now_ms

if TYPE_CHECKING:
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper

JOB_KEY = "bkledger.job"    # custom metadata of a ledger: the job (a Spark write, a sink's run) that wrote it
LOG_KEY = "bkledger.log"    # custom metadata of a ledger: the log it was written for


def log_ledger_password(bk: BookKeeper, name: str, given: bytes = b"") -> bytes:
    """The password to create ledgers for log `name` with: the one given (not empty), else the log's own
    key (`client.log.core.meta.log_password`; a missing log is created, empty, so that its key exists before
    its first ledgers), else the empty password (a log made before logs had keys). What a Spark task or
    any other job that writes ledgers for a log and appends them later (`append_ledgers`) must use."""
    if given:
        return given
    got = load_log(bk.store, name, whole=False) or create_log(bk.store, name, whole=False)
    return lm.ledger_password(got.meta, b"")


def seal_tail(bk: BookKeeper, meta: LogMetadata, password: bytes, rules: LogRules = DEFAULT_LOG_RULES
              ) -> LogMetadata:
    """Fence and recover (open with recovery) every ledger not recorded as sealed: the last two (R28 step 2;
    those recorded as sealed are CLOSED already) and any older one a crashed writer left unrecorded. Their
    entry counts and sizes go into the returned metadata. No password given: each ledger is recovered with
    the one its metadata holds (the log's own key for the ledgers its writers made). How is the pure rule
    `client.log.core.takeover.tail_seal` (`rules`: the defaults but in tests)."""
    out = meta
    recover = tail_seal(rules) is TailSeal.RECOVER
    for led in meta.ledgers:
        if led.sealed:          # recorded only once CLOSED, and CLOSED is terminal: fencing is a no-op
            continue
        rh = bk.open_ledger(led.ledger_id, password or None, recovery=recover)
        out = lm.with_ledger_sealed(out, led.ledger_id, rh.last_entry_id, rh.metadata.length, now_ms())
    return out


@dataclasses.dataclass(frozen=True)
class RollPolicy:
    """When a log writer rolls to a new ledger (R29). Defaults follow Pulsar's broker.conf:
    managedLedgerMaxEntriesPerLedger=50000, managedLedgerMaxLedgerRolloverTimeMinutes=240, and
    DistributedLog's maxLogSegmentBytes=256 MB. None disables a limit."""

    entries: int | None = 50_000
    bytes: int | None = 256 * 1024 * 1024
    age_s: float | None = 4 * 3600.0

    def __post_init__(self) -> None:
        for what, value in (("roll_entries", self.entries), ("roll_bytes", self.bytes), ("roll_age_s", self.age_s)):
            if value is not None and value <= 0:
                raise InvalidOptionError(f"{what} must be > 0 (or None to disable), got {value}")
