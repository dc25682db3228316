"""Bulk adds as pure functions: checking one buffer and its entry offsets, cutting it into packaging
chunks, and packaging a chunk (R7).

A bulk is n entries given as ONE buffer and n + 1 offsets: entry i is `data[offsets[i]:offsets[i + 1]]`
(the start of each entry, then the end of the last one; offsets[0] need not be 0). The offsets may be
any sequence of integers or a 1-D numpy integer array; they are kept as one int64 array, so a bulk holds
no Python object per entry between the call and the packaging. Packaging writes exactly the bytes that
n separate adds would (`digest.package_batch`), one chunk of at most `max_bytes` at a time, so one
AddRequest never grows past the request limit however large the bulk.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from bkledger.client.errors import EntryTooLargeError, InvalidBulkError
from bkledger.client.protocol.digest import HEADER, HEADER_LENGTH, Buffer, DigestManager
from bkledger.client.protocol.metadata import DigestType
from bkledger.wire.native import NATIVE

Offsets = npt.NDArray[np.int64]


@dataclasses.dataclass(frozen=True)
class Bulk:
    """n entries: `data[offsets[i]:offsets[i + 1]]` for i < n. `data` is the caller's bytes (a copy when
    the caller passed another buffer, so changing it after the call cannot change what is written), or a
    byte view of the caller's buffer when the caller asked for no copy."""

    data: bytes | memoryview
    offsets: Offsets

    @property
    def count(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        """Payload bytes of all its entries."""
        return int(self.offsets[-1] - self.offsets[0])


def check_bulk(data: Buffer | npt.NDArray[np.uint8], offsets: Sequence[int] | npt.NDArray[np.integer],
               max_entry_size: int, *, copy: bool = True) -> Bulk:
    """The Bulk for (data, offsets), or InvalidBulkError / EntryTooLargeError saying what is wrong.

    Checks everything before anything is queued: a bulk is refused whole, never in part. `copy=False`:
    a buffer other than bytes is used in place (the caller keeps it unchanged until the bulk is done)."""
    try:
        view = memoryview(data)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidBulkError(f"bulk data must be bytes-like (bytes, bytearray, memoryview, uint8 array), "
                               f"not {type(data).__name__}") from None
    if not view.c_contiguous:
        raise InvalidBulkError("bulk data must be one contiguous buffer; pass bytes(data) or a contiguous array")
    raw = view if isinstance(data, bytes) else view.cast("B")
    nbytes = raw.nbytes
    arr = _offsets_array(offsets)
    sizes = np.diff(arr)
    if arr[0] < 0 or arr[-1] > nbytes:
        raise InvalidBulkError(f"bulk offsets span [{int(arr[0])}, {int(arr[-1])}] but the buffer has {nbytes} "
                               "bytes; every offset must lie within the buffer")
    if (sizes < 0).any():
        i = int(np.argmax(sizes < 0))
        raise InvalidBulkError(f"bulk offsets must not decrease: offsets[{i}]={int(arr[i])} > "
                               f"offsets[{i + 1}]={int(arr[i + 1])}")
    if (sizes > max_entry_size).any():
        i = int(np.argmax(sizes > max_entry_size))
        raise EntryTooLargeError(f"entry {i} of the bulk has {int(sizes[i])} bytes, over maxEntrySize="
                                 f"{max_entry_size}; split it; nothing of this bulk was added")
    payload = data if isinstance(data, bytes) else raw.tobytes() if copy else raw
    return Bulk(payload, arr)


def _offsets_array(offsets: Sequence[int] | npt.NDArray[np.integer]) -> Offsets:
    if isinstance(offsets, np.ndarray):
        if offsets.dtype.kind not in "iu":
            raise InvalidBulkError(f"bulk offsets must be integers, not an array of {offsets.dtype}")
        arr = offsets
    else:
        try:
            arr = np.asarray(offsets)
        except (TypeError, ValueError):
            raise InvalidBulkError("bulk offsets must be a sequence of integers") from None
        if arr.size and arr.dtype.kind not in "iu":
            raise InvalidBulkError(f"bulk offsets must be integers, got {arr.dtype} values")
    if arr.ndim != 1:
        raise InvalidBulkError(f"bulk offsets must be one-dimensional, got shape {arr.shape}")
    if len(arr) < 2:
        raise InvalidBulkError(f"a bulk needs at least one entry: n + 1 >= 2 offsets, got {len(arr)}")
    if arr.dtype == np.uint64 and int(arr.max()) > np.iinfo(np.int64).max:
        raise InvalidBulkError("bulk offsets are too large")
    return np.ascontiguousarray(arr, dtype=np.int64)


def chunk_bounds(offsets: Offsets, overhead: int, max_bytes: int) -> list[int]:
    """Entry indices where packaging chunks start, then n: each chunk's packaged bytes (payload +
    `overhead` per entry) stay within max_bytes, except a lone entry larger than that on its own."""
    n = len(offsets) - 1
    if n <= 0:
        return [0]
    packaged_end = (offsets[1:] - offsets[0]) + overhead * np.arange(1, n + 1, dtype=np.int64)
    bounds = [0]
    base = 0
    while bounds[-1] < n:
        start = bounds[-1]
        # the last entry whose packaged end stays within base + max_bytes (at least one entry)
        stop = int(np.searchsorted(packaged_end, base + max_bytes, side="right"))
        stop = min(n, max(stop, start + 1))
        bounds.append(stop)
        base = int(packaged_end[stop - 1])
    return bounds


def package_bulk(digest: DigestManager, ledger_id: int, first_entry_id: int, lac: int, start_length: int,
                 data: bytes | memoryview, offsets: Offsets) -> tuple[bytes, Offsets]:
    """Package entries data[offsets[i]:offsets[i+1]] as ids first_entry_id + i, back to back, exactly as
    package_batch would: (one blob, n + 1 offsets of the packaged entries within the blob). CRC32C, the
    default digest, is packaged by one native call where the module was built (wire.native)."""
    overhead = HEADER_LENGTH + digest.mac_length
    packaged = (offsets - offsets[0]) + overhead * np.arange(len(offsets), dtype=np.int64)
    if digest.digest_type is DigestType.CRC32C and NATIVE is not None:
        bounds = np.ascontiguousarray(offsets, dtype=np.int64)
        return NATIVE.package_crc32c(data, bounds, ledger_id, first_entry_id, lac, start_length), packaged
    parts: list[bytes | memoryview] = []
    pack = HEADER.pack
    compute = digest.compute
    length = start_length
    entry_id = first_entry_id
    ends = offsets.tolist()
    start = ends[0]
    for end in ends[1:]:
        payload = data[start:end]
        length += end - start
        header = pack(ledger_id, entry_id, lac, length)
        parts += (header, compute(header, payload), payload)
        entry_id += 1
        start = end
    return b"".join(parts), packaged


def striped_targets(first_entry_id: int, offsets: Offsets, ensemble_size: int, write_quorum: int
                    ) -> list[tuple[int, npt.NDArray[np.bool_]]]:
    """For consecutive entries from `first_entry_id` (n + 1 offsets): each ensemble index with the mask of
    the entries whose write set holds it (R5: entry e goes to indices e .. e + Qw - 1 mod E)."""
    ids = np.arange(first_entry_id, first_entry_id + len(offsets) - 1, dtype=np.int64)
    out = []
    for index in range(ensemble_size):
        keep = (index - ids) % ensemble_size < write_quorum
        if bool(keep.any()):
            out.append((index, keep))
    return out

