"""Commits whose ZooKeeper answer was lost (R27): the transaction applied, the reply swallowed and the
connection dropped by a proxy (`zk_drop_proxy`), another commit landing before the client asks again. The
client must take what the log lists as the outcome: no acknowledged ledger deleted, nothing appended
twice (`client.log.core.outcome`)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from bkledger.client import BookKeeper
from bkledger.client.errors import NoSuchLedgerError
from bkledger.spark_connector import envelope as env
from bkledger.spark_connector.log_commit import commit_to_logs
from tests.integration.conftest import start_cluster
from tests.integration.zk_drop_proxy import DropProxy


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator:
    made = start_cluster(tmp_path_factory.mktemp("lostanswer"), zookeeper, 3)
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


@pytest.fixture
def victim(cluster) -> Iterator[tuple[BookKeeper, DropProxy]]:
    """A client whose ZooKeeper connection goes through the proxy that loses one multi's answer."""
    port = int(re.search(r":(\d+)/", cluster.metadata_service_uri).group(1))  # type: ignore[union-attr]
    proxy = DropProxy(port)
    try:
        with BookKeeper(re.sub(r":\d+/", f":{proxy.port}/", cluster.metadata_service_uri, count=1)) as client:
            yield client, proxy
    finally:
        proxy.close()


@pytest.fixture
def name() -> str:
    return f"lost-{uuid.uuid4().hex[:8]}"


def ledger(client: BookKeeper, password: bytes, value: bytes) -> int:
    lh = client.create_ledger(3, 2, 2, password=password, custom_metadata=env.custom_metadata(env.V1))
    lh.add_entry(env.encode(None, None, value))
    lh.close()
    return lh.ledger_id


def values(bk: BookKeeper, name: str) -> list[bytes]:
    with bk.open_log_reader(name) as reader:
        return [env.decode(r.payload)[2] for r in reader.read(timeout=2.0)]


def another_commit(bk: BookKeeper, name: str, password: bytes, landed: list[int]) -> None:
    """Run by the proxy while it holds the lost answer: another job's commit moves the log on."""
    other = ledger(bk, password, b"meanwhile")
    assert bk.append_ledgers(name, [other], password=password)
    landed.append(other)


def test_rehomed_commit_whose_answer_was_lost_keeps_its_copy(bk: BookKeeper, victim, name: str):
    """R27: a sink commit (with its batch marker) re-homes its overtaken ledger to a copy; ZooKeeper applies
    the transaction listing the copy, the answer is lost and another commit lands. The retry finds its
    marker: the commit is reported done (True) and the copy the log lists is kept (it was deleted as
    "unused" before: acknowledged records lost); the replaced original is deleted."""
    client, proxy = victim
    password = client.log_ledger_password(name)
    late = ledger(client, password, b"late")
    first = ledger(bk, password, b"first")
    assert bk.append_ledgers(name, [first], password=password)      # `late` is below the log's tail now
    landed: list[int] = []
    proxy.arm(lambda: another_commit(bk, name, password, landed))
    done = commit_to_logs(client, {name: [late]}, password=password, fence_live_writer=False,
                          commit_marker=("sink-1", 7))
    assert proxy.dropped.is_set() and len(landed) == 1
    ids = bk.log_metadata(name).ledger_ids
    assert len(ids) == 3 and ids[0] == first and ids[2] == landed[0] and ids[1] not in (late, first)
    bk.ledger_metadata(ids[1])                                      # the copy exists
    assert values(bk, name) == [b"first", b"late", b"meanwhile"]
    assert done is True                                             # this commit's marker, not a replay's
    with pytest.raises(NoSuchLedgerError):
        bk.ledger_metadata(late)                                    # the replaced original is gone


def test_job_commit_whose_answer_was_lost_lands_once(bk: BookKeeper, victim, name: str):
    """R27: a batch job's commit (no marker) lands, its answer is lost and another commit lands: the
    retry sees its ledgers listed and is done. Before, it took them for overtaken ledgers, appended copies
    (records twice) and deleted the listed originals (records lost)."""
    client, proxy = victim
    password = client.log_ledger_password(name)
    mine = ledger(client, password, b"mine")
    landed: list[int] = []
    proxy.arm(lambda: another_commit(bk, name, password, landed))
    assert commit_to_logs(client, {name: [mine]}, password=password, fence_live_writer=False) is True
    assert proxy.dropped.is_set()
    assert bk.log_metadata(name).ledger_ids == [mine, *landed]
    assert values(bk, name) == [b"mine", b"meanwhile"]


def test_append_ledgers_whose_answer_was_lost_reports_it_appended(bk: BookKeeper, victim, name: str):
    """R27: `append_ledgers` whose transaction landed but whose answer was lost (another commit landed
    before the retry) returns True, appending nothing twice; it raised InvalidLogUpdateError before (the
    ledgers below the tail), telling its caller the append failed when it had not."""
    client, proxy = victim
    password = client.log_ledger_password(name)
    mine = ledger(client, password, b"mine")
    landed: list[int] = []
    proxy.arm(lambda: another_commit(bk, name, password, landed))
    assert client.append_ledgers(name, [mine], password=password) is True
    assert proxy.dropped.is_set()
    assert bk.log_metadata(name).ledger_ids == [mine, *landed]


def test_rehomed_commit_that_raises_after_landing_keeps_its_copy(bk: BookKeeper, victim, name: str):
    """R27: a job commit re-homes its overtaken ledger; the transaction listing the copy lands, its answer
    is lost and a LogWriter opens the log meanwhile (a live writer at the tail: the retry would raise
    LiveLogWriterError). Before, the retry raised and the error path deleted the copy the log lists; now
    the retry sees its ledgers listed: done, the copy kept, the writer not fenced."""
    client, proxy = victim
    password = client.log_ledger_password(name)
    late = ledger(client, password, b"late")
    first = ledger(bk, password, b"first")
    assert bk.append_ledgers(name, [first], password=password)
    writers = []

    def live_writer() -> None:
        writer = bk.open_log_writer(name, envelope=env.V1)
        writer.append(b"live")
        writers.append(writer)

    proxy.arm(live_writer)
    try:
        done = commit_to_logs(client, {name: [late]}, password=password, fence_live_writer=False)
        assert proxy.dropped.is_set() and len(writers) == 1
        writers[0].append(b"after")                                 # not fenced
    finally:
        for writer in writers:
            writer.close()
    ids = bk.log_metadata(name).ledger_ids
    assert len(ids) == 3 and ids[0] == first and ids[1] not in (late, first)
    bk.ledger_metadata(ids[1])                                      # the copy exists
    assert values(bk, name) == [b"first", b"late", b"live", b"after"]
    assert done is True


def test_compaction_swap_whose_answer_was_lost_keeps_its_copy(bk: BookKeeper, victim, name: str):
    """R27: compaction's swap lands, its answer is lost and a commit appends meanwhile: the retry finds
    the run already replaced. Before, it took the copy for one it could not swap and deleted it while the
    log listed it (every compacted record lost); now the copy the log lists is kept and reported swapped."""
    client, proxy = victim
    password = client.log_ledger_password(name)
    for value in (b"a", b"b", b"c", b"d", b"e"):        # the last two stay (compaction keeps the tail)
        assert bk.append_ledgers(name, [ledger(bk, password, value)], password=password)
    landed: list[int] = []
    proxy.arm(lambda: another_commit(bk, name, password, landed))
    done = client.compact_log(name, target_bytes=1 << 20, min_ledgers=2, grace_s=600)
    assert proxy.dropped.is_set() and len(landed) == 1
    meta = bk.log_metadata(name)
    assert len(meta.ledgers) == 4 and len(meta.ledgers[0].replaced) == 3
    bk.ledger_metadata(meta.ledger_ids[0])                          # the compacted copy exists
    assert values(bk, name) == [b"a", b"b", b"c", b"d", b"e", b"meanwhile"]
    assert [new for new, _ in done.compacted] == [meta.ledger_ids[0]]
