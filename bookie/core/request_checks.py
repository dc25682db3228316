"""Which requests a bookie refuses before doing anything with them (R26), and the limits it sets itself (pure).

Every request is hostile until checked: a message that does not parse, a varint wider than the 64 bits of
its field (protobuf keeps the low 64 bits, so ledger id 2**64 would silently read as ledger 0), a negative
ledger id, an entry id below -1, an absurd explicit-LAC body or residue modulus gets EBADREQ (an add
stream INVALID_ARGUMENT) and a log line from the driver (`bookie.request_guard`). What a client may choose
but the bookie bounds, it clamps: a range read's batch bytes (`maxReadBatchBytes`); the largest message
gRPC takes follows `nettyMaxFrameSizeBytes` (`max_message_bytes`).

Mirrors the checks of BookKeeper's request processors (`ReadEntryProcessorV3` and friends answer EBADREQ
to a request they cannot use). Nothing here touches a socket, a file or a clock.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from bkledger.bookie.core.decisions import MASTER_KEY_SIZE
from bkledger.proto import bookie_pb2 as pb

MAX_EXPLICIT_LAC_BODY = 1024     # ledgerId | lac | digest: 16 bytes and a digest of at most 32
MAX_RESIDUE_MODULUS = 64         # residue_mask is 64 bits: one bit per residue
MAX_RANGES = 16384               # ranges of one ReadRanges call (a client asks up to 1024: client.ranges_reader)
CLIENT_REQUEST_BYTES = 4 << 20   # the payload bytes a client puts in one AddRequest (client.bookie_client)
MESSAGE_OVERHEAD_FIXED = 64 << 10
WIDE_VARINT_SHAPE = re.compile(rb"[\x80-\xff]{9}[\x02-\x7f]")   # nine continued bytes, then a last one >= 2


def max_message_bytes(frame_bytes: int) -> int:
    """The largest gRPC message a bookie receives, for `nettyMaxFrameSizeBytes` = frame_bytes: a frame of
    entry data, plus the batch overhead (each entry's id and size, at most 15 bytes against at least a
    32-byte header: under half the data; the batches' ledger ids, keys and flags: the fixed part). Never
    below what a client packs into one AddRequest (CLIENT_REQUEST_BYTES of small adds): a lowered frame
    refuses large entries (EBADREQ), not merged small ones."""
    data = max(frame_bytes, CLIENT_REQUEST_BYTES)
    return data + data // 2 + MESSAGE_OVERHEAD_FIXED


def read_batch_bytes(asked: int, cap: int, default: int) -> int:
    """The bytes a range read's batch may hold: what the client asked (0: the default), at most `cap`."""
    return min(asked or default, cap)


@dataclasses.dataclass(frozen=True)
class Malformed:
    """A request message that could not be used at all, and why (answered EBADREQ / INVALID_ARGUMENT)."""

    why: str


def parse(message_class: type[Message], raw: bytes) -> Message | Malformed:
    """The message, or Malformed when protobuf refuses it or one of its integers is wider than 64 bits."""
    try:
        message = message_class.FromString(raw)
    except DecodeError as exc:
        return Malformed(f"the {message_class.__name__} does not parse: {exc}")
    wide = wide_varint(memoryview(raw), message_class.DESCRIPTOR)
    return Malformed(f"the {message_class.__name__} has {wide}") if wide else message


def wide_varint(buf: memoryview, descriptor: Any, prescan: bool = True) -> str:
    """'' unless a varint field of this message (parsed already, so well formed) or of a message nested in
    it is wider than 64 bits, which protobuf would cut silently. Bytes fields and packed arrays are passed
    over; so is what follows a group (a wire type this protocol never uses). A wide varint is ten bytes whose
    last is 2 or more (protobuf refuses longer ones): with `prescan`, where no bytes have that shape, none is
    searched for (a quick regex over a small request; not over an AddRequest's megabytes of payload, which
    the walk passes over in one step anyway)."""
    if prescan and WIDE_VARINT_SHAPE.search(buf) is None:     # the common case, at C speed: none can be wide
        return ""
    try:
        return _wide_varint(buf, descriptor)
    except IndexError:      # cannot happen after protobuf's parse; then protobuf's reading stands
        return ""


def _wide_varint(buf: memoryview, descriptor: Any) -> str:
    pos = 0
    while pos < len(buf):
        key, pos, _ = _varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, pos, wide = _varint(buf, pos)
            if wide:
                field = descriptor.fields_by_number.get(number)
                return f"a value wider than 64 bits in {field.name if field else f'field {number}'}"
        elif wire_type == 2:
            length, pos, _ = _varint(buf, pos)
            field = descriptor.fields_by_number.get(number)
            if field is not None and field.type == FieldDescriptor.TYPE_MESSAGE:
                inner = _wide_varint(buf[pos:pos + length], field.message_type)
                if inner:
                    return inner
            pos += length
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
        else:
            return ""
    return ""


def _varint(buf: memoryview, pos: int) -> tuple[int, int, bool]:
    """(value, position after it, wider than 64 bits) of a varint protobuf has already accepted."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos, value >> 64 != 0
        shift += 7


def check(request: Message) -> str:
    """'' if the request's values are usable, else why not (answered EBADREQ)."""
    checker: Any = _CHECKS.get(type(request).__name__)
    return str(checker(request)) if checker is not None else ""


def _ledger(ledger_id: int) -> str:
    return f"negative ledger id {ledger_id}" if ledger_id < 0 else ""


def _key(master_key: bytes) -> str:
    """A master key is absent (a plain read) or MASTER_KEY_SIZE bytes (R26: anything else is EBADREQ)."""
    if len(master_key) in (0, MASTER_KEY_SIZE):
        return ""
    return f"a master key of {len(master_key)} bytes (it has {MASTER_KEY_SIZE})"


def _read(r: pb.ReadRequest) -> str:
    if _key(r.master_key):
        return _key(r.master_key)
    if r.entry_id < -1:
        return f"entry id {r.entry_id} (only -1, the last entry, may be negative)"
    if r.has_previous_lac and r.previous_lac < -1:
        return f"previous LAC {r.previous_lac} below -1"
    return _ledger(r.ledger_id)


def _read_range(r: pb.ReadRangeRequest) -> str:
    if _key(r.master_key):
        return _key(r.master_key)
    if r.first_entry_id < 0:
        return f"negative first entry id {r.first_entry_id}"
    if r.residue_modulus > MAX_RESIDUE_MODULUS:
        return f"residue modulus {r.residue_modulus} over {MAX_RESIDUE_MODULUS}"
    return _ledger(r.ledger_id)


def _read_ranges(r: pb.ReadRangesRequest) -> str:
    if len(r.ranges) > MAX_RANGES:
        return f"{len(r.ranges)} ranges in one call (at most {MAX_RANGES})"
    for i, one in enumerate(r.ranges):
        why = _read_range(one)
        if why:
            return f"range {i}: {why}"
    return ""


def _write_lac(r: pb.WriteLacRequest) -> str:
    if _key(r.master_key):
        return _key(r.master_key)
    if r.lac < -1:
        return f"LAC {r.lac} below -1"
    if len(r.body) > MAX_EXPLICIT_LAC_BODY:
        return f"explicit LAC body of {len(r.body)} bytes (at most {MAX_EXPLICIT_LAC_BODY})"
    return _ledger(r.ledger_id)


_CHECKS: dict[str, Any] = {
    "ReadRequest": _read,
    "ReadRangeRequest": _read_range,
    "ReadRangesRequest": _read_ranges,
    "ReadLacRequest": lambda r: _ledger(r.ledger_id),
    "WriteLacRequest": _write_lac,
    "ForceLedgerRequest": lambda r: _ledger(r.ledger_id),
    "GetListOfEntriesRequest": lambda r: _ledger(r.ledger_id),
}
