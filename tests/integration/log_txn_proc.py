"""A consume-transform-produce service for kill -9 tests of transactions (issue 44 item 4): reads log A
with a cursor, and per batch, in ONE transaction, appends each record to B and C and acknowledges A's
cursor past the batch. Prints `COMMIT <count>` after each commit, until killed.

    python -m tests.integration.log_txn_proc URI A B C CURSOR
"""

from __future__ import annotations

import sys

from bkledger.client import BookKeeper

BATCH = 4


def main(uri: str, source: str, out_b: str, out_c: str, cursor: str) -> None:
    bk = BookKeeper(uri)
    reader = bk.open_log_reader(source, cursor=cursor)
    print("READY", flush=True)
    while True:
        batch = reader.read_batch(BATCH, timeout=0.5)
        if not batch:
            print("IDLE", flush=True)
            continue
        with bk.transaction() as tx:
            for record in batch:
                tx.append(out_b, record.payload + b"|b", key=record.payload)
                tx.append(out_c, record.payload + b"|c")
            assert reader.position is not None
            tx.ack(source, cursor, reader.position)
        print(f"COMMIT {len(batch)}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
