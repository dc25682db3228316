"""bookie.log_limit: one line per interval for an event a client can repeat, saying how many were left out;
and the add port's connection limit kept under half the open-file limit (bookie.service)."""

from __future__ import annotations

import resource

import pytest

from bkledger.bookie.config import ConfigError, from_mapping
from bkledger.bookie.log_limit import LogLimit, left_out_note
from bkledger.bookie.service import add_port_connections


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


def test_the_add_port_keeps_half_the_open_file_limit_for_the_bookies_files() -> None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert add_port_connections(10) == 10
    if soft != resource.RLIM_INFINITY:
        assert add_port_connections(soft) == max(1, soft // 2)


def test_the_connection_limit_is_checked_in_the_configuration() -> None:
    assert from_mapping({}).addStreamPortMaxConnections == 1024
    with pytest.raises(ConfigError, match="addStreamPortMaxConnections"):
        from_mapping({"addStreamPortMaxConnections": "0"})
