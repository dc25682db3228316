"""Records as a LogWriter writes them: (value, key, timestamp, headers) put in the record envelope of the
writer's ledgers (`client.log.core.envelope`), one at a time or in bulk, the same bytes the Spark writer
writes, so Spark reads `key`, `timestamp` (and `headers`) columns from what Python wrote.

Timestamps as the caller gives them: an int is milliseconds since the epoch (Kafka's unit, as `bkledger
log append --timestamp`), a `datetime` is that moment (naive: UTC); the envelope keeps microseconds. No
timestamp given: the writer's clock when `append` is called (Kafka's CreateTime, the producer's clock at
send), passed in as `now_us`; `NO_TIMESTAMP`: the record has none (its `timestamp` column is null).
The writer notes the (least, greatest) timestamp of each ledger's records and the log records it
when the writer seals the ledger, as it does a Spark job's (reads by time then pick ledgers without
reading entries). A writer of bare values (envelope 0) refuses a key, timestamp or headers, and a
version 1 writer refuses headers (EnvelopeError saying which `envelope=` to open it with): nothing given
is silently dropped.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from bkledger.client.errors import InvalidBulkError
from bkledger.client.log.core import envelope as env
from bkledger.client.protocol.bulk import check_bulk
from bkledger.client.protocol.digest import Buffer


class _Absent(enum.Enum):
    NO_TIMESTAMP = "no timestamp"


NO_TIMESTAMP = _Absent.NO_TIMESTAMP     # timestamp=NO_TIMESTAMP: a record without a timestamp
Timestamp = int | datetime.datetime | Literal[_Absent.NO_TIMESTAMP]
Span = tuple[int, int] | None        # (least, greatest) record timestamp in microseconds, as the log records
_NO_LIMIT = 2**62
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def timestamp_us(timestamp: Timestamp | None, now_us: int) -> int | None:
    """Microseconds since the epoch of a caller's timestamp (None: `now_us`; NO_TIMESTAMP: None)."""
    if timestamp is None:
        return now_us
    if timestamp is NO_TIMESTAMP:
        return None
    if isinstance(timestamp, datetime.datetime):
        moment = timestamp if timestamp.tzinfo is not None else timestamp.replace(tzinfo=datetime.UTC)
        delta = moment - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | np.integer):
        raise TypeError(f"a record timestamp is an int (milliseconds since the epoch) or a datetime, not "
                        f"{type(timestamp).__name__}")
    return int(timestamp) * 1000


def check_fields(log: str, version: int, key: object, timestamp: object, headers: object) -> None:
    """EnvelopeError if the writer's envelope version cannot carry what was given."""
    if version == env.NONE and (key is not None or timestamp is not None or headers is not None):
        raise env.EnvelopeError(f"log {log!r}: this writer writes bare values (opened with envelope=0); open it "
                                "with envelope=1 to append keys and timestamps, envelope=2 for headers too")
    if version == env.V1 and headers is not None:
        raise env.EnvelopeError(f"log {log!r}: this writer's ledgers use envelope version 1, which has no "
                                "headers; open the writer with envelope=2 to append headers")


def enveloped(version: int, value: bytes | bytearray | memoryview, key: bytes | None,
              timestamp: Timestamp | None, headers: env.HeadersIn | None, now_us: int) -> tuple[bytes, Span]:
    """One record as the entry a writer of this envelope version appends (bare values as given), and its
    time span (its timestamp twice; None without one)."""
    if version == env.NONE:
        return bytes(value), None
    if key is not None and not isinstance(key, bytes | bytearray | memoryview):
        raise TypeError(f"a record key is bytes or None, not {type(key).__name__}")
    micros = timestamp_us(timestamp, now_us)
    entry = env.encode(None if key is None else bytes(key), micros, bytes(value), headers, version)
    return entry, None if micros is None else (micros, micros)


def widened(span: Span, more: Span) -> Span:
    """The span covering both (None: no timestamp known)."""
    if span is None or more is None:
        return span or more
    return min(span[0], more[0]), max(span[1], more[1])


def enveloped_many(version: int, data: Buffer | npt.NDArray[np.uint8],
                   offsets: Sequence[int] | npt.NDArray[np.integer], keys: Sequence[bytes | None] | None,
                   timestamps: Sequence[Timestamp | None] | None,
                   headers: Sequence[env.HeadersIn | None] | None,
                   now_us: int) -> tuple[env.U8, env.I64, Span]:
    """n records (record i: data[offsets[i]:offsets[i + 1]]) enveloped at once: (data, offsets from 0, the
    least and greatest timestamp). Bad data or offsets: InvalidBulkError, as `LedgerHandle.add_entries`
    says (nothing is queued)."""
    bulk = check_bulk(data, offsets, _NO_LIMIT, copy=False)       # the enveloped entries' sizes: checked later
    n = bulk.count
    for name, column in (("keys", keys), ("timestamps", timestamps), ("headers", headers)):
        if column is not None and len(column) != n:
            raise InvalidBulkError(f"{name} has {len(column)} items for {n} records")
    base = bulk.offsets
    values = (np.frombuffer(bulk.data, dtype=np.uint8)[int(base[0]):int(base[-1])], base - base[0])
    micros = [timestamp_us(t, now_us) for t in timestamps] if timestamps is not None else [now_us] * n
    times = (np.asarray([m or 0 for m in micros], dtype=np.int64),
             np.fromiter((m is not None for m in micros), dtype=np.bool_, count=n))
    blocks = env.header_blocks(headers) if headers is not None else None
    out, bounds = env.encode_bulk(values, _key_parts(keys) if keys is not None else None, times, blocks, version)
    stamped = [m for m in micros if m is not None]
    return out, bounds, (min(stamped), max(stamped)) if stamped else None


def _key_parts(keys: Sequence[bytes | None]) -> tuple[env.U8, env.I64, env.Bools]:
    for key in keys:
        if key is not None and not isinstance(key, bytes | bytearray | memoryview):
            raise TypeError(f"a record key is bytes or None, not {type(key).__name__}")
    raw = [bytes(k) if k is not None else b"" for k in keys]
    offsets = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, raw), dtype=np.int64, count=len(raw)), out=offsets[1:])
    valid = np.fromiter((k is not None for k in keys), dtype=np.bool_, count=len(keys))
    return np.frombuffer(b"".join(raw), dtype=np.uint8), offsets, valid
