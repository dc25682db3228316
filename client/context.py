"""What the drivers of one BookKeeper instance share (`ClientContext`), apart from the facade that makes it.

The ledger handle, the reader, the writer and the recovery driver take it; none of them imports
`client.bookkeeper`, which imports them.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from bkledger.client.add_trace import SlowAddLog
from bkledger.client.bookies import BookiePool
from bkledger.client.config import ClientConfig
from bkledger.client.errors import BKError
from bkledger.client.meta.store import MetadataStore
from bkledger.client.metrics import NO_METRICS, ClientMetrics
from bkledger.client.placement import PlacementPolicy
from bkledger.client.protocol.speculative import BookieHealth, SpeculativePolicy
from bkledger.client.runtime import EventLoopThread


class OpenWriter(Protocol):
    """A ledger's writer (`client.writer.LedgerWriter`) as the client holds it until the ledger closes."""

    def shutdown(self, error: BKError) -> None: ...


class NoRanges:
    """The bookies that answered UNIMPLEMENTED to ReadRanges (older bookies): read one ledger at a time."""

    def __init__(self) -> None:
        self.bookies: set[str] = set()



@dataclasses.dataclass
class ClientContext:
    """What the drivers of one BookKeeper instance share."""

    runtime: EventLoopThread
    store: MetadataStore
    pool: BookiePool
    config: ClientConfig
    placement: PlacementPolicy
    writers: set[OpenWriter] = dataclasses.field(default_factory=set)
    metrics: ClientMetrics = NO_METRICS      # client.metrics: counters in the application's registry, if given
    health: BookieHealth = dataclasses.field(default_factory=BookieHealth)   # failure history for read order
    no_ranges: NoRanges = dataclasses.field(default_factory=NoRanges)   # bookies without ReadRanges (older)
    slow_log: SlowAddLog = dataclasses.field(default_factory=lambda: SlowAddLog(0, 0.0, 1))   # client.add_trace

    @property
    def speculative(self) -> SpeculativePolicy:
        return SpeculativePolicy.from_ms(self.config.speculativeReadTimeout, self.config.maxSpeculativeReadTimeout)
