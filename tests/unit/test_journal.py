"""Journal: fsync before callback (R8), group commit, failure, roll, replay (R23), old-file removal."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from bkledger.bookie import journal as jmod
from bkledger.bookie.core import records as rec
from bkledger.bookie.journal import Journal, JournalClosedError, LogMark, read_mark_file, write_mark_file
from tests.unit.descriptors import out_of_descriptors


class Waiter:
    """Collects callback results; wait() blocks until n of them arrived."""

    def __init__(self) -> None:
        self.results: list[BaseException | None] = []
        self.cond = threading.Condition()

    def __call__(self, err: BaseException | None) -> None:
        with self.cond:
            self.results.append(err)
            self.cond.notify_all()

    def wait(self, n: int, timeout: float = 10.0) -> list[BaseException | None]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.results) >= n, timeout)
            return list(self.results)


def _fence(i: int) -> bytes:
    return rec.encode_fence(i)


Replayed = list[tuple[int, int, rec.Record]]


def _replay(tmp_path: Path, mark: LogMark = LogMark(0, 0)) -> tuple[Replayed, LogMark]:
    j = Journal(tmp_path)
    got: list[tuple[int, int, rec.Record]] = []
    end = j.replay(mark, lambda f, o, r: got.append((f, o, r)))
    return got, end


def _write(tmp_path: Path, records: list[bytes], **kw: object) -> Journal:
    j = Journal(tmp_path, **kw)  # type: ignore[arg-type]
    j.replay(LogMark(0, 0), lambda f, o, r: None)
    j.start()
    w = Waiter()
    for r in records:
        j.append([r], w)
    assert w.wait(len(records)) == [None] * len(records)
    return j


def test_callback_only_after_fdatasync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real = os.fdatasync

    def fake_fdatasync(fd: int) -> None:
        real(fd)
        events.append("fsync")

    monkeypatch.setattr(jmod.os, "fdatasync", fake_fdatasync)
    j = Journal(tmp_path)
    j.start()
    done = threading.Event()

    def cb(err: BaseException | None) -> None:
        events.append(f"cb:{err}")
        done.set()

    j.append([_fence(1)], cb)
    assert done.wait(5)
    j.close()
    assert events[:2] == ["fsync", "cb:None"]


def test_deferred_sync_skips_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(jmod.os, "fdatasync", lambda fd: calls.append(fd))
    j = Journal(tmp_path)
    j.start()
    w = Waiter()
    j.append([_fence(1)], w, sync=False)
    assert w.wait(1) == [None]
    assert calls == []
    j.append([], w, sync=True)  # force: an empty synced group
    assert w.wait(2) == [None, None]
    assert len(calls) == 1
    j.close()


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("sync_data", [False, True])
def test_unsynced_data_is_flushed_within_the_page_cache_flush_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync_data: bool, inline: bool) -> None:
    """journalPageCacheFlushIntervalMSec: with journalSyncData=false (or a deferred-sync add) the ack
    comes before any fdatasync, and an idle journal still syncs that data within the interval, also when
    the record was committed on the appending thread (`inline`)."""
    synced = threading.Event()
    calls: list[int] = []

    def fdatasync(fd: int) -> None:
        calls.append(fd)
        synced.set()

    monkeypatch.setattr(jmod.os, "fdatasync", fdatasync)
    j = Journal(tmp_path, sync_data=sync_data, page_cache_flush_interval_ms=50)
    j.start()
    w = Waiter()
    j.append([_fence(1)], w, sync=False, inline=inline)
    assert w.wait(1) == [None]
    assert synced.wait(5), "unsynced journal data was never flushed"
    assert len(calls) == 1
    j.close()


def test_no_page_cache_flush_when_the_interval_is_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(jmod.os, "fdatasync", lambda fd: calls.append(fd))
    j = Journal(tmp_path, sync_data=False, page_cache_flush_interval_ms=0)
    j.start()
    w = Waiter()
    j.append([_fence(1)], w)
    assert w.wait(1) == [None]
    j.append([], w)                       # one more round trip through the journal thread
    assert w.wait(2) == [None, None]
    assert calls == []
    j.close()


def test_group_commit_from_many_threads(tmp_path: Path) -> None:
    j = Journal(tmp_path, max_group_wait_ms=5)
    j.start()
    w = Waiter()
    per_thread, threads = 200, 8

    def producer(t: int) -> None:
        for i in range(per_thread):
            j.append([rec.encode_add_batch(t, [i], [40], bytes(40))], w)

    workers = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    results = w.wait(per_thread * threads)
    j.close()
    assert all(r is None for r in results)
    assert j.stats.fsyncs < per_thread * threads / 4
    got, _ = _replay(tmp_path)
    assert len(got) == per_thread * threads


def test_fsync_error_fails_group_and_later_appends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fatal: list[BaseException] = []
    j = Journal(tmp_path, on_fatal=fatal.append)
    j.start()
    w = Waiter()
    j.append([_fence(1)], w)
    assert w.wait(1) == [None]

    def broken(fd: int) -> None:
        raise OSError(5, "EIO")

    monkeypatch.setattr(jmod.os, "fdatasync", broken)
    j.append([_fence(2)], w)
    results = w.wait(2)
    assert isinstance(results[1], OSError)
    assert j.failed
    j.append([_fence(3)], w)  # fails fast, never success
    assert isinstance(w.wait(3)[2], OSError)
    monkeypatch.undo()
    j.append([_fence(4)], w)
    assert isinstance(w.wait(4)[3], OSError)
    assert len(fatal) == 1
    j.close()
    j.close()


def test_append_after_close_fails(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.start()
    j.close()
    w = Waiter()
    j.append([_fence(1)], w)
    assert isinstance(w.wait(1)[0], JournalClosedError)


def test_close_flushes_queued(tmp_path: Path) -> None:
    j = Journal(tmp_path, max_group_wait_ms=50, flush_when_queue_empty=False)
    j.start()
    w = Waiter()
    for i in range(50):
        j.append([_fence(i)], w)
    j.close()
    assert w.wait(50) == [None] * 50
    got, _ = _replay(tmp_path)
    assert [r.ledger_id for _, _, r in got] == list(range(50))


def test_replay_after_close_and_position(tmp_path: Path) -> None:
    records = [rec.encode_add_batch(1, [i, i + 1], [3, 4], b"abcdefg") for i in range(0, 40, 2)]
    records.append(rec.encode_explicit_lac(1, b"lac"))
    j = _write(tmp_path, records)
    pos = j.position()
    j.close()
    got, end = _replay(tmp_path)
    assert end == pos
    assert len(got) == len(records)
    assert isinstance(got[-1][2], rec.ExplicitLacRecord)
    first = got[0][2]
    assert isinstance(first, rec.AddBatchRecord) and bytes(first.data) == b"abcdefg"


def test_replay_from_mid_file_mark(tmp_path: Path) -> None:
    j = _write(tmp_path, [_fence(i) for i in range(10)])
    j.close()
    got, _ = _replay(tmp_path)
    file_id, offset, _ = got[4]
    later, _ = _replay(tmp_path, LogMark(file_id, offset))
    assert [r.ledger_id for _, _, r in later] == list(range(4, 10))


def test_torn_tail_then_newer_file(tmp_path: Path) -> None:
    j = _write(tmp_path, [_fence(i) for i in range(5)])
    j.close()
    first_file = jmod.list_journal_ids(tmp_path / "current")[-1]
    path = tmp_path / "current" / f"{first_file:x}.txn"
    with open(path, "ab") as f:  # a torn record: half of a frame, then preallocation zeros
        f.write(_fence(99)[:7] + b"\0" * 100)
    j2 = _write(tmp_path, [_fence(i) for i in range(5, 8)])
    j2.close()
    got, end = _replay(tmp_path)
    assert [r.ledger_id for _, _, r in got] == list(range(8))
    assert end.file_id > first_file


def test_roll_at_max_size(tmp_path: Path) -> None:
    big = rec.encode_add_batch(1, [0], [300_000], bytes(300_000))
    j = _write(tmp_path, [big] * 8, max_size_mb=1)
    j.close()
    ids = jmod.list_journal_ids(tmp_path / "current")
    assert len(ids) >= 2 and j.stats.rolls >= 1
    got, _ = _replay(tmp_path)
    assert len(got) == 8 and len({f for f, _, _ in got}) == len(ids)


@pytest.mark.parametrize("spare", [0, 1])
def test_a_roll_with_no_descriptor_to_spare_writes_on_in_the_current_file(tmp_path: Path, spare: int,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A roll closed the current file before it made the next: with the process out of descriptors (a
    flood of connections), making the next failed with EMFILE and the journal failed for good, so the
    bookie stayed read-only. Now the groups go on into the current file, past journalMaxSizeMB, one
    warning says so, and the first group once a descriptor is free rolls. For real: the open-file limit
    is lowered and /dev/null opened until EMFILE. With one descriptor spare the next file is made and
    its directory's sync fails: that file is removed again, not left behind empty."""
    big = rec.encode_add_batch(1, [0], [300_000], bytes(300_000))
    j = _write(tmp_path, [big] * 4, max_size_mb=1)      # 1.2 MB in the first file: the next group rolls
    before = jmod.list_journal_ids(tmp_path / "current")
    starved = Waiter()
    with out_of_descriptors(spare):
        for _ in range(3):
            j.append([big], starved)
        assert starved.wait(3) == [None] * 3
    assert not j.failed and j.stats.rolls_deferred >= 1 and j.stats.rolls == 0     # a roll per group formed
    assert jmod.list_journal_ids(tmp_path / "current") == before
    freed = Waiter()
    j.append([big], freed)
    assert freed.wait(1) == [None] and j.stats.rolls == 1
    assert len(jmod.list_journal_ids(tmp_path / "current")) == len(before) + 1
    j.close()
    got, _ = _replay(tmp_path)
    assert len(got) == 8
    assert sum("cannot start a new file" in r.getMessage() for r in caplog.records) == 1


def test_checkpoint_runs_on_journal_thread_with_applied_mark(tmp_path: Path) -> None:
    j = _write(tmp_path, [_fence(i) for i in range(3)])
    seen: list[tuple[LogMark, str]] = []
    done = threading.Event()

    def checkpoint(mark: LogMark) -> None:
        seen.append((mark, threading.current_thread().name))
        done.set()

    j.request_checkpoint(checkpoint)
    assert done.wait(5)
    assert seen == [(j.position(), "journal")]
    j.close()


def test_remove_old_files_keeps_backups(tmp_path: Path) -> None:
    for i in range(6):
        _write(tmp_path, [_fence(i)]).close()
    j = _write(tmp_path, [_fence(6)], max_backups=2)
    ids = jmod.list_journal_ids(tmp_path / "current")
    assert len(ids) == 7
    j.remove_old_files(j.position())
    assert jmod.list_journal_ids(tmp_path / "current") == ids[-3:]
    j.close()


def test_mark_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "d" / "current" / "lastMark"
    assert read_mark_file(path) is None
    write_mark_file(path, LogMark(5, 1234))
    assert read_mark_file(path) == LogMark(5, 1234)
    write_mark_file(path, LogMark(6, 16))
    assert read_mark_file(path) == LogMark(6, 16)


@pytest.mark.parametrize("inline", [False, True])
def test_close_from_a_callback_does_not_deadlock(tmp_path: Path, inline: bool) -> None:
    """close() from a record's callback returns, whether the journal thread or (inline) the appending
    thread runs it: neither waits for itself."""
    j = Journal(tmp_path)
    j.start()
    w = Waiter()

    def closing(err: BaseException | None) -> None:
        j.close()
        w(err)

    appender = threading.Thread(target=lambda: j.append([_fence(1)], closing, inline=inline), daemon=True)
    appender.start()
    appender.join(5)
    assert not appender.is_alive(), "close() from the committer's callback waits for itself"
    assert w.wait(1) == [None]
    j.close()
    got, _ = _replay(tmp_path)
    assert len(got) == 1


def test_inline_append_commits_on_the_callers_thread_after_fdatasync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """R8 with `inline`: an idle journal writes, syncs and answers the record on the appending thread, the
    callback after the fdatasync, before append returns; the journal thread did none of it."""
    events: list[str] = []
    real = os.fdatasync

    def fake_fdatasync(fd: int) -> None:
        real(fd)
        events.append(f"fsync:{threading.current_thread().name}")

    j = Journal(tmp_path)
    j.start()
    monkeypatch.setattr(jmod.os, "fdatasync", fake_fdatasync)
    j.append([_fence(1)], lambda err: events.append(f"cb:{err}:{threading.current_thread().name}"), inline=True)
    assert events == ["fsync:MainThread", "cb:None:MainThread"]
    assert j.stats.groups == 1 and j.stats.fsyncs == 1
    j.close()
    got, _ = _replay(tmp_path)
    assert [r for _, _, r in got] == [rec.FenceRecord(1)]


def test_inline_append_waits_its_turn_behind_queued_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the journal thread writes a group (its fdatasync held up here), an inline append is queued
    behind it, not written past it: records reach the file and are answered in append order."""
    j = Journal(tmp_path)
    j.start()
    release, syncing = threading.Event(), threading.Event()
    real = os.fdatasync
    order: list[int] = []

    def slow_fdatasync(fd: int) -> None:
        if threading.current_thread().name == "journal" and not release.is_set():
            syncing.set()
            assert release.wait(5)
        real(fd)

    monkeypatch.setattr(jmod.os, "fdatasync", slow_fdatasync)
    j.append([_fence(1)], lambda err: order.append(1))          # queued: the journal thread takes it
    assert syncing.wait(5)
    j.append([_fence(2)], lambda err: order.append(2), inline=True)   # the journal is busy: queued
    assert order == []
    release.set()
    w = Waiter()
    j.append([], w, inline=True)
    assert w.wait(1) == [None]
    assert order == [1, 2]
    j.close()
    got, _ = _replay(tmp_path)
    assert [r for _, _, r in got] == [rec.FenceRecord(1), rec.FenceRecord(2)]


def test_inline_append_is_queued_when_the_journal_gathers_groups(tmp_path: Path) -> None:
    """With a group wait (journalFlushWhenQueueEmpty=false) the journal thread gathers the group: no inline commit."""
    j = Journal(tmp_path, flush_when_queue_empty=False, max_group_wait_ms=1.0)
    j.start()
    names: list[str] = []
    w = Waiter()

    def cb(err: BaseException | None) -> None:
        names.append(threading.current_thread().name)
        w(err)

    j.append([_fence(1)], cb, inline=True)
    assert w.wait(1) == [None] and names == ["journal"]
    j.close()
