"""A writer process for fault tests: creates a ledger, adds entries, prints every acknowledgement.

    python -m tests.integration.writer_proc URI E QW QA COUNT

Prints `LEDGER <id>`, then `ACK <entry id>` for each acknowledged add (flushed), `ERROR <type>`
when adds fail, and `DONE`. After COUNT adds it waits for a line on stdin: `add` adds one more entry
(to see what a fenced writer gets), `close` closes the ledger and prints `CLOSED <last entry>`.
"""

from __future__ import annotations

import sys

from bkledger.client import BookKeeper
from bkledger.client.errors import BKError


def payload(i: int) -> bytes:
    return b"w-%08d-" % i + b"z" * 200


def main() -> None:
    uri, e, qw, qa, count = sys.argv[1], *map(int, sys.argv[2:6])
    bk = BookKeeper(uri, addEntryTimeoutSec=3.0, readTimeout=3.0)
    lh = bk.create_ledger(e, qw, qa, password=b"pw")
    print(f"LEDGER {lh.ledger_id}", flush=True)
    futures = [lh.add_entry_async(payload(i)) for i in range(count)]
    for fut in futures:
        try:
            print(f"ACK {fut.result(60)}", flush=True)
        except BKError as exc:
            print(f"ERROR {type(exc).__name__}", flush=True)
            break
    print("DONE", flush=True)
    for line in sys.stdin:
        command = line.strip()
        try:
            if command == "add":
                print(f"ACK {lh.add_entry(b'late')}", flush=True)
            elif command == "close":
                lh.close()
                print(f"CLOSED {lh.last_entry_id}", flush=True)
        except BKError as exc:
            print(f"ERROR {type(exc).__name__}", flush=True)
    bk.close()


if __name__ == "__main__":
    main()
