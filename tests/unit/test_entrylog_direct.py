"""Entry logs written with O_DIRECT: every record readable at once, written once, durable at flush (R22)."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest

from bkledger.bookie import direct_append
from bkledger.bookie.direct_append import ALIGN, open_direct
from bkledger.bookie.entrylog import HEADER_SIZE, WRITE_BYTES, EntryLogger, StorageError
from tests.unit.descriptors import out_of_descriptors


@pytest.fixture
def writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(offset, length) of every direct write; skips where the file system refuses O_DIRECT."""
    probe = open_direct(tmp_path / "probe", os.O_WRONLY | os.O_CREAT)
    if probe is None:
        pytest.skip(f"the file system of {tmp_path} refuses O_DIRECT")
    os.close(probe)
    seen: list[tuple[int, int]] = []
    real = os.pwrite

    def pwrite(fd: int, data: memoryview, offset: int) -> int:
        seen.append((offset, len(data)))
        return real(fd, data, offset)

    monkeypatch.setattr(direct_append.os, "pwrite", pwrite)
    return seen


def pieces(record: bytes) -> list[bytes | memoryview]:
    """A record as the bookie hands it over: in pieces, some of them views."""
    return [record[:7], memoryview(record)[7:]]


def _records(count: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(1, 9000)) for _ in range(count)]


def _check_whole_blocks_once(writes: list[tuple[int, int]]) -> None:
    """Every direct write covers whole blocks, and no block is written twice."""
    blocks: list[int] = []
    for offset, length in writes:
        assert offset % ALIGN == 0 and length % ALIGN == 0
        blocks.extend(range(offset // ALIGN, (offset + length) // ALIGN))
    assert len(blocks) == len(set(blocks))


def _check(logger: EntryLogger, placed: list[tuple[tuple[int, int], bytes]]) -> None:
    for (log_id, offset), record in placed:
        assert logger.read(log_id, offset, len(record)) == record


def test_r22_records_are_readable_before_during_and_after_their_write(tmp_path: Path, writes: list) -> None:
    logger = EntryLogger(tmp_path / "current", 1 << 30)
    placed = []
    for record in _records(400):
        placed.append((logger.append(pieces(record)), record))
        _check(logger, placed[-3:])          # the newest, still in memory, and the ones before it
    logger.written()
    assert writes, "about 1.8 MB of records and nothing reached the disk"
    _check(logger, placed)
    logger.flush()
    _check(logger, placed)
    later = [(logger.append(pieces(r)), r) for r in _records(20, seed=2)]
    assert later[0][0][1] % ALIGN == 0, "after a flush the next record starts on a fresh block"
    logger.close()
    reopened = EntryLogger(tmp_path / "current", 1 << 30)
    _check(reopened, placed + later)
    reopened.close()


def test_a_read_that_saw_the_records_unwritten_gets_them_once_they_are_written(tmp_path: Path, writes: list) -> None:
    """A reader checks where the disk ends without the lock; by the time it takes the lock, the range may
    lie wholly, or partly, on disk."""
    logger = EntryLogger(tmp_path / "current", 1 << 30)
    placed = [(logger.append(pieces(r)), r) for r in _records(400, seed=6)]
    logger.written()
    assert writes
    for (log_id, offset), record in placed[::7]:
        assert logger._read_unwritten(log_id, offset, len(record)) == record
        assert logger._read_unwritten(log_id, offset + 1, len(record) - 1) == record[1:]
    logger.close()


def test_no_block_is_written_twice_and_writes_are_whole_blocks(tmp_path: Path, writes: list) -> None:
    logger = EntryLogger(tmp_path / "current", 1 << 30)
    for i, record in enumerate(_records(600, seed=3)):
        logger.append(pieces(record))
        if i % 150 == 149:
            logger.flush()
    logger.close()
    _check_whole_blocks_once(writes)
    assert max(length for _, length in writes) <= WRITE_BYTES + 9000 + ALIGN


def test_records_of_a_log_whose_write_failed_stay_readable(
    tmp_path: Path, writes: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    logger = EntryLogger(tmp_path / "current", 1 << 30)
    records = _records(400, seed=4)
    placed = []
    real = os.pwrite

    def failing(fd: int, data: memoryview, offset: int) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(direct_append.os, "pwrite", failing)
    for record in records:                   # about 1.8 MB: the writer takes a block and fails
        placed.append((logger.append(pieces(record)), record))
    logger.written()
    assert logger.write_failures == 1
    _check(logger, placed)                   # from memory
    with pytest.raises(OSError, match="Input/output error"):
        logger.append([b"y" * 100])          # the next add fails as the write did; the log is abandoned
    monkeypatch.setattr(direct_append.os, "pwrite", real)
    _check(logger, placed)
    again = logger.append([b"x" * 100])
    assert again[0] != placed[0][0][0], "a log whose write failed is never appended to again"
    assert logger.read(again[0], again[1], 100) == b"x" * 100
    with pytest.raises(StorageError, match="no checkpoint"):
        logger.flush()            # the journal must keep what never reached a log
    logger.close()


def test_a_block_being_written_is_read_from_memory_and_the_add_path_does_not_wait_for_it(
    tmp_path: Path, writes: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread writes the blocks: an append returns while a write is stuck, the records of the
    stuck block and those after it read back from memory, and a flush waits for the write."""
    import threading

    logger = EntryLogger(tmp_path / "current", 1 << 30)
    entered, release = threading.Event(), threading.Event()
    real = os.pwrite

    def stuck(fd: int, data: memoryview, offset: int) -> int:
        entered.set()
        assert release.wait(30)
        return real(fd, data, offset)

    monkeypatch.setattr(direct_append.os, "pwrite", stuck)
    placed = [(logger.append(pieces(r)), r) for r in _records(300, seed=7)]    # about 1.3 MB
    assert entered.wait(30), "the writer took no block of 1.3 MB held"
    more = [(logger.append(pieces(r)), r) for r in _records(50, seed=8)]     # appends go on meanwhile
    _check(logger, placed + more)
    flushed = threading.Thread(target=logger.flush)
    flushed.start()
    flushed.join(0.2)
    assert flushed.is_alive(), "a flush returned while a block of it was still being written"
    release.set()
    flushed.join(30)
    assert not flushed.is_alive()
    _check(logger, placed + more)
    logger.close()
    _check_whole_blocks_once(writes)
    reopened = EntryLogger(tmp_path / "current", 1 << 30)
    _check(reopened, placed + more)
    reopened.close()


def test_buffered_entry_log_when_direct_io_is_off(tmp_path: Path) -> None:
    logger = EntryLogger(tmp_path / "current", 1 << 30, direct_io=False)
    placed = [(logger.append(pieces(r)), r) for r in _records(50, seed=5)]
    _check(logger, placed)
    log_id = placed[0][0][0]
    assert logger.size(log_id) == sum(len(r) for _, r in placed)
    assert placed[0][0][1] == HEADER_SIZE
    logger.close()


def test_records_larger_than_a_write_are_readable_and_written_in_whole_blocks_once(
    tmp_path: Path, writes: list
) -> None:
    """A record that fills WRITE_BYTES goes to disk from its own pieces: its head with what was held, its
    tail held for later. Every byte still reads back, before and after the flush and after a reopen."""
    rng = random.Random(4)
    sizes = [100, 5000, 3 << 20, 10, (2 << 20) + 123, 700_000, WRITE_BYTES, 3, WRITE_BYTES - 17, 1]
    logger = EntryLogger(tmp_path / "current", 1 << 30)
    placed = []
    for size in sizes * 2:
        record = rng.randbytes(size)
        placed.append((logger.append(pieces(record)), record))
        _check(logger, placed[-3:])
    _check(logger, placed)
    logger.flush()
    _check(logger, placed)
    logger.close()
    _check_whole_blocks_once(writes)
    reopened = EntryLogger(tmp_path / "current", 1 << 30)
    _check(reopened, placed)
    reopened.close()


def test_a_roll_with_no_descriptor_to_spare_fails_that_add_only(tmp_path: Path) -> None:
    """Rolling to a new log with the process out of descriptors (a flood of connections): closing the full
    log frees the one descriptor the new log takes, and syncing the directory then fails with EMFILE. That
    append raises; once descriptors are free the next one rolls and is written. The new log was left
    half-made under an id the next roll tried again with O_EXCL: every later add failed (EEXIST) until a
    restart. For real: the open-file limit is lowered and /dev/null opened until EMFILE."""
    logger = EntryLogger(tmp_path / "current", 4096)
    record = os.urandom(3000)
    first = logger.append(pieces(record))
    with out_of_descriptors(), pytest.raises(OSError) as raised:
        logger.append(pieces(record))      # the log is full: this one rolls
    assert raised.value.errno == errno.EMFILE
    second = logger.append(pieces(record))
    assert second[0] != first[0]
    logger.flush()
    assert logger.read(*first, len(record)) == record and logger.read(*second, len(record)) == record
    logger.close()
