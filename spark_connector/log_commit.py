"""The driver's commit of a Spark append (batch job or streaming micro-batch) into a log.

`append_ledgers` adds a job's CLOSED ledgers to the log in ONE compare-and-swap and retries a lost CAS
itself. What it cannot retry is order: a log's ledger ids strictly increase (R27), and two jobs appending
to one log at the same time create their ledgers interleaved (job A 10, 12; job B 11, 13). When A commits
first, B's ledger 11 is below the log's new last ledger 12 and cannot follow it. `commit_ledgers` then
re-homes each such ledger: it copies its entries, in order, into a new ledger (created now, so its id is
above every ledger that exists, with the same quorum, digest, password, compression and custom metadata)
and tries again with the copies, a bounded number of times. The originals are deleted once the log lists
the copies (and are otherwise swept with the job's other unlisted ledgers). So concurrent jobs each land
whole, none twice; only a job that keeps losing for `COMMIT_ATTEMPTS` rounds fails (with
LogUpdateConflictError, nothing of it appended).

`commit_to_logs` does the same for a job that wrote to several logs (per-row destinations): all of
them in ONE ZooKeeper transaction (`client.log.logs.append_ledgers_to_logs`), retried whole.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping

from bkledger.client import BookKeeper, append_ledgers_to_logs
from bkledger.client.connector import copy_ledger
from bkledger.client.errors import InvalidLogUpdateError, LogNotFoundError, LogUpdateConflictError
from bkledger.client.log.core import outcome
from bkledger.client.log.core.meta import LogMetadata, late_ledgers

log = logging.getLogger("bkledger.spark")

COMMIT_ATTEMPTS = 20


def commit_ledgers(bk: BookKeeper, name: str, ids: list[int], *, password: bytes, fence_live_writer: bool,
                   commit_marker: tuple[str, int] | None = None,
                   time_spans: Mapping[int, tuple[int, int]] | None = None) -> bool:
    """append_ledgers(ids), re-homing ledgers that another job's commit left below the log's tail."""
    return commit_to_logs(bk, {name: ids}, password=password, fence_live_writer=fence_live_writer,
                          commit_marker=commit_marker, time_spans=time_spans)


def commit_to_logs(bk: BookKeeper, ids: Mapping[str, list[int]], *, password: bytes, fence_live_writer: bool,
                   commit_marker: tuple[str, int] | None = None,
                   time_spans: Mapping[int, tuple[int, int]] | None = None) -> bool:
    """append_ledgers_to_logs(ids): every destination log in ONE transaction; on a lost race the whole
    transaction is tried again, after re-homing the ledgers that other jobs' commits left below a log's
    tail (in any of the logs). False (nothing appended) if the marker shows the batch committed.
    `time_spans`: each ledger's record time span (min, max us) where its task knew it; a copy gets its
    original's.

    A transaction whose answer ZooKeeper lost may have landed: what it did is read from the logs
    (`client.log.core.outcome`), never assumed. If they list the ledgers tried last, the commit is done
    (True, even after an error); the copies and replaced originals deleted are only those no log lists."""
    current = {name: sorted(got) for name, got in ids.items()}
    copies: dict[int, int] = {}                  # original -> copy, for the ids re-homed so far
    spans = dict(time_spans or {})
    done = False
    try:
        for _ in range(COMMIT_ATTEMPTS):
            try:
                done = append_ledgers_to_logs(bk, current, commit_marker=commit_marker, password=password,
                                              fence_live_writer=fence_live_writer,
                                              time_spans=_spans_of_copies(spans, copies))
            except InvalidLogUpdateError:
                metas = _logs(bk, current)
                if not outcome.landed(metas, current):    # else an earlier try landed; its answer was lost
                    late = late_ledgers(metas, current)
                    if not late:
                        raise
                    current = {name: _rehome(bk, got, late.get(name, []), password, copies)
                               for name, got in current.items()}
                    continue
                done = True
            done = done or outcome.landed(_logs(bk, current), current)   # a marker it set itself
            return done
    except Exception:
        done = _landed_after_all(bk, current)
        if not done:
            raise
        return True
    finally:
        _delete_unlisted(bk, current, [*copies.values(), *(copies.keys() if done else ())])
    raise LogUpdateConflictError(f"logs {sorted(ids)}: other appends kept landing first ({COMMIT_ATTEMPTS} "
                                 "times); nothing of this job was appended; retry it")


def _logs(bk: BookKeeper, ids: Mapping[str, list[int]]) -> dict[str, LogMetadata]:
    """The logs (those that exist), each from the segment of its least ledger id in `ids` on: enough to
    see whether they list those ledgers, read in a time that does not grow with the log."""
    metas = {}
    for name, got in ids.items():
        with contextlib.suppress(LogNotFoundError):
            metas[name] = bk.log_metadata(name, from_ledger=min(got)) if got else bk.log_metadata(name)
    return metas


def _landed_after_all(bk: BookKeeper, current: Mapping[str, list[int]]) -> bool:
    """After an error: whether the logs list the ledgers tried last (the error followed a transaction that
    landed, e.g. ZooKeeper's answer lost). False if the logs cannot be read (then unknown: not deleted)."""
    try:
        landed = outcome.landed(_logs(bk, current), current)
    except Exception as exc:  # noqa: BLE001 - the commit's own error is what the caller gets
        log.warning("logs %s: could not read them after a failed commit (%s); its outcome is unknown",
                    sorted(current), exc)
        return False
    if landed:
        log.warning("logs %s: the commit failed after its transaction landed (ZooKeeper's answer was lost); "
                    "it is in the logs, once", sorted(current))
    return landed


def _delete_unlisted(bk: BookKeeper, current: Mapping[str, list[int]], candidates: list[int]) -> None:
    """Delete the candidates (copies, replaced originals) that no log lists; if the logs cannot be read,
    none (a job's sweep finds its unlisted ledgers later)."""
    if not candidates:
        return
    try:
        metas = _logs(bk, {name: [*got, *candidates] for name, got in current.items()})
    except Exception as exc:  # noqa: BLE001 - cleanup only; deleting blind could delete committed data
        log.warning("logs %s: could not read them to delete this commit's unlisted ledgers %s (%s); a sweep "
                    "of the job's ledgers deletes them later", sorted(current), candidates, exc)
        return
    bk.delete_ledgers(outcome.unlisted(metas, candidates))


def _spans_of_copies(spans: Mapping[int, tuple[int, int]], copies: Mapping[int, int]
                     ) -> dict[int, tuple[int, int]]:
    """The spans by ledger id, each re-homed ledger's under its copy's id too (same records, same span)."""
    return {**spans, **{copy: spans[original] for original, copy in copies.items() if original in spans}}


def _rehome(bk: BookKeeper, ids: list[int], late: list[int], password: bytes, copies: dict[int, int]) -> list[int]:
    """Replace each late ledger by a fresh copy; the new sorted id list."""
    out = [i for i in ids if i not in late]
    for ledger_id in late:
        new_id = copy_ledger(bk, ledger_id, password)
        original = next((o for o, c in copies.items() if c == ledger_id), ledger_id)
        if original != ledger_id:                # a copy that went late too: replace it
            bk.delete_ledgers([ledger_id])
        copies[original] = new_id
        out.append(new_id)
        log.info("ledger %d landed below the log's tail (a concurrent append committed first): copied to %d",
                 ledger_id, new_id)
    return sorted(out)
