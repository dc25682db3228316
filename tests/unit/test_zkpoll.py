"""kazoo's connection loop over poll(2) (client.meta.zkpoll): the answers kazoo's own selector gives."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from kazoo.handlers.utils import selector_select

from bkledger.client.meta.zkpoll import PollingHandler, poll_select


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def both(rlist: list[object], wlist: list[object], timeout: float) -> tuple[object, object]:
    """(ours, kazoo's) for the same question."""
    return poll_select(rlist, wlist, timeout), selector_select(rlist, wlist, [], timeout)


def test_nothing_to_read_is_a_timeout_within_its_bound(pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    started = time.monotonic()
    assert poll_select([a], [], 0.05) == ([], [], [])
    assert 0.04 <= time.monotonic() - started < 2.0


def test_readable_and_writable_as_kazoos_selector_says(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    ours, theirs = both([a], [b], 0.0)
    assert ours == theirs == ([], [b], [])
    b.sendall(b"x")
    ours, theirs = both([a, a.fileno()], [], 1.0)
    assert ours == theirs == ([a, a.fileno()], [], [])


def test_a_peer_that_hung_up_is_readable_so_the_loop_sees_eof(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.close()
    ours, theirs = both([a], [], 1.0)
    assert ours == theirs == ([a], [], [])
    assert a.recv(1) == b""


def test_a_closed_socket_and_a_negative_timeout_are_refused(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.close()
    with pytest.raises(ValueError, match="descriptor"):
        poll_select([b], [], 0.0)
    with pytest.raises(ValueError, match="non-negative"):
        poll_select([a], [], -1.0)


def test_the_handler_uses_it(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.sendall(b"y")
    assert PollingHandler().select([a], [b], [], 1.0) == ([a], [b], [])
