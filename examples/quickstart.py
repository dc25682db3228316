"""A first tour of bkledger without Spark: a local cluster, a ledger, a log, recovery.

    python examples/quickstart.py

Starts ZooKeeper and three bookies on 127.0.0.1 (under a temporary directory), writes a ledger with
E=3 Qw=2 Qa=2, reads it back while it is open (no fencing) and after close, fences it from a second
client, appends to a log across two ledgers and tails it, then stops the cluster.
"""

from __future__ import annotations

import logging
import tempfile
import time

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.client import BookKeeper, LedgerFencedError


def ledger_tour(uri: str) -> None:
    with BookKeeper(uri) as bk, BookKeeper(uri) as other:
        lh = bk.create_ledger(ensemble_size=3, write_quorum=2, ack_quorum=2, password=b"pw")
        start = time.perf_counter()
        futures = [lh.add_entry_async(b"order-%05d" % i) for i in range(10000)]
        last = [f.result() for f in futures][-1]
        elapsed = time.perf_counter() - start
        ensemble = list(lh.metadata.last_fragment.ensemble)
        print(f"ledger {lh.ledger_id}: 10000 entries acknowledged in {elapsed:.2f}s on {ensemble}")
        reader = other.open_ledger(lh.ledger_id, b"pw", recovery=False)
        opened_at = reader.last_add_confirmed
        lac = reader.wait_for_lac(opened_at, timeout=2)    # the idle writer sends its LAC explicitly
        print(f"a reader opened it without recovery at LAC {opened_at}, then long-polled LAC {lac} "
              f"(writer's LAC {last}); the writer was not disturbed")
        recovered = other.open_ledger(lh.ledger_id, b"pw", recovery=True)
        print(f"a second client recovered it: CLOSED at last entry {recovered.last_entry_id}")
        try:
            lh.add_entry(b"too late")
        except LedgerFencedError:
            print("the first writer's next add failed: LedgerFencedError (it was fenced)")
        entries = list(recovered.read_entries(0, 2))
        print("first entries:", [e.payload for e in entries])


def log_tour(uri: str) -> None:
    with BookKeeper(uri) as bk:
        writer = bk.open_log_writer("orders")
        first = writer.append(b"first")
        writer.roll()
        last = writer.append(b"second")
        print(f"log 'orders': appended at {first} and, after a roll, at {last}")
        reader = bk.open_log_reader("orders", start="earliest")
        records = [reader.read_next(timeout=5) for _ in range(2)]
        print("read back:", [(r.position, r.payload) for r in records if r is not None])
        writer.close()


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="bkledger-quickstart-") as home:
        cluster = LocalCluster(home)
        try:
            cluster.up(3)
            print(f"local cluster up: {cluster.metadata_service_uri}, bookies {[b.bookie_id for b in cluster.bookies]}")
            ledger_tour(cluster.metadata_service_uri)
            log_tour(cluster.metadata_service_uri)
        finally:
            cluster.down()
            print("local cluster down")


if __name__ == "__main__":
    main()
