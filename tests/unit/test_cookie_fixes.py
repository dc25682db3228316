"""R24: every cookie refusal names its fix, a `bkledger shell` verb (bookieformat, decommission, cookie)."""

from __future__ import annotations

import dataclasses

import pytest

from bkledger.bookie.core.cookie import Cookie, CookieError, decide

C = Cookie(bookie_id="127.0.0.1:3181", journal_dir="/j", ledger_dirs=("/l1", "/l2"), instance_id="i-1")


@pytest.mark.parametrize(("zk", "local", "data", "fix"), [
    (C, [None, None, None], False, "bkledger shell decommission 127.0.0.1:3181"),
    (None, [None, None, None], True, "bkledger shell bookieformat"),
    (C, [C, None, C], True, "bkledger shell decommission 127.0.0.1:3181"),
    (None, [C, C, C], True, "bkledger shell bookieformat"),
    (C, [dataclasses.replace(C, bookie_id="127.0.0.1:4000")] * 3, True, "old id"),
    (dataclasses.replace(C, instance_id="i-2"), [C, C, C], True, "bkledger shell bookieformat"),
    (C, [dataclasses.replace(C, journal_dir="/old")] * 3, True, "journalDirectories back at /old"),
])
def test_each_refusal_names_its_fix(zk, local, data, fix):
    with pytest.raises(CookieError) as refused:
        decide(C, zk, local, dirs_have_data=data)
    assert fix in str(refused.value)
