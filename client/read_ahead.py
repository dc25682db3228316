"""Reads of many small ledgers asked for ahead of their use (`chunks_ahead`), for readers of logs."""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING

from bkledger.client.reader import ReadChunk

if TYPE_CHECKING:
    from bkledger.client.ledger_handle import LedgerHandle

Chunk = concurrent.futures.Future[ReadChunk]
Read = tuple["LedgerHandle", int, int]                # (handle, first, last), as bk.read_chunks_async takes


def chunks_ahead(read_chunks_async: Callable[[Sequence[Read]], list[Chunk]], groups: int,
                 reads_of: Callable[[int], Sequence[Read | None]]) -> Generator[Chunk | None, None, None]:
    """The futures of group 0's reads, then group 1's, ... in order (None where `reads_of(n)` gave None):
    a group is asked for (`bk.read_chunks_async`, many small ledgers per bookie call) two groups ahead of
    the one being handed over, and `reads_of(n)` is called only then, so it may depend on what the caller
    has consumed. Futures never handed over are cancelled when the caller stops iterating."""
    def start(number: int) -> list[Chunk | None]:
        reads = reads_of(number)
        futures = iter(read_chunks_async([r for r in reads if r is not None]))
        return [None if r is None else next(futures) for r in reads]

    flight = collections.deque(start(n) for n in range(min(2, groups)))
    try:
        for number in range(groups):
            current = flight[0]
            if number + 2 < groups:
                flight.append(start(number + 2))
            for position, got in enumerate(current):
                current[position] = None          # handed over: the caller owns it now
                yield got
            flight.popleft()
    finally:
        for futures in flight:
            for future in futures:
                if future is not None:
                    future.cancel()
