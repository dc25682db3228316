"""Hostile requests against real bookies (issue 41, items 5-7): raw gRPC with the stubs' wire format and raw
HTTP, each class answered with a typed refusal and a log line; after each, every bookie still answers, the
data written before reads back byte for byte, a fenced ledger still refuses plain adds (R15) and the checkpoint
still runs (R26: malformed or oversized requests get EBADREQ, nothing crashes).

One cluster for the module (three bookies, small read-batch and HTTP limits); the hostile requests go to
bookie 0, and the data checked after each is a client ledger on all three plus a raw ledger on bookie 0.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig
from bkledger.proto import bookie_pb2 as pb
from tests.integration.bookie_util import KEY, add, package, read, wait_for
from tests.integration.conftest import FAST_CLIENT, start_cluster

pytestmark = pytest.mark.integration

SERVICE = "/bkledger.v1.Bookie/"
READ_BATCH_CAP = 64 * 1024
HTTP_MAX_CONNECTIONS = 4
HTTP_TIMEOUT_MS = 2000
ADMIN_TOKEN = "hostile-test-token"
RAW_LEDGER = 900_001             # written by raw adds to bookie 0 (no metadata: the bookies' GC is off)
RAW_PAYLOAD = b"r" * 2000        # 100 entries of ~2 KiB: several read batches under READ_BATCH_CAP
RAW_FENCED = 900_999             # entry 0 by a raw add to bookie 0, then fenced: every later plain add EFENCED
CHECKPOINT_MS = 300              # flushInterval: the checkpoint runs often enough to be seen running


class World:
    """The module's cluster, what was written before the hostile requests, and raw access to bookie 0."""

    def __init__(self, cluster: LocalCluster, bk: BookKeeper, ledger_id: int, written: list[bytes]):
        self.cluster = cluster
        self.bk = bk
        self.ledger_id = ledger_id
        self.written = written
        self.address = cluster.bookies[0].address
        self.channel = grpc.insecure_channel(self.address)
        self.raw_entries = {e: package(RAW_LEDGER, [e], payload=RAW_PAYLOAD)[0] for e in range(100)}
        self.fenced_adds = 0

    def unary(self, method: str, raw: bytes, response: type[Any], timeout: float = 10.0) -> Any:
        call = self.channel.unary_unary(SERVICE + method, request_serializer=_raw,
                                        response_deserializer=response.FromString)
        return call(raw, timeout=timeout)

    def streamed(self, method: str, raw: bytes, timeout: float = 10.0) -> list[pb.ReadRangeBatch]:
        call = self.channel.unary_stream(SERVICE + method, request_serializer=_raw,
                                         response_deserializer=pb.ReadRangeBatch.FromString)
        return list(call(raw, timeout=timeout))

    def add_stream(self, messages: list[bytes], timeout: float = 10.0
                   ) -> tuple[list[pb.AddResponse], grpc.RpcError | None]:
        call = self.channel.stream_stream(SERVICE + "AddStream", request_serializer=_raw,
                                          response_deserializer=pb.AddResponse.FromString)
        got: list[pb.AddResponse] = []
        try:
            for response in call(iter(messages), timeout=timeout):
                got.append(response)
        except grpc.RpcError as exc:
            return got, exc
        return got, None

    def log(self) -> str:
        return Path(self.cluster.bookies[0].log).read_text(errors="replace")

    def wait_logged(self, text: str) -> None:
        wait_for(lambda: text in self.log(), 10, f"{text!r} in bookie 0's log")

    def checkpoint_time(self) -> float:
        conn = http.client.HTTPConnection("127.0.0.1", self.cluster.bookies[0].http_port, timeout=10)
        try:
            conn.request("GET", "/api/v1/bookie/state")
            return float(json.loads(conn.getresponse().read())["lastCheckpointTime"])
        finally:
            conn.close()

    def assert_healthy(self) -> None:
        """Every bookie answers, the data written before reads back byte for byte, the fence of RAW_FENCED
        holds (a plain add gets EFENCED: R15) and bookie 0's checkpoint runs again after the request."""
        before = self.checkpoint_time()
        for bookie in self.cluster.bookies:
            with grpc.insecure_channel(bookie.address) as channel:
                info = channel.unary_unary(SERVICE + "GetBookieInfo", request_serializer=_raw,
                                           response_deserializer=pb.GetBookieInfoResponse.FromString)(b"", timeout=10)
            assert info.status == pb.EOK and info.bookie_id == bookie.bookie_id
        handle = self.bk.open_ledger(self.ledger_id, password=b"pw", recovery=False)
        assert [e.payload for e in handle.read_entries(0, len(self.written) - 1)] == self.written
        for entry_id in (0, 57, 99):
            request = pb.ReadRequest(ledger_id=RAW_LEDGER, entry_id=entry_id).SerializeToString()
            response = self.unary("Read", request, pb.ReadResponse)
            assert response.status == pb.EOK and response.body == self.raw_entries[entry_id]
        self.fenced_adds += 1
        refused = add(self.address, RAW_FENCED, [self.fenced_adds]).statuses
        assert refused == {self.fenced_adds: pb.EFENCED}, refused
        wait_for(lambda: self.checkpoint_time() > before, 10, "a checkpoint of bookie 0 after the request")


def _raw(message: bytes) -> bytes:
    return message


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, zookeeper: Any) -> Iterator[World]:
    conf = {"maxReadBatchBytes": str(READ_BATCH_CAP), "httpServerMaxConnections": str(HTTP_MAX_CONNECTIONS),
            "httpServerSocketTimeoutMs": str(HTTP_TIMEOUT_MS), "httpServerAdminToken": ADMIN_TOKEN,
            "longPollMaxTimeoutMs": "2000", "flushInterval": str(CHECKPOINT_MS)}
    cluster = start_cluster(tmp_path_factory.mktemp("hostile"), zookeeper, 3, conf)
    bk = BookKeeper(cluster.metadata_service_uri, config=ClientConfig.from_options(FAST_CLIENT))
    try:
        handle = bk.create_ledger(ensemble_size=3, write_quorum=3, ack_quorum=2, password=b"pw")
        written = [f"record {i} {uuid.uuid4().hex}".encode() * (i % 7 + 1) for i in range(40)]
        for payload in written:
            handle.add_entry(payload)
        handle.close()
        world = World(cluster, bk, handle.ledger_id, written)
        _add_raw_entries(world)
        world.assert_healthy()
        yield world
        world.channel.close()
    finally:
        bk.close()
        cluster.down()


def _add_raw_entries(world: World) -> None:
    """RAW_LEDGER's entries 0-99 on bookie 0, each the packaged RAW_PAYLOAD (what assert_healthy reads), and
    RAW_FENCED's entry 0, then a fence of RAW_FENCED (what assert_healthy checks holds)."""
    assert add(world.address, RAW_FENCED, [0]).ok() == [0]
    assert read(world.address, RAW_FENCED, 0, fence=True).status == pb.EOK
    for first in range(0, 100, 25):
        ids = list(range(first, first + 25))
        data, sizes = package(RAW_LEDGER, ids, payload=RAW_PAYLOAD)
        assert add(world.address, RAW_LEDGER, ids, raw=(data, sizes)).ok() == ids


def add_request(ledger_id: int, entry_ids: list[int], payload: bytes = b"x" * 100) -> bytes:
    data, sizes = package(ledger_id, entry_ids, payload)
    batch = pb.AddBatch(ledger_id=ledger_id, master_key=KEY, entry_ids=entry_ids, sizes=sizes, data=data)
    return pb.AddRequest(batches=[batch]).SerializeToString()


def test_oversized_messages_are_refused_with_resource_exhausted_and_logged(world: World):
    """Item 5: gRPC's message cap follows nettyMaxFrameSizeBytes (5 MiB: about 7.6 MiB with the batch
    overhead), not 256 MiB: a 9 MiB Read or AddStream message is refused with RESOURCE_EXHAUSTED, and
    the bookie logs both with the client's address."""
    huge = pb.ReadRequest(ledger_id=1, entry_id=0, master_key=b"k" * (9 << 20)).SerializeToString()
    with pytest.raises(grpc.RpcError) as refused:
        world.unary("Read", huge, pb.ReadResponse)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    world.wait_logged("Read from ipv4:127.0.0.1")
    world.wait_logged("no request arrived (over the")
    acks, error = world.add_stream([add_request(RAW_LEDGER + 1, [0], payload=b"y" * (9 << 20))])
    assert error is not None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and not acks
    world.wait_logged("byte limit (refused by gRPC with RESOURCE_EXHAUSTED)")
    read = world.unary("Read", pb.ReadRequest(ledger_id=RAW_LEDGER + 1, entry_id=0).SerializeToString(),
                       pb.ReadResponse)
    assert read.status == pb.ENOLEDGER              # nothing of it was stored
    world.assert_healthy()


def test_unparsable_add_stream_message_ends_the_stream_with_invalid_argument(world: World):
    """Item 6: a batch before the bad message is acknowledged, the stream then ends INVALID_ARGUMENT (not
    OK), the batch after it is never read (not stored), and the bookie logs it with the client's address."""
    ledger_id = RAW_LEDGER + 2
    acks, error = world.add_stream([add_request(ledger_id, [0]), b"\x12\xff\xff", add_request(ledger_id, [1])])
    assert error is not None and error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert "does not parse" in (error.details() or "")
    assert [(a.status, list(a.entry_ids)) for r in acks for a in r.acks] == [(pb.EOK, [0])]
    read = world.unary("Read", pb.ReadRequest(ledger_id=ledger_id, entry_id=1).SerializeToString(),
                       pb.ReadResponse)
    assert read.status == pb.ENOENTRY
    world.wait_logged("add stream from ipv4:127.0.0.1")
    world.wait_logged("ended with INVALID_ARGUMENT")
    wide = b"\x12" + _varint(len(b"\x08" + _varint(1 << 64))) + b"\x08" + _varint(1 << 64)   # ledger id 2**64
    acks, error = world.add_stream([wide])
    assert error is not None and error.code() == grpc.StatusCode.INVALID_ARGUMENT and "wider than 64" in (
        error.details() or "")
    world.assert_healthy()


def ebadreq_cases() -> dict[str, tuple[str, bytes, type[Any]]]:
    """A hostile request for each one-message handler: (method, raw request, response class)."""
    wide_ledger = b"\x08" + _varint(1 << 64)            # ledger id 2**64: protobuf alone would read ledger 0
    return {
        "unparsable Read": ("Read", b"\xff\xff\xff", pb.ReadResponse),
        "Read ledger id 2**64": ("Read", wide_ledger, pb.ReadResponse),
        "Read negative ledger": ("Read", pb.ReadRequest(ledger_id=-1).SerializeToString(), pb.ReadResponse),
        "Read entry -5": ("Read", pb.ReadRequest(ledger_id=RAW_LEDGER, entry_id=-5).SerializeToString(),
                          pb.ReadResponse),
        "long poll previous LAC -9": ("Read", pb.ReadRequest(ledger_id=1, entry_id=-1, has_previous_lac=True,
                                                             previous_lac=-9).SerializeToString(), pb.ReadResponse),
        "fencing Read with a 5000-byte key": ("Read", pb.ReadRequest(ledger_id=RAW_LEDGER, entry_id=-1, fence=True,
                                                                     master_key=b"k" * 5000).SerializeToString(),
                                              pb.ReadResponse),
        "ReadLac negative ledger": ("ReadLac", pb.ReadLacRequest(ledger_id=-7).SerializeToString(),
                                    pb.ReadLacResponse),
        "ReadLac unparsable": ("ReadLac", b"\x0a\x05ab", pb.ReadLacResponse),
        "WriteLac negative ledger": ("WriteLac", pb.WriteLacRequest(ledger_id=-1, master_key=KEY)
                                     .SerializeToString(), pb.WriteLacResponse),
        "WriteLac absurd body": ("WriteLac", pb.WriteLacRequest(ledger_id=RAW_LEDGER, lac=1, master_key=KEY,
                                                                body=b"b" * (1 << 20)).SerializeToString(),
                                 pb.WriteLacResponse),
        "ForceLedger negative ledger": ("ForceLedger", pb.ForceLedgerRequest(ledger_id=-3).SerializeToString(),
                                        pb.ForceLedgerResponse),
        "GetBookieInfo unparsable": ("GetBookieInfo", b"\x08", pb.GetBookieInfoResponse),
        "GetListOfEntries negative ledger": ("GetListOfEntries", pb.GetListOfEntriesRequest(ledger_id=-2)
                                             .SerializeToString(), pb.GetListOfEntriesResponse),
        "GetListOfEntries ledger id 2**64": ("GetListOfEntries", wide_ledger, pb.GetListOfEntriesResponse),
    }


@pytest.mark.parametrize("case", sorted(ebadreq_cases()))
def test_hostile_one_message_requests_get_ebadreq_and_a_log_line(world: World, case: str):
    """Item 6, R26: an unparsable or out-of-range request gets its method's response with EBADREQ (not
    UNKNOWN and a traceback), logged with the client's address; nothing else changes."""
    method, raw, response_class = ebadreq_cases()[case]
    response = world.unary(method, raw, response_class)
    assert response.status == pb.EBADREQ, pb.StatusCode.Name(response.status)
    world.wait_logged(f"{method} from ipv4:127.0.0.1")
    assert "Traceback" not in world.log()
    world.assert_healthy()


@pytest.mark.parametrize("request_bytes", [
    pb.ReadRangeRequest(ledger_id=-1, first_entry_id=0, last_entry_id=9).SerializeToString(),
    pb.ReadRangeRequest(ledger_id=RAW_LEDGER, first_entry_id=-4, last_entry_id=9).SerializeToString(),
    pb.ReadRangeRequest(ledger_id=RAW_LEDGER, first_entry_id=0, last_entry_id=9,
                        residue_modulus=1000, residue_mask=1).SerializeToString(),
    b"\x08" + _varint(1 << 64),
    b"\xff",
], ids=["negative ledger", "negative first entry", "residue modulus 1000", "ledger id 2**64", "unparsable"])
def test_hostile_range_reads_get_one_ebadreq_batch(world: World, request_bytes: bytes):
    """Item 6, R26: ReadRange and ReadRanges answer a hostile request with a single EBADREQ batch."""
    for method, raw in (("ReadRange", request_bytes), ("ReadRanges", b"\x0a" + _varint(len(request_bytes))
                                                       + request_bytes)):
        batches = world.streamed(method, raw)
        assert [b.status for b in batches] == [pb.EBADREQ], method
        world.wait_logged(f"{method} from ipv4:127.0.0.1")
    world.assert_healthy()


def test_read_batches_are_capped_by_the_bookie_whatever_the_client_asks(world: World):
    """Item 5: a client asking for 4 GiB batches gets batches of at most maxReadBatchBytes (one entry more
    at most), ReadRange and ReadRanges alike; a ReadRange still streams every entry, a ReadRanges answers
    a range's first batch (the reader asks again from there)."""
    asked = (1 << 32) - 1
    one = pb.ReadRangeRequest(ledger_id=RAW_LEDGER, first_entry_id=0, last_entry_id=99, max_batch_bytes=asked)
    batches = world.streamed("ReadRange", one.SerializeToString())
    assert len(batches) > 1 and all(b.status == pb.EOK for b in batches)
    assert max(len(b.data) for b in batches) <= READ_BATCH_CAP + len(world.raw_entries[0])
    assert [e for b in batches for e in b.entry_ids] == list(range(100))
    many = pb.ReadRangesRequest(ranges=[one], max_batch_bytes=asked)
    batches = world.streamed("ReadRanges", many.SerializeToString())      # a range's first batch only
    assert len(batches) == 1 and batches[0].status == pb.EOK
    assert len(batches[0].data) <= READ_BATCH_CAP + len(world.raw_entries[0])
    sent = list(batches[0].entry_ids)
    assert sent == list(range(len(sent))) and 0 < len(sent) < 100
    world.assert_healthy()


def test_long_polls_on_unknown_ledgers_time_out_and_the_bookie_goes_on(world: World):
    """Item 5: many long polls on ledgers the bookie never saw each end at their timeout (capped by
    longPollMaxTimeoutMs) with ENOLEDGER; none outlives it (the waiter map is checked in
    tests/unit/test_long_poll_waiters.py)."""
    call = world.channel.unary_unary(SERVICE + "Read", request_serializer=_raw,
                                     response_deserializer=pb.ReadResponse.FromString)
    started = time.monotonic()
    futures = [call.future(pb.ReadRequest(ledger_id=5_000_000 + i, entry_id=-1, has_previous_lac=True,
                                          previous_lac=-1, timeout_ms=(1 << 32) - 1).SerializeToString(),
                           timeout=30) for i in range(200)]
    statuses = {f.result().status for f in futures}
    assert statuses == {pb.ENOLEDGER}
    assert time.monotonic() - started < 15                 # 2 s each, all at once: not 4 GiB ms
    world.assert_healthy()


# ---- the admin HTTP server -------------------------------------------------------------------------------


def _http_port(world: World) -> int:
    return world.cluster.bookies[0].http_port


def _raw_http(world: World, request: bytes) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", _http_port(world)), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize("request_bytes", [
    b"PUT /api/v1/bookie/state/readonly HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
    b"PUT /api/v1/bookie/state/readonly HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
    b"GET api/v1/bookie/info HTTP/1.1\r\nConnection: close\r\n\r\n",
    b"PUT /api/v1/bookie/state/readonly HTTP/1.1\r\nAuthorization: Bearer " + ADMIN_TOKEN.encode()
    + b"\r\nContent-Length: 9\r\nConnection: close\r\n\r\n{\"readOnl",
], ids=["Content-Length abc", "Content-Length -5", "target not a path", "body not JSON"])
def test_malformed_http_requests_get_400_not_a_traceback(world: World, request_bytes: bytes):
    """Item 5: a malformed admin request is answered 400 with a JSON error and logged; no traceback."""
    status, body = _raw_http(world, request_bytes)
    assert status == 400, body
    assert "error" in json.loads(body)
    world.wait_logged("refused with 400")
    assert "Traceback" not in world.log()
    assert _heartbeat(world) == 200
    world.assert_healthy()


def _heartbeat(world: World) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", _http_port(world), timeout=10)
    try:
        conn.request("GET", "/heartbeat")
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_http_connections_are_capped_and_idle_ones_time_out(world: World):
    """Item 5: with httpServerMaxConnections idle connections open, one more is answered 503 and closed
    at once (no thread for it); the idle ones are closed by the server after httpServerSocketTimeoutMs,
    after which requests are served again."""
    idle = [socket.create_connection(("127.0.0.1", _http_port(world)), timeout=10)
            for _ in range(HTTP_MAX_CONNECTIONS)]
    try:
        started = time.monotonic()
        wait_for(lambda: _status_or_zero(world) == 503, 5, "a 503 past the connection cap", step=0.05)
        world.wait_logged("connections open (httpServerMaxConnections)")
        for sock in idle:
            assert _closed_by_server(sock), "an idle connection was never closed"
        assert time.monotonic() - started < HTTP_TIMEOUT_MS / 1000 + 8
    finally:
        for sock in idle:
            sock.close()
    wait_for(lambda: _status_or_zero(world) == 200, 10, "the admin server serving again")
    world.assert_healthy()


def _status_or_zero(world: World) -> int:
    try:
        return _heartbeat(world)
    except (OSError, http.client.HTTPException):
        return 0


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes this connection within the socket's timeout (recv gives EOF)."""
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True

