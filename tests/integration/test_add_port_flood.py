"""A client that opens connections to the add port as fast as it can: the bookie refuses those past
addStreamPortMaxConnections with a reason (those to bookiePort past bookiePortMaxConnections are closed),
keeps file descriptors for its own files, logs a bounded number of lines, and goes on serving; and where
the process runs out of descriptors anyway, it stays writable once they are free. Seen before the limit:
20,000 connections left a bookie read-only (its checkpoints failed with EMFILE) and wrote 835,000 log
lines. Real bookie processes; raw sockets play the flood; the bookie's open-file limit is lowered for real
(prlimit) so that a few hundred connections exhaust it."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import os
import resource
import socket
import urllib.request
from collections.abc import Callable, Iterator

import grpc
import psutil
import pytest

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper
from bkledger.proto import bookie_pb2 as pb
from bkledger.proto import bookie_pb2_grpc as pb_grpc
from bkledger.wire.add_stream import REFUSED
from tests.integration.bookie_util import KEY, add, add_port_refusals, frames_until_closed, package, read, wait_for

pytestmark = pytest.mark.integration

WAIT_S = 20.0
MAX_CONNECTIONS = 40
MAX_CALLS = 60
_ledger_ids = iter(range(7_900_000, 8_000_000))


@pytest.fixture(scope="module")
def flooded(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[LocalCluster]:
    from tests.integration.conftest import start_cluster

    conf = {"addStreamPortMaxConnections": str(MAX_CONNECTIONS), "bookiePortMaxConnections": str(MAX_CONNECTIONS),
            "bookiePortMaxConcurrentCalls": str(MAX_CALLS),
            "flushInterval": "200",
            "checkpointFailuresBeforeReadOnly": "2"}
    made = start_cluster(tmp_path_factory.mktemp("add-port-flood"), zookeeper, 1, conf)
    try:
        yield made
    finally:
        made.down()


@contextlib.contextmanager
def _open_connections(cluster: LocalCluster, count: int, port: int = 0) -> Iterator[list[socket.socket]]:
    """`count` connections to `port` (default: the add port), closed at the end once the bookie closed its ends."""
    port = port or cluster.bookies[0].add_port
    socks: list[socket.socket] = []
    held_before = _held(cluster, port)
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
            sock.settimeout(WAIT_S)
            socks.append(sock)
        yield socks
    finally:
        for sock in socks:
            sock.close()
    # the bookie closes its ends after ours: until then they hold its descriptors (a next test counts them)
    wait_for(lambda: _held(cluster, port) <= held_before, WAIT_S, "the bookie closing the connections")


def _log(cluster: LocalCluster) -> str:
    return (cluster.base_dir / "bookie-0" / "bookie.log").read_text(errors="replace")


def _state(cluster: LocalCluster) -> dict[str, object]:
    url = f"http://127.0.0.1:{cluster.bookies[0].http_port}/api/v1/bookie/state"
    with urllib.request.urlopen(url, timeout=10) as answer:
        state: dict[str, object] = json.loads(answer.read())
    return state


@contextlib.contextmanager
def _checkpoint_failures(cluster: LocalCluster) -> Iterator[Callable[[], int]]:
    """The bookie's checkpointFailures, asked over one kept-alive admin HTTP connection: opened now, it needs
    no descriptor of the bookie's later, when a flood has taken them all (a new connection would not be
    accepted)."""
    connection = http.client.HTTPConnection("127.0.0.1", cluster.bookies[0].http_port, timeout=WAIT_S)

    def failures() -> int:
        connection.request("GET", "/api/v1/bookie/state")
        return int(json.loads(connection.getresponse().read())["checkpointFailures"])

    try:
        failures()
        yield failures
    finally:
        connection.close()


def _serves(cluster: LocalCluster) -> bool:
    bookie = cluster.bookies[0]
    ledger_id = next(_ledger_ids)
    return (add(bookie.bookie_id, ledger_id, [0, 1], add_port=bookie.add_port).ok() == [0, 1]
            and read(bookie.bookie_id, ledger_id, 1).status == pb.EOK)


def _held(cluster: LocalCluster, port: int = 0) -> int:
    """Connections the bookie has open on `port` (default: its add port), in any state (a descriptor each)."""
    bookie = cluster.bookies[0]
    port = port or bookie.add_port
    return sum(1 for c in psutil.Process(bookie.pid).net_connections("tcp")
               if c.laddr and c.laddr.port == port and c.status != psutil.CONN_LISTEN)


def _add_request(ledger_id: int, entry_id: int) -> pb.AddRequest:
    data, sizes = package(ledger_id, [entry_id])
    return pb.AddRequest(batches=[pb.AddBatch(ledger_id=ledger_id, master_key=KEY, entry_ids=[entry_id], sizes=sizes,
                                              data=data)])


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_connections_past_the_limit_are_refused_with_a_reason_and_few_log_lines(flooded: LocalCluster) -> None:
    with _open_connections(flooded, MAX_CONNECTIONS) as held:
        wait_for(lambda: _held(flooded) == MAX_CONNECTIONS, WAIT_S, "the connections accepted")
        with _open_connections(flooded, 25) as extra:
            refusals = [frames_until_closed(sock)[0] for sock in extra]
        assert {kind for kind, _ in refusals} == {REFUSED}
        assert all(b"addStreamPortMaxConnections" in why for _, why in refusals)
        assert len(held) == MAX_CONNECTIONS
    wait_for(lambda: _serves(flooded), WAIT_S, "adds over the add port once the connections are closed")
    warnings = [line for line in _log(flooded).splitlines() if "add port: refused a connection" in line]
    assert 1 <= len(warnings) <= 3, warnings     # 25 refusals, one line per 10 s


def test_a_client_the_add_port_refuses_adds_over_grpc_instead(flooded: LocalCluster,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """Every add port connection held by a flood: a client's stream there is refused before anything is
    read, so its connection sends the same requests over bookiePort. It does not treat the bookie as
    failed (R9 does not apply: the bookie failed nothing): with one bookie there is none to change the
    ensemble to, and its adds would fail."""
    bookie = flooded.bookies[0]
    payloads = [os.urandom(100 + i) for i in range(50)]
    with _open_connections(flooded, MAX_CONNECTIONS):
        wait_for(lambda: _held(flooded) == MAX_CONNECTIONS, WAIT_S, "the connections accepted")
        refused_before = add_port_refusals(bookie.metrics_port)
        with caplog.at_level(logging.WARNING, logger="bkledger.client"), \
                BookKeeper(flooded.metadata_service_uri) as bk:
            lh = bk.create_ledger(1, 1, 1, password=b"flooded")
            futures = [lh.add_entry_async(payload) for payload in payloads]
            assert [future.result(timeout=WAIT_S) for future in futures] == list(range(len(payloads)))
            assert [entry.payload for entry in lh.read_entries(0, len(payloads) - 1)] == payloads
            assert len(lh.metadata.fragments) == 1        # no ensemble change: the bookie did not fail
            lh.close()
        assert add_port_refusals(bookie.metrics_port) > refused_before
    fallbacks = [r.getMessage() for r in caplog.records if "adds over bookiePort (gRPC) instead" in r.getMessage()]
    assert len(fallbacks) == 1, fallbacks   # the refusal's reason, or a reset: the bookie closed under a write


def test_connections_past_the_limit_on_bookie_port_are_closed_and_adds_go_on(flooded: LocalCluster) -> None:
    """bookiePortMaxConnections: gRPC closes a connection past it at once, before any byte (those within it
    get the server's HTTP/2 settings), so the flood holds no more descriptors than that and the add port
    goes on taking adds. Unbounded, connections to bookiePort took every descriptor of the process."""
    bookie = flooded.bookies[0]
    with _open_connections(flooded, MAX_CONNECTIONS, bookie.port) as held:
        wait_for(lambda: _held(flooded, bookie.port) == MAX_CONNECTIONS, WAIT_S, "the connections accepted")
        with _open_connections(flooded, 25, bookie.port) as extra:
            assert [sock.recv(64) for sock in extra] == [b""] * len(extra)
        assert held[0].recv(64)          # the first ones were taken: the server's preface came
        assert _held(flooded, bookie.port) <= MAX_CONNECTIONS
        ledger_id = next(_ledger_ids)
        assert add(bookie.bookie_id, ledger_id, [0, 1], add_port=bookie.add_port).ok() == [0, 1]
    wait_for(lambda: _serves(flooded), WAIT_S, "adds and reads once the connections are closed")


def test_add_streams_opened_and_cancelled_at_will_make_one_log_line_per_interval(flooded: LocalCluster) -> None:
    """Each AddStream a client cancels is a line in the bookie's log ("cut off"): 50,000 opened and
    cancelled on one connection made as many. One per 10 s now, saying how many were left out."""
    bookie, ledger_id = flooded.bookies[0], next(_ledger_ids)

    async def open_and_cancel(count: int) -> None:
        async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
            stub = pb_grpc.BookieStub(channel)
            calls = [stub.AddStream() for _ in range(count)]
            for entry_id, call in enumerate(calls):
                await call.write(_add_request(ledger_id, entry_id))
            for call in calls:       # each acknowledged: the bookie serves them all
                assert [ack.status for ack in (await call.read()).acks] == [pb.EOK]
            for call in calls:
                call.cancel()

    before = _log(flooded).count("cut off")
    asyncio.run(open_and_cancel(50))
    wait_for(lambda: _log(flooded).count("cut off") > before, WAIT_S, "the bookie hearing the streams cut off")
    assert read(bookie.bookie_id, ledger_id, 49).status == pb.EOK
    assert _log(flooded).count("cut off") - before <= 2


def test_calls_past_the_limit_on_bookie_port_are_refused_until_others_end(flooded: LocalCluster) -> None:
    """bookiePortMaxConcurrentCalls: a client holding that many AddStream calls open on one connection
    (each costs the bookie memory: 50,000 took one from 60 to 677 MB) gets RESOURCE_EXHAUSTED for one
    more, and once they end the bookie takes calls again."""
    bookie, ledger_id = flooded.bookies[0], next(_ledger_ids)

    async def over_the_limit() -> tuple[grpc.StatusCode | None, int]:
        async with grpc.aio.insecure_channel(bookie.bookie_id) as channel:
            stub = pb_grpc.BookieStub(channel)
            held = [stub.AddStream() for _ in range(MAX_CALLS)]
            for entry_id, call in enumerate(held):     # each add answered: the bookie holds every call
                await call.write(_add_request(ledger_id, entry_id))
                assert [ack.status for ack in (await call.read()).acks] == [pb.EOK]
            one_more = stub.AddStream()
            await one_more.write(_add_request(ledger_id, MAX_CALLS))
            try:
                code: grpc.StatusCode | None = await asyncio.wait_for(one_more.code(), WAIT_S)
            except TimeoutError:       # taken and open: not refused
                code = None
            for call in [*held, one_more]:
                call.cancel()
            after = stub.Read(pb.ReadRequest(ledger_id=ledger_id, entry_id=MAX_CALLS - 1, master_key=KEY),
                              timeout=WAIT_S)
            return code, (await after).status

    code, status = asyncio.run(over_the_limit())
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert status == pb.EOK        # a call past the limit once the others ended is answered


def test_a_bookie_out_of_descriptors_logs_little_and_stays_writable(flooded: LocalCluster) -> None:
    """The open-file limit lowered under the connection limit: the connections exhaust the descriptors,
    accepts fail and checkpoints fail with EMFILE; afterwards the bookie is writable and serves."""
    pid = flooded.bookies[0].pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    with _checkpoint_failures(flooded) as checkpoint_failures:
        failed_before = checkpoint_failures()
        try:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (_open_fds(pid) + MAX_CONNECTIONS // 2, hard))
            with _open_connections(flooded, MAX_CONNECTIONS):
                wait_for(lambda: "a listening socket cannot accept" in _log(flooded), WAIT_S, "an accept failing")
                wait_for(lambda: checkpoint_failures() >= failed_before + 3, WAIT_S,
                         "more checkpoints failing for want of descriptors than checkpointFailuresBeforeReadOnly")
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    wait_for(lambda: _serves(flooded), WAIT_S, "adds once the descriptors are free")
    state = _state(flooded)
    assert not state["storageFailed"] and state["readOnly"] is False, state
    log = _log(flooded)
    assert log.count("a listening socket cannot accept") <= 3
    assert "socket.accept() out of system resource" not in log
    failed = [line for line in log.splitlines() if "checkpoint thread: checkpoint" in line]
    assert 1 <= len(failed) <= 3 and all("out of file descriptors" in line for line in failed), failed
    assert "Traceback" not in log
