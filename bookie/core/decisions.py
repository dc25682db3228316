"""The bookie's request decisions: which status an add, read or fence request gets (pure).

Mirrors BookKeeper's WriteEntryProcessorV3 / ReadEntryProcessorV3 checks, in their order:
malformed or oversized request, or an entry id far beyond what the ledger can hold next -> EBADREQ
(R26, `check_entry_range`), read-only bookie -> EREADONLY unless high priority
(R25), master key mismatch -> EUA (R26), fenced ledger -> EFENCED unless a recovery add (R15); and,
once storage has supplied what it holds of the batch's ids, an entry stored with other bytes -> EBADREQ.
The driver executes what these return; nothing here touches a socket, a file or a clock.
"""

from __future__ import annotations

import dataclasses
import errno
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from bkledger.bookie.core.index_pages import PageGeometry
from bkledger.bookie.core.records import be64_view, native_vector
from bkledger.proto import bookie_pb2 as pb
from bkledger.wire.entry import HEADER, HEADER_SIZE
from bkledger.wire.native import NATIVE

MASTER_KEY_SIZE = 20

Status = int
IntArray = npt.NDArray[np.int64]


@dataclasses.dataclass(frozen=True)
class LedgerView:
    """What the bookie knows of a ledger when it decides: its master key and fenced flag."""

    master_key: bytes | None
    fenced: bool


@dataclasses.dataclass(frozen=True)
class AddCheck:
    """The outcome of checking one add batch: a status for the whole batch, and on EOK the highest
    piggy-backed LAC it carries and whether the master key must be recorded (first add)."""

    status: Status
    max_lac: int = -1
    record_key: bool = False
    reason: str = ""


def _bad(reason: str) -> AddCheck:
    return AddCheck(pb.EBADREQ, reason=reason)


def check_batch_shape(
    ledger_id: int, entry_ids: Sequence[int] | IntArray, sizes: Sequence[int] | IntArray, data_len: int,
    max_entry_size: int,
) -> str:
    """'' if the batch is well formed, else why not (R26: answered with EBADREQ)."""
    if ledger_id < 0:
        return f"negative ledger id {ledger_id}"
    if len(entry_ids) != len(sizes):
        return f"{len(entry_ids)} entry ids but {len(sizes)} sizes"
    if not len(entry_ids):
        return "empty batch"
    total, smallest, largest = _sum_min_max(sizes)
    return _bounds_why(total, smallest, largest, lowest(entry_ids), data_len, max_entry_size)


def _bounds_why(total: int, smallest: int, largest: int, lowest_id: int, data_len: int, max_entry_size: int) -> str:
    """check_batch_shape's checks of a non-empty batch's sizes (their sum, min, max) and lowest id."""
    if total != data_len:
        return f"sizes add up to {total} but the data has {data_len} bytes"
    if lowest_id < 0:
        return "negative entry id"
    if smallest < HEADER_SIZE:
        return f"an entry is shorter than the {HEADER_SIZE}-byte header"
    if largest > max_entry_size:
        return f"entry of {largest} bytes exceeds the limit of {max_entry_size} bytes"
    return ""


def check_add(ledger_id: int, entry_ids: Sequence[int] | IntArray, sizes: Sequence[int] | IntArray,
              data: bytes | memoryview, max_entry_size: int) -> tuple[str, int, int]:
    """check_batch_shape, then check_headers: (why not, max LAC, highest entry id); the last two -1 when
    refused. One native pass (`scan_add_batch`) for a received batch (int64 arrays) where wire._native was
    built: the three checks' numpy calls cost 30-35 us a request of 90 entries, check_add with it 5 us."""
    scan = _scan(ledger_id, entry_ids, sizes, data)
    if scan is None:
        why = check_batch_shape(ledger_id, entry_ids, sizes, len(data), max_entry_size)
        if why:
            return why, -1, -1
        why, max_lac = check_headers(ledger_id, entry_ids, sizes, data)
        return (why, -1, -1) if why else ("", max_lac, highest(entry_ids))
    total, smallest, largest, lowest_id, highest_id, bad, max_lac = scan
    why = _bounds_why(total, smallest, largest, lowest_id, len(data), max_entry_size)
    if why:
        return why, -1, -1
    if bad >= 0:
        lid, eid, _lac, _length = HEADER.unpack_from(data, int(np.add.reduce(sizes[:bad])))
        return _header_mismatch(lid, eid, ledger_id, int(entry_ids[bad])), -1, -1
    return "", max_lac, highest_id


def _scan(ledger_id: int, entry_ids: Sequence[int] | IntArray, sizes: Sequence[int] | IntArray,
          data: bytes | memoryview) -> tuple[int, int, int, int, int, int, int] | None:
    """wire._native's scan_add_batch where it applies (contiguous int64 vectors of the same non-zero length, a
    ledger id of 0 or more): None where check_add decides in Python."""
    if NATIVE is None or not native_vector(entry_ids) or not native_vector(sizes):
        return None
    if not 0 < len(entry_ids) == len(sizes):
        return None
    if not 0 <= ledger_id < 1 << 63:
        return None
    scan: tuple[int, int, int, int, int, int, int] | None = NATIVE.scan_add_batch(ledger_id, entry_ids, sizes, data)
    return scan


def _sum_min_max(values: Sequence[int] | IntArray) -> tuple[int, int, int]:
    """Of a non-empty vector: numpy for a long one, Python ints for a short one (cheaper there). The ufuncs'
    reduce is called directly: `ndarray.sum()` and its kin go through two Python functions each."""
    if isinstance(values, np.ndarray):
        if len(values) >= _VECTOR_MIN:
            vector = values.astype(np.int64, copy=False)
            return int(np.add.reduce(vector)), int(np.minimum.reduce(vector)), int(np.maximum.reduce(vector))
        values = values.tolist()
    return sum(values), min(values), max(values)


def lowest(values: Sequence[int] | IntArray) -> int:
    """The smallest of a non-empty vector."""
    return int(np.minimum.reduce(values)) if isinstance(values, np.ndarray) else min(values)


def highest(values: Sequence[int] | IntArray) -> int:
    """The largest of a non-empty vector."""
    return int(np.maximum.reduce(values)) if isinstance(values, np.ndarray) else max(values)


def check_headers(
    ledger_id: int, entry_ids: Sequence[int] | IntArray, sizes: Sequence[int] | IntArray, data: bytes | memoryview
) -> tuple[str, int]:
    """Each packaged entry must name the ledger and entry id it is sent as. Returns (why not, max LAC).
    Call after check_batch_shape (sizes cover the data, each at least a header)."""
    if len(entry_ids) >= _VECTOR_MIN:
        return _check_headers_vector(ledger_id, entry_ids, sizes, data)
    offset = 0
    max_lac = -1
    unpack = HEADER.unpack_from
    if isinstance(entry_ids, np.ndarray):
        entry_ids = entry_ids.tolist()
    if isinstance(sizes, np.ndarray):
        sizes = sizes.tolist()
    for entry_id, size in zip(entry_ids, sizes, strict=True):
        lid, eid, lac, _length = unpack(data, offset)
        if lid != ledger_id or eid != entry_id:
            return _header_mismatch(lid, eid, ledger_id, entry_id), -1
        if lac > max_lac:
            max_lac = lac
        offset += size
    return "", max_lac


_VECTOR_MIN = 16                          # from this many entries, check the headers with numpy


def _check_headers_vector(
    ledger_id: int, entry_ids: Sequence[int] | IntArray, sizes: Sequence[int] | IntArray, data: bytes | memoryview
) -> tuple[str, int]:
    """check_headers for a large batch: gathers the headers' first three fields from one big-endian view
    (compared as they are: no conversion of each to native order)."""
    starts = np.zeros(len(sizes), dtype=np.int64)
    np.add.accumulate(sizes[:-1], out=starts[1:])
    every = be64_view(data)      # element i: the big-endian int64 at byte i (check_batch_shape: each entry fits)
    lids, eids = every[starts], every[starts + 8]     # ledgerId | entryId | lastAddConfirmed
    bad = (lids != ledger_id) | (eids != np.asarray(entry_ids, dtype=np.int64))
    if np.logical_or.reduce(bad):
        i = int(np.argmax(bad))
        return _header_mismatch(int(lids[i]), int(eids[i]), ledger_id, int(entry_ids[i])), -1
    return "", max(-1, int(np.maximum.reduce(every[starts + 16])))


def max_entry_id(max_index_file_bytes: int, geometry: PageGeometry) -> int:
    """The largest entry id whose index page (written whole) fits an index file of `max_index_file_bytes`."""
    return (max_index_file_bytes // geometry.page_bytes) * geometry.entries - 1


def check_entry_range(highest_id: int, known_last: int, batch_lac: int, window: int, limit: int) -> str:
    """'' if a batch whose highest entry id is `highest_id` may be stored, else why not (R26: EBADREQ).

    Writers send consecutive ids (a striped bookie sees every E-th one), so an add lies within `window`
    ids past the ledger's *known range*: the highest of the bookie's last stored entry and the LAC it
    has seen (`known_last`) and the LAC the batch itself carries (`batch_lac`: after an ensemble change
    or for a re-replicated fragment the bookie knows nothing of the ledger yet, but each entry names the
    writer's LAC, which trails its id by the adds in flight). The same rule holds for recovery adds: a
    recovering writer only writes back entries some bookie holds, so below the known range's end plus
    the window too. Whatever the headers say, an id whose index slot lies past `limit` (the largest id
    an index file can hold on this file system) is refused: its index write would fail every checkpoint.
    """
    if highest_id > limit:
        return f"entry id {highest_id} is beyond the largest id an index file here can hold ({limit})"
    bound = max(known_last, batch_lac) + window
    if highest_id > bound:
        return (f"entry id {highest_id} is far beyond the ledger's known range (last entry or LAC "
                f"{max(known_last, batch_lac)}, window {window})")
    return ""


def _header_mismatch(lid: int, eid: int, ledger_id: int, entry_id: int) -> str:
    return f"entry header says ledger {lid} entry {eid}, request says {ledger_id}/{entry_id}"


def decide_add(
    view: LedgerView | None,
    master_key: bytes,
    *,
    recovery_add: bool,
    high_priority: bool,
    read_only: bool,
) -> AddCheck:
    """Status for a well-formed add batch to a ledger in state `view` (None = unknown ledger)."""
    if read_only and not (high_priority or recovery_add):
        return AddCheck(pb.EREADONLY, reason="bookie is read-only")
    if len(master_key) != MASTER_KEY_SIZE:
        return _bad(f"master key must be {MASTER_KEY_SIZE} bytes")
    if view is None or view.master_key is None:
        return AddCheck(pb.EOK, record_key=True)
    if view.master_key != master_key:
        return AddCheck(pb.EUA, reason="master key does not match (wrong password)")
    if view.fenced and not recovery_add:
        return AddCheck(pb.EFENCED, reason="ledger is fenced")
    return AddCheck(pb.EOK)


def check_rewrites(
    entry_ids: Sequence[int] | IntArray, sizes: Sequence[int] | IntArray, data: bytes | memoryview,
    stored: dict[int, bytes],
) -> str:
    """Records cannot be rewritten: '' if every entry of the batch that the bookie already stores
    (`stored`: entry id -> the packaged entry as stored, only for the ids it holds) arrives with the same
    bytes, else why not (answered EBADREQ). A recovery write-back and a writer's resend after an ensemble
    change send the bytes the entry was written with, so they pass; a forged or buggy re-add does not.
    The whole packaged entry is compared (header, digest, payload): the bookie does not know the digest
    type, and the writer never packages one entry id twice."""
    if not stored:
        return ""
    offset = 0
    view = memoryview(data)
    for entry_id, size in zip(_as_ints(entry_ids), _as_ints(sizes), strict=True):
        old = stored.get(entry_id)
        if old is not None and view[offset:offset + size] != old:
            return f"entry {entry_id} is already stored with other bytes: records cannot be rewritten"
        offset += size
    return ""


def _as_ints(values: Sequence[int] | IntArray) -> list[int]:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


@dataclasses.dataclass(frozen=True)
class FenceCheck:
    status: Status
    record_key: bool = False     # the ledger was unknown: it is created fenced with this key (R15)
    newly_fenced: bool = False   # a FENCE record must be journaled before the reply


def decide_fence(view: LedgerView | None, master_key: bytes) -> FenceCheck:
    """R15: fencing needs the ledger's master key; fencing an unknown ledger creates it fenced."""
    if len(master_key) != MASTER_KEY_SIZE:
        return FenceCheck(pb.EBADREQ)
    if view is None or view.master_key is None:
        return FenceCheck(pb.EOK, record_key=True, newly_fenced=True)
    if view.master_key != master_key:
        return FenceCheck(pb.EUA)
    return FenceCheck(pb.EOK, newly_fenced=not view.fenced)


def decide_write_lac(view: LedgerView | None, master_key: bytes) -> Status:
    if view is None or view.master_key is None:
        return pb.ENOLEDGER
    if view.master_key != master_key:
        return pb.EUA
    return pb.EOK


def decide_read(held: bool, ledger_known: bool) -> Status:
    """R22: a miss is ENOENTRY / ENOLEDGER only when the bookie really does not hold it; storage
    errors never reach here (they are answered EIO by the driver)."""
    if held:
        return pb.EOK
    return pb.ENOENTRY if ledger_known else pb.ENOLEDGER


def long_poll_ready(known_lac: int, previous_lac: int) -> bool:
    """A long-poll read (previous_lac set) answers once the LAC known here passes previous_lac."""
    return known_lac > previous_lac


def disk_state(usages: Sequence[float], threshold: float, lwm: float, read_only_now: bool) -> bool:
    """R25: read-only when any directory is above the threshold; writable again only once every
    directory is below the low-water mark. Returns whether the bookie should be read-only."""
    if any(u >= threshold for u in usages):
        return True
    if read_only_now:
        return not all(u < lwm for u in usages)
    return False


OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})


def out_of_descriptors(error_number: int | None) -> bool:
    """Did an OSError come from the process or the system having no file descriptor left (EMFILE, ENFILE)?
    Not a fault of the disk: what failed for it is tried again (a checkpoint, a journal roll)."""
    return error_number in OUT_OF_DESCRIPTORS


def checkpoint_failure_counts(error_number: int | None) -> bool:
    """Does a failed checkpoint count toward checkpointFailuresBeforeReadOnly (storage failed, read-only)?
    Not when the process or the system ran out of file descriptors (EMFILE, ENFILE): that is not the disk,
    and a client that opens connections until the bookie has none left must not turn it read-only for
    good. The journal keeps everything until the next checkpoint passes it."""
    return not out_of_descriptors(error_number)
