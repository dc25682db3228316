"""Cutting the entries a mask keeps out of back-to-back entries, into one buffer: a striped bulk's share of
one bookie (client) and the residue of a range read (bookie)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from bkledger.wire.native import NATIVE

Buffer = bytes | bytearray | memoryview
Offsets = npt.NDArray[np.int64]


def gather_entries(data: Buffer, offsets: Offsets, keep: npt.NDArray[np.bool_]) -> bytes:
    """The entries `keep` selects of the back-to-back entries `data[offsets[i]:offsets[i + 1]]`, back to
    back: one native pass (a copy per run of kept entries) where wire._native was built, else
    Arrow's filter kernel over a binary array laid on `data` and `offsets`. A striped write set keeps runs
    of Qw of every E entries, so a slice per run would be a Python object per one or two entries."""
    if bool(keep.all()):
        whole = int(offsets[0]) == 0 and int(offsets[-1]) == len(data)
        return data if whole and isinstance(data, bytes) else bytes(memoryview(data)[int(offsets[0]):int(offsets[-1])])
    if not bool(keep.any()):
        return b""
    bounds = np.ascontiguousarray(offsets, dtype=np.int64)
    if NATIVE is not None:
        return NATIVE.gather(data, bounds, np.ascontiguousarray(keep, dtype=np.bool_))
    import pyarrow as pa  # only where entries are cut out (striped bulks, read residues)

    entries = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(bounds) - 1,
                                               [None, pa.py_buffer(bounds), pa.py_buffer(data)])
    kept = entries.filter(pa.array(keep, type=pa.bool_()))
    kept_bounds = np.frombuffer(kept.buffers()[1], dtype=np.int64, count=len(kept) + 1)
    return memoryview(kept.buffers()[2])[int(kept_bounds[0]):int(kept_bounds[-1])].tobytes()
