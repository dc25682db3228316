"""Removing a large file (an old journal, a dead entry log) in fsynced steps, so the disk's other
fdatasyncs are not held behind one big free (`bookie.files.remove_gradually`), and finishing a removal
that a stop interrupted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bkledger.bookie import files
from bkledger.bookie.entrylog import EntryLogger, list_log_ids
from bkledger.bookie.journal import Journal, list_journal_ids

STEP = files.REMOVE_STEP_BYTES


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def test_a_large_file_shrinks_step_by_step_each_step_fsynced_then_it_is_unlinked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _sparse(tmp_path / "1a.txn", 3 * STEP + 5)
    calls: list[tuple[str, int]] = []
    truncate, fsync = os.ftruncate, os.fsync

    def recording_truncate(fd: int, size: int) -> None:
        calls.append(("truncate", size))
        truncate(fd, size)

    def recording_fsync(fd: int) -> None:
        calls.append(("fsync", os.fstat(fd).st_size))
        fsync(fd)

    monkeypatch.setattr(os, "ftruncate", recording_truncate)
    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(files, "REMOVE_PAUSE_S", 0.0)

    assert files.remove_gradually(path) == 3 * STEP + 5
    assert os.listdir(tmp_path) == []
    steps = [c for c in calls if c[0] == "truncate"]
    assert steps == [("truncate", 2 * STEP + 5), ("truncate", STEP + 5), ("truncate", 5)]
    for step in steps:   # each step is committed by the remover itself, before the next one
        assert calls[calls.index(step) + 1] == ("fsync", step[1])


def test_a_missing_file_frees_nothing(tmp_path: Path) -> None:
    assert files.remove_gradually(tmp_path / "gone.log") == 0


def test_an_interrupted_removal_is_finished_and_its_file_is_no_journal_or_entry_log(tmp_path: Path) -> None:
    journals = tmp_path / "journal" / "current"
    logs = tmp_path / "ledgers" / "current"
    journals.mkdir(parents=True)
    logs.mkdir(parents=True)
    _sparse(journals / f"{5:x}.txn{files.DELETING}", 2 * STEP)
    _sparse(logs / f"{9:x}.log{files.DELETING}", STEP + 1)
    assert list_journal_ids(journals) == []      # half removed: never replayed, never counted
    assert list_log_ids(logs) == []

    EntryLogger(logs, size_limit=1 << 20)
    assert os.listdir(logs) == []
    j = Journal(tmp_path / "journal")
    j.start()
    try:
        assert [name for name in os.listdir(journals) if name.endswith(files.DELETING)] == []
        assert len(list_journal_ids(journals)) == 1    # the new journal only
    finally:
        j.close()
