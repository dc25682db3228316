"""A simulated metadata store (the ZooKeeper stand-in): versioned ledger nodes changed by compare-and-swap.

Mirrors the part of ZooKeeper that BookKeeper's ledger manager uses: getData returns (value, version);
setData(value, version) succeeds only if the version still matches, else BADVERSION. It is a network node,
so its requests and answers are delayed, lost or cut like any other; a CAS whose answer is lost is the
"connection loss, maybe written" ambiguity that clients must resolve by re-reading. Every stored version
is shown to the oracle (fragments, CLOSED terminal).
"""

from __future__ import annotations

from bkledger.client.protocol.metadata import LedgerMetadata
from tests.sim.messages import Envelope, MetaCas, MetaRead, MetaResponse
from tests.sim.net import Network
from tests.sim.oracle import Oracle
from tests.sim.world import World

ZK = "zk"


class MetaStore:
    """Ledger id -> (version, metadata)."""

    name = ZK

    def __init__(self, world: World, net: Network, oracle: Oracle) -> None:
        self.world = world
        self.net = net
        self.oracle = oracle
        self.nodes: dict[int, tuple[int, LedgerMetadata]] = {}

    def is_up(self) -> bool:
        return True

    def is_paused(self) -> bool:
        return False

    def create(self, md: LedgerMetadata) -> int:
        """Create the ledger node (done directly at setup; creation is not what this simulation tests)."""
        if md.ledger_id in self.nodes:
            raise ValueError(f"ledger {md.ledger_id} exists")
        self.oracle.on_metadata_write(None, md)
        self.nodes[md.ledger_id] = (0, md)
        return 0

    def get(self, ledger_id: int) -> tuple[int, LedgerMetadata]:
        return self.nodes[ledger_id]

    def deliver(self, src: str, env: Envelope) -> None:
        payload = env.payload
        if isinstance(payload, MetaRead):
            node = self.nodes.get(payload.ledger_id)
            reply = MetaResponse(False) if node is None else MetaResponse(True, node[0], node[1])
        elif isinstance(payload, MetaCas):
            reply = self._cas(payload)
        else:
            return
        self.net.send(self.name, src, Envelope(env.req_id, reply))

    def _cas(self, cas: MetaCas) -> MetaResponse:
        version, md = self.nodes[cas.ledger_id]
        if cas.version != -1 and version != cas.version:    # -1: ZooKeeper's "any version" (no CAS)
            return MetaResponse(False, version)
        self.oracle.on_metadata_write(md, cas.md)
        self.nodes[cas.ledger_id] = (version + 1, cas.md)
        self.world.note(f"zk: L{cas.ledger_id} v{version + 1} {cas.md.state.name} "
                        f"last={cas.md.last_entry_id} fragments={[f.first_entry_id for f in cas.md.fragments]}")
        return MetaResponse(True, version + 1, cas.md)
