"""Ledger metadata as a value (R2), and the pure transforms of it.

Mirrors BookKeeper's LedgerMetadata: quorum sizes, state (OPEN, IN_RECOVERY, CLOSED), last entry id
(meaningful only when CLOSED), length, the ordered fragments (first entry id -> ensemble), digest
type, password, creation time and custom metadata. Values are immutable; every change returns a new
value, which the metadata layer stores with a compare-and-swap on the znode version.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping


class LedgerState(enum.Enum):
    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


class DigestType(enum.Enum):
    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4

    @classmethod
    def parse(cls, name: str | DigestType) -> DigestType:
        if isinstance(name, DigestType):
            return name
        key = name.strip().upper().replace("-", "")
        if key == "MAC":
            key = "HMAC"
        try:
            return cls[key]
        except KeyError:
            raise ValueError(
                f"unknown digest type {name!r}: use one of crc32c (default), crc32, hmac, dummy"
            ) from None


@dataclasses.dataclass(frozen=True)
class Fragment:
    """One segment of a ledger: entries from first_entry_id on are written to this ensemble."""

    first_entry_id: int
    ensemble: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerState
    last_entry_id: int          # -1 unless CLOSED (and -1 for a closed empty ledger)
    length: int
    fragments: tuple[Fragment, ...]
    digest_type: DigestType
    password: bytes
    ctime_ms: int
    custom_metadata: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    compression: str = ""       # "" or "lz4"

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    @property
    def last_fragment(self) -> Fragment:
        return self.fragments[-1]

    def fragment_for(self, entry_id: int) -> Fragment:
        """The fragment whose range holds entry_id (the last one starting at or below it)."""
        chosen = self.fragments[0]
        for fragment in self.fragments:
            if fragment.first_entry_id <= entry_id:
                chosen = fragment
            else:
                break
        return chosen

    def all_bookies(self) -> set[str]:
        return {b for f in self.fragments for b in f.ensemble}
