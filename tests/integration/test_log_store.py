"""The segmented log store against a real ZooKeeper (no bookies): commits beyond the old 1 MiB limit,
format-1 conversion, CAS conflicts on the head, multi-log transactions, and the request-size guard."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bkledger.client.errors import MetadataVersionError
from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import stored as st
from bkledger.client.log.store import commit_changes, load_log, log_path, prepare_change, update_log, update_logs
from bkledger.client.meta.errors import MetadataStoreError, ZNodeTooLargeError
from bkledger.client.meta.store import MetadataStore

pytestmark = pytest.mark.integration


@pytest.fixture
def store(metadata_uri: str) -> Iterator[MetadataStore]:
    with MetadataStore(metadata_uri, session_timeout=5.0) as made:
        made.init_cluster()
        yield made


def append_sealed(store: MetadataStore, name: str, first_id: int, count: int) -> None:
    """One commit appending `count` sealed ledgers (ids first_id..) to the log's tail."""
    ledgers = [(i, 0, 100, 1) for i in range(first_id, first_id + count)]
    update_logs(store, [name], lambda m: {name: lm.with_sealed_ledgers_appended(m[name], ledgers, 5)},
                create=True)


def test_commit_beyond_the_old_one_mib_limit(store):
    """20,000 ledgers (the one-znode form broke near 9,000 at 1.03 MB); then every further commit is small:
    its transaction holds the head and one segment, whatever the log's length."""
    for first in range(1, 20_001, 2_000):
        append_sealed(store, "big", first, 2_000)
    loaded = load_log(store, "big", whole=False)
    assert loaded is not None and loaded.meta.first_index > 19_000
    new = lm.with_batch_marker(lm.with_sealed_ledgers_appended(loaded.meta, [(30_000, 4, 50, 1)], 6), "q", 1)
    change = prepare_change(store, loaded, new)
    assert len(change.ops) == 2 and sum(op.request_bytes for op in change.ops) < 40_000
    commit_changes(store, [change])
    whole = load_log(store, "big")
    assert whole is not None and whole.meta.ledger_ids == [*range(1, 20_001), 30_000]
    assert whole.meta.ledgers[-1].first_position == 20_000 and whole.meta.committed_batches == {"q": 1}
    assert max(len(store.get(f"{whole.path}/{c}")[0]) for c in store.children(whole.path)) < 64 * 1024


def write_format_1(store: MetadataStore, name: str, count: int) -> lm.LogMetadata:
    meta = lm.with_batch_marker(lm.new_log(name, 1), "query", 7)
    meta = lm.with_sealed_ledgers_appended(meta, [(i, 0, 10, 1) for i in range(1, count + 1)], 2)
    store.create(log_path(store, name), lm.encode(meta), makepath=True)
    return meta


@pytest.mark.parametrize("limit", [None, 200_000], ids=["one-transaction", "staged-segments"])
def test_format_1_log_is_read_then_converted_on_its_next_change(store, limit):
    """An old one-znode log reads as it is; the next change converts it in the same CAS discipline (big
    ones stage their segments first: nothing refers to them until the head is set)."""
    old = write_format_1(store, "old", 5_000)
    loaded = load_log(store, "old")
    assert loaded is not None and loaded.window.head is None and loaded.meta == old
    if limit is not None:
        store.max_request_bytes = limit
    update_log(store, "old", lambda m: lm.with_ledger_appended(m, 9_000, 3), whole=False)
    data, _ = store.get(log_path(store, "old"))
    assert st.decode_head("old", data)[1] is not None                       # format 2 now
    whole = load_log(store, "old")
    assert whole is not None and whole.meta.ledger_ids == [*range(1, 5_001), 9_000]
    assert whole.meta.committed_batches == {"query": 7}
    assert len(store.children(log_path(store, "old"))) == -(-5_001 // st.SEGMENT_LEDGERS)


def test_conversion_that_loses_the_race_leaves_nothing_referenced(store):
    """Two converters of one format-1 log: the second's head CAS fails; its staged segments are dropped."""
    write_format_1(store, "race", 600)
    first, second = load_log(store, "race"), load_log(store, "race")
    assert first is not None and second is not None
    store.max_request_bytes = 30_000                      # both stage their segments
    commit_changes(store, [prepare_change(store, first, lm.with_ledger_appended(first.meta, 700, 1))])
    losing = prepare_change(store, second, lm.with_ledger_appended(second.meta, 701, 1))
    with pytest.raises(MetadataVersionError):
        commit_changes(store, [losing])
    whole = load_log(store, "race")
    assert whole is not None and whole.meta.ledger_ids[-1] == 700
    assert len(store.children(log_path(store, "race"))) == 3


def test_two_writers_of_one_head_conflict(store):
    """Both read version v; the first commit wins, the second gets MetadataVersionError and wrote nothing."""
    append_sealed(store, "cas", 1, 10)
    a, b = load_log(store, "cas", whole=False), load_log(store, "cas", whole=False)
    assert a is not None and b is not None
    commit_changes(store, [prepare_change(store, a, lm.with_ledger_appended(a.meta, 100, 1))])
    with pytest.raises(MetadataVersionError):
        commit_changes(store, [prepare_change(store, b, lm.with_ledger_appended(b.meta, 200, 1))])
    whole = load_log(store, "cas")
    assert whole is not None and whole.meta.ledger_ids == [*range(1, 11), 100]


def test_several_logs_change_in_one_transaction(store):
    """commit_changes over two logs: all or nothing, each log's head checked at the version read."""
    append_sealed(store, "left", 1, 3)
    append_sealed(store, "right", 1, 3)
    left, right = load_log(store, "left", whole=False), load_log(store, "right", whole=False)
    assert left is not None and right is not None
    update_log(store, "right", lambda m: lm.with_batch_marker(m, "other", 1), whole=False)   # right moves on
    changes = [prepare_change(store, left, lm.with_batch_marker(left.meta, "job", 1)),
               prepare_change(store, right, lm.with_batch_marker(right.meta, "job", 1))]
    with pytest.raises(MetadataVersionError):
        commit_changes(store, changes)
    got = load_log(store, "left")
    assert got is not None and got.meta.committed_batches == {}              # nothing of it landed
    done = update_logs(store, ["left", "right"], lambda metas: {
        n: lm.with_sealed_ledgers_appended(lm.with_batch_marker(m, "job", 1), [(50, 0, 1, 1)], 2)
        for n, m in metas.items()})
    assert {n: (d.meta.committed_batches["job"], d.meta.last_ledger_id) for n, d in done.items()} == \
        {"left": (1, 50), "right": (1, 50)}


def test_a_value_above_the_server_limit_is_refused_with_a_typed_error(store):
    """Not "unreachable after 40 attempts": ZNodeTooLargeError at once, naming the znode."""
    started = time.monotonic()
    with pytest.raises(ZNodeTooLargeError, match="too-big") as info:
        store.create("too-big", b"x" * (1024 * 1024 + 10))
    assert time.monotonic() - started < 2.0 and isinstance(info.value, MetadataStoreError)
    store.create("small", b"x")
    with pytest.raises(ZNodeTooLargeError, match="small"):
        store.cas("small", b"y" * (1024 * 1024), 0)
    assert store.get("small") == (b"x", 0)


def test_a_reader_loads_the_log_from_its_ledger_on(store):
    """load_log(from_ledger=L) finds L's segment by binary search and loads from there: a few segments of
    a 20,000-ledger log, whatever L; segments emptied by compaction are stepped over; a ledger before the
    log's first (truncated) loads it all, so a reader still sees that as data loss."""
    append_sealed(store, "read", 1, 20_000)
    whole = load_log(store, "read")
    assert whole is not None
    runs = [cp.Run(tuple(range(first, first + 900))) for first in (1_001, 5_001, 12_001)]   # 3-4 segments each
    meta = whole.meta
    for n, run in enumerate(runs):
        elements = [led for led in meta.ledgers if led.ledger_id in set(run.ledger_ids)]
        compacted = cp.with_compacted(meta, run, cp.compacted_ledger(elements, 50_000 + n, 7))
        assert compacted is not None
        meta = compacted
    update_log(store, "read", lambda _: meta)
    everything = lm.logical_ledgers(load_log(store, "read").meta)
    assert [x.ledger_id for x in everything] == list(range(1, 20_001))
    for wanted in (1, 256, 257, 1_000, 1_001, 1_500, 1_901, 5_450, 12_899, 12_900, 19_999, 20_000, 30_000):
        loaded = load_log(store, "read", from_ledger=wanted)
        assert loaded is not None
        ids = [x.ledger_id for x in lm.logical_ledgers(loaded.meta)]
        assert ids[0] <= wanted and ids[-1] == 20_000 and (wanted in ids or wanted > 20_000)
        assert ids == [x.ledger_id for x in everything][ids[0] - 1:]
        assert loaded.meta.first_index + len(loaded.meta.ledgers) == len(meta.ledgers)
        assert ids[0] > min(wanted, 20_000) - st.SEGMENT_LEDGERS - 900     # its segment (or compacted ledger)
    update_log(store, "read", lambda m: lm.truncated_before(m, lm.Position(5_000, 0))[0])
    truncated = load_log(store, "read", from_ledger=10)
    assert truncated is not None and truncated.meta.first_index == 0
    assert lm.logical_ledgers(truncated.meta)[0].ledger_id == 5_000
