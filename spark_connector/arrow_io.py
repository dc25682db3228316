"""Arrow in and out of the connector: RecordBatches from ledger read chunks, byte columns from batches.

The read path turns one `ReadChunk` (entry ids + payloads, up to ~4 MiB) into one `pyarrow.RecordBatch`
with a fixed number of Python operations per chunk. A range read's chunk comes as `Spans` (where each
payload sits in the received range batches): the binary column is packed from those buffers in one
native pass (`client.log.core.gather`), no Python object per row. Payload lists (tiny pieces,
compressed ledgers) take two C-level passes (`bytes.join`, `map(len, ...)`) and
`pa.Array.from_buffers`. Enveloped ledgers are decoded in bulk (`client.log.core.envelope.decode_bulk`);
v2 headers make the `headers` column (one Python list per row, built only when the read asks for it).
The write path goes the other way: a binary/string column's (data, offsets, validity) as numpy arrays,
zero-copy.
The batch's schema is exactly the one Spark derives from the read schema (timestamps as UTC micros).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bkledger.client.log.core import envelope as env
from bkledger.client.log.core.envelope import I64, U8, Bools
from bkledger.client.log.core.gather import array_parts, packed

if TYPE_CHECKING:
    from bkledger.client.connector import Spans

TIMESTAMP = pa.timestamp("us", tz="UTC")
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))     # Kafka's headers column
Payloads = Sequence[memoryview | bytes]


def _validity(valid: Bools | None) -> tuple[pa.Buffer | None, int]:
    if valid is None:
        return None, 0
    nulls = int(len(valid) - np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def binary_array(data: U8 | bytes, offsets: I64, valid: Bools | None = None) -> pa.Array:
    """A pa.binary() array over `data` with n + 1 `offsets` (int32 in Arrow), nulls where not valid."""
    n = len(offsets) - 1
    validity, nulls = _validity(valid)
    data_buf = pa.py_buffer(data)
    offsets_buf = pa.py_buffer(np.asarray(offsets, dtype=np.int32))
    return pa.Array.from_buffers(pa.binary(), n, [validity, offsets_buf, data_buf], null_count=nulls)


def timestamp_array(micros: I64, valid: Bools | None = None) -> pa.Array:
    validity, nulls = _validity(valid)
    values = pa.py_buffer(np.ascontiguousarray(micros, np.int64))
    return pa.Array.from_buffers(TIMESTAMP, len(micros), [validity, values], null_count=nulls)


def repeated_string(value: str | None, n: int) -> pa.Array:
    """`value` n times, built from its buffers (offsets step by its length): `take` on a one-element
    array cost ~0.5 us per row, more than the rest of a chunk's conversion together."""
    if value is None:
        return pa.nulls(n, pa.string())
    raw = value.encode()
    offsets = np.arange(0, (n + 1) * len(raw), len(raw), dtype=np.int32) if raw else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def entry_id_array(entry_ids: Sequence[int]) -> pa.Array:
    n = len(entry_ids)
    first = entry_ids[0] if n else 0
    if n and entry_ids[-1] - first == n - 1:      # a chunk is contiguous: no list walk needed
        return pa.array(np.arange(first, first + n, dtype=np.int64))
    return pa.array(np.asarray(entry_ids, dtype=np.int64))


def joined(payloads: Sequence[memoryview | bytes]) -> tuple[bytes, I64]:
    """The payloads back to back and their n + 1 offsets."""
    lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
    offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return b"".join(payloads), offsets


def spans_array(spans: Spans) -> pa.Array:
    """The payloads the spans name as one pa.binary() array, packed by `gather.packed` (one native pass
    over the received buffers)."""
    return packed(spans.buffers, spans.buffer, spans.start, spans.end)


def chunk_to_batch(schema: pa.Schema, log: str | None, ledger_id: int, entry_ids: Sequence[int],
                   payloads: Payloads | Spans, envelope: int) -> pa.RecordBatch:
    """One RecordBatch of the read schema from entries of one ledger."""
    return rows_to_batch(schema, log, np.full(len(entry_ids), ledger_id, dtype=np.int64), entry_ids, payloads,
                         envelope)


def rows_to_batch(schema: pa.Schema, log: str | None, ledger_ids: I64, entry_ids: Sequence[int],
                  payloads: Payloads | Spans, envelope: int) -> pa.RecordBatch:
    """One RecordBatch of the read schema from entries of one log, of one or many ledgers (row i is
    entry entry_ids[i] of ledger ledger_ids[i]; many tiny ledgers make one batch)."""
    n = len(entry_ids)
    values: pa.Array | None = None
    if isinstance(payloads, Sequence):
        data: U8 | bytes
        data, offsets = joined(payloads)
    else:
        values = spans_array(payloads)
        data, offsets = array_parts(values)
    columns: dict[str, pa.Array] = {
        "log": repeated_string(log, n),
        "ledger_id": pa.array(ledger_ids),
        "entry_id": entry_id_array(entry_ids),
    }
    if envelope != env.NONE:
        dec = env.decode_bulk(np.frombuffer(data, dtype=np.uint8), offsets, envelope)
        columns["value"] = binary_array(dec.value_data, dec.value_offsets)
        columns["key"] = binary_array(dec.key_data, dec.key_offsets, dec.key_valid)
        columns["timestamp"] = timestamp_array(dec.timestamps, dec.timestamp_valid)
        if "headers" in schema.names:
            columns["headers"] = headers_array(dec)
    else:
        columns["value"] = values if values is not None else binary_array(data, offsets)
        columns["key"] = pa.nulls(n, pa.binary())
        columns["timestamp"] = pa.nulls(n, TIMESTAMP)
        columns["headers"] = pa.nulls(n, HEADERS)
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)


def headers_array(dec: env.Decoded) -> pa.Array:
    """The headers column of decoded entries: a list of {key, value} per entry, null where it has none."""
    if dec.header_valid is None or not bool(dec.header_valid.any()):
        return pa.nulls(len(dec.timestamps), HEADERS)
    rows = [None if h is None else [{"key": k, "value": v} for k, v in h] for h in dec.headers()]
    return pa.array(rows, HEADERS)


# ---- the write side -------------------------------------------------------------------------------
def byte_parts(array: pa.Array) -> tuple[U8, I64, Bools]:
    """(data, offsets rebased to 0, validity) of a binary or string array, without copying the data."""
    if pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type):
        width: type = np.int64
    elif pa.types.is_binary(array.type) or pa.types.is_string(array.type):
        width = np.int32
    else:
        raise TypeError(f"expected a binary or string column, got {array.type}")
    n = len(array)
    buffers = array.buffers()
    raw_offsets = np.frombuffer(buffers[1], dtype=width, count=array.offset + n + 1) if buffers[1] else \
        np.zeros(array.offset + n + 1, dtype=width)
    offsets = raw_offsets[array.offset:].astype(np.int64)
    base = int(offsets[0]) if n else 0
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None and buffers[2].size else \
        np.zeros(0, dtype=np.uint8)
    data = data[base:int(offsets[-1])] if n else data[:0]
    valid = np.ones(n, dtype=np.bool_) if array.null_count == 0 else \
        pc.is_valid(array).to_numpy(zero_copy_only=False)
    return data, offsets - base, valid


def header_parts(array: pa.Array) -> tuple[U8, I64, Bools]:
    """Each row's headers (a list of {key, value} structs, null: none) encoded for `envelope.encode_bulk`."""
    rows = [None if row is None else [(h["key"], h["value"]) for h in row] for row in array.to_pylist()]
    for row in rows:
        if row is not None and any(key is None for key, _ in row):
            raise ValueError("bkledger: a header in column headers has a null key; header keys are strings")
    return env.header_blocks(rows)


def timestamp_parts(array: pa.Array) -> tuple[I64, Bools]:
    """(microseconds since the epoch, validity) of a timestamp column of any unit."""
    if not pa.types.is_timestamp(array.type):
        raise TypeError(f"expected a timestamp column, got {array.type}")
    micros = pc.cast(array, pa.timestamp("us", tz=array.type.tz)).cast(pa.int64())
    valid = np.ones(len(array), dtype=np.bool_) if array.null_count == 0 else \
        pc.is_valid(array).to_numpy(zero_copy_only=False)
    return micros.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64), valid


def timestamp_range(array: pa.Array) -> tuple[int, int] | None:
    """(least, greatest) of a timestamp column in microseconds since the epoch, nulls skipped; None if
    every value is null (one pass of pyarrow's min_max, no Python object per row)."""
    if len(array) == array.null_count:
        return None
    micros = pc.cast(array, pa.timestamp("us", tz=array.type.tz)).cast(pa.int64())
    found = pc.min_max(micros)
    return int(found["min"].as_py()), int(found["max"].as_py())


def widened(span: tuple[int, int] | None, more: tuple[int, int] | None) -> tuple[int, int] | None:
    """The span covering both (None: nothing known yet)."""
    if span is None or more is None:
        return span or more
    return min(span[0], more[0]), max(span[1], more[1])
