"""A bookie's add port (addStreamPort, bookie.add_port): adds over plain TCP are acknowledged like AddStream's,
and whatever a hostile or broken client sends there is refused with a reason, logged and counted, while the
bookie goes on serving every other connection. Real bookie processes; raw sockets play the bad clients."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper
from bkledger.proto import bookie_pb2 as pb
from bkledger.wire.add_stream import (
    HEADER_SIZE,
    MAGIC,
    REFUSED,
    REGISTRATION_PROPERTY,
    REQUEST,
    RESPONSE,
    frame,
    header,
)
from tests.integration.bookie_util import KEY, add, add_port_refusals, frames_until_closed, package, read, wait_for

pytestmark = pytest.mark.integration

WAIT_S = 20.0
_ledger_ids = iter(range(7_700_000, 7_800_000))


@pytest.fixture(scope="module")
def one_bookie(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator[LocalCluster]:
    from tests.integration.conftest import start_cluster

    made = start_cluster(tmp_path_factory.mktemp("add-port"), zookeeper, 1)
    try:
        yield made
    finally:
        made.down()


def _connect(cluster: LocalCluster) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", cluster.bookies[0].add_port), timeout=WAIT_S)
    sock.settimeout(WAIT_S)
    return sock


def _request(ledger_id: int, entry_ids: list[int]) -> bytes:
    data, sizes = package(ledger_id, entry_ids)
    batch = pb.AddBatch(ledger_id=ledger_id, master_key=KEY, entry_ids=entry_ids, sizes=sizes, data=data)
    return pb.AddRequest(batches=[batch]).SerializeToString()


def _still_serves(cluster: LocalCluster) -> None:
    """A fresh client's adds over the add port are acknowledged, and read back over gRPC."""
    bookie = cluster.bookies[0]
    ledger_id = next(_ledger_ids)
    assert add(bookie.bookie_id, ledger_id, [0, 1, 2], add_port=bookie.add_port).ok() == [0, 1, 2]
    assert read(bookie.bookie_id, ledger_id, 2).status == pb.EOK


def test_the_bookie_registers_its_add_port_and_acknowledges_adds_on_it(one_bookie: LocalCluster) -> None:
    bookie = one_bookie.bookies[0]
    assert bookie.add_port > 0
    store = one_bookie.metadata_store().start()
    try:
        info = store.bookie_info(bookie.bookie_id)
        assert info is not None and info[REGISTRATION_PROPERTY] == str(bookie.add_port)
    finally:
        store.close()
    ledger_id = next(_ledger_ids)
    result = add(bookie.bookie_id, ledger_id, list(range(250)), add_port=bookie.add_port, per_batch=60)
    assert result.ok() == list(range(250))
    assert read(bookie.bookie_id, ledger_id, 249).status == pb.EOK


def test_a_client_of_the_library_adds_over_the_add_port_and_can_be_told_not_to(one_bookie: LocalCluster) -> None:
    for use, expected in ((True, one_bookie.bookies[0].add_port), (False, 0)):
        bk = BookKeeper(one_bookie.metadata_service_uri, useAddStreamPort=use)
        try:
            lh = bk.create_ledger(1, 1, 1)
            assert [lh.add_entry(b"e%d" % i) for i in range(5)] == [0, 1, 2, 3, 4]
            assert [e.payload for e in lh.read_entries(0, 4)] == [b"e%d" % i for i in range(5)]
            assert {c.add_port for c in bk._ctx.pool._clients.values()} == {expected}
            lh.close()
        finally:
            bk.close()


@pytest.mark.parametrize("opening", [b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"BKADD\x00\x00\x09" + b"\x00" * 8])
def test_a_stream_that_is_not_this_framing_is_refused_with_a_reason(one_bookie: LocalCluster, opening: bytes) -> None:
    before = add_port_refusals(one_bookie.bookies[0].metrics_port)
    with _connect(one_bookie) as sock:
        sock.sendall(opening)
        frames = frames_until_closed(sock)
    assert len(frames) == 1 and frames[0][0] == REFUSED
    assert b"preamble" in frames[0][1]
    wait_for(lambda: add_port_refusals(one_bookie.bookies[0].metrics_port) == before + 1, WAIT_S, "the refusal counted")
    log = (one_bookie.base_dir / "bookie-0" / "bookie.log").read_text()
    assert "add port: stream from 127.0.0.1" in log and "refused: the stream does not begin" in log
    _still_serves(one_bookie)


def test_a_frame_over_the_limit_is_refused_from_its_header_without_its_body(one_bookie: LocalCluster) -> None:
    with _connect(one_bookie) as sock:
        sock.sendall(MAGIC + header(REQUEST, 1 << 30))       # 1 GiB announced; not one byte of it sent
        frames = frames_until_closed(sock)
    assert [kind for kind, _ in frames] == [REFUSED]
    assert b"over the limit" in frames[0][1]
    _still_serves(one_bookie)


def test_the_batches_before_a_malformed_request_are_answered_then_the_stream_is_refused(
        one_bookie: LocalCluster) -> None:
    ledger_id = next(_ledger_ids)
    with _connect(one_bookie) as sock:
        sock.sendall(MAGIC + frame(REQUEST, _request(ledger_id, [0, 1])) + frame(REQUEST, b"\xff\xff\xff\xff")
                     + frame(REQUEST, _request(ledger_id, [2])))     # after the refusal: never read
        frames = frames_until_closed(sock)
    kinds = [kind for kind, _ in frames]
    assert kinds[-1] == REFUSED and set(kinds[:-1]) == {RESPONSE}, kinds
    acks = [ack for _, body in frames[:-1] for ack in pb.AddResponse.FromString(body).acks]
    assert [(a.ledger_id, list(a.entry_ids), a.status) for a in acks] == [(ledger_id, [0, 1], pb.EOK)]
    assert b"does not parse" in frames[-1][1]
    bookie = one_bookie.bookies[0]
    assert read(bookie.bookie_id, ledger_id, 1).status == pb.EOK
    assert read(bookie.bookie_id, ledger_id, 2).status == pb.ENOENTRY      # sent after the bad one: not read


def test_a_client_that_ends_its_side_gets_its_acks_then_the_close(one_bookie: LocalCluster) -> None:
    ledger_id = next(_ledger_ids)
    with _connect(one_bookie) as sock:
        sock.sendall(MAGIC + frame(REQUEST, _request(ledger_id, [0, 1, 2])))
        sock.shutdown(socket.SHUT_WR)
        frames = frames_until_closed(sock)
    acks = [ack for kind, body in frames if kind == RESPONSE for ack in pb.AddResponse.FromString(body).acks]
    assert [(list(a.entry_ids), a.status) for a in acks] == [([0, 1, 2], pb.EOK)]


@pytest.mark.parametrize("cut", [3, len(MAGIC) + 2, len(MAGIC) + HEADER_SIZE + 5])
def test_a_client_gone_inside_a_frame_leaves_the_bookie_serving(one_bookie: LocalCluster, cut: int) -> None:
    stream = MAGIC + frame(REQUEST, _request(next(_ledger_ids), [0]))
    with _connect(one_bookie) as sock:
        sock.sendall(stream[:cut])
    _still_serves(one_bookie)
    log = (one_bookie.base_dir / "bookie-0" / "bookie.log").read_text()
    assert "Traceback" not in log


def test_a_client_that_never_reads_its_acks_is_no_longer_read(one_bookie: LocalCluster) -> None:
    """Acks the client leaves unread fill the socket and the bookie's write buffer; the bookie then stops
    reading that client's requests (its sends stall), and goes on serving everyone else meanwhile.

    Each batch is refused at once (EBADREQ: its entries have no headers), and its ack echoes its entry ids,
    9-byte varints each (ids near 2**62): about as many ack bytes as request bytes, so the acks fill the
    bookie's socket buffers (up to 4 MiB here) within a few MiB of requests, whatever the kernel's buffer
    tuning, while the bookie does no disk work."""
    entries, first = 4000, 1 << 62
    request = pb.AddRequest(batches=[pb.AddBatch(ledger_id=next(_ledger_ids), master_key=KEY,
                                                 entry_ids=range(first, first + entries), sizes=[0] * entries,
                                                 data=b"")]).SerializeToString()
    sent, stalled = 0, False
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)      # before connect: a small window
        sock.connect(("127.0.0.1", one_bookie.bookies[0].add_port))
        sock.settimeout(5.0)
        sock.sendall(MAGIC)
        while sent < (400 << 20) and not stalled:   # unpaused, the bookie would read all 400 MiB
            try:
                sock.sendall(frame(REQUEST, request))
                sent += len(request)
            except TimeoutError:
                stalled = True
        assert stalled, f"the bookie read all {sent >> 20} MiB from a client that never read an ack"
        assert sent < (80 << 20), sent     # the bookie's buffers, the client's and the kernel's: no more
        _still_serves(one_bookie)
