"""Log names (client.log.core.names) and password types (client.errors.checked_password) are checked at the
client's door, with typed errors that say what is wrong and where (pure: no cluster)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bkledger.client import BookKeeper, InvalidOptionError
from bkledger.client.errors import InvalidLogNameError, PasswordTypeError, checked_password
from bkledger.client.log.core.names import MAX_LOG_NAME_LENGTH, check_log_name, refused_by_zookeeper


# ---- log names -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["orders", "a b", "é", "注文", "\ud7ff", "\uf900", "\ufeff", "a:b*c?d\\e",
                                  "zookeeper", "x" * MAX_LOG_NAME_LENGTH, "a.b", "..a", "-_."])
def test_names_zookeeper_stores_as_given_are_accepted(name: str) -> None:
    assert check_log_name(name) == name


@pytest.mark.parametrize(("name", "index", "char"), [
    ("ab\x00c", 2, "\x00"), ("\x1f", 0, "\x1f"), ("a\x7f", 1, "\x7f"), ("a\x9f", 1, "\x9f"),
    ("x\ue000", 1, "\ue000"), ("ok\uf8ff", 2, "\uf8ff"), ("\ufff0", 0, "\ufff0"), ("a\ufffd", 1, "\ufffd"),
    ("ab\U0001f600", 2, "\U0001f600"), ("a\nb", 1, "\n"),
])
def test_characters_zookeeper_refuses_are_named_with_their_index(name: str, index: int, char: str) -> None:
    with pytest.raises(InvalidLogNameError) as got:
        check_log_name(name)
    assert got.value.index == index and got.value.char == char and got.value.reason == "character"
    assert f"U+{ord(char):04X} at index {index}" in str(got.value)
    assert isinstance(got.value, InvalidOptionError) and isinstance(got.value, ValueError)


@pytest.mark.parametrize(("name", "reason"), [("", "empty"), (".", "relative"), ("..", "relative"),
                                              ("a/b", "slash"), ("/a", "slash"), ("a/", "slash")])
def test_empty_relative_and_slashed_names_are_refused(name: str, reason: str) -> None:
    with pytest.raises(InvalidLogNameError) as got:
        check_log_name(name)
    assert got.value.reason == reason
    if reason == "slash":
        assert got.value.index == name.index("/") and "'/' at index" in str(got.value)


def test_length_limit_applies_to_new_names_only() -> None:
    long = "x" * (MAX_LOG_NAME_LENGTH + 1)
    with pytest.raises(InvalidLogNameError) as got:
        check_log_name(long)
    assert got.value.reason == "length" and "at most 249" in str(got.value)
    assert len(str(got.value)) < 300                       # the name is cut in the message
    assert check_log_name(long, new=False) == long         # an existing (older) log is still found
    with pytest.raises(InvalidLogNameError):               # but nothing ZooKeeper could not have stored
        check_log_name("x" * 2_000_000, new=False)
    with pytest.raises(InvalidLogNameError):
        check_log_name(long + "\x00", new=False)


def test_refused_characters_follow_zookeeper_ranges() -> None:
    refused = [c for c in range(0x10000) if refused_by_zookeeper(chr(c))]
    expected = [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0xD800, 0xF900), *range(0xFFF0, 0x10000)]
    assert refused == expected
    assert refused_by_zookeeper("\U00010000") and not refused_by_zookeeper(" ")


def test_a_non_str_name_is_refused() -> None:
    with pytest.raises(InvalidLogNameError, match="must be a str, got bytes"):
        check_log_name(b"orders")


# ---- passwords -----------------------------------------------------------------------------------
def test_password_must_be_bytes() -> None:
    assert checked_password(b"pw") == b"pw" and checked_password(bytearray(b"pw")) == b"pw"
    for bad in ("pw", None, 5, memoryview(b"pw")):
        with pytest.raises(PasswordTypeError) as got:
            checked_password(bad)
        assert "password must be bytes (b'pw')" in str(got.value)
        assert isinstance(got.value, TypeError)
    with pytest.raises(PasswordTypeError) as got:
        checked_password("s3cret")
    assert "s3cret" not in str(got.value)                  # never echoed


def _unconnected_client() -> BookKeeper:
    """A BookKeeper whose checks run before any I/O: every call below must fail before touching it."""
    bk = BookKeeper.__new__(BookKeeper)
    bk._closed = False
    bk._ctx = SimpleNamespace(runtime=SimpleNamespace(check_not_forked=lambda: None))  # type: ignore[assignment]
    return bk


@pytest.mark.parametrize("call", [
    lambda bk: bk.create_ledger(3, 2, 2, password="pw"),
    lambda bk: bk.open_ledger(1, "pw"),
    lambda bk: bk.open_ledgers([1], "pw"),
    lambda bk: bk.handles_for([], "pw"),
    lambda bk: bk.open_log_writer("orders", password="pw"),
    lambda bk: bk.open_log_reader("orders", password="pw"),
    lambda bk: bk.compact_log("orders", password="pw"),
    lambda bk: bk.append_ledgers("orders", [1], password="pw"),
])
def test_every_client_door_refuses_a_str_password(call) -> None:
    with pytest.raises(PasswordTypeError, match=r"password must be bytes \(b'pw'\)"):
        call(_unconnected_client())


@pytest.mark.parametrize("call", [
    lambda bk: bk.open_log_writer("a/b"),
    lambda bk: bk.open_log_writer("a\x00", create=False),
    lambda bk: bk.open_log_reader(".."),
    lambda bk: bk.log_metadata("x\ud800"),
    lambda bk: bk.truncate_log("a/b", None),
    lambda bk: bk.set_log_retention("a/b"),
    lambda bk: bk.apply_log_retention("a/b"),
    lambda bk: bk.compact_log("a/b"),
    lambda bk: bk.delete_log("a/b"),
    lambda bk: bk.append_ledgers("a/b", [1]),
])
def test_every_log_door_checks_the_name(call) -> None:
    with pytest.raises(InvalidLogNameError):
        call(_unconnected_client())
