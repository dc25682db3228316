"""Copying a CLOSED ledger into a new one: what a commit does with a ledger another commit overtook.

A log's ledger ids strictly increase (R27): a ledger created before another that committed first cannot
follow it. The Spark commit (`spark_connector.log_commit`) and the log producer (`client.log.producer`)
then re-home it: `copy_ledger` writes its entries, in order, to a ledger created now (so its id is above
every ledger that exists), with the same quorum, digest, password, compression and custom metadata (so
the copy names the same record envelope version and job tags).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bkledger.client.log.facade import BookKeeperFacade as BookKeeper

COPY_IN_FLIGHT = 2_000
COPY_TIMEOUT_S = 120.0


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
