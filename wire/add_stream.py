"""The add stream's framing on a bookie's add port (`addStreamPort`): adds over plain TCP, outside gRPC.

gRPC costs a bookie about 0.2 ms of CPU per request and two thread hand-offs (its poller thread, then
the event loop) each way; on the add path, where one request per bookie is in flight at a time, that is
most of a request's round trip (docs/performance.md). The add port carries the same messages as gRPC's
AddStream, AddRequest one way and AddResponse the other, in frames of its own, the way BookKeeper's
clients speak to bookies over Netty.

A connection opens with `MAGIC` (client to bookie). Each frame is a header, the body's length (4 bytes,
big endian) and its kind (1 byte), then the body:

- `REQUEST` (client to bookie): one serialized AddRequest;
- `RESPONSE` (bookie to client): one serialized AddResponse, the acks of one or more batches;
- `REFUSED` (bookie to client): why the bookie refuses the stream (UTF-8), sent once every batch read
  before the refused frame is answered; the bookie then closes the connection and reads nothing more.

Pure: `FrameReader` takes the bytes as they arrive and returns whole frames, or raises FrameError saying
what is wrong with them; the bookie (bookie.add_port) and the client (client.add_port) run it.
"""

from __future__ import annotations

import struct

__all__ = ["MAGIC", "REFUSED", "REGISTRATION_PROPERTY", "REQUEST", "RESPONSE", "FrameError", "FrameReader", "frame",
           "header", "unpack_header"]

REGISTRATION_PROPERTY = "addStreamPort"    # the bookie's registration property that names its add port
MAGIC = b"BKADD\x00\x00\x01"      # "BKADD", then the framing's version (1)
REQUEST, RESPONSE, REFUSED = 1, 2, 3
KINDS = {REQUEST: "request", RESPONSE: "response", REFUSED: "refusal"}
_HEADER = struct.Struct(">IB")
HEADER_SIZE = _HEADER.size


class FrameError(ValueError):
    """The bytes are not this framing, or a frame breaks its limits: the stream ends."""


def frame(kind: int, body: bytes | memoryview) -> bytes:
    """One frame of `kind` holding `body`."""
    return _HEADER.pack(len(body), kind) + bytes(body)


def unpack_header(head: bytes) -> tuple[int, int]:
    """(body size, kind) of a frame's HEADER_SIZE-byte header."""
    size, kind = _HEADER.unpack(head)
    return int(size), int(kind)


def header(kind: int, size: int) -> bytes:
    """The header of a frame of `kind` whose body has `size` bytes (the body written after it)."""
    return _HEADER.pack(size, kind)


class FrameReader:
    """The frames in a byte stream, as its pieces arrive.

    `kinds`: the kinds this side may receive; `max_body`: the largest body taken (a larger one is refused
    from its header, before its bytes are kept); `magic`: the bytes the stream must begin with (None: no
    preamble)."""

    def __init__(self, kinds: frozenset[int], max_body: int, magic: bytes | None = None) -> None:
        self.kinds = kinds
        self.max_body = max_body
        self._magic = magic
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned in a frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[tuple[int, bytes]]:
        """The (kind, body) of each frame that `data` completes, in order; FrameError when the bytes so far
        break the framing (nothing more should be fed then)."""
        self._buf += data
        if self._magic is not None:
            if not self._starts_with_magic():
                raise FrameError(f"the stream does not begin with this add port's preamble {self._magic!r} "
                                 f"(got {bytes(self._buf[:len(self._magic)])!r}): not a bkledger client, or "
                                 "a client of another version; gRPC clients use bookiePort")
            if len(self._buf) < len(self._magic):
                return []
            del self._buf[:len(self._magic)]
            self._magic = None
        frames: list[tuple[int, bytes]] = []
        while len(self._buf) >= HEADER_SIZE:
            size, kind = _HEADER.unpack_from(self._buf)
            self._check(kind, size)
            end = HEADER_SIZE + size
            if len(self._buf) < end:
                break
            with memoryview(self._buf) as view:       # one copy of the body, none of the buffer
                frames.append((kind, bytes(view[HEADER_SIZE:end])))
            del self._buf[:end]
        return frames

    def _starts_with_magic(self) -> bool:
        assert self._magic is not None
        n = min(len(self._buf), len(self._magic))
        return self._buf[:n] == self._magic[:n]

    def _check(self, kind: int, size: int) -> None:
        if kind not in self.kinds:
            expected = ", ".join(f"{k} ({KINDS[k]})" for k in sorted(self.kinds))
            raise FrameError(f"a frame of kind {kind}, where this side takes only {expected}")
        if size > self.max_body:
            raise FrameError(f"a {KINDS[kind]} frame of {size} bytes, over the limit of {self.max_body} "
                             "(nettyMaxFrameSizeBytes on the bookie)")
