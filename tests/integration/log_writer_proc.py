"""A log writer process for kill -9 tests: appends numbered records with many in flight and prints
`ACK <ledger_id> <entry_id> <seq>` for each acknowledged one (flushed), until it is killed.

    python -m tests.integration.log_writer_proc URI LOG ROLL_ENTRIES
"""

from __future__ import annotations

import functools
import sys
import threading
from concurrent.futures import Future

from bkledger.client import BookKeeper
from bkledger.client.log.core.meta import Position

IN_FLIGHT = 64


def main(uri: str, name: str, roll_entries: int) -> None:
    bk = BookKeeper(uri)
    writer = bk.open_log_writer(name, roll_entries=roll_entries)
    print(f"READY {writer.ledger_id}", flush=True)
    slots = threading.Semaphore(IN_FLIGHT)
    out = threading.Lock()

    def acked(seq: int, fut: Future[Position]) -> None:
        slots.release()
        if fut.exception() is None:
            pos = fut.result()
            with out:
                sys.stdout.write(f"ACK {pos.ledger_id} {pos.entry_id} {seq}\n")
                sys.stdout.flush()

    seq = 0
    while True:
        slots.acquire()
        fut = writer.append_async(b"rec-%08d" % seq)
        fut.add_done_callback(functools.partial(acked, seq))
        seq += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
