"""Test helpers that talk to one real bookie over its gRPC wire contract (no client logic)."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import TypeVar

from bkledger.client.bookie_client import BookieClient
from bkledger.client.protocol.digest import make_digest, master_key, package_batch
from bkledger.proto import bookie_pb2 as pb
from bkledger.wire.add_stream import HEADER_SIZE, unpack_header

T = TypeVar("T")

PASSWORD = b"pw"
DIGEST = make_digest("crc32c", PASSWORD)
KEY = master_key(PASSWORD)


@dataclasses.dataclass
class AddResult:
    statuses: dict[int, int]          # entry id -> status
    latency: float

    def ok(self) -> list[int]:
        return sorted(e for e, s in self.statuses.items() if s == pb.EOK)


class _Collector:
    def __init__(self, want: int):
        self.want = want
        self.statuses: dict[int, int] = {}
        self.done = asyncio.Event()
        self.failed = False

    def on_ack(self, bookie_id: str, ack: pb.AddAck) -> None:
        for e in ack.entry_ids:
            self.statuses[e] = ack.status
        if len(self.statuses) >= self.want:
            self.done.set()

    def on_bookie_failed(self, bookie_id: str) -> None:
        self.failed = True
        self.done.set()


def package(ledger_id: int, entry_ids: Sequence[int], payload: bytes = b"x" * 100) -> tuple[bytes, list[int]]:
    parts, sizes = [], []
    for e in entry_ids:
        data, size = package_batch(DIGEST, ledger_id, e, e - 1, 0, [payload + str(e).encode()])
        parts.append(data)
        sizes += size
    return b"".join(parts), sizes


async def add_async(
    address: str, ledger_id: int, entry_ids: Sequence[int], *, key: bytes = KEY, recovery: bool = False,
    per_batch: int = 100, timeout: float = 30.0, raw: tuple[bytes, list[int]] | None = None, add_port: int = 0,
) -> AddResult:
    """`add_port`: add over the bookie's add port (bookie.add_port) instead of gRPC's AddStream."""
    client = BookieClient(address, address, add_port=add_port)
    collector = _Collector(len(entry_ids))
    client.register(ledger_id, collector)
    start = time.monotonic()
    try:
        for i in range(0, len(entry_ids), per_batch):
            ids = list(entry_ids[i : i + per_batch])
            data, sizes = raw if raw is not None else package(ledger_id, ids)
            client.send_add(ledger_id, key, ids, sizes, data, recovery_add=recovery, high_priority=recovery)
        await asyncio.wait_for(client_done(collector), timeout)
        return AddResult(collector.statuses, time.monotonic() - start)
    finally:
        await client.close()


async def client_done(collector: _Collector) -> None:
    await collector.done.wait()


def add(address: str, ledger_id: int, entry_ids: Sequence[int], **kw: object) -> AddResult:
    return asyncio.run(add_async(address, ledger_id, entry_ids, **kw))  # type: ignore[arg-type]


def read(address: str, ledger_id: int, entry_id: int, *, fence: bool = False, key: bytes = KEY,
         timeout: float = 10.0) -> pb.ReadResponse:
    async def go() -> pb.ReadResponse:
        client = BookieClient(address, address)
        try:
            request = pb.ReadRequest(ledger_id=ledger_id, entry_id=entry_id, fence=fence, master_key=key)
            return await client.read(request, timeout)
        finally:
            await client.close()

    return asyncio.run(go())


def read_range(address: str, ledger_id: int, first: int, last: int, residues: tuple[int, int] = (0, 0)
               ) -> list[int]:
    async def go() -> list[int]:
        client = BookieClient(address, address)
        ids: list[int] = []
        try:
            async for batch in client.read_range(ledger_id, first, last, timeout=30, residues=residues):
                assert batch.status == pb.EOK, pb.StatusCode.Name(batch.status)
                ids += batch.entry_ids
            return ids
        finally:
            await client.close()

    return asyncio.run(go())


def fenced_range(address: str, ledger_id: int, first: int, last: int, key: bytes = KEY) -> tuple[int, list[int]]:
    """A recovery range read (fence flag): (status of the first non-EOK batch or EOK, entry ids streamed)."""
    async def go() -> tuple[int, list[int]]:
        client = BookieClient(address, address)
        ids: list[int] = []
        try:
            async for batch in client.read_range(ledger_id, first, last, timeout=30, fence=True, master_key=key):
                if batch.status != pb.EOK:
                    return batch.status, ids
                ids += batch.entry_ids
            return pb.EOK, ids
        finally:
            await client.close()

    return asyncio.run(go())


def expected_payload(entry_id: int, payload: bytes = b"x" * 100) -> bytes:
    return payload + str(entry_id).encode()


def wait_for(predicate: Callable[[], T], timeout: float, what: str, step: float = 0.2) -> T:
    """Poll `predicate` until it returns something truthy (returned), or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def add_port_refusals(metrics_port: int) -> float:
    """The bookie's bookie_ADD_PORT_REFUSED_total, from its metrics endpoint (0 before the first)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("bookie_ADD_PORT_REFUSED_total "):
                return float(line.split()[1])
    return 0.0


def frames_until_closed(sock: socket.socket) -> list[tuple[int, bytes]]:
    """Every frame the bookie sends until it closes the connection (bounded by the socket's timeout)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    frames = []
    while data:
        size, kind = unpack_header(data[:HEADER_SIZE])
        frames.append((kind, data[HEADER_SIZE:HEADER_SIZE + size]))
        data = data[HEADER_SIZE + size:]
    return frames
