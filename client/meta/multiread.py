"""ZooKeeper's multiRead request (opcode 22, ZooKeeper 3.6+): many znodes' data in one request.

Reading the metadata of thousands of small ledgers one getData request each cost ZooKeeper about 100 us of
CPU per request and this process about as much in kazoo (a request object, a pending slot, a reply
parsed and handed to a waiting thread). One multiRead carries up to `MAX_PATHS` getData operations and
comes back as one reply; ZooKeeper answers each operation on its own (a missing znode is an error result
for that operation only, the others are read).

kazoo has no call for it, so this is the request as kazoo's connection sends any request: an object with
`type`, `serialize()` and `deserialize(buffer, offset)`, queued through the client's `_call` like its own
(`client.meta.zksession.ZkSession.get_many` does that and falls back to one getData per znode when the
server does not know the request). The wire form is ZooKeeper's MultiOperationRecord and MultiResponse:
per operation a MultiHeader (type, done, err) and the getData request or response, closed by a header
with done set.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from kazoo.protocol.states import ZnodeStat

MULTI_READ = 22          # ZooDefs.OpCode.multiRead
GET_DATA = 4             # ZooDefs.OpCode.getData
ERROR = -1               # ZooDefs.OpCode.error: an operation's error result
MAX_PATHS = 128          # getData operations per request (a reply of up to 128 ledgers' metadata)

_HEADER = struct.Struct("!iBi")          # MultiHeader: type, done, err
_INT = struct.Struct("!i")
_STAT = struct.Struct("!qqqqiiiqiiq")    # Stat: czxid mzxid ctime mtime version cversion aversion
                                         # ephemeralOwner dataLength numChildren pzxid


class ReadError(NamedTuple):
    """One operation's error result: ZooKeeper's error code (-101: no node)."""

    code: int


Result = tuple[bytes, ZnodeStat] | ReadError


class MultiRead:
    """The request: getData (no watch) of each path, answered in order."""

    type = MULTI_READ

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)

    def serialize(self) -> bytes:
        out = bytearray()
        for path in self.paths:
            raw = path.encode("utf-8")
            out += _HEADER.pack(GET_DATA, False, -1) + _INT.pack(len(raw)) + raw + b"\x00"
        return bytes(out + _HEADER.pack(-1, True, -1))

    @classmethod
    def deserialize(cls, buffer: bytes | bytearray | memoryview, offset: int) -> list[Result]:
        results: list[Result] = []
        kind, done, _ = _HEADER.unpack_from(buffer, offset)
        offset += _HEADER.size
        while not done:
            if kind == GET_DATA:
                length = _INT.unpack_from(buffer, offset)[0]
                offset += _INT.size
                data = bytes(buffer[offset:offset + length]) if length > 0 else b""
                offset += max(length, 0)
                results.append((data, ZnodeStat._make(_STAT.unpack_from(buffer, offset))))
                offset += _STAT.size
            elif kind == ERROR:
                results.append(ReadError(_INT.unpack_from(buffer, offset)[0]))
                offset += _INT.size
            else:
                raise ValueError(f"multiRead reply holds an operation of type {kind}, not getData")
            kind, done, _ = _HEADER.unpack_from(buffer, offset)
            offset += _HEADER.size
        return results
