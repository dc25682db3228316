"""bookie.log_limit: one line per interval for an event a client can repeat, saying how many were left out
(and a background thread's failures for want of file descriptors, bookie.thread_guard); and the ports'
connection limits kept under a quarter of the open-file limit each (bookie.service)."""

from __future__ import annotations

import errno
import logging
import resource

import pytest

from bkledger.bookie.config import ConfigError, from_mapping
from bkledger.bookie.log_limit import LogLimit, left_out_note
from bkledger.bookie.service import port_connections
from bkledger.bookie.thread_guard import ThreadFailures


def test_the_first_event_is_logged_then_one_per_interval_with_the_count_left_out() -> None:
    now = [100.0]
    limit = LogLimit(10.0, clock=lambda: now[0])
    assert limit.allow() == 0
    assert [limit.allow() for _ in range(5)] == [None] * 5
    now[0] += 9.9
    assert limit.allow() is None
    now[0] += 0.1
    assert limit.allow() == 6
    assert limit.allow() is None
    assert left_out_note(0) == "" and left_out_note(6) == "; 6 more since the last such line"


def test_the_two_ports_keep_half_the_open_file_limit_for_the_bookies_files() -> None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert port_connections(10, "addStreamPortMaxConnections") == 10
    if soft != resource.RLIM_INFINITY:
        assert port_connections(soft, "bookiePortMaxConnections") == max(1, soft // 4)


@pytest.mark.parametrize(("key", "default"), [("addStreamPortMaxConnections", 1024), ("bookiePortMaxConnections", 1024),
                                              ("bookiePortMaxConcurrentCalls", 10000)])
def test_the_connection_limits_are_checked_in_the_configuration(key: str, default: int) -> None:
    assert getattr(from_mapping({}), key) == default
    for bad in ("0", "1000001", str(2**31 - 1)):     # gRPC aborted the process on 2^31 - 1 (a C int's most)
        with pytest.raises(ConfigError, match=f"{key} must be 1..1000000"):
            from_mapping({key: bad})
    assert getattr(from_mapping({key: "1000000"}), key) == 1_000_000


def test_a_threads_rounds_out_of_descriptors_are_counted_each_and_logged_once_without_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    failures = ThreadFailures()
    with caplog.at_level(logging.WARNING, logger="bkledger.bookie"):
        for _ in range(5):
            with failures.guard("gc", "a garbage-collection round"):
                raise OSError(errno.EMFILE, "Too many open files")
        with failures.guard("checkpoint", "a checkpoint round"):
            raise OSError(errno.ENFILE, "Too many open files in system")
        with failures.guard("gc", "a garbage-collection round"):
            raise OSError(errno.EIO, "Input/output error")
    assert failures.counts() == {"gc": 6, "checkpoint": 1}
    lines = [(r.getMessage(), bool(r.exc_info)) for r in caplog.records]
    assert [line for line in lines if "out of file descriptors" in line[0]] == [
        ("gc thread: a garbage-collection round failed: out of file descriptors ([Errno 24] Too many open files; "
         "too many connections?), tried again next round", False),
        ("checkpoint thread: a checkpoint round failed: out of file descriptors ([Errno 23] Too many open files "
         "in system; too many connections?), tried again next round", False)]
    assert lines[-1] == ("gc thread: a garbage-collection round failed", True)    # not descriptors: the traceback
