"""Messages between simulated clients, bookies and the metadata store (the wire of the simulation).

Mirrors BookKeeper's AddRequest / ReadRequest (a read of entry -1 is a ReadLastConfirmed, with the fence
flag a fencing read) and the ZooKeeper getData / setData(version) calls. Requests travel in an Envelope
whose `req_id` the answer carries back. Each message has a short `label()` for the trace.
"""

from __future__ import annotations

import dataclasses

from bkledger.client.protocol.metadata import LedgerMetadata


@dataclasses.dataclass(frozen=True)
class AddRequest:
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    recovery: bool

    def label(self) -> str:
        return f"add L{self.ledger_id}/e{self.entry_id}{' recovery' if self.recovery else ''}"


@dataclasses.dataclass(frozen=True)
class ReadRequest:
    ledger_id: int
    entry_id: int          # -1: last add confirmed
    fence: bool
    master_key: bytes
    recovery: bool = False  # sent by a recovery: for the oracle only (bookies decide by the fence flag)

    def label(self) -> str:
        what = "lac" if self.entry_id < 0 else f"e{self.entry_id}"
        return f"read L{self.ledger_id}/{what}{' fence' if self.fence else ''}"


@dataclasses.dataclass(frozen=True)
class AddResponse:
    status: int

    def label(self) -> str:
        return f"add-resp {self.status}"


@dataclasses.dataclass(frozen=True)
class ReadResponse:
    status: int
    body: bytes | None = None
    lac: int = -1

    def label(self) -> str:
        return f"read-resp {self.status} lac={self.lac}{' body' if self.body is not None else ''}"


@dataclasses.dataclass(frozen=True)
class MetaRead:
    ledger_id: int

    def label(self) -> str:
        return f"zk-read L{self.ledger_id}"


@dataclasses.dataclass(frozen=True)
class MetaCas:
    ledger_id: int
    version: int
    md: LedgerMetadata

    def label(self) -> str:
        return f"zk-cas L{self.ledger_id} v{self.version} {self.md.state.name}"


@dataclasses.dataclass(frozen=True)
class MetaResponse:
    ok: bool                          # False: bad version (for a CAS) or no node (for a read)
    version: int = -1
    md: LedgerMetadata | None = None

    def label(self) -> str:
        state = self.md.state.name if self.md is not None else "-"
        return f"zk-resp {'ok' if self.ok else 'BADVERSION'} v{self.version} {state}"


Payload = AddRequest | ReadRequest | AddResponse | ReadResponse | MetaRead | MetaCas | MetaResponse


@dataclasses.dataclass(frozen=True)
class Envelope:
    req_id: int
    payload: Payload

    def label(self) -> str:
        return f"#{self.req_id} {self.payload.label()}"
