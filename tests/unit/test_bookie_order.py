"""The bookie journals records in the order it decided them (bookie.bookie): adds go through ledger storage
on the storage thread first, and a fence, explicit LAC or force queued after them must not overtake them.
A real journal and real ledger storage in a temporary directory; no server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from bkledger.bookie.bookie import Bookie
from bkledger.bookie.config import BookieConfig
from tests.integration.bookie_util import package

KEY = b"k" * 20


def _bookie(tmp_path: Path) -> Bookie:
    config = BookieConfig(journalDirectories=(str(tmp_path / "journal"),),
                          ledgerDirectories=(str(tmp_path / "ledgers"),), flushInterval=60_000)
    bookie = Bookie(config)
    bookie.start()
    return bookie


def test_an_add_accepted_before_a_fence_is_durable_before_the_fence_is_answered(tmp_path: Path) -> None:
    """R15 with storage first: a fence answered before an earlier add reached the journal would let the
    writer complete that add after recovery had read the fenced bookie without it."""
    bookie = _bookie(tmp_path)
    order: list[str] = []
    lock = threading.Lock()
    finished = threading.Event()

    def note(what: str, last: bool = False) -> Callable[[BaseException | None], None]:
        def done(err: BaseException | None) -> None:
            assert err is None, err
            with lock:
                order.append(what)
            if last:
                finished.set()
        return done

    try:
        for batch in range(200):
            ids = list(range(batch * 20, batch * 20 + 20))
            data, sizes = package(7, ids, b"p" * 2000)
            bookie.add_batch(7, KEY, batch == 0, ids, sizes, data, sync=True, done=note(f"add {batch}"))
        bookie.fence(7, KEY, False, note("fence"))
        bookie.force_ledger(note("force", last=True))
        assert finished.wait(30)
        assert order == [f"add {b}" for b in range(200)] + ["fence", "force"]
        view = bookie.view(7)
        assert view is not None and view.fenced
    finally:
        bookie.close()


def test_close_journals_what_was_queued(tmp_path: Path) -> None:
    """Adds queued on the storage thread when the bookie closes are journaled (or failed), never dropped."""
    bookie = _bookie(tmp_path)
    answers: list[BaseException | None] = []
    for batch in range(50):
        ids = list(range(batch * 10, batch * 10 + 10))
        data, sizes = package(9, ids)
        bookie.add_batch(9, KEY, batch == 0, ids, sizes, data, sync=True, done=answers.append)
    bookie.close()
    assert len(answers) == 50 and answers == [None] * 50
