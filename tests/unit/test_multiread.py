"""ZooKeeper's multiRead request as `client.meta.multiread` writes it and reads its reply (the wire forms
of ZooKeeper's MultiOperationRecord and MultiResponse). Pure; the store's use of it against a real
ZooKeeper is in tests/integration/test_metadata_store.py."""

from __future__ import annotations

import struct

import pytest

from bkledger.client.meta.multiread import ERROR, GET_DATA, MULTI_READ, MultiRead, ReadError

HEADER = struct.Struct("!iBi")
STAT = struct.Struct("!qqqqiiiqiiq")


def test_request_is_one_getdata_per_path_without_watches_then_the_done_header():
    raw = MultiRead(["/a", "/ledgers/00/0000/L0001"]).serialize()
    expected = (HEADER.pack(GET_DATA, 0, -1) + struct.pack("!i", 2) + b"/a" + b"\x00"
                + HEADER.pack(GET_DATA, 0, -1) + struct.pack("!i", 22) + b"/ledgers/00/0000/L0001" + b"\x00"
                + HEADER.pack(-1, 1, -1))
    assert raw == expected and MultiRead.type == MULTI_READ == 22


def test_reply_gives_data_and_stat_per_path_and_an_error_code_for_a_missing_one():
    stat = (1, 2, 3, 4, 7, 0, 0, 0, 5, 0, 9)
    reply = (b"xx" + HEADER.pack(GET_DATA, 0, 0) + struct.pack("!i", 5) + b"hello" + STAT.pack(*stat)
             + HEADER.pack(ERROR, 0, -101) + struct.pack("!i", -101)
             + HEADER.pack(GET_DATA, 0, 0) + struct.pack("!i", -1) + STAT.pack(*stat)
             + HEADER.pack(-1, 1, -1))
    got = MultiRead.deserialize(reply, 2)
    assert got[0][0] == b"hello" and got[0][1].version == 7 and got[0][1].data_length == 5
    assert got[1] == ReadError(-101)
    assert got[2][0] == b""
    assert MultiRead.deserialize(HEADER.pack(-1, 1, -1), 0) == []


def test_a_reply_that_is_not_getdata_results_is_refused():
    with pytest.raises(ValueError, match="type 5"):
        MultiRead.deserialize(HEADER.pack(5, 0, 0) + STAT.pack(*range(11)) + HEADER.pack(-1, 1, -1), 0)
    with pytest.raises(struct.error):
        MultiRead.deserialize(HEADER.pack(GET_DATA, 0, 0), 0)       # cut short
