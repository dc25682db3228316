"""The transaction of a job that appends to several logs (Spark's per-row destinations): what each log
becomes (`client.log.core.meta.with_job_appended`), which ledgers an overtaking commit made late
(`late_ledgers`), and the ZooKeeper operations of one multi-log change (`client.log.store.prepare_change`),
including a log created by the transaction itself. Pure: no ZooKeeper (the store stub only names paths)."""

from __future__ import annotations

import dataclasses

import pytest

from bkledger.client.errors import InvalidLogUpdateError
from bkledger.client.log import store as ls
from bkledger.client.log.core import meta as lm
from bkledger.client.log.core import stored as st
from bkledger.client.log.core.meta import LogLedger, LogMetadata


def log_with(name: str, *ids: int, markers: dict[str, int] | None = None) -> LogMetadata:
    ledgers = tuple(LogLedger(i, 1, None, 2, 20, 3) for i in ids)
    meta = dataclasses.replace(lm.new_log(name, 1), ledgers=ledgers, committed_batches=markers or {})
    return lm.with_first_positions(meta)


def closed(*ids: int) -> list[lm.ClosedLedger]:
    return [(i, 4, 50, 7) for i in ids]


def test_every_destination_log_gets_its_ledgers_and_the_marker() -> None:
    metas = {"a": log_with("a", 1), "b": log_with("b"), "c": log_with("c", 9)}
    new = lm.with_job_appended(metas, {"a": closed(10, 12), "b": closed(11)}, 100, ("sink:q", 5))
    assert sorted(new) == ["a", "b"]                          # c is no destination: not written, not checked
    assert new["a"].ledger_ids == [1, 10, 12] and new["b"].ledger_ids == [11]
    assert new["a"].committed_batches == new["b"].committed_batches == {"sink:q": 5}
    assert new["b"].ledgers[0].first_position == 0 and new["b"].entries == 5


def test_a_batch_marked_in_any_destination_log_appends_nothing_anywhere() -> None:
    """Markers are written to all logs of a batch in one transaction: one log showing the batch (or a later
    one) proves the batch landed, even if another destination log never saw this sink."""
    metas = {"a": log_with("a", markers={"sink:q": 5}), "b": log_with("b")}
    assert lm.with_job_appended(metas, {"a": closed(20), "b": closed(21)}, 100, ("sink:q", 5)) == {}
    assert lm.with_job_appended(metas, {"a": closed(20), "b": closed(21)}, 100, ("sink:q", 4)) == {}
    again = lm.with_job_appended(metas, {"a": closed(20), "b": closed(21)}, 100, ("sink:q", 6))
    assert again["a"].committed_batches == again["b"].committed_batches == {"sink:q": 6}
    other = lm.with_job_appended(metas, {"a": closed(20)}, 100, ("sink:other", 0))
    assert other["a"].committed_batches == {"sink:q": 5, "sink:other": 0}


def test_a_log_without_ledgers_in_the_batch_still_gets_the_marker() -> None:
    new = lm.with_job_appended({"a": log_with("a", 3)}, {"a": []}, 100, ("sink:q", 0))
    assert new["a"].ledger_ids == [3] and new["a"].committed_batches == {"sink:q": 0}


def test_batch_append_without_marker_and_late_ledgers() -> None:
    metas = {"a": log_with("a", 10), "b": log_with("b", 3)}
    new = lm.with_job_appended(metas, {"a": closed(11), "b": closed(12)}, 100)
    assert new["a"].committed_batches == {} and new["b"].ledger_ids == [3, 12]
    with pytest.raises(InvalidLogUpdateError):
        lm.with_job_appended(metas, {"a": closed(8, 11), "b": closed(12)}, 100)
    assert lm.late_ledgers(metas, {"a": [8, 11], "b": [2, 3, 12], "new": [1]}) == {"a": [8], "b": [2, 3]}


class PathsOnly:
    """Enough of a MetadataStore for `prepare_change`: znode paths and the request size limit."""

    class layout:  # noqa: N801 - mirrors MetadataStore.layout
        @staticmethod
        def log(name: str) -> str:
            return f"/ledgers/logs/{name}"

    max_request_bytes = 1 << 20

    def check_size(self, path: str, data: bytes, why: str = "") -> None:
        assert len(data) + len(path) < self.max_request_bytes, why


def test_one_transaction_sets_existing_heads_at_their_versions_and_creates_a_new_log() -> None:
    store = PathsOnly()
    meta = log_with("a", 1)
    head = st.Head("p", 0, 0, 1)
    existing = ls.LoadedLog("a", "/ledgers/logs/a", 7, st.Window(meta, head, ((0, meta.ledgers),)))
    unborn = ls.unborn_log(store, "b")                  # type: ignore[arg-type]
    assert unborn.unborn and unborn.meta.ledgers == ()
    new = lm.with_job_appended({"a": existing.meta, "b": unborn.meta}, {"a": closed(5), "b": closed(6)}, 9)
    changes = [ls.prepare_change(store, existing, new["a"]),  # type: ignore[arg-type]
               ls.prepare_change(store, unborn, new["b"])]    # type: ignore[arg-type]
    ops = [op for c in changes for op in c.ops]
    assert [(op.kind, op.path.rsplit("/", 2)[-2:], op.version) for op in ops[:2]] == [
        ("set", ["logs", "a"], 7), ("set", ["a", "p-0000000000"], -1)]
    kinds = [(op.kind, op.path) for op in ops[2:]]
    assert kinds[0] == ("create", "/ledgers/logs/b")                # the head first: its segment goes below it
    assert kinds[1][0] == "create" and kinds[1][1].startswith("/ledgers/logs/b/")
    assert [c.head_op.kind for c in changes] == ["set", "create"]
    base, got_head = st.decode_head("b", ops[2].data)
    assert got_head is not None and got_head.count == 1 and base.name == "b"
    assert st.decode_segment("b", 0, ops[3].data)[0].ledger_id == 6
