"""R26: the bookie's request path in C (wire/_add_request.c) decides as its Python form does, which is the
fallback where the module was not built: the same batches and the same refusals (with the same words)
for any AddRequest bytes, the same answer of `check_add` for any batch, the same ADD_BATCH record, and
(R22) the same index: slots, last entry and per-log usage, whatever ids the batches carry."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bkledger.bookie import add_request, storage
from bkledger.bookie.core import decisions, records
from bkledger.proto import bookie_pb2 as pb
from bkledger.wire import codec as wire
from bkledger.wire.entry import HEADER
from bkledger.wire.native import NATIVE
from tests.unit.test_add_request import BATCH_FIELDS, BATCHES, VARINTS, _varint_field, unpacked
from tests.unit.test_storage import _state, batch

pytestmark = pytest.mark.skipif(NATIVE is None, reason="wire._native was not built")


def outcome(parse: object, raw: bytes) -> object:
    """What a parse gives for `raw`: its batches as plain values and the wide varint, or its refusal."""
    try:
        batches, wide = parse(raw)  # type: ignore[operator]
    except ValueError as exc:
        return ("refused", str(exc))
    return [(b.ledger_id, b.master_key, b.recovery_add, b.write_flags, b.high_priority, b.entry_ids.tolist(),
             b.sizes.tolist(), b.entry_ids.dtype, b.sizes.dtype, bytes(b.data)) for b in batches], wide


def assert_parsed_alike(raw: bytes) -> None:
    native = outcome(add_request.native_parse_add_request_wide, raw)
    assert native == outcome(add_request.python_parse_add_request_wide, raw)


REQUESTS = st.builds(lambda txn, batches: pb.AddRequest(txn_id=txn, batches=batches).SerializeToString(),
                     st.integers(min_value=0, max_value=2**64 - 1), st.lists(BATCHES, max_size=4))
UNPACKED = BATCHES.map(unpacked).map(lambda body: wire.field_prefix(2, len(body)) + body)
WIDE = st.lists(st.one_of(st.builds(_varint_field, st.sampled_from([1, 2, 5]), VARINTS),
                          BATCH_FIELDS.map(lambda b: wire.field_prefix(2, len(b)) + b)), max_size=4).map(b"".join)


@settings(max_examples=300)
@given(st.one_of(REQUESTS, UNPACKED, WIDE, st.binary(max_size=80)))
@example(b"\x80\x80\x80\x80\x10\x00")                    # a tag past 32 bits
@example(b"\x98\x80\x80\x80\x80\x00\x00")                 # a tag in six bytes
@example(b"\x12\x0b\x08" + b"\x80" * 9 + b"\x02")        # ledger id 2**64 in a batch
@example(b"\x12\x03\x32\x01\x80")                        # packed entry ids ending inside a varint
@example(b"\x12\x0d\x32\x0b" + b"\x80" * 10 + b"\x01")    # a packed varint of eleven bytes
@example(b"\x12\x02\x09\x00")                            # a fixed64 field cut off inside a batch
@example(b"\x0b")                                        # a group (wire type 3)
@example(b"\x12\x05\x0a\x00\x42\x00\x00")                # empty master key and data: present, empty
def test_r26_the_native_parse_gives_what_the_python_parse_gives(raw: bytes) -> None:
    assert_parsed_alike(raw)


def test_r26_the_native_parse_views_the_request_and_fills_in_what_is_absent() -> None:
    raw = pb.AddRequest(batches=[pb.AddBatch(ledger_id=3, data=b"x" * 64), pb.AddBatch()]).SerializeToString()
    with_data, empty = add_request.native_parse_add_request_wide(raw)[0]
    assert isinstance(with_data.data, memoryview) and with_data.data.obj is raw
    assert (empty.ledger_id, len(empty.entry_ids), len(empty.sizes), bytes(empty.data)) == (0, 0, 0, b"")
    assert empty.entry_ids.dtype == np.int64 and empty.sizes.dtype == np.int64


def packaged(ledger_id: int, ids: list[int], payload_sizes: list[int], lacs: list[int]) -> tuple[bytes, list[int]]:
    """Entries as a writer packages them (header, then a payload of zeros standing in for digest and data)."""
    blobs = [HEADER.pack(ledger_id, i, lac, size) + bytes(size) for i, size, lac in zip(ids, payload_sizes, lacs,
                                                                                       strict=True)]
    return b"".join(blobs), [len(b) for b in blobs]


INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, np.ndarray, np.ndarray, bytes]:
    """A batch as a bookie receives it: mostly well formed, with one of the ways it can be wrong drawn in."""
    ledger_id = draw(st.one_of(st.integers(0, 2**20), INT64))
    n = draw(st.integers(1, 12))
    first = draw(st.one_of(st.integers(0, 1000), INT64.map(lambda v: v // 2)))
    ids = [first + i for i in range(n)]
    data, sizes = packaged(ledger_id, ids, draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)),
                           draw(st.lists(st.integers(-1, 2**40), min_size=n, max_size=n)))
    flaw = draw(st.sampled_from(["none", "header", "id", "size", "short", "long", "data", "negative"]))
    at = draw(st.integers(0, n - 1))
    if flaw == "header":                        # an entry names another ledger
        start = sum(sizes[:at])
        data = data[:start] + HEADER.pack(ledger_id ^ 1, ids[at], 0, 0)[:8] + data[start + 8:]
    elif flaw == "id":
        ids[at] = draw(INT64)
    elif flaw == "size":
        sizes[at] = draw(st.integers(0, 2**32 - 1))
    elif flaw == "short":                       # shorter than a header (the data then does not add up)
        sizes[at] = draw(st.integers(0, 31))
    elif flaw == "long":
        sizes[at] += 10**6
    elif flaw == "data":
        data = data[:-1]
    elif flaw == "negative":
        ids[at] = -draw(st.integers(1, 2**62))
    return ledger_id, np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.int64), data


@settings(max_examples=400)
@given(batches(), st.sampled_from([1 << 20, 50]), st.booleans())
def test_r26_a_batch_is_checked_alike_natively_and_in_python(
        batch: tuple[int, np.ndarray, np.ndarray, bytes], max_entry_size: int, as_view: bool) -> None:
    ledger_id, ids, sizes, data = batch
    received: bytes | memoryview = memoryview(data) if as_view else data
    native = decisions.check_add(ledger_id, ids, sizes, received, max_entry_size)
    in_python = decisions.check_add(ledger_id, ids.tolist(), sizes.tolist(), received, max_entry_size)
    assert native == in_python


def test_r26_check_add_refuses_what_check_batch_shape_and_check_headers_refuse() -> None:
    data, sizes = packaged(7, [5, 6], [10, 10], [3, 4])
    ids = np.array([5, 6], dtype=np.int64)
    assert decisions.check_add(7, ids, np.array(sizes, dtype=np.int64), data, 1 << 20) == ("", 4, 6)
    why, lac, highest = decisions.check_add(8, ids, np.array(sizes, dtype=np.int64), data, 1 << 20)
    assert why == decisions.check_headers(8, ids, sizes, data)[0] != "" and (lac, highest) == (-1, -1)
    assert decisions.check_add(-1, ids, np.array(sizes, dtype=np.int64), data, 1 << 20)[0] == "negative ledger id -1"


@settings(max_examples=200)
@given(st.integers(min_value=0, max_value=2**63 - 1), st.lists(INT64, max_size=20),
       st.lists(st.integers(0, 200), max_size=20), st.booleans(), st.integers(-1, 1))
def test_r23_the_native_add_batch_record_is_the_python_record(
        ledger_id: int, ids: list[int], sizes: list[int], same_length: bool, off: int) -> None:
    """The same bytes, or the same refusal (ids and sizes of different lengths, sizes that miss the data)."""
    if same_length:
        ids, sizes = ids[: len(sizes)], sizes[: len(ids)]
    data = bytes(max(0, sum(sizes) + off))

    def record(entry_ids: object, entry_sizes: object) -> object:
        try:
            return b"".join(records.add_batch_parts(ledger_id, entry_ids, entry_sizes, data))  # type: ignore[arg-type]
        except ValueError as exc:
            return str(exc)

    native = record(np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.int64))
    assert native == record(ids, sizes)


def stored(batches: list[list[int]], page_size: int, directory: Path) -> tuple[object, ...]:
    """The state of a storage that took `batches` of ledger 7 (entries as test_storage packages them)."""
    st = storage.LedgerStorage([directory], page_size=page_size)
    try:
        for ids in batches:
            entry_ids, sizes, data = batch(7, ids, lac=len(ids))
            st.add_batch(7, np.array(entry_ids, dtype=np.int64), np.array(sizes, dtype=np.int64), data)
        usage = {log_id: tuple(use) for log_id, use in st._ledgers[7].usage.items()} if 7 in st._ledgers else {}
        return _state(st, [7]), usage
    finally:
        st.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.builds(lambda a, n, step: list(range(a, a + n * step, step)), st.integers(0, 40),
                                    st.integers(1, 30), st.integers(1, 3)),
                          st.lists(st.integers(0, 80), min_size=1, max_size=12)), min_size=1, max_size=6),
       st.sampled_from([48, 240, 8192]))
def test_r22_a_record_is_indexed_alike_natively_and_in_python(batches: list[list[int]], page_size: int) -> None:
    """Runs and strides across page boundaries (fill_slots), and ids in any order, repeated, or stored
    before (a replay): the native path stops where it must and the Python path finishes alike."""
    with tempfile.TemporaryDirectory() as native_dir, tempfile.TemporaryDirectory() as python_dir:
        native = stored(batches, page_size, Path(native_dir))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(storage, "NATIVE", None)
            assert stored(batches, page_size, Path(python_dir)) == native


def test_r26_a_strided_batch_is_decided_in_python_not_refused_by_the_native_call() -> None:
    """Ids that are a view with a stride (not what the parse gives, but what a caller may pass) are checked
    as well: the native pass takes only contiguous vectors, and these go the Python way."""
    data, sizes = packaged(7, [0, 1, 2, 3], [5, 5, 5, 5], [1, 2, 3, 4])
    ids = np.repeat(np.arange(4, dtype=np.int64), 2)[::2]
    assert not ids.flags.c_contiguous
    assert decisions.check_add(7, ids, np.array(sizes, dtype=np.int64), data, 1 << 20) == ("", 4, 3)


def test_r22_a_strided_batch_is_indexed_in_python_not_refused_by_the_native_call(tmp_path: Path) -> None:
    entry_ids, sizes, data = batch(7, [0, 1, 2, 3], lac=2)
    ids = np.repeat(np.array(entry_ids, dtype=np.int64), 2)[::2]
    assert not ids.flags.c_contiguous
    st = storage.LedgerStorage([tmp_path])
    try:
        st.add_batch(7, ids, np.array(sizes, dtype=np.int64), data)
        assert st.entry_ids(7) == [0, 1, 2, 3] and st.read_entry(7, 3) is not None
    finally:
        st.close()
