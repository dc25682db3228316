"""What a streaming source's `commit(end)` does with option `cursor` (issue 44 item 3): acknowledge each
committed batch's end to the cursor held by the cluster on each log, so retention keeps what the query has
not processed and `bkledger log cursors` shows its lag outside Spark. Runs on the driver.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from bkledger.client.connector import ack_cursor, create_cursor
from bkledger.client.errors import BKError, CursorLostError, CursorNotFoundError
from bkledger.client.log.core.meta import Position
from bkledger.spark_connector.stream_positions import Pos

if TYPE_CHECKING:
    from bkledger.client import BookKeeper

log = logging.getLogger("bkledger.spark.stream")


def ack_batch_end(bk: BookKeeper, cursor: str, ends: Mapping[str, Pos], fail_on_data_loss: bool) -> None:
    """Acknowledge `ends` (per log: the next record after the batch) to `cursor`, forward only. A cursor
    marked lost raises CursorLostError with failOnDataLoss (the query fails, loudly), else it is cleared and
    moved to the end; a deleted cursor is created again; other errors are logged (the next commit retries)."""
    for name, pos in sorted(ends.items()):
        if pos.ledger < 0:
            continue                                   # the log has no ledger yet: nothing to acknowledge
        position = Position(pos.ledger, pos.entry)
        try:
            try:
                ack_cursor(bk.store, name, cursor, position, clear_lost=not fail_on_data_loss)
            except CursorNotFoundError:
                log.warning("cursor %r of log %r was deleted; creating it again at %s", cursor, name, position)
                create_cursor(bk.store, name, cursor)
                ack_cursor(bk.store, name, cursor, position)
        except CursorLostError:
            raise
        except BKError as exc:
            log.warning("cannot acknowledge %s to cursor %r of log %r (the next batch's commit tries again): %s",
                        position, cursor, name, exc)
