"""The writer that dies for recovery_time: `python -m bench.recovery_writer URI E QW QA PRELOAD INFLIGHT`.

Creates a ledger and prints `LEDGER <id>`, adds PRELOAD entries and waits for all of them, prints
`READY <last acknowledged entry id>`, then queues INFLIGHT more adds without waiting and kills itself
with SIGKILL from the client's event loop the moment the first of them is acknowledged: by then the
in-flight adds are on their way to (or already on) the bookies, and none of them got an answer to
the application. Entries are PAYLOAD_SIZE bytes.
"""

from __future__ import annotations

import os
import signal
import sys
from concurrent.futures import Future

from bkledger.client import BookKeeper

PAYLOAD_SIZE = 1024


def _die(_: Future[int]) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> None:
    uri, e, qw, qa, preload, inflight = argv[0], *map(int, argv[1:6])
    payload = os.urandom(PAYLOAD_SIZE)
    bk = BookKeeper(uri)
    lh = bk.create_ledger(e, qw, qa, password=b"pw")
    print(f"LEDGER {lh.ledger_id}", flush=True)
    last = -1
    futures = [lh.add_entry_async(payload) for _ in range(preload)]
    for future in futures:
        last = future.result(120)
    print(f"READY {last}", flush=True)
    futures = [lh.add_entry_async(payload) for _ in range(inflight)]
    futures[0].add_done_callback(_die)
    futures[-1].result(120)
    _die(futures[-1])  # not reached unless the callback did not run: die all the same


if __name__ == "__main__":
    main(sys.argv[1:])
