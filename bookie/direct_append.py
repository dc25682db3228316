"""Appending to a file opened with O_DIRECT: the journal's writes without a copy into the page cache.

On this kind of machine a buffered write(2) copies into the page cache at about 0.65 GB/s (fresh
data, measured), so a bookie taking 48 MB/s of adds spent about a sixth of a core per copy; a direct
write hands the aligned buffer to the device instead. O_DIRECT needs the buffer, the file offset and
the length aligned to the device's block, so each append rewrites the file's last partial block from
a copy kept here, adds the new bytes and pads with zeros up to the next block. The zeros after the
logical end read as a torn tail (a frame of length 0), which replay already stops at; the next append
overwrites them. A block that holds earlier records is written again with the same bytes, as a
buffered write's page write-back would; `pad` instead leaves the zeros in place and starts the next
append on a fresh block. Durability is still the caller's fdatasync.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence

ALIGN = 4096


def open_direct(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int | None:
    """A descriptor of `path` opened with O_DIRECT, or None where the file system refuses it."""
    direct = getattr(os, "O_DIRECT", 0)
    if not direct:
        return None
    try:
        return os.open(path, flags | direct, mode)
    except OSError:
        return None


def _round_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class DirectAppender:
    """Appends byte strings to a direct descriptor whose logical end is `end` (a new file: 0)."""

    def __init__(self, fd: int, end: int = 0, tail: bytes = b"") -> None:
        if end % ALIGN != len(tail):
            raise ValueError(f"the tail must hold the {end % ALIGN} bytes of the last partial block")
        self.fd = fd
        self.end = end
        self._tail = tail
        self._buf = mmap.mmap(-1, ALIGN)

    def _buffer(self, size: int) -> memoryview:
        if len(self._buf) < size:
            self._buf.close()
            self._buf = mmap.mmap(-1, _round_up(size))
        return memoryview(self._buf)

    def append(self, parts: Sequence[bytes | memoryview]) -> int:
        """Write `parts` after the logical end; return how many bytes were appended."""
        added = sum(len(p) for p in parts)
        if not added:
            return 0
        keep = len(self._tail)
        total = keep + added
        padded = _round_up(total)
        view = self._buffer(padded)
        try:
            view[:keep] = self._tail
            pos = keep
            for part in parts:
                view[pos : pos + len(part)] = part
                pos += len(part)
            view[total:padded] = bytes(padded - total)
            with view[:padded] as chunk:
                self._write(chunk, self.end - keep)
            last = total - total % ALIGN
            self._tail = bytes(view[last:total])
        finally:
            view.release()
        self.end += added
        return added

    def pad(self) -> None:
        """End the current block: the logical end moves to the next block boundary, over the zeros already
        written there, so no later append writes that block again (the entry logs' way: a block a reader
        may have cached is never rewritten)."""
        self.end += (-self.end) % ALIGN
        self._tail = b""

    def _write(self, view: memoryview, offset: int) -> None:
        done = 0
        while done < len(view):
            with view[done:] as rest:        # released even when pwrite fails: the buffer stays closable
                done += os.pwrite(self.fd, rest, offset + done)

    def close(self) -> None:
        """Release the buffer (the descriptor is the caller's)."""
        self._buf.close()
