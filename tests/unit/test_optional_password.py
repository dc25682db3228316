"""Opening a ledger with password=None means "with the password its metadata holds" (the log machinery and the
Spark reader open a log's ledgers so); any other non-bytes password is still a PasswordTypeError."""

from __future__ import annotations

import pytest

from bkledger.client.errors import PasswordTypeError, checked_optional_password


def test_none_opens_with_the_metadatas_password_and_bytes_pass_through() -> None:
    assert checked_optional_password(None) is None
    assert checked_optional_password(b"pw") == b"pw" and checked_optional_password(bytearray(b"pw")) == b"pw"


def test_a_str_password_is_still_refused_when_opening() -> None:
    with pytest.raises(PasswordTypeError, match="got str"):
        checked_optional_password("pw")
