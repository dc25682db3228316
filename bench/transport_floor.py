"""The transport floor of add_latency: the same open loop through the same kind of processes and transport,
with no protocol and no disk.

A run starts three echo servers, each a process of its own serving one bidirectional gRPC stream with
grpc.aio (as a bookie serves its add stream), and in this process an asyncio loop thread that holds one
stream to each (as the client does). A timer thread submits 1 KiB "adds" at the scheduled rate with
add_latency's timer (`bench.core.timer_loop`); each submission is queued under a lock and the loop is woken
once per drain, as the writer is. The loop sends whatever is queued to every server, at most one request
unanswered per server (the client's Nagle rule at low load), and an add is done when two of the three
servers have answered the request holding it (Qa=2). There is no digest, no ledger, no journal, no fsync and
no future object per add: whatever add_latency measures above this is the protocol, the storage and the
disk; this is what this design's processes, threads, GIL and transport cost on this machine at that rate.

With `--journal DIR` each echo server also appends every request to a file in DIR and fdatasyncs it
before it answers (inline on its loop, O_DIRECT where the file system takes it, as the bookie's journal
commits a group when idle): the floor of this design with durability, the processes, transport and one
journaled request in flight per server, and nothing of the protocol or the ledger storage. The bench runs
the plain floor; the journaled one is a tool for the question "is the gap the disk?", and bench.bookie_floor
runs the same client through real bookies (the bookie's part of the gap).

`python -m bench.transport_floor --serve PORT [--journal DIR]` is one echo server.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc

from bench.core import timer_loop
from bench.disk import GroupFile
from bench.tails import percentile
from bkledger.bookie.local.zookeeper import free_port

SERVICE = "benchfloor.Echo"
METHOD = f"/{SERVICE}/Stream"
SERVERS = 3
ACK_QUORUM = 2
MAX_MESSAGE = 64 << 20
READY_TIMEOUT = 30.0


async def _serve(port: int, journal_dir: str | None = None) -> None:
    journal = GroupFile(os.path.join(journal_dir, f"floor-journal-{port}")) if journal_dir else None

    async def stream(requests: AsyncIterator[bytes], _context: Any) -> AsyncIterator[bytes]:
        async for request in requests:
            if journal is not None:
                journal.commit(request)
            yield len(request).to_bytes(8, "little")

    handler = grpc.method_handlers_generic_handler(SERVICE, {"Stream": grpc.stream_stream_rpc_method_handler(stream)})
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE)])
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


class FloorStream:
    """One server's stream: requests leave one at a time, each with everything queued for it meanwhile."""

    method = METHOD
    max_request_bytes = 0       # 0: one message holds everything queued

    def __init__(self, floor: FloorLoop, port: int) -> None:
        self.floor = floor
        self.port = port
        self.queued: collections.deque[tuple[int, Any]] = collections.deque()    # (request id, its data)
        self.unanswered: collections.deque[list[int]] = collections.deque()
        self.wakeup = asyncio.Event()

    async def start(self) -> None:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}",
                                            options=[("grpc.max_send_message_length", MAX_MESSAGE)])
        await asyncio.wait_for(channel.channel_ready(), READY_TIMEOUT)
        self.channel = channel
        self.call = channel.stream_stream(self.method)()
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._write()), loop.create_task(self._read())]

    def send(self, request: int, data: Any) -> None:
        self.queued.append((request, data))
        if not self.unanswered:
            self.wakeup.set()

    async def _write(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            if self.unanswered or not self.queued:
                continue
            taken = self._take()
            self.unanswered.append([request for request, _ in taken])
            await self.call.write(self.encode([chunk for _, chunk in taken]))

    def _take(self) -> list[tuple[int, Any]]:
        """The queued requests the next message holds: all of them, or, with `max_request_bytes`, the oldest
        up to that many bytes (at least one), as the client splits what a bookie would refuse."""
        if not self.max_request_bytes:
            taken = list(self.queued)
            self.queued.clear()
            return taken
        taken = [self.queued.popleft()]
        nbytes = self.nbytes(taken[0][1])
        while self.queued and nbytes + self.nbytes(self.queued[0][1]) <= self.max_request_bytes:
            request = self.queued.popleft()
            nbytes += self.nbytes(request[1])
            taken.append(request)
        return taken

    def nbytes(self, chunk: Any) -> int:
        """The payload bytes of one queued request's data (the echo floor: its length)."""
        return len(chunk)

    def encode(self, queued: list[Any]) -> bytes:
        """One message of what the requests queued meanwhile hold (the echo floor: their bytes, joined)."""
        return b"".join(queued)

    async def _read(self) -> None:
        async for _ in self.call:
            for request in self.unanswered.popleft():
                self.floor.answered(request)
            if self.queued:
                self.wakeup.set()


class FloorLoop:
    """The client side: the loop thread, the submission queue, and the completion time of each add."""

    stream_class = FloorStream

    def __init__(self, ports: list[int], count: int) -> None:
        self.ports = ports
        self.done = [0.0] * count
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._incoming: list[tuple[int, bytes]] = []
        self._scheduled = False
        self._members: dict[int, list[int]] = {}
        self._answers: dict[int, int] = {}
        self._next_request = 0
        self._streams: list[FloorStream] = []
        self._stop: asyncio.Event | None = None

    def submit(self, index: int, payload: bytes) -> None:
        with self._lock:
            self._incoming.append((index, payload))
            wake = not self._scheduled
            self._scheduled = True
        if wake:
            self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            items, self._incoming = self._incoming, []
            self._scheduled = False
        if not items:
            return
        request = self._next_request
        self._next_request += 1
        self._members[request] = [index for index, _ in items]
        self._answers[request] = 0
        data = self.request_data([payload for _, payload in items])
        for stream in self._streams:
            stream.send(request, data)

    def request_data(self, payloads: list[bytes]) -> Any:
        """What one drain sends every server (the echo floor: the adds' bytes, joined)."""
        return b"".join(payloads)

    def answered(self, request: int) -> None:
        self._answers[request] += 1
        if self._answers[request] == ACK_QUORUM:
            now = time.perf_counter()
            for index in self._members.pop(request):
                self.done[index] = now
        if self._answers[request] == len(self._streams):
            del self._answers[request]

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported by measure(), never lost
            self.error = exc
            self.ready.set()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._streams = [self.stream_class(self, port) for port in self.ports]
        await asyncio.gather(*(stream.start() for stream in self._streams))
        self.ready.set()
        await self._stop.wait()
        for stream in self._streams:
            for task in stream.tasks:
                task.cancel()
            await stream.channel.close()

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)


@contextlib.contextmanager
def echo_servers(journal_dir: str | None = None) -> Iterator[list[int]]:
    """Three echo server processes for the runs inside the block: their ports. With `journal_dir`, each
    journals every request there (append + fdatasync) before it answers."""
    ports = [free_port() for _ in range(SERVERS)]
    journal = ["--journal", journal_dir] if journal_dir else []
    servers = [subprocess.Popen([sys.executable, "-m", "bench.transport_floor", "--serve", str(port), *journal])
               for port in ports]
    try:
        yield ports
    finally:
        for server in servers:
            server.kill()
            server.wait(10)


def measure(ports: list[int], rate: float, seconds: float, sample_every: int = 8, tick: float = 0.001,
            ack_timeout: float = 60.0, loop_class: type[FloorLoop] = FloorLoop) -> list[float]:
    """One open-loop run through the echo servers at `ports` (fresh streams): the latencies (s, ascending)
    of every `sample_every`-th add. `loop_class`: another client of the same shape (bench.bookie_floor)."""
    count = max(10, int(rate * seconds))
    floor = loop_class(ports, count)
    thread = threading.Thread(target=floor.run, name="transport-floor-loop", daemon=True)
    try:
        thread.start()
        if not floor.ready.wait(READY_TIMEOUT) or floor.error is not None:
            raise RuntimeError(f"the transport floor's echo servers did not answer: {floor.error!r}")
        start = time.perf_counter() + 0.05
        payload = os.urandom(1024)

        def submit(first: int, end: int) -> None:
            for i in range(first, end):
                floor.submit(i, payload)

        timer_loop(submit, rate, count, start, max(tick, 1.0 / rate))
        deadline = time.monotonic() + ack_timeout
        while floor.done[-1] == 0.0 and floor.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if floor.done[-1] == 0.0:
            raise RuntimeError(f"the transport floor did not answer at {rate:.0f}/s: {floor.error!r}")
        return sorted(floor.done[i] - (start + i / rate) for i in range(0, count, sample_every) if floor.done[i])
    finally:
        floor.stop()
        thread.join(10)


def positive(text: str) -> float:
    value = float(text)
    if not value > 0:       # also NaN
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text!r}")
    return value


def _writable_dir(text: str) -> str:
    if not os.path.isdir(text) or not os.access(text, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"must be a directory this user can write in, not {text!r}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transport_floor", description=__doc__.split("\n")[0])
    parser.add_argument("--serve", type=int, metavar="PORT", help="be one echo server on 127.0.0.1:PORT")
    parser.add_argument("--rate", type=positive, default=5000.0, help="adds/s of a run from the command line")
    parser.add_argument("--seconds", type=positive, default=10.0)
    parser.add_argument("--journal", metavar="DIR", type=_writable_dir,
                        help="journal each request in DIR (append + fdatasync) first")
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(args.serve, args.journal))
        return 0
    with echo_servers(args.journal) as ports:
        lat = measure(ports, args.rate, args.seconds)
    q = [1000 * percentile(lat, f) for f in (0.5, 0.99, 0.999)]
    name = "journaled floor" if args.journal else "transport floor"
    print(f"{name} at {args.rate:.0f}/s: p50 {q[0]:.2f} p99 {q[1]:.2f} p999 {q[2]:.2f} ms ({len(lat)} timed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
