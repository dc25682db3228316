"""Records cannot be rewritten, and fences cannot squat ledger ids, on real bookies (issue 41 item 4).

One cluster of three bookies serves the module. The attacker talks to the bookies over their gRPC wire
contract with the stubs of `proto/` (`tests.integration.bookie_util`), as the issue's hostile client did.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkledger.bookie.cli import main as cli_main
from bkledger.client import BookKeeper
from bkledger.client.errors import DigestMismatchError, LedgerSquattedError
from bkledger.client.log.core import meta as lm
from bkledger.client.log.logs import append_ledgers, log_ledger_password
from bkledger.client.log.store import create_log, log_path
from bkledger.client.protocol.digest import make_digest, master_key, package_batch
from bkledger.proto import bookie_pb2 as pb
from tests.integration.bookie_util import add, package, read, wait_for
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


def test_a_re_add_must_bring_the_same_bytes(cluster) -> None:
    """Issue 41 item 4 (R26): a plain re-add of an entry with the same bytes (a writer's resend) is accepted;
    with other bytes it is refused EBADREQ, the stored entry stays, and the refusal is logged with the
    client's address."""
    bookie = cluster.bookies[0]
    ledger_id = 1 << 40 | 77                  # a ledger only this test writes (no metadata: GC is off)
    assert add(bookie.address, ledger_id, [0, 1, 2]).ok() == [0, 1, 2]
    original = read(bookie.address, ledger_id, 1).body
    assert add(bookie.address, ledger_id, [1, 2]).ok() == [1, 2]                  # same bytes again
    other = package(ledger_id, [1, 2], payload=b"y" * 100)
    assert add(bookie.address, ledger_id, [1, 2], raw=other).statuses == {1: pb.EBADREQ, 2: pb.EBADREQ}
    assert add(bookie.address, ledger_id, [3]).ok() == [3]                        # the ledger goes on
    assert read(bookie.address, ledger_id, 1).body == original
    logged = wait_for(lambda: [line for line in Path(bookie.log).read_text().splitlines()
                               if f"add to ledger {ledger_id} from" in line], 10, "the refusal's log line")
    assert "EBADREQ" in logged[0] and "127.0.0.1" in logged[0] and "other bytes" in logged[0]


def _fence_everywhere(cluster, ledger_ids: range, key: bytes) -> None:
    for address in _addresses(cluster, [b.bookie_id for b in cluster.bookies]):
        for ledger_id in ledger_ids:
            assert read(address, ledger_id, -1, fence=True, key=key).status == pb.EOK


def test_fenced_unknown_ids_do_not_squat_new_ledgers(cluster_factory, bk_factory) -> None:
    """Issue 41 item 4 (R15: a fence of an unknown ledger creates it fenced): an attacker fences the next
    ledger ids with a foreign key before their metadata exists; create_ledger sees the bookies already know
    the ids, deletes those, and the ledger it returns has a fresh id that takes adds."""
    cluster = cluster_factory(3)           # its own ledger id space: the squatted ids stay out of the others'
    bk = bk_factory(cluster.metadata_service_uri)
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


def test_create_gives_up_with_a_squatted_error_after_bounded_attempts(cluster_factory, bk_factory) -> None:
    """A creator that meets only squatted ids gets LedgerSquattedError naming them, after a bounded number
    of fresh ids (never a BadPasswordError that blames its own password)."""
    cluster = cluster_factory(3)
    bk = bk_factory(cluster.metadata_service_uri)
    first = bk.create_ledger(3, 3, 2)
    second = bk.create_ledger(3, 3, 2)
    stride = max(second.ledger_id - first.ledger_id, 1)
    _fence_everywhere(cluster, range(second.ledger_id + 1, second.ledger_id + 12 * stride + 1), master_key(b"foreign"))
    with pytest.raises(LedgerSquattedError, match="squatted"):
        bk.create_ledger(3, 3, 2)


def test_each_log_has_its_own_key(cluster, bk: BookKeeper, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 41 item 4: a new log gets a secret of its own, kept in its znode; its writer's ledgers use it as
    their password when none is given, so the public empty key cannot fence or forge them (EUA); readers,
    append_ledgers (ledgers made with any password) and compaction need no password."""
    name = f"keyed-{uuid.uuid4().hex[:8]}"
    with bk.open_log_writer(name, roll_entries=2) as writer:
        for i in range(6):
            writer.append(f"w{i}".encode())
    key = lm.log_password(bk.log_metadata(name))
    assert key is not None and len(key) == 20
    stored = bk.store.get(log_path(bk.store, name))
    assert stored is not None and key.hex().encode() in stored[0]
    ids = bk.log_metadata(name).ledger_ids
    assert {bk.ledger_metadata(i).password for i in ids} == {key}
    assert cli_main(["log", "describe", name, "--uri", cluster.metadata_service_uri, "--json"]) == 0
    shown = capsys.readouterr().out
    assert key.hex() not in shown and '"(hidden)"' in shown          # printed without the key
    md = bk.ledger_metadata(ids[0])
    public = master_key(b"")
    for address in _addresses(cluster, md.fragment_for(0).ensemble):
        assert read(address, ids[0], -1, fence=True, key=public).status == pb.EUA
    job = bk.create_ledger(3, 2, 2)            # made with the empty password, as before: still appendable
    job.add_entry(b"job")
    job.close()
    assert append_ledgers(bk, name, [job.ledger_id])
    assert log_ledger_password(bk, name) == key == bk.log_ledger_password(name)
    result = bk.compact_log(name, min_ledgers=2, grace_s=0)
    assert result.compacted
    assert {bk.ledger_metadata(new).password for new, _ in result.compacted} == {key}
    with bk.open_log_reader(name) as reader:
        assert [r.payload for r in reader.read(timeout=0.5)] == [f"w{i}".encode() for i in range(6)] + [b"job"]


def test_a_log_without_a_stored_key_works_as_before(bk: BookKeeper) -> None:
    """A log created before logs had keys (no key in its znode) keeps the empty password for its ledgers."""
    name = f"legacy-{uuid.uuid4().hex[:8]}"
    create_log(bk.store, name)
    path = log_path(bk.store, name)
    got = bk.store.get(path)
    assert got is not None
    data, version = got
    head = json.loads(data)
    del head[lm.PASSWORD_KEY]
    bk.store.cas(path, json.dumps(head).encode(), version)
    with bk.open_log_writer(name) as writer:
        writer.append(b"old")
    assert lm.log_password(bk.log_metadata(name)) is None
    assert {bk.ledger_metadata(i).password for i in bk.log_metadata(name).ledger_ids} == {b""}
    with bk.open_log_reader(name) as reader:
        assert [r.payload for r in reader.read(timeout=0.5)] == [b"old"]


@pytest.mark.parametrize("digest_type", ["crc32c", "hmac"])
def test_hmac_with_a_secret_makes_forged_records_evident(cluster, bk: BookKeeper, digest_type: str) -> None:
    """Issue 41 item 4: an attacker who learned a ledger's master key (it travels with every add) but not the
    password adds a forged next entry to every bookie. With CRC32C (unkeyed) a reader gets the forgery with
    no error; with digestType=hmac the digest needs the password itself, so the reader refuses it
    (DigestMismatchError): records are tamper-evident end to end."""
    lh = bk.create_ledger(3, 3, 2, digest_type=digest_type, password=b"secret")
    for i in range(3):
        lh.add_entry(b"real-%d" % i)
    forged = package_batch(make_digest(digest_type, b"guessed"), lh.ledger_id, 3, 3, 0, [b"FORGED"])
    for address in _addresses(cluster, lh.metadata.fragment_for(3).ensemble):
        assert add(address, lh.ledger_id, [3], key=master_key(b"secret"), raw=forged).statuses == {3: pb.EOK}
    if digest_type == "crc32c":
        rh = bk.open_ledger(lh.ledger_id, b"secret", recovery=False)
        assert [bytes(e.payload) for e in rh.read_entries(3, 3)] == [b"FORGED"]
    else:       # every copy of the last entry fails its digest: not even the LAC can be learnt from them
        with pytest.raises(DigestMismatchError):
            rh = bk.open_ledger(lh.ledger_id, b"secret", recovery=False)
            list(rh.read_entries(3, 3))
    assert [bytes(e.payload) for e in lh.read_entries(0, 2)] == [b"real-0", b"real-1", b"real-2"]
