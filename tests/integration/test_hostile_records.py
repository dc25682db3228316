"""Records cannot be rewritten, and fences cannot squat ledger ids, on real bookies (issue 41 item 4).

One cluster of three bookies serves the module. The attacker talks to the bookies over their gRPC wire
contract with the stubs of `proto/` (`tests.integration.bookie_util`), as the issue's hostile client did.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from bkledger.client import BookKeeper
from bkledger.client.errors import LedgerSquattedError
from bkledger.client.protocol.digest import make_digest, master_key, package_batch
from bkledger.proto import bookie_pb2 as pb
from tests.integration.bookie_util import add, read
from tests.integration.conftest import start_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator:
    made = start_cluster(tmp_path_factory.mktemp("hostile-records"), zookeeper, 3)
    try:
        yield made
    finally:
        made.down()


@pytest.fixture
def bk(cluster) -> Iterator[BookKeeper]:
    client = BookKeeper(cluster.metadata_service_uri)
    try:
        yield client
    finally:
        client.close()


def _addresses(cluster, bookie_ids: tuple[str, ...] | list[str]) -> list[str]:
    by_id = {b.bookie_id: b.address for b in cluster.bookies}
    return [by_id[b] for b in bookie_ids]


def _closed_log_ledger(bk: BookKeeper, records: int) -> tuple[str, int]:
    name = f"hostile-{uuid.uuid4().hex[:8]}"
    with bk.open_log_writer(name) as writer:
        positions = [writer.append(f"record-{i}".encode()) for i in range(records)]
    return name, positions[0].ledger_id


def test_forged_recovery_add_of_a_closed_log_ledger_is_refused(cluster, bk: BookKeeper) -> None:
    """Issue 41 item 4 (R19, R26): recovery adds that would rewrite record 3 of a closed log ledger, sent to
    every bookie of its ensemble with the ledger's own master key and a valid digest, are refused with
    EBADREQ by each; the log still reads the original record. A write-back of the same bytes is allowed."""
    name, ledger_id = _closed_log_ledger(bk, 6)
    md = bk.ledger_metadata(ledger_id)
    key = master_key(md.password)
    digest = make_digest(md.digest_type, md.password)
    forged = package_batch(digest, ledger_id, 3, 2, 0, [b"FORGED-by-attacker"])
    ensemble = md.fragment_for(3).ensemble
    for address in _addresses(cluster, ensemble):
        original = read(address, ledger_id, 3, key=key)
        if original.status != pb.EOK:
            continue            # Qw < E: this bookie holds no copy of entry 3, nothing to rewrite
        statuses = add(address, ledger_id, [3], key=key, recovery=True, raw=forged).statuses
        assert statuses == {3: pb.EBADREQ}, address
        again = add(address, ledger_id, [3], key=key, recovery=True, raw=(original.body, [len(original.body)]))
        assert again.statuses == {3: pb.EOK}, address     # a recovery write-back of the same bytes
        assert read(address, ledger_id, 3, key=key).body == original.body
    with bk.open_log_reader(name) as reader:
        payloads = [r.payload for r in reader.read(timeout=0.5)]
    assert payloads == [f"record-{i}".encode() for i in range(6)]


def _fence_everywhere(cluster, ledger_ids: range, key: bytes) -> None:
    for address in _addresses(cluster, [b.bookie_id for b in cluster.bookies]):
        for ledger_id in ledger_ids:
            assert read(address, ledger_id, -1, fence=True, key=key).status == pb.EOK


def test_fenced_unknown_ids_do_not_squat_new_ledgers(cluster, bk: BookKeeper) -> None:
    """Issue 41 item 4 (R15: a fence of an unknown ledger creates it fenced): an attacker fences the next
    ledger ids with a foreign key before their metadata exists; create_ledger sees the bookies already know
    the ids, deletes those, and the ledger it returns has a fresh id that takes adds."""
    first = bk.create_ledger(3, 3, 2, password=b"victim")
    second = bk.create_ledger(3, 3, 2, password=b"victim")
    stride = max(second.ledger_id - first.ledger_id, 1)
    squatted = range(second.ledger_id + 1, second.ledger_id + 3 * stride + 1)
    _fence_everywhere(cluster, squatted, master_key(b"foreign"))
    lh = bk.create_ledger(3, 3, 2, password=b"victim")
    assert lh.ledger_id > squatted[-1]
    assert lh.add_entry(b"mine") == 0
    lh.close()
    assert [bytes(e.payload) for e in bk.open_ledger(lh.ledger_id, b"victim").read_entries(0, 0)] == [b"mine"]
    for ledger_id in squatted:
        assert ledger_id not in bk.list_ledgers(squatted[0] - 1)


def test_create_gives_up_with_a_squatted_error_after_bounded_attempts(cluster, bk: BookKeeper) -> None:
    """A creator that meets only squatted ids gets LedgerSquattedError naming them, after a bounded number
    of fresh ids (never a BadPasswordError that blames its own password)."""
    first = bk.create_ledger(3, 3, 2)
    second = bk.create_ledger(3, 3, 2)
    stride = max(second.ledger_id - first.ledger_id, 1)
    _fence_everywhere(cluster, range(second.ledger_id + 1, second.ledger_id + 12 * stride + 1), master_key(b"foreign"))
    with pytest.raises(LedgerSquattedError, match="squatted"):
        bk.create_ledger(3, 3, 2)
