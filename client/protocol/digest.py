"""Entry packaging and digests (R7): the bytes a writer sends and a bookie stores, byte for byte.

Mirrors BookKeeper's DigestManager (CRC32 / CRC32C / MAC / DUMMY subclasses). A packaged entry is

    ledgerId:int64 | entryId:int64 | lastAddConfirmed:int64 | length:int64 | digest | payload

all big-endian; `length` is the cumulative ledger length including this payload. The digest covers the
32-byte header plus the payload (never itself):

- CRC32C: 4 bytes, the unsigned CRC32C as int32 (google_crc32c, native).
- CRC32: 8 bytes, zlib's CRC32 written as an int64 (top 4 bytes zero), as BookKeeper does.
- HMAC: 32 bytes, HMAC-SHA256. R7 asks for HMAC-SHA256 keyed by the password (BookKeeper uses HmacSHA1);
  following BookKeeper's key derivation, the HMAC key is SHA-256(b"mac" + password), so the MAC key is
  never the raw password and is distinct from the master key.
- DUMMY: 0 bytes.

The master key sent with adds and fencing reads is SHA-1(b"ledger" + password), 20 bytes. Explicit LAC
bodies (WriteLac) are `ledgerId:int64 | lac:int64 | digest over those 16 bytes`.

Entry by entry, verification of CRC32C copies the payload slice once (google-crc32c only accepts
`bytes`); bulks are packaged and range batches verified by one call of the batched C module instead
(`wire.native`, where it was built), and so are the single adds a writer drains together
(`package_batch`). Payloads returned to callers are zero-copy memoryview slices of the received buffer.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import hmac
import itertools
import struct
import zlib
from collections.abc import Callable, Sequence

import google_crc32c

from bkledger.client.errors import DigestMismatchError
from bkledger.client.protocol.metadata import DigestType
from bkledger.wire.entry import HEADER, HEADER_SIZE
from bkledger.wire.native import NATIVE

Buffer = bytes | bytearray | memoryview

HEADER_LENGTH = HEADER_SIZE  # 32, BookKeeper's METADATA_LENGTH
LAC_HEADER = struct.Struct(">qq")
_IDS = struct.Struct(">qq")  # ledgerId, entryId at the start of a packaged entry
LAC_HEADER_LENGTH = LAC_HEADER.size  # 16
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

MAC_LENGTHS = {DigestType.CRC32C: 4, DigestType.CRC32: 8, DigestType.HMAC: 32, DigestType.DUMMY: 0}


def master_key(password: bytes) -> bytes:
    """The 20-byte master key a bookie checks on adds and fencing: SHA-1(b"ledger" + password)."""
    return hashlib.sha1(b"ledger" + password).digest()


def mac_key(password: bytes) -> bytes:
    """The HMAC-SHA256 key for digest type HMAC: SHA-256(b"mac" + password)."""
    return hashlib.sha256(b"mac" + password).digest()


def _as_bytes(data: Buffer) -> bytes:
    return data if isinstance(data, bytes) else bytes(data)


_crc32c_value, _crc32c_extend = google_crc32c.value, google_crc32c.extend


def _crc32c(header: bytes, payload: Buffer) -> bytes:
    return _U32.pack(_crc32c_extend(_crc32c_value(header), _as_bytes(payload)))


def _crc32(header: bytes, payload: Buffer) -> bytes:
    return _U64.pack(zlib.crc32(payload, zlib.crc32(header)))


def _no_digest(header: bytes, payload: Buffer) -> bytes:
    return b""


class DigestManager:
    """Computes the digest of one ledger's entries (one instance per ledger; cheap to reuse).

    `compute(header, payload)` is the function of the ledger's digest type, chosen once: a bulk of
    thousands of entries calls it per entry, and the dispatch on the type cost a quarter of that."""

    __slots__ = ("digest_type", "mac_length", "_hmac", "compute")

    def __init__(self, digest_type: DigestType | str, password: bytes = b"") -> None:
        self.digest_type = DigestType.parse(digest_type)
        self.mac_length = MAC_LENGTHS[self.digest_type]
        self._hmac = (hmac.new(mac_key(password), digestmod=hashlib.sha256)
                      if self.digest_type is DigestType.HMAC else None)
        self.compute: Callable[[bytes, Buffer], bytes] = {
            DigestType.CRC32C: _crc32c, DigestType.CRC32: _crc32, DigestType.HMAC: self._mac,
        }.get(self.digest_type, _no_digest)

    def _mac(self, header: bytes, payload: Buffer) -> bytes:
        assert self._hmac is not None
        mac = self._hmac.copy()
        mac.update(header)
        mac.update(payload)
        return mac.digest()

    def matches(self, header: bytes, payload: Buffer, received: Buffer) -> bool:
        expected = self.compute(header, payload)
        if self._hmac is not None:
            return hmac.compare_digest(expected, _as_bytes(received))
        return expected == received


def make_digest(digest_type: DigestType | str, password: bytes = b"") -> DigestManager:
    return DigestManager(digest_type, password)


@dataclasses.dataclass(frozen=True)
class Entry:
    """An unpacked, verified entry: its id, the writer's LAC at send time, cumulative length, payload."""

    entry_id: int
    lac: int
    length: int
    payload: memoryview


def package_entry(digest: DigestManager, ledger_id: int, entry_id: int, lac: int, length: int,
                  payload: Buffer) -> bytes:
    """R7: the packaged entry (header | digest | payload); `length` includes this payload."""
    header = HEADER.pack(ledger_id, entry_id, lac, length)
    return b"".join((header, digest.compute(header, payload), payload))


def package_batch(digest: DigestManager, ledger_id: int, first_entry_id: int, lac: int,
                  start_length: int, payloads: Sequence[Buffer]) -> tuple[bytes, list[int]]:
    """Package consecutive entries back to back: (one blob, size of each packaged entry).

    Entry i gets id first_entry_id + i, the same piggy-backed LAC, and the cumulative length
    start_length + len(payloads[0]) + ... + len(payloads[i]). CRC32C (the default) is packaged by one
    native call where the module was built: per entry, the Python loop's header, digest and three parts
    cost more than the add's share of everything else the client loop does for it.
    """
    overhead = HEADER_LENGTH + digest.mac_length
    if digest.digest_type is DigestType.CRC32C and NATIVE is not None and len(payloads) > 1:
        bounds = array.array("q", itertools.accumulate(map(len, payloads), initial=0))
        blob = NATIVE.package_crc32c(b"".join(payloads), bounds, ledger_id, first_entry_id, lac, start_length)
        return blob, [overhead + len(payload) for payload in payloads]
    parts: list[Buffer] = []
    sizes: list[int] = []
    pack = HEADER.pack
    compute = digest.compute
    length = start_length
    entry_id = first_entry_id
    for payload in payloads:
        size = len(payload)
        length += size
        header = pack(ledger_id, entry_id, lac, length)
        parts.append(header)
        parts.append(compute(header, payload))
        parts.append(payload)
        sizes.append(overhead + size)
        entry_id += 1
    return b"".join(parts), sizes


def _verify(digest: DigestManager, ledger_id: int, expected_entry_id: int | None,
            view: memoryview) -> Entry:
    mac_length = digest.mac_length
    if len(view) < HEADER_LENGTH + mac_length:
        raise DigestMismatchError(
            f"entry body of {len(view)} bytes is shorter than its header and digest "
            f"({HEADER_LENGTH + mac_length} bytes): the copy is truncated; read another replica")
    header = bytes(view[:HEADER_LENGTH])
    got_ledger, got_entry, lac, length = HEADER.unpack(header)
    if got_ledger != ledger_id:
        raise DigestMismatchError(
            f"entry belongs to ledger {got_ledger}, expected ledger {ledger_id}: a bookie returned "
            "the wrong entry; read another replica")
    if expected_entry_id is not None and got_entry != expected_entry_id:
        raise DigestMismatchError(
            f"entry id {got_entry} in ledger {ledger_id} where {expected_entry_id} was expected: a bookie "
            "returned the wrong entry; read another replica")
    payload = view[HEADER_LENGTH + mac_length:]
    if not digest.matches(header, payload, view[HEADER_LENGTH:HEADER_LENGTH + mac_length]):
        raise DigestMismatchError(
            f"digest mismatch for ledger {ledger_id} entry {got_entry} ({digest.digest_type.name}): "
            "the copy is corrupt or the ledger was opened with a different digest type or password; "
            "read another replica or open with the right password")
    return Entry(got_entry, lac, length, payload)


def unpack_entry(digest: DigestManager, ledger_id: int, expected_entry_id: int | None,
                 body: Buffer) -> Entry:
    """Verify a packaged entry and return it; the payload is a zero-copy view of `body`.

    Raises DigestMismatchError on a wrong ledger id, a wrong entry id (unless expected_entry_id is None),
    a truncated body or a bad digest.
    """
    return _verify(digest, ledger_id, expected_entry_id, memoryview(body))


def parse_entry(digest: DigestManager, body: Buffer) -> Entry:
    """The fields of a packaged entry read without any check (ids, digest): what a reader without R7 uses
    (`reads.received_entry` with its rule off, a known bug). Only a body too short for a header fails."""
    view = memoryview(body)
    if len(view) < HEADER_LENGTH + digest.mac_length:
        raise DigestMismatchError(f"entry body of {len(view)} bytes is shorter than its header and digest")
    _, entry_id, lac, length = HEADER.unpack_from(view)
    return Entry(entry_id, lac, length, view[HEADER_LENGTH + digest.mac_length:])


def unpack_batch(digest: DigestManager, ledger_id: int, entry_ids: Sequence[int], sizes: Sequence[int],
                 data: Buffer) -> list[memoryview]:
    """Verify entries packed back to back in `data` and return their payloads as memoryviews (no copies)."""
    if len(entry_ids) != len(sizes):
        raise DigestMismatchError(
            f"batch names {len(entry_ids)} entries but {len(sizes)} sizes: malformed response; retry")
    view = memoryview(data)
    if sum(sizes) != len(view):
        raise DigestMismatchError(
            f"batch sizes add up to {sum(sizes)} bytes but {len(view)} arrived: malformed response; retry")
    overhead = HEADER_LENGTH + digest.mac_length
    unpack_ids = _IDS.unpack_from
    matches = digest.matches
    payloads: list[memoryview] = []
    offset = 0
    for entry_id, size in zip(entry_ids, sizes, strict=True):
        end = offset + size
        start = offset + overhead
        if (size < overhead or unpack_ids(view, offset) != (ledger_id, entry_id)
                or not matches(bytes(view[offset:offset + HEADER_LENGTH]), view[start:end],
                               view[offset + HEADER_LENGTH:start])):
            _verify(digest, ledger_id, entry_id, view[offset:end])  # raises with the precise reason
        payloads.append(view[start:end])
        offset = end
    return payloads


def package_lac(digest: DigestManager, ledger_id: int, lac: int) -> bytes:
    """The explicit-LAC body (WriteLac): ledgerId | lac | digest over those 16 bytes."""
    header = LAC_HEADER.pack(ledger_id, lac)
    return header + digest.compute(header, b"")


def unpack_lac(digest: DigestManager, ledger_id: int, body: Buffer) -> int:
    """Verify an explicit-LAC body and return the LAC."""
    view = memoryview(body)
    if len(view) != LAC_HEADER_LENGTH + digest.mac_length:
        raise DigestMismatchError(
            f"explicit LAC body of {len(view)} bytes, expected {LAC_HEADER_LENGTH + digest.mac_length}: "
            "malformed or different digest type; check the ledger's digest type")
    header = bytes(view[:LAC_HEADER_LENGTH])
    got_ledger, lac = LAC_HEADER.unpack(header)
    if got_ledger != ledger_id:
        raise DigestMismatchError(f"explicit LAC for ledger {got_ledger}, expected {ledger_id}; retry")
    if not digest.matches(header, b"", view[LAC_HEADER_LENGTH:]):
        raise DigestMismatchError(
            f"digest mismatch on the explicit LAC of ledger {ledger_id}: corrupt, or wrong password")
    return int(lac)
