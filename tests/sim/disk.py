"""A simulated journal disk: bytes in memory, an unsynced tail, fsync, crashes with torn writes.

Mirrors what BookKeeper's Journal relies on from the disk: appended records sit in the page cache (here:
`unsynced`) until fsync makes them durable; a crash loses the unsynced bytes, except that a random prefix
of them may have reached the platter (a torn write, possibly ending mid-record) and junk may follow.
Replay (R23) uses the real record codec's `iter_records`, which stops at the first incomplete or corrupt
frame; the valid prefix is kept and the rest cut off before new records are appended.
"""

from __future__ import annotations

import random

from bkledger.bookie.core.records import Record, iter_records


class SimJournal:
    """One bookie's journal file, in memory."""

    def __init__(self) -> None:
        self.durable = bytearray()
        self.unsynced = bytearray()

    @property
    def end(self) -> int:
        """Offset just past the last appended byte (synced or not)."""
        return len(self.durable) + len(self.unsynced)

    @property
    def synced(self) -> int:
        """Offset up to which everything is durable."""
        return len(self.durable)

    def append(self, record: bytes) -> int:
        """Append one encoded record; returns the journal end after it."""
        self.unsynced += record
        return self.end

    def sync(self) -> tuple[int, int]:
        """fsync succeeded: everything appended is durable. Returns (old synced offset, new synced offset)."""
        old = len(self.durable)
        self.durable += self.unsynced
        self.unsynced.clear()
        return old, len(self.durable)

    def lose_unsynced(self, rng: random.Random, *, torn: bool, junk: bool) -> int:
        """Crash or failed fsync: drop the unsynced bytes; with `torn` a random prefix of them survives, with
        `junk` random garbage follows. Returns how many bytes reached the disk."""
        kept = rng.randint(0, len(self.unsynced)) if torn and self.unsynced else 0
        self.durable += self.unsynced[:kept]
        self.unsynced.clear()
        if junk:
            self.durable += rng.randbytes(rng.randint(1, 24))
            kept += 1
        return kept

    def replay(self) -> tuple[list[Record], int]:
        """R23: the valid records from the start; the torn/junk tail is cut off. Returns (records, bytes cut)."""
        it = iter_records(bytes(self.durable))
        records = [record for _offset, record in it]
        cut = len(self.durable) - it.end
        del self.durable[it.end:]
        return records, cut

    def records_between(self, start: int, end: int) -> list[Record]:
        """The records durable in [start, end) (after a sync), decoded by the real codec."""
        it = iter_records(bytes(self.durable[:end]), start)
        return [record for _offset, record in it]
