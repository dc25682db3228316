"""Driver side of reads by time: the record timestamp at a position, read from the bookies for the binary
search of `spark_connector.narrowing.first_at_or_after` (one entry per probe, handles kept per ledger).

Mirrors Kafka's `offsetsForTimes`. A ledger written without the record envelope has no timestamps: its
records count as older than any time, without a read. Ledgers are opened without recovery (R12).
A ledger of the log's offloaded history is probed in its Parquet file (its timestamp column, read once).
"""

from __future__ import annotations

from collections.abc import Sequence

from bkledger.client import BookKeeper, LedgerHandle
from bkledger.client.log.core import envelope as env
from bkledger.spark_connector.offloaded import OffloadedFiles
from bkledger.spark_connector.planning import LedgerView


class TimeProbe:
    """(ledger id, entry id) -> the record's timestamp in microseconds since the epoch, or None."""

    def __init__(self, bk: BookKeeper, views: Sequence[LedgerView], password: bytes | None,
                 log_name: str | None = None) -> None:
        self._bk = bk
        self._log = log_name
        self._files = OffloadedFiles()
        self._views = {v.ledger_id: v for v in views}
        self._password = password
        self._handles: dict[int, LedgerHandle] = {}
        self.reads = 0                       # entries read so far (tests check the search stays O(log n))

    def _handle(self, physical: int) -> LedgerHandle:
        if physical not in self._handles:
            self._handles[physical] = self._bk.open_ledger(physical, self._password, recovery=False)
        return self._handles[physical]

    def __call__(self, ledger_id: int, entry_id: int) -> int | None:
        view = self._views[ledger_id]
        if view.envelope == env.NONE:
            return None
        if view.offloaded is not None and self._log is not None:
            self.reads += 1
            return self._files.timestamp(self._log, view, entry_id)
        rh = self._handle(view.physical or ledger_id)
        envelope = view.envelope if view.envelope >= 0 else env.version_of(rh.metadata.custom_metadata)
        if envelope == env.NONE:
            return None
        position = view.base + entry_id
        chunk = rh.read_chunk(position, position)
        self.reads += 1
        return env.decode_record(chunk.payloads[0], envelope).timestamp_us
