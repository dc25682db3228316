"""A bookie cannot be wedged by an entry id, forgets no fence on a failing checkpoint, scans only its data.

The pure decision (`bookie.core.decisions.check_entry_range`), and real ledger storage and a real bookie in a
temporary directory: sparse index files with holes, and flushes that fail for real (an index offset that
`os.pwrite` cannot take raises OverflowError). No mocks.
"""

from __future__ import annotations

import queue
import time
from pathlib import Path

import pytest

from bkledger.bookie.bookie import Bookie
from bkledger.bookie.config import BookieConfig
from bkledger.bookie.core import decisions
from bkledger.bookie.core.index_pages import PageGeometry
from bkledger.bookie.journal import Journal
from bkledger.bookie.storage import LedgerStorage
from bkledger.bookie.thread_guard import FAILURES
from tests.unit.descriptors import out_of_descriptors
from tests.unit.test_storage import add

KEY = b"k" * 20
WINDOW, LIMIT = 1000, 10**12


def test_entry_range_bounds_ids_by_the_ledgers_known_range() -> None:
    """R26: an add id more than the window past the last entry / LAC known (the bookie's or the batch's own)
    is refused; so is an id whose index slot cannot fit an index file, whatever the batch's LAC says."""
    check = decisions.check_entry_range
    assert check(0, -1, -1, WINDOW, LIMIT) == ""                     # a new ledger's first entries
    assert check(WINDOW - 1, -1, -1, WINDOW, LIMIT) == ""
    assert "known range" in check(WINDOW, -1, -1, WINDOW, LIMIT)
    assert check(5000 + WINDOW, 5000, -1, WINDOW, LIMIT) == ""     # the bookie's last entry or LAC
    assert "known range" in check(2**32, 5000, -1, WINDOW, LIMIT)   # a 32-bit client bug
    assert check(10**6, -1, 10**6 - 10, WINDOW, LIMIT) == ""      # after an ensemble change: the batch's LAC
    assert "index file" in check(2**62, -1, 2**62 - 1, WINDOW, LIMIT)   # a forged LAC cannot pass the limit
    assert "index file" in check(LIMIT + 1, LIMIT, LIMIT, WINDOW, LIMIT)


def test_max_entry_id_keeps_the_last_page_inside_the_file_limit() -> None:
    geo = PageGeometry(8192)
    limit = decisions.max_entry_id(1 << 40, geo)
    assert (geo.page_of(limit) + 1) * geo.page_bytes <= 1 << 40
    assert (geo.page_of(limit + 1) + 1) * geo.page_bytes > 1 << 40


def test_scans_skip_the_holes_of_a_sparse_index(tmp_path: Path) -> None:
    """An entry id far beyond the others (2^31: a 48 GiB sparse index file) costs no time in proportion to
    the id: listing the entries, a range read over the hole and reopening (restart) follow the data held."""
    far = 2**31
    st = LedgerStorage([tmp_path / "l0"])
    add(st, 7, list(range(10)))
    add(st, 7, [far])
    st.flush()
    started = time.monotonic()
    assert st.entry_ids(7) == [*range(10), far]
    assert [int(e) for ids, _, _ in st.read_range(7, 0, far + 5, 1 << 20, 1000) for e in ids] == [*range(10), far]
    st.close()
    st = LedgerStorage([tmp_path / "l0"])
    assert st.last_entry_id(7) == far and st.entry_ids(7) == [*range(10), far]
    assert st.read_entry(7, far) is not None
    st.close()
    assert time.monotonic() - started < 3.0


def test_a_failing_flush_keeps_a_fence_of_another_ledger(tmp_path: Path) -> None:
    """R15: a flush that fails (here with OverflowError from a real pwrite at an offset past any file) keeps
    dirty every ledger state it did not write; the fence of another ledger set in the same interval reaches
    the meta file at the next flush that succeeds, and survives a restart."""
    st = LedgerStorage([tmp_path / "l0"])
    add(st, 1, [0])
    st.set_master_key(2, KEY)
    st.flush()
    add(st, 1, [2**62])               # storage itself takes any id: the bound is the request's (server)
    st.set_fenced(2)
    st.set_explicit_lac(2, b"lac")
    with pytest.raises(OverflowError):
        st.flush()
    st.delete_ledger(1)               # the bad ledger goes (garbage collection): the next flush succeeds
    st.flush()
    st.close()
    st = LedgerStorage([tmp_path / "l0"])
    assert st.is_fenced(2) and st.explicit_lac(2) == b"lac" and st.master_key(2) == KEY
    st.close()


def _config(tmp_path: Path, **overrides: object) -> BookieConfig:
    conf = {"journalDirectories": str(tmp_path / "j"), "ledgerDirectories": str(tmp_path / "l"),
            "flushInterval": "3600000", "checkpointFailuresBeforeReadOnly": "2"}
    return BookieConfig().with_overrides(**{**conf, **{k: str(v) for k, v in overrides.items()}})


def test_failed_checkpoints_are_counted_and_turn_storage_failed(tmp_path: Path) -> None:
    """No dead checkpoint thread: a checkpoint that raises (OverflowError, not an OSError) is logged, counted,
    and after checkpointFailuresBeforeReadOnly in a row the bookie's storage counts as failed (the server
    turns read-only); the journal is kept, so a restart replays the fence and the acknowledged entries."""
    fatal: list[BaseException] = []
    bookie = Bookie(_config(tmp_path), on_fatal=fatal.append)
    bookie.start()
    assert bookie.storage is not None and bookie.journal is not None
    before = FAILURES.counts().get("checkpoint", 0)
    bookie.storage.set_master_key(1, KEY)
    add(bookie.storage, 1, [0, 2**62])            # as a journal replay of an old journal could
    bookie.storage.set_fenced(2)
    for _ in range(2):
        bookie._checkpoint(bookie.journal.position())
    assert bookie.checkpoint_failures == 2 and bookie.last_checkpoint_time == 0.0
    assert bookie.storage_failed and len(fatal) == 1
    assert FAILURES.counts()["checkpoint"] == before + 2
    bookie.storage.delete_ledger(1)
    bookie._checkpoint(bookie.journal.position())
    assert bookie.last_checkpoint_time > 0 and bookie.storage_failed   # read-only until restarted
    bookie.close()
    again = LedgerStorage([tmp_path / "l"])
    assert again.is_fenced(2)
    again.close()


def test_checkpoints_out_of_file_descriptors_do_not_turn_storage_failed(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A client that opened connections to the add port until the bookie had no descriptor left made every
    checkpoint fail with EMFILE, and after checkpointFailuresBeforeReadOnly the bookie stayed read-only
    after the connections were gone (seen with 20,000 connections). Here the process runs out of
    descriptors for real: the failures are counted, storage does not count as failed, and once descriptors
    are free the next checkpoint passes. The pure rule: `decisions.checkpoint_failure_counts`."""
    assert not decisions.checkpoint_failure_counts(24) and decisions.checkpoint_failure_counts(5)   # EMFILE, EIO
    assert decisions.checkpoint_failure_counts(None)
    fatal: list[BaseException] = []
    bookie = Bookie(_config(tmp_path), on_fatal=fatal.append)
    bookie.start()
    assert bookie.storage is not None and bookie.journal is not None
    bookie.storage.set_master_key(1, KEY)
    add(bookie.storage, 1, [0, 1])
    with out_of_descriptors():
        for _ in range(3):
            bookie._checkpoint(bookie.journal.position())
    assert bookie.checkpoint_failures == 3 and bookie.last_checkpoint_time == 0.0
    warned = [r for r in caplog.records if "out of file descriptors" in r.getMessage()]
    assert len(warned) <= 1 and all("Too many open files" in r.getMessage() and not r.exc_info for r in warned)
    assert not [r for r in caplog.records if r.exc_info]        # one line per interval (bookie.thread_guard)
    assert not bookie.storage_failed and not fatal
    bookie._checkpoint(bookie.journal.position())
    assert bookie.last_checkpoint_time > 0 and bookie.checkpoint_failures == 3
    bookie.close()
    again = LedgerStorage([tmp_path / "l"])
    assert again.master_key(1) == KEY
    again.close()


def test_an_unexpected_exception_on_the_journal_thread_fails_the_journal_not_the_thread(tmp_path: Path) -> None:
    """No dead journal thread: an exception that is no OSError (here from a buggy metrics hook) is logged with its
    traceback and counted; the journal fails (so the bookie turns read-only), and every waiting add is answered
    with the error instead of waiting for ever."""
    fatal: list[BaseException] = []
    journal = Journal(tmp_path, on_fatal=fatal.append)

    def buggy_hook(items: int, nbytes: int) -> None:
        raise ValueError("a bug in a metrics hook")

    journal.on_group = buggy_hook
    journal.start()
    before = FAILURES.counts().get("journal", 0)
    answers: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
    journal.append([b"record"], answers.put, sync=True)
    assert isinstance(answers.get(timeout=10), ValueError)
    assert journal.failed and len(fatal) == 1 and FAILURES.counts()["journal"] == before + 1
    journal.append([b"later"], answers.put, sync=True)
    assert isinstance(answers.get(timeout=10), ValueError)     # the thread still answers
    journal.close()


def test_range_reads_and_scans_find_entries_past_a_hole_in_the_file_or_only_in_the_cache(tmp_path: Path) -> None:
    """Skipping holes never skips an entry: one written to the index file, one only in a dirty cached page (not
    flushed yet) and one on a clean cached page past a hole are all listed and read, from any first id."""
    st = LedgerStorage([tmp_path / "l0"], page_size=240, page_limit=64)
    add(st, 4, list(range(10)))
    add(st, 4, [10**6])
    st.flush()
    add(st, 4, [2 * 10**6])                          # dirty, in the cache only

    def ids(first: int, last: int) -> list[int]:
        return [int(e) for batch_ids, _, _ in st.read_range(4, first, last, 1 << 20, 1000) for e in batch_ids]

    assert st.entry_ids(4) == [*range(10), 10**6, 2 * 10**6]
    assert ids(5, 10**6 - 1) == [5, 6, 7, 8, 9]
    assert ids(20, 3 * 10**6) == [10**6, 2 * 10**6]
    assert ids(10**6 + 1, 3 * 10**6) == [2 * 10**6]
    assert ids(0, 10**6) == [*range(10), 10**6]
    st.close()
