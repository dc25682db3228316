"""Client settings, with BookKeeper's ClientConfiguration names where one exists.

`ClientConfig.from_options` accepts a mapping of strings (as Spark options or a properties file give
them) and rejects unknown keys with an InvalidOptionError that names the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from client.errors import InvalidOptionError


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    zkTimeout: float = 10.0                  # s, ZooKeeper session timeout
    addEntryTimeoutSec: float = 5.0          # an add not acked by a bookie in this time: the bookie failed
    readTimeout: float = 5.0                 # s, per read request
    speculativeReadTimeout: int = 500        # ms without an answer from a bookie: also ask the next bookie of
                                             # the write set; the first valid answer wins (0: never speculate)
    maxSpeculativeReadTimeout: int = 0       # ms, cap of the backoff (x2) between further speculations of one
                                             # read (0: same as speculativeReadTimeout, so it never grows)
    reorderReadSequenceEnabled: bool = True  # read from bookies that were slow or failed recently last
    bookieFailureHistoryExpirationMSec: int = 60000   # how long a bookie counts as "recently slow"
    fenceTimeout: float = 5.0                # s, recovery's fencing reads
    metadataMaxAttempts: int = 20            # CAS attempts before giving up with a clear error
    maxEntrySize: int = 5 * 1024 * 1024 - 1024   # payload limit, below the bookie's frame limit
    maxAddRequestsInFlight: int = 2          # per bookie connection: unanswered AddRequests before new adds
                                             # wait to leave together in the next one (0: no bound)
    maxOutstandingAdds: int = 4000           # adds in flight per ledger before add_entry waits (deeper queues
                                             # only delay acks past addEntryTimeoutSec when many ledgers share a bookie)
    ensembleChangeMaxAttempts: int = 5       # bounded ensemble changes per failure
    readBatchBytes: int = 4 * 1024 * 1024    # range read batch size asked from bookies
    recoveryReadWindow: int = 64             # recovery reads in flight (BookKeeper: recoveryReadBatchSize)

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None = None) -> ClientConfig:
        if not options:
            return cls()
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in options.items():
            if key not in fields:
                raise InvalidOptionError(f"unknown client setting {key!r}; known: {', '.join(sorted(fields))}")
            kind: type = type(fields[key].default)
            try:
                kwargs[key] = _parse_bool(raw) if kind is bool else kind(raw)
            except (TypeError, ValueError):
                raise InvalidOptionError(f"client setting {key} must be a {kind.__name__}, got {raw!r}") from None
        return cls(**kwargs)


def _parse_bool(raw: Any) -> bool:
    """A boolean setting: a bool, or true/false (any case) as Spark options and properties give it."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(raw)
