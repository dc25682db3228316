"""A log producer process for kill -9 tests: sends numbered records with small batches and prints
`ACK <ledger_id> <entry_id> <seq>` for each committed one (flushed), until it is killed.

    python -m tests.integration.log_producer_proc URI LOG PRODUCER_ID
"""

from __future__ import annotations

import functools
import sys
import threading
from concurrent.futures import Future

from bkledger.client import BookKeeper
from bkledger.client.log.core.meta import Position

IN_FLIGHT = 200


def main(uri: str, name: str, producer_id: str) -> None:
    bk = BookKeeper(uri)
    producer = bk.open_log_producer(name, producer_id, max_records=20, linger_ms=2)
    print("READY", flush=True)
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
        fut = producer.send(b"rec-%08d" % seq, key=producer_id.encode())
        fut.add_done_callback(functools.partial(acked, seq))
        seq += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
