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

import collections
import concurrent.futures
import contextlib
import logging
from collections.abc import Mapping

from bkledger.client import BookKeeper, append_ledgers_to_logs
from bkledger.client.errors import InvalidLogUpdateError, LogNotFoundError, LogUpdateConflictError
from bkledger.client.log.core.meta import late_ledgers

log = logging.getLogger("bkledger.spark")

COMMIT_ATTEMPTS = 20
COPY_IN_FLIGHT = 2_000
COPY_TIMEOUT_S = 120.0


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
    original's."""
    current = {name: sorted(got) for name, got in ids.items()}
    copies: dict[int, int] = {}                  # original -> copy, for the ids re-homed so far
    spans = dict(time_spans or {})
    try:
        for _ in range(COMMIT_ATTEMPTS):
            try:
                done = append_ledgers_to_logs(bk, current, commit_marker=commit_marker, password=password,
                                              fence_live_writer=fence_live_writer,
                                              time_spans=_spans_of_copies(spans, copies))
            except InvalidLogUpdateError:
                late = _below_tail(bk, current)
                if not late:
                    raise
                current = {name: _rehome(bk, got, late.get(name, []), password, copies)
                           for name, got in current.items()}
                continue
            bk.delete_ledgers(copies.keys() if done else copies.values())    # the replaced, or the unused
            return done
    except BaseException:
        bk.delete_ledgers(copies.values())
        raise
    bk.delete_ledgers(copies.values())
    raise LogUpdateConflictError(f"logs {sorted(ids)}: other appends kept landing first ({COMMIT_ATTEMPTS} "
                                 "times); nothing of this job was appended; retry it")


def _spans_of_copies(spans: Mapping[int, tuple[int, int]], copies: Mapping[int, int]
                     ) -> dict[int, tuple[int, int]]:
    """The spans by ledger id, each re-homed ledger's under its copy's id too (same records, same span)."""
    return {**spans, **{copy: spans[original] for original, copy in copies.items() if original in spans}}


def _below_tail(bk: BookKeeper, ids: Mapping[str, list[int]]) -> dict[str, list[int]]:
    metas = {}
    for name in ids:
        with contextlib.suppress(LogNotFoundError):
            metas[name] = bk.log_metadata(name)
    return late_ledgers(metas, ids)


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


def copy_ledger(bk: BookKeeper, ledger_id: int, password: bytes) -> int:
    """A new CLOSED ledger with the same entries, settings, password (none given: the original's, the log's
    key) and custom metadata; its id."""
    rh = bk.open_ledger(ledger_id, password or None, recovery=False)
    md = rh.metadata
    lh = bk.create_ledger(md.ensemble_size, md.write_quorum, md.ack_quorum, digest_type=md.digest_type,
                          password=password or md.password, custom_metadata=dict(md.custom_metadata),
                          compression=md.compression)
    try:
        pending: collections.deque[concurrent.futures.Future[int]] = collections.deque()
        position, last = 0, md.last_entry_id
        while position <= last:
            chunk = rh.read_chunk(position, last)
            for payload in chunk.payloads:
                pending.append(lh.add_entry_async(payload))
                if len(pending) > COPY_IN_FLIGHT:
                    pending.popleft().result(COPY_TIMEOUT_S)
            position = chunk.entry_ids[-1] + 1
        while pending:
            pending.popleft().result(COPY_TIMEOUT_S)
        lh.close()
    except BaseException:
        with contextlib.suppress(Exception):
            lh.close()
        with contextlib.suppress(Exception):
            bk.delete_ledger(lh.ledger_id)
        raise
    return lh.ledger_id
