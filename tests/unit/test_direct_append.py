"""Direct (O_DIRECT) appends: the journal's file holds exactly what a buffered journal would, then zeros (R8, R23)."""

from __future__ import annotations

import fcntl
import os
import random
from pathlib import Path

import pytest

from bkledger.bookie import journal as jmod
from bkledger.bookie.core import records as rec
from bkledger.bookie.direct_append import ALIGN, DirectAppender, open_direct
from bkledger.bookie.journal import Journal, LogMark
from tests.unit.test_journal import Waiter


def _direct_fd(path: Path) -> int:
    fd = open_direct(path, os.O_WRONLY | os.O_CREAT)
    if fd is None:
        pytest.skip(f"the file system of {path.parent} refuses O_DIRECT")
    return fd


def _skip_without_direct_io(directory: Path) -> None:
    os.close(_direct_fd(directory / "probe"))


def test_appends_of_any_size_land_back_to_back_then_zeros_to_the_block(tmp_path: Path) -> None:
    path = tmp_path / "f"
    fd = _direct_fd(path)
    rng = random.Random(7)
    sizes = [1, 15, ALIGN - 1, ALIGN, ALIGN + 1, 3, 70_000, 0, 2 * ALIGN, 5]
    parts = [rng.randbytes(n) for n in sizes]
    appender = DirectAppender(fd)
    for i in range(0, len(parts), 2):
        assert appender.append(parts[i : i + 2]) == len(parts[i]) + len(parts[i + 1])
    appender.close()
    os.close(fd)
    expected = b"".join(parts)
    raw = path.read_bytes()
    assert appender.end == len(expected)
    assert raw[: len(expected)] == expected
    assert len(raw) % ALIGN == 0 and len(raw) - len(expected) < ALIGN
    assert raw[len(expected) :] == bytes(len(raw) - len(expected))


def test_appender_refuses_a_tail_that_does_not_match_the_end(tmp_path: Path) -> None:
    fd = _direct_fd(tmp_path / "f")
    try:
        with pytest.raises(ValueError, match="tail"):
            DirectAppender(fd, 16, b"short")
    finally:
        os.close(fd)


def _journal(tmp_path: Path, **kw: object) -> Journal:
    j = Journal(tmp_path, **kw)  # type: ignore[arg-type]
    j.replay(LogMark(0, 0), lambda f, o, r: None)
    j.start()
    return j


def test_r23_direct_journal_replays_every_record_and_stops_at_its_padding(tmp_path: Path) -> None:
    _skip_without_direct_io(tmp_path)
    j = _journal(tmp_path)
    assert j._fd >= 0 and fcntl.fcntl(j._fd, fcntl.F_GETFL) & os.O_DIRECT, "journal did not open with O_DIRECT"
    records = [rec.encode_add_batch(1, [i], [i % 5000 + 1], bytes([i % 251]) * (i % 5000 + 1)) for i in range(300)]
    records.append(rec.encode_fence(1))
    w = Waiter()
    for r in records:
        j.append([r], w)
    assert w.wait(len(records)) == [None] * len(records)
    pos = j.position()
    j.close()
    got: list[rec.Record] = []
    end = Journal(tmp_path).replay(LogMark(0, 0), lambda f, o, r: got.append(r))
    assert end == pos
    assert len(got) == len(records) and isinstance(got[-1], rec.FenceRecord)
    first = got[5]
    assert isinstance(first, rec.AddBatchRecord) and bytes(first.data) == bytes([5]) * 6
    size = (tmp_path / "current" / f"{pos.file_id:x}.txn").stat().st_size
    assert size % ALIGN == 0 and pos.offset <= size < pos.offset + ALIGN


def test_buffered_journal_when_direct_io_is_off(tmp_path: Path) -> None:
    j = _journal(tmp_path, direct_io=False)
    assert not fcntl.fcntl(j._fd, fcntl.F_GETFL) & os.O_DIRECT
    w = Waiter()
    j.append([rec.encode_fence(3)], w)
    assert w.wait(1) == [None]
    pos = j.position()
    j.close()
    assert (tmp_path / "current" / f"{pos.file_id:x}.txn").stat().st_size == pos.offset


def test_direct_journal_rolls_and_replays_across_files(tmp_path: Path) -> None:
    _skip_without_direct_io(tmp_path)
    big = rec.encode_add_batch(1, [0], [300_000], bytes(300_000))
    j = _journal(tmp_path, max_size_mb=1)
    w = Waiter()
    for _ in range(8):
        j.append([big], w)
    assert w.wait(8) == [None] * 8
    j.close()
    ids = jmod.list_journal_ids(tmp_path / "current")
    got: list[int] = []
    Journal(tmp_path).replay(LogMark(0, 0), lambda f, o, r: got.append(f))
    assert len(ids) >= 2 and len(got) == 8 and len(set(got)) == len(ids)
